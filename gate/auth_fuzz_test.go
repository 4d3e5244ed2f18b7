package gate

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

// writeJSON writes v as JSON with every object's keys in the order keyOrder
// gives, numbers as their lexemes: the same value spelled differently.
func writeOrderedJSON(b *strings.Builder, v any, keyOrder func([]string)) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		keyOrder(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(" , ")
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteString(" : ")
			writeOrderedJSON(b, x[k], keyOrder)
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeOrderedJSON(b, e, keyOrder)
		}
		b.WriteByte(']')
	case json.Number:
		b.WriteString(string(x))
	default:
		vb, _ := json.Marshal(x)
		b.Write(vb)
	}
}

// mutate changes the value under key in m to a different value (a type
// change, a flipped bool, a longer string, one more key or element).
func mutate(m map[string]any, key string) {
	switch x := m[key].(type) {
	case string:
		m[key] = x + "!"
	case bool:
		m[key] = !x
	case nil:
		m[key] = false
	case map[string]any:
		c := make(map[string]any, len(x)+1)
		for k, v := range x {
			c[k] = v
		}
		c[freshKey(c)] = true
		m[key] = c
	case []any:
		m[key] = append(slices.Clip(x), nil)
	default: // a number
		m[key] = "0"
	}
}

// FuzzSignMessage checks the per-message signer (PROTOCOL.md §5.2) on
// arbitrary frames: the signature is a function of the value alone — the
// same whatever the key order or spacing of the text it was decoded from;
// a signed frame verifies; and changing any one signed field, or adding
// one, makes verification fail. The canonical bytes themselves are
// FuzzCanonical's (pyjson) and CPython's vectors' (TestSignMessage_*).
func FuzzSignMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"claim","sender":"p/a","task_id":"T","paths":["src/a","src/b"],"ttl":60,"note":"café <ok>"}`,
		`{"type":"release","task_id":"T","idem_key":"k1","worktree":"/wt","git":{"branch":"main","base":null}}`,
		`{"type":"task_update","status":"working","version":3,"ratio":0.1,"big":12345678901234567890,"e":1e16}`,
		`{"type":"checkpoint","checkpoint":"\u2028\u0000\n\"\\","x":[1,[2,{"b":1,"a":2}]],"t":true,"f":false}`,
		`{"type":"handoff","to":"p/b","😀":1,"\ue000":2,"A":3,"a":4}`,
		`{"type":"resource","meta":{},"list":[],"neg":-0.0,"tiny":5e-324}`,
	} {
		f.Add(s, uint8(0), uint8(0))
	}
	keys := []MessageAuthKey{{ID: "main", Secret: []byte("s3cret"), Senders: []string{"p/a"}}}
	const now = 1782648000.0
	f.Fuzz(func(t *testing.T, text string, pick, variant uint8) {
		in, err := wire.Decode([]byte(text), 0, 64)
		if err != nil {
			return
		}
		m := in.Map()
		m["sender"] = "p/a"
		m["auth"] = map[string]any{"alg": "hmac-sha256", "kid": "main", "nonce": "n", "sequence": json.Number("1"),
			"timestamp": json.Number("1782648000.25"), "value": "placeholder"}
		sig, err := SignMessage([]byte("s3cret"), m)
		if err != nil {
			return // a number Python could not print (1e400): the client cannot sign it either
		}
		if again, _ := SignMessage([]byte("s3cret"), m); again != sig {
			t.Fatalf("signing twice gave %s and %s", sig, again)
		}
		// The same value spelled with the keys reversed and spaces added.
		var sb strings.Builder
		writeOrderedJSON(&sb, m, func(k []string) { slices.Sort(k); slices.Reverse(k) })
		in2, err := wire.Decode([]byte(sb.String()), 0, 64)
		if err != nil {
			t.Fatalf("the reordered frame does not decode: %v\n%s", err, sb.String())
		}
		if other, err := SignMessage([]byte("s3cret"), in2.Map()); err != nil || other != sig {
			t.Fatalf("key order changed the signature: %s vs %s (%v)\n%s", sig, other, err, sb.String())
		}
		if c1, _ := pyjson.AppendCanonical(nil, m, false); !json.Valid(c1) {
			t.Fatalf("canonical form is not JSON: %q", c1)
		}

		m["auth"].(map[string]any)["value"] = sig
		v, _ := NewVerifier(keys, false, 0) // started long before the frame: no restart horizon in play
		verify := func(frame map[string]any) string {
			var sb strings.Builder
			writeOrderedJSON(&sb, frame, slices.Sort[[]string])
			in, err := wire.Decode([]byte(sb.String()), 0, 64)
			if err != nil {
				t.Fatalf("a signed frame does not decode: %v\n%s", err, sb.String())
			}
			return v.Verify("p/a", in, now)
		}
		if got := verify(m); got != VerifyOK {
			t.Fatalf("a frame signed by SignMessage verifies as %s", got)
		}

		// One change to a signed field: the top-level keys, the auth keys
		// but value, or a new key.
		top := make([]string, 0, len(m))
		for k := range m {
			top = append(top, k)
		}
		slices.Sort(top)
		authKeys := []string{"alg", "kid", "nonce", "sequence", "timestamp"}
		mut := cloneFrame(m)
		switch n := int(pick) % (len(top) + len(authKeys) + 1); {
		case n < len(top) && top[n] != "auth":
			mutate(mut, top[n])
		case n < len(top) || n < len(top)+len(authKeys):
			mutate(mut["auth"].(map[string]any), authKeys[(n+int(variant))%len(authKeys)])
		default:
			mut[freshKey(mut)] = json.Number("1")
		}
		if got := verify(mut); got == VerifyOK {
			t.Fatalf("a frame changed after signing still verifies:\nsigned  %v\nchanged %v", m, mut)
		}
	})
}

// freshKey returns a key m does not hold.
func freshKey(m map[string]any) string {
	k := "mutated"
	for _, taken := m[k]; taken; _, taken = m[k] {
		k += "!"
	}
	return k
}

// cloneFrame copies a frame and its auth object.
func cloneFrame(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	a := make(map[string]any)
	for k, v := range m["auth"].(map[string]any) {
		a[k] = v
	}
	c["auth"] = a
	return c
}
