package client

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/synapse-hub/synapse/gate"
)

// Signed registrations (PROTOCOL.md §5.5; docs/security.md, "Identity
// pins"). By default a client signs the frame that binds its name with
// this machine's Ed25519 key, so a hub pins the name to the key on first
// use and refuses it to any other machine afterwards. The key is the
// reference's machine key, in its place and form —
// $XDG_DATA_HOME/synapse/identity/machine.pem (default
// ~/.local/share/synapse/identity/machine.pem), PKCS#8 PEM, mode 0600 —
// so the reference's clients and ours on one machine present the same
// key, and a name pinned by one is admitted from the other. It is created
// on first use. Only the registration is signed: nothing is added to the
// frames after it.

// NoIdentityEnv, set to any value but "" or "0", turns signing off for
// every client of the process (Options.NoIdentity).
const NoIdentityEnv = "SYNAPSE_NO_IDENTITY"

// MachineKeyPath is where this machine's identity key is kept.
func MachineKeyPath() (string, error) {
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("client: identity key: no home directory: %w", err)
		}
		base = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(base, "synapse", "identity", "machine.pem"), nil
}

// ErrIdentityKeyFile is wrapped by every failure to read or create an
// identity key file.
var ErrIdentityKeyFile = errors.New("client: identity key")

// LoadOrCreateIdentityKey returns the Ed25519 key in path (PKCS#8 PEM),
// creating it (mode 0600, its folder 0700) if it does not exist. Two
// processes creating it at once agree: the file is created exclusively,
// and the loser reads the winner's. A file other users may read is
// refused.
func LoadOrCreateIdentityKey(path string) (ed25519.PrivateKey, error) {
	if k, err := loadIdentityKey(path); !errors.Is(err, os.ErrNotExist) {
		return k, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentityKeyFile, err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentityKeyFile, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentityKeyFile, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return loadIdentityKey(path) // another process made it first
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentityKeyFile, err)
	}
	_, err = f.Write(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("%w: write %s: %v", ErrIdentityKeyFile, path, err)
	}
	return priv, nil
}

func loadIdentityKey(path string) (ed25519.PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s may be read by other users (mode %04o): run 'chmod 600 %s'", ErrIdentityKeyFile, path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentityKeyFile, err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%w: %s is not a PEM file", ErrIdentityKeyFile, path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrIdentityKeyFile, path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s does not hold an Ed25519 key", ErrIdentityKeyFile, path)
	}
	return priv, nil
}

// machineKeys are the machine keys this process read (or made), by path.
var machineKeys struct {
	mu   sync.Mutex
	keys map[string]ed25519.PrivateKey
}

// defaultIdentityKey is the machine key, or nil (unsigned) when it cannot
// be had: a read-only home must not stop an agent from connecting.
func defaultIdentityKey() (ed25519.PrivateKey, error) {
	path, err := MachineKeyPath()
	if err != nil {
		return nil, err
	}
	machineKeys.mu.Lock()
	defer machineKeys.mu.Unlock()
	if k := machineKeys.keys[path]; k != nil {
		return k, nil
	}
	k, err := LoadOrCreateIdentityKey(path)
	if err != nil {
		return nil, err
	}
	if machineKeys.keys == nil {
		machineKeys.keys = make(map[string]ed25519.PrivateKey)
	}
	machineKeys.keys[path] = k
	return k, nil
}

// signRegistration signs a registration frame with the client's key; the
// frame is returned as it was when the client does not sign.
func (c *Client) signRegistration(reg map[string]any) map[string]any {
	key := c.opts.IdentityKey
	if key == nil {
		return reg
	}
	var n [16]byte
	_, _ = rand.Read(n[:])
	seq := c.identitySeq.Add(1)
	signed, err := gate.SignRegistration(reg, key, base64.RawURLEncoding.EncodeToString(n[:]), seq, nowSeconds())
	if err != nil {
		return reg
	}
	return signed
}

// FeatureIdentityPins is the welcome feature of hubs that pin names to
// keys and answer identity_pin_list and identity_pin_reclaim.
const FeatureIdentityPins = "identity_pins"

// IdentityPin is one name a hub pinned to a key.
type IdentityPin struct {
	Name      string  `json:"name"`
	KeyID     string  `json:"key_id"`
	PublicKey string  `json:"public_key"` // base64 raw Ed25519
	PinnedAt  float64 `json:"pinned_at"`  // unix seconds, hub clock
}

// IdentityPins lists the hub's pins.
func (c *Client) IdentityPins(ctx context.Context) ([]IdentityPin, error) {
	if w := c.Welcome(); !w.HasFeature(FeatureIdentityPins) {
		return nil, &UnsupportedError{Call: "IdentityPins", Feature: FeatureIdentityPins, HubID: w.HubID}
	}
	f, err := c.reply(ctx, c.envelope("identity_pin_list", ""), "", "identity_pin_list_result", matchTypes("identity_pin_list_result", "error"))
	if err != nil {
		return nil, err
	}
	var pins []IdentityPin
	if err := f.DecodeField("pins", &pins); err != nil {
		return nil, fmt.Errorf("client: decode identity_pin_list_result: %w", err)
	}
	return pins, nil
}

// ReclaimResult is the hub's answer to ReclaimIdentityPin.
type ReclaimResult struct {
	Applied       bool   `json:"applied"`
	PreviousKeyID string `json:"previous_key_id"`
	Detail        string `json:"detail"`
}

// ReclaimIdentityPin asks the hub to forget name's pin (only if it is
// expectedKeyID, when given), closing a live holder of the name: its next
// signed registration pins it anew. The hub's operator may (its shared
// token, or a credential with role synapse/admin), and whom its access
// rules allow identity-pin-reclaim on agent:NAME; a refusal of the rules
// is a *Refused with Code "acl_denied", other refusals a result with
// Applied false and Detail saying what to do instead.
func (c *Client) ReclaimIdentityPin(ctx context.Context, name, expectedKeyID, reason string) (ReclaimResult, error) {
	if w := c.Welcome(); !w.HasFeature(FeatureIdentityPins) {
		return ReclaimResult{}, &UnsupportedError{Call: "ReclaimIdentityPin", Feature: FeatureIdentityPins, HubID: w.HubID}
	}
	m := c.envelope("identity_pin_reclaim", "")
	m["pin_name"], m["expected_key_id"], m["reason"] = name, expectedKeyID, reason
	f, err := c.reply(ctx, m, "", "identity_pin_reclaim_result", matchTypes("identity_pin_reclaim_result", "error"))
	if err != nil {
		return ReclaimResult{}, err
	}
	if f.Type == "error" { // refused before the verb ran: the access rules (acl_denied), a rate limit
		return ReclaimResult{Detail: f.Payload}, refusedFrom(f, "")
	}
	var r ReclaimResult
	if err := f.Decode(&r); err != nil {
		return ReclaimResult{}, fmt.Errorf("client: decode identity_pin_reclaim_result: %w", err)
	}
	return r, nil
}

// matchTypes matches a reply of any of types.
func matchTypes(types ...string) func(Frame) (bool, bool) {
	return func(f Frame) (bool, bool) { ok := slices.Contains(types, f.Type); return ok, ok }
}
