package gate

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

// Signed registrations (PROTOCOL.md §5.5; docs/security.md, "Identity
// pins"): a socket's first frame may carry an Ed25519 proof that it holds
// a key, and the public half of that key as identity_public_key. This is
// the reference's wire form, byte for byte, so its clients' proofs verify:
//
//   - signature = {version:1, key_id, algorithm:"ed25519", nonce,
//     sequence, signed_at, value}: the reference's "legacy v1" signed-event
//     envelope, which its clients use for registration. Version 2 (domain
//     "aef:legacy-event:v0.1", the canonical bytes prefixed by the domain
//     and a NUL) is accepted too.
//   - value is the standard base64 (with padding) of the Ed25519
//     signature of the frame's canonical JSON without signature.value:
//     Python's json.dumps(sort_keys=True, separators=(",",":"),
//     ensure_ascii=False), which pyjson.AppendCanonical reproduces. The
//     frame is covered whole, token included.
//   - identity_public_key is the standard base64 of the raw 32-byte key;
//     a machine key's id is "machine-" + the first 16 hex digits of the
//     SHA-256 of that base64 text (MachineKeyID).
//   - Freshness: signed_at within [now − 10 s, now + 1 s] of the hub's
//     clock (INV-CK-2); the nonce is admitted once per (key_id, sender)
//     inside that window.
//
// The verification is pure (CheckRegistration); the IdentityVerifier adds
// the replay cache. It runs once per socket, on the
// frame that binds its name: nothing is verified on the frames after.

// Identity verification results: the reference's signed-event
// verification_result strings.
const (
	IdentityValid            = "valid"
	IdentityMissingSignature = "missing_signature"
	IdentityUnknownKey       = "unknown_key"
	IdentitySenderMismatch   = "sender_mismatch"
	IdentityBadSignature     = "bad_signature"
	IdentityInvalidDomain    = "invalid_domain"
	IdentitySequenceMismatch = "sequence_mismatch"
	IdentityExpired          = "expired"
	IdentityReplayed         = "replayed"
)

// Signed-event envelope constants (the reference's message_auth.py).
const (
	identityAlgorithm    = "ed25519"
	identityDomainV2     = "aef:legacy-event:v0.1"
	machineKeyIDPrefix   = "machine-"
	machineKeyIDDigits   = 16
	identityReplayPerKey = 4096 // live registration nonces per (key, name)
)

// ErrIdentityKey is wrapped by every refusal of a public key's text.
var ErrIdentityKey = errors.New("identity key")

