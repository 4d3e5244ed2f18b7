package access

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// TokenPrefix starts every credential's secret, so a hub tells a
// credential from the shared --token without a lookup and a leaked one is
// easy to grep for.
const TokenPrefix = "syncred_"

// AdminRole is the role that lets a credential run the admin verbs
// (token, role) on a hub, as the shared token does. "synapse" is a
// reserved name, so no agent answers to it by accident.
const AdminRole = "synapse/admin"

// Credential is one agent's connect credential. Its secret is never
// stored: Digest is the hex SHA-256 of the whole token. Records are
// values; a change (revocation) replaces the record.
type Credential struct {
	ID      string   `json:"id"`
	Digest  string   `json:"-"`
	Pattern string   `json:"name_pattern"` // the names a socket with it may bind (Match)
	Roles   []string `json:"roles"`        // role patterns it is granted
	Created float64  `json:"created"`
	Expires float64  `json:"expires,omitempty"` // unix seconds; 0 = never
	Note    string   `json:"note,omitempty"`
	Revoked float64  `json:"revoked,omitempty"` // when it was revoked; 0 = live
}

// Principal is the quota principal of sockets that use the credential
// (INV-ME-5): every name it binds shares one claim budget.
func (c *Credential) Principal() string { return "credential:" + c.ID }

// AllowsName reports whether a socket with the credential may bind name.
func (c *Credential) AllowsName(name string) bool { return Match(c.Pattern, name) }

// HasRole reports whether the credential grants role.
func (c *Credential) HasRole(role string) bool {
	return slices.ContainsFunc(c.Roles, func(p string) bool { return Match(p, role) })
}

// Check says why the credential cannot authenticate a socket at now, or
// nil.
func (c *Credential) Check(now float64) error {
	switch {
	case c.Revoked > 0:
		return fmt.Errorf("%w: credential %s", ErrRevoked, c.ID)
	case c.Expires > 0 && now >= c.Expires:
		return fmt.Errorf("%w: credential %s", ErrExpired, c.ID)
	}
	return nil
}

// Errors of credentials and grants; callers compare with errors.Is.
var (
	ErrUnknownCredential = errors.New("access: no such credential")
	ErrRevoked           = errors.New("access: credential revoked")
	ErrExpired           = errors.New("access: credential expired")
	ErrBadPattern        = errors.New("access: invalid name pattern")
	ErrBadRole           = errors.New("access: invalid role")
	ErrUnknownGrant      = errors.New("access: no such role grant")
)

// NewToken mints a credential id and its secret token.
func NewToken() (id, token string, err error) {
	var idb [6]byte
	var sec [24]byte
	if _, err = rand.Read(idb[:]); err != nil {
		return "", "", fmt.Errorf("access: new token: %w", err)
	}
	if _, err = rand.Read(sec[:]); err != nil {
		return "", "", fmt.Errorf("access: new token: %w", err)
	}
	id = hex.EncodeToString(idb[:])
	return id, TokenPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(sec[:]), nil
}

// IsCredentialToken reports whether tok has a credential's form.
func IsCredentialToken(tok string) bool { return strings.HasPrefix(tok, TokenPrefix) }

// Digest is the stored form of a token: hex SHA-256.
func Digest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// checkName validates a name pattern or a role: not blank, no spaces or
// control bytes, at most 256 bytes.
func checkName(kind error, s string) error {
	if s == "" || len(s) > 256 {
		return fmt.Errorf("%w %q: give 1 to 256 bytes", kind, s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f || s[i] == ',' {
			return fmt.Errorf("%w %q: no spaces, commas or control characters", kind, s)
		}
	}
	return nil
}
