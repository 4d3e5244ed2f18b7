package gate

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/synapse-hub/synapse/wire"
)

// referenceRegistration is testdata/reference_registration.json: a first
// frame signed by the reference's own Python client code
// (synapse_channel.core.identity_keys.sign_registration over
// protocol.build_envelope, sent as json.dumps sends it), with the key made
// from a fixed seed. Non-ASCII, HTML characters and U+2028 are in it on
// purpose: the canonical bytes must be Python's.
type referenceRegistration struct {
	SeedHex   string  `json:"seed_hex"`
	PublicKey string  `json:"public_key"`
	KeyID     string  `json:"key_id"`
	Now       float64 `json:"now"`
	Frame     string  `json:"frame"`
}

func loadReference(t *testing.T) (referenceRegistration, map[string]any) {
	t.Helper()
	b, err := os.ReadFile("testdata/reference_registration.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref referenceRegistration
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	in, err := wire.Decode([]byte(ref.Frame), 0, wire.DefaultMaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	return ref, in.Map()
}

// Issue23: the reference client's signed registration verifies here, its
// key id is derived the reference's way, and a replay of it is refused.
func TestIdentity_ReferenceClientRegistrationVerifies_Issue23(t *testing.T) {
	ref, frame := loadReference(t)
	pub, err := ParseIdentityPublicKey(ref.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := hex.DecodeString(ref.SeedHex)
	if got := EncodeIdentityPublicKey(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)); got != ref.PublicKey {
		t.Fatalf("public key from the seed %s, the reference says %s", got, ref.PublicKey)
	}
	if got := MachineKeyID(ref.PublicKey); got != ref.KeyID {
		t.Fatalf("MachineKeyID = %s, the reference derives %s", got, ref.KeyID)
	}
	sender, _ := frame["sender"].(string)
	if got := CheckRegistration(frame, sender, ref.KeyID, pub, ref.Now); got != IdentityValid {
		t.Fatalf("the reference's signed registration checks as %s", got)
	}
	v := NewIdentityVerifier()
	if got := v.Verify(frame, sender, ref.KeyID, pub, ref.Now); got != IdentityValid {
		t.Fatalf("first use: %s", got)
	}
	if got := v.Verify(frame, sender, ref.KeyID, pub, ref.Now+1); got != IdentityReplayed {
		t.Fatalf("the same proof again: %s, want replayed", got)
	}
	if got := v.Verify(frame, sender, ref.KeyID, pub, ref.Now+MessageAuthWindow+0.5); got != IdentityExpired {
		t.Fatalf("the same proof after its window: %s, want expired", got)
	}
	// A restarted hub's verifier, given the nonces the last one admitted
	// (Remember), refuses it too.
	again := NewIdentityVerifier()
	p := ReadProof(frame)
	again.Remember(ref.KeyID, sender, p.Nonce, p.SignedAt, ref.Now+2)
	if got := again.Verify(frame, sender, ref.KeyID, pub, ref.Now+2); got != IdentityReplayed {
		t.Fatalf("the same proof after a restart: %s, want replayed", got)
	}
}

// Issue23: each refusal of the reference's order, on the reference frame.
func TestIdentity_RefusalsInReferenceOrder_Issue23(t *testing.T) {
	ref, frame := loadReference(t)
	pub, _ := ParseIdentityPublicKey(ref.PublicKey)
	other := ed25519.NewKeyFromSeed(make([]byte, 32)).Public().(ed25519.PublicKey)
	sender, _ := frame["sender"].(string)
	with := func(edit func(m, sig map[string]any)) map[string]any {
		c := make(map[string]any, len(frame))
		for k, v := range frame {
			c[k] = v
		}
		s := make(map[string]any)
		for k, v := range frame["signature"].(map[string]any) {
			s[k] = v
		}
		c["signature"] = s
		edit(c, s)
		return c
	}
	cases := []struct {
		name   string
		frame  map[string]any
		sender string
		keyID  string
		pub    ed25519.PublicKey
		want   string
	}{
		{"no signature", with(func(m, _ map[string]any) { delete(m, "signature") }), sender, ref.KeyID, pub, IdentityMissingSignature},
		{"signature not an object", with(func(m, _ map[string]any) { m["signature"] = "x" }), sender, ref.KeyID, pub, IdentityMissingSignature},
		{"another key id", frame, sender, "machine-0000000000000000", pub, IdentityUnknownKey},
		{"another sender", frame, "proj/other", ref.KeyID, pub, IdentitySenderMismatch},
		{"another algorithm", with(func(_, s map[string]any) { s["algorithm"] = "rsa" }), sender, ref.KeyID, pub, IdentityBadSignature},
		{"version 1 with a domain", with(func(_, s map[string]any) { s["domain"] = identityDomainV2 }), sender, ref.KeyID, pub, IdentityInvalidDomain},
		{"version 3", with(func(_, s map[string]any) { s["version"] = json.Number("3") }), sender, ref.KeyID, pub, IdentityBadSignature},
		{"sequence 0", with(func(_, s map[string]any) { s["sequence"] = json.Number("0") }), sender, ref.KeyID, pub, IdentitySequenceMismatch},
		{"no signed_at", with(func(_, s map[string]any) { delete(s, "signed_at") }), sender, ref.KeyID, pub, IdentityBadSignature},
		{"signed too long ago", with(func(_, s map[string]any) { s["signed_at"] = json.Number("1782647980.0") }), sender, ref.KeyID, pub, IdentityExpired},
		{"empty nonce", with(func(_, s map[string]any) { s["nonce"] = "" }), sender, ref.KeyID, pub, IdentityBadSignature},
		{"altered payload", with(func(m, _ map[string]any) { m["payload"] = "offline" }), sender, ref.KeyID, pub, IdentityBadSignature},
		{"altered token", with(func(m, _ map[string]any) { m["token"] = "other" }), sender, ref.KeyID, pub, IdentityBadSignature},
		{"another public key", frame, sender, ref.KeyID, other, IdentityBadSignature},
		{"value not base64", with(func(_, s map[string]any) { s["value"] = "!!" }), sender, ref.KeyID, pub, IdentityBadSignature},
	}
	for _, c := range cases {
		if got := CheckRegistration(c.frame, c.sender, c.keyID, c.pub, ref.Now); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// Issue23: what SignRegistration (our SDK's signer) produces verifies, in
// version 1 as the reference's clients sign.
func TestIdentity_SignRegistrationVerifies_Issue23(t *testing.T) {
	priv := ed25519.NewKeyFromSeed([]byte(strings.Repeat("k", 32)))
	frame := map[string]any{"sender": "p/a", "type": "heartbeat", "target": "System", "payload": "online", "token": "t", "timestamp": 1782648000.5}
	m, err := SignRegistration(frame, priv, "n1", 1, 1782648000.5)
	if err != nil {
		t.Fatal(err)
	}
	p := ReadProof(m)
	pub, err := ParseIdentityPublicKey(p.PublicKey)
	if err != nil || p.KeyID != MachineKeyID(p.PublicKey) {
		t.Fatalf("proof %+v: %v", p, err)
	}
	b, _ := json.Marshal(m)
	in, _ := wire.Decode(b, 0, wire.DefaultMaxDepth)
	if got := CheckRegistration(in.Map(), "p/a", p.KeyID, pub, 1782648001); got != IdentityValid {
		t.Fatalf("%s", got)
	}
	if _, ok := frame["signature"]; ok {
		t.Fatal("SignRegistration modified its input")
	}
}

// pyString is an independent definition of how Python's json.dumps with
// ensure_ascii=False writes a string: only '"', '\\' and the C0 controls
// are escaped; the short escapes for \b \f \n \r \t, \u00XX (lowercase)
// for the rest; everything else, U+2028 and '<' included, raw.
func pyString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				b.WriteString(`\u00`)
				b.WriteString(strconv.FormatInt(int64(r)>>4, 16))
				b.WriteString(strconv.FormatInt(int64(r)&15, 16))
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// pyFloat writes a float in [1e9, 1e10) as Python's repr does: the
// shortest digits that round-trip, always with a fraction.
func pyFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// independentMessage writes the canonical bytes of a registration frame
// with exactly these fields by hand, keys in sorted order: a second
// definition of what the signature covers, sharing no code with
// RegistrationMessage or pyjson.
func independentMessage(sender, token, payload, nonce, pub, kid string, seq int64, signedAt float64) []byte {
	sig := `{"algorithm":"ed25519","key_id":` + pyString(kid) + `,"nonce":` + pyString(nonce) +
		`,"sequence":` + strconv.FormatInt(seq, 10) + `,"signed_at":` + pyFloat(signedAt) + `,"version":1}`
	return []byte(`{"identity_public_key":` + pyString(pub) + `,"payload":` + pyString(payload) +
		`,"sender":` + pyString(sender) + `,"signature":` + sig + `,"target":"System","token":` + pyString(token) +
		`,"type":"heartbeat"}`)
}

// FuzzIdentityRegistration checks the signed-registration verifier
// against an independent definition of its canonical bytes
// (independentMessage): a frame signed over those bytes verifies, however
// its JSON is spelled; RegistrationMessage reproduces them exactly; and
// changing any field after signing makes it fail (Issue23).
func FuzzIdentityRegistration(f *testing.F) {
	f.Add("proj/alpha", "s3cret", "online", "bm9uY2U", int64(1), 0.25, uint8(0))
	f.Add("p/ä <&>", "", "\u2028\x00\"\\\n", "n", int64(7), -9.5, uint8(3))
	f.Add("x", "t\x1f", "😀\ue000", strings.Repeat("n", 256), int64(1<<40), 0.999, uint8(9))
	priv := ed25519.NewKeyFromSeed([]byte(strings.Repeat("f", 32)))
	pub := priv.Public().(ed25519.PublicKey)
	pubB64 := EncodeIdentityPublicKey(pub)
	kid := MachineKeyID(pubB64)
	const now = 1782648000.0
	f.Fuzz(func(t *testing.T, sender, token, payload, nonce string, seq int64, offset float64, pick uint8) {
		if !utf8.ValidString(sender) || !utf8.ValidString(token) || !utf8.ValidString(payload) || !utf8.ValidString(nonce) {
			return // not text a client can send: JSON carries Unicode
		}
		if seq < 1 || nonce == "" || len(nonce) > maxNonceBytes || !(offset >= -MessageAuthWindow && offset <= MessageAuthFutureSkew) {
			return
		}
		signedAt := now + offset
		msg := independentMessage(sender, token, payload, nonce, pubB64, kid, seq, signedAt)
		value := base64.StdEncoding.EncodeToString(ed25519.Sign(priv, msg))
		frame := map[string]any{"sender": sender, "target": "System", "type": "heartbeat", "payload": payload, "token": token,
			"identity_public_key": pubB64, "signature": map[string]any{"version": json.Number("1"), "key_id": kid,
				"algorithm": "ed25519", "nonce": nonce, "sequence": json.Number(strconv.FormatInt(seq, 10)),
				"signed_at": json.Number(strconv.FormatFloat(signedAt, 'g', -1, 64)), "value": value}}
		// Spelled with keys reversed and spaces, then decoded as the hub
		// decodes a frame.
		var sb strings.Builder
		writeOrderedJSON(&sb, frame, func(k []string) { slices.Sort(k); slices.Reverse(k) })
		in, err := wire.Decode([]byte(sb.String()), 0, wire.DefaultMaxDepth)
		if err != nil {
			t.Fatalf("decode: %v\n%s", err, sb.String())
		}
		decoded := in.Map()
		if got, err := RegistrationMessage(decoded); err != nil || string(got) != string(msg) {
			t.Fatalf("canonical bytes differ (%v):\nours        %s\nindependent %s", err, got, msg)
		}
		if got := CheckRegistration(decoded, sender, kid, pub, now); got != IdentityValid {
			t.Fatalf("a frame signed over the independent bytes checks as %s", got)
		}
		mut := make(map[string]any, len(decoded))
		for k, v := range decoded {
			mut[k] = v
		}
		sig := make(map[string]any)
		for k, v := range decoded["signature"].(map[string]any) {
			sig[k] = v
		}
		mut["signature"] = sig
		switch pick % 6 {
		case 0:
			mut["payload"] = payload + "!"
		case 1:
			mut["token"] = token + "!"
		case 2:
			sig["nonce"] = nonce + "!"
		case 3:
			sig["sequence"] = json.Number(strconv.FormatInt(seq+1, 10))
		case 4:
			mut["target"] = "all"
		case 5:
			mut["extra"] = true
		}
		if got := CheckRegistration(mut, sender, kid, pub, now); got == IdentityValid {
			t.Fatalf("a frame changed after signing (pick %d) still verifies", pick%6)
		}
	})
}

// BenchmarkCheckRegistration is the hub's cost per signed registration
// (once per socket; nothing per frame after it).
func BenchmarkCheckRegistration(b *testing.B) {
	priv := ed25519.NewKeyFromSeed([]byte(strings.Repeat("b", 32)))
	m, _ := SignRegistration(map[string]any{"sender": "proj/alpha", "type": "heartbeat", "target": "System", "payload": "online",
		"token": "t", "roles": []any{"proj/review"}, "timestamp": 1782648000.5}, priv, "n1", 1, 1782648000.5)
	raw, _ := json.Marshal(m)
	in, _ := wire.Decode(raw, 0, wire.DefaultMaxDepth)
	p := ReadProof(in.Map())
	pub, _ := ParseIdentityPublicKey(p.PublicKey)
	b.ResetTimer()
	for range b.N {
		if CheckRegistration(in.Map(), "proj/alpha", p.KeyID, pub, 1782648001) != IdentityValid {
			b.Fatal("invalid")
		}
	}
}