// ParseIdentityPublicKey decodes identity_public_key: standard base64 of a
// raw 32-byte Ed25519 public key.
func ParseIdentityPublicKey(b64 string) (ed25519.PublicKey, error) {
	raw, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64: %v", ErrIdentityKey, err)
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrIdentityKey, len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// EncodeIdentityPublicKey is identity_public_key for pub.
func EncodeIdentityPublicKey(pub ed25519.PublicKey) string {
	return base64.StdEncoding.EncodeToString(pub)
}

// MachineKeyID is the key id the reference derives for a machine key from
// its base64 public key: "machine-" + 16 hex digits of its SHA-256.
func MachineKeyID(publicB64 string) string {
	sum := sha256.Sum256([]byte(publicB64))
	return machineKeyIDPrefix + hex.EncodeToString(sum[:])[:machineKeyIDDigits]
}

// Proof is what a signed registration claims, read before it is verified.
type Proof struct {
	Signed    bool   // the frame has a signature object
	KeyID     string // signature.key_id
	PublicKey string // identity_public_key, "" if absent
	Nonce     string
	SignedAt  float64
}

// ReadProof reads the proof fields of frame (a decoded JSON object).
func ReadProof(frame map[string]any) Proof {
	sig, ok := frame["signature"].(map[string]any)
	if !ok {
		return Proof{}
	}
	p := Proof{Signed: true}
	p.KeyID, _ = sig["key_id"].(string)
	p.PublicKey, _ = frame["identity_public_key"].(string)
	p.Nonce, _ = sig["nonce"].(string)
	p.SignedAt, _ = jsonFloat(sig["signed_at"])
	return p
}

// CheckRegistration verifies frame's signature envelope against the key
// keyID/pub for sender at hub time now, in the reference's order
// (verify_event_signature), without the replay cache. It returns
// IdentityValid or the verification_result of the refusal. It never
// modifies frame.
func CheckRegistration(frame map[string]any, sender, keyID string, pub ed25519.PublicKey, now float64) string {
	sig, ok := frame["signature"].(map[string]any)
	if !ok {
		return IdentityMissingSignature
	}
	if kid, _ := sig["key_id"].(string); kid == "" || kid != keyID || len(pub) != ed25519.PublicKeySize {
		return IdentityUnknownKey
	}
	if s, _ := frame["sender"].(string); s != sender {
		return IdentitySenderMismatch
	}
	if alg, _ := sig["algorithm"].(string); alg != identityAlgorithm {
		return IdentityBadSignature
	}
	version, ok := sig["version"].(json.Number)
	if !ok {
		return IdentityBadSignature
	}
	domain, hasDomain := sig["domain"]
	var prefix string
	switch version {
	case "1":
		if hasDomain {
			return IdentityInvalidDomain
		}
	case "2":
		if d, _ := domain.(string); d != identityDomainV2 {
			return IdentityInvalidDomain
		}
		prefix = identityDomainV2 + "\x00"
	default:
		return IdentityBadSignature
	}
	signedAt, ok := jsonFloat(sig["signed_at"])
	if _, hasSeq := sig["sequence"]; !ok || !hasSeq {
		return IdentityBadSignature
	}
	if !positiveInt(sig["sequence"]) {
		return IdentitySequenceMismatch
	}
	if signedAt < now-MessageAuthWindow || signedAt > now+MessageAuthFutureSkew {
		return IdentityExpired
	}
	nonce, _ := sig["nonce"].(string)
	value, _ := sig["value"].(string)
	if nonce == "" || value == "" || len(nonce) > maxNonceBytes {
		return IdentityBadSignature
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(value)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return IdentityBadSignature
	}
	msg, err := RegistrationMessage(frame)
	if err != nil {
		return IdentityBadSignature
	}
	if !ed25519.Verify(pub, append([]byte(prefix), msg...), raw) {
		return IdentityBadSignature
	}
	return IdentityValid
}

// RegistrationMessage is the canonical JSON a registration signature
// covers: frame with signature.value removed (version 1; version 2 signs
// it prefixed by its domain and a NUL).
func RegistrationMessage(frame map[string]any) ([]byte, error) {
	c := make(map[string]any, len(frame))
	for k, v := range frame {
		c[k] = v
	}
	if sig, ok := frame["signature"].(map[string]any); ok {
		s := make(map[string]any, len(sig))
		for k, v := range sig {
			if k != "value" {
				s[k] = v
			}
		}
		c["signature"] = s
	}
	return pyjson.AppendCanonical(nil, c, false)
}

// SignRegistration returns frame with a version-1 signature envelope and
// identity_public_key, as the reference's clients sign their first frame:
// key id MachineKeyID of the public key, stamped at signedAt (unix
// seconds) with nonce and sequence. The frame is encoded and decoded first
// so the signature covers what the hub reads; frame itself is not
// modified.
func SignRegistration(frame map[string]any, priv ed25519.PrivateKey, nonce string, sequence int64, signedAt float64) (map[string]any, error) {
	pub := EncodeIdentityPublicKey(priv.Public().(ed25519.PublicKey))
	c := make(map[string]any, len(frame)+2)
	for k, v := range frame {
		c[k] = v
	}
	c["identity_public_key"] = pub
	c["signature"] = map[string]any{"version": 1, "key_id": MachineKeyID(pub), "algorithm": identityAlgorithm,
		"nonce": nonce, "sequence": sequence, "signed_at": signedAt}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("gate: sign registration: %w", err)
	}
	in, err := wire.Decode(b, 0, wire.DefaultMaxDepth)
	if err != nil {
		return nil, fmt.Errorf("gate: sign registration: %w", err)
	}
	m := in.Map()
	msg, err := RegistrationMessage(m)
	if err != nil {
		return nil, fmt.Errorf("gate: sign registration: %w", err)
	}
	m["signature"].(map[string]any)["value"] = base64.StdEncoding.EncodeToString(ed25519.Sign(priv, msg))
	return m, nil
}

// IdentityVerifier verifies signed registrations and refuses their
// replays: within the window by the nonce (per key id and name), after it
// by the timestamp. A hub with a durable pin store writes each admitted
// nonce down and gives the ones still inside the window back to a new
// verifier at its start (Remember), so a restart does not reopen them; a
// hub without one forgets its pins too, and an unpinned name needs no
// proof. Safe for concurrent use.
type IdentityVerifier struct {
	replay *replayCache
}

// NewIdentityVerifier returns a verifier with an empty nonce cache.
func NewIdentityVerifier() *IdentityVerifier {
	return &IdentityVerifier{replay: newReplayCache(identityReplayPerKey, replayTotal)}
}

// Verify checks frame against keyID/pub for sender at now
// (CheckRegistration), then admits its nonce: a proof is accepted once.
func (v *IdentityVerifier) Verify(frame map[string]any, sender, keyID string, pub ed25519.PublicKey, now float64) string {
	if r := CheckRegistration(frame, sender, keyID, pub, now); r != IdentityValid {
		return r
	}
	p := ReadProof(frame)
	// Only a proof whose signature holds reaches the cache, so forgeries
	// cannot fill it.
	if !v.replay.admit(keyID+"\x00"+sender, p.Nonce, p.SignedAt+MessageAuthWindow, now) {
		return IdentityReplayed
	}
	return IdentityValid
}

// Remember admits a nonce an earlier process admitted (signed at
// signedAt), so its proof is refused as replayed while it is inside the
// window.
func (v *IdentityVerifier) Remember(keyID, sender, nonce string, signedAt, now float64) {
	v.replay.admit(keyID+"\x00"+sender, nonce, signedAt+MessageAuthWindow, now)
}
