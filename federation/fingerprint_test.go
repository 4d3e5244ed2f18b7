package federation

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// The test encoder below is deliberately written the reference's way (each
// value encoded to its own byte string, then framed) rather than the code
// under test's way (one buffer, lengths patched in), so the two check each
// other.

func tframe(tag byte, body []byte) []byte {
	out := []byte{tag}
	out = binary.BigEndian.AppendUint64(out, uint64(len(body)))
	return append(out, body...)
}

func tcat(parts ...[]byte) []byte { return slices.Concat(parts...) }

func tdouble(f float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(f)) }

func mustFingerprint(t *testing.T, hub string, e Event) [32]byte {
	t.Helper()
	sum, err := Fingerprint(hub, e)
	if err != nil {
		t.Fatalf("Fingerprint(%q, %+v): %v", hub, e, err)
	}
	return sum
}

func ev(seq int64, ts float64, kind, payload string) Event {
	return Event{Seq: seq, TS: ts, Kind: kind, Payload: json.RawMessage(payload)}
}

func TestFingerprint_MatchesHandBuiltLayout(t *testing.T) {
	e := ev(7, 1782648000.5, "release",
		`{"task_id":"T1","n":1,"f":1.5,"ok":true,"z":null,"l":["a",false],"o":{}}`)

	// Members in key order: f l n o ok task_id z.
	payload := tframe('o', tcat(
		tframe('k', []byte("f")), tframe('v', tframe('f', tdouble(1.5))),
		tframe('k', []byte("l")), tframe('v', tframe('l', tcat(
			tframe('v', tframe('s', []byte("a"))),
			tframe('v', []byte("b0")),
		))),
		tframe('k', []byte("n")), tframe('v', tframe('i', []byte("1"))),
		tframe('k', []byte("o")), tframe('v', tframe('o', nil)),
		tframe('k', []byte("ok")), tframe('v', []byte("b1")),
		tframe('k', []byte("task_id")), tframe('v', tframe('s', []byte("T1"))),
		tframe('k', []byte("z")), tframe('v', []byte("n")),
	))
	want := sha256.Sum256(tcat(
		[]byte("synapse-channel:multihub-event-fingerprint:v1\x00"),
		tframe('h', []byte("syn-west")),
		tframe('q', []byte("7")),
		tframe('t', tdouble(1782648000.5)),
		tframe('k', []byte("release")),
		tframe('p', payload),
	))
	got := mustFingerprint(t, "syn-west", e)
	if got != want {
		t.Fatalf("fingerprint = %x, hand-built layout gives %x", got, want)
	}
	// Pinned so a change to the layout cannot pass by changing both encoders.
	// The same digest comes out of a transcription of the reference's
	// event_fingerprint fed this event.
	const golden = "2f09d858e78a95e40608c8cb066b1fe33d86a02c3e24f379f5321ca7dbbe3d3c"
	if hex.EncodeToString(got[:]) != golden {
		t.Fatalf("fingerprint = %x, want pinned %s", got, golden)
	}
}

func TestFingerprint_IsDeterministic(t *testing.T) {
	e := ev(3, 10.25, "claim", `{"task_id":"T","paths":["a","b"],"epoch":4}`)
	a, b := mustFingerprint(t, "h", e), mustFingerprint(t, "h", e)
	if a != b {
		t.Fatalf("two calls differ: %x vs %x", a, b)
	}
}

func TestFingerprint_IgnoresKeyOrderAndWhitespace(t *testing.T) {
	a := mustFingerprint(t, "h", ev(1, 1, "k", `{"b":{"y":1,"x":[1,{"q":2,"p":3}]},"a":"s"}`))
	b := mustFingerprint(t, "h", ev(1, 1, "k", " {\"a\" : \"s\",\n\"b\":{\"x\":[1,{\"p\":3,\"q\":2}],\"y\":1}} "))
	if a != b {
		t.Fatalf("same object in another key order or spacing: %x vs %x", a, b)
	}
}

func TestFingerprint_SortsKeysByUTF8Bytes(t *testing.T) {
	// "é" (C3 A9) sorts after "z" by bytes; a sort by UTF-16 or by rune
	// would agree here, but a locale sort would not. Pin it against the
	// hand-built order.
	got := mustFingerprint(t, "h", ev(1, 0, "k", `{"é":1,"z":2}`))
	want := sha256.Sum256(tcat(
		[]byte(fingerprintDomain),
		tframe('h', []byte("h")), tframe('q', []byte("1")), tframe('t', tdouble(0)), tframe('k', []byte("k")),
		tframe('p', tframe('o', tcat(
			tframe('k', []byte("z")), tframe('v', tframe('i', []byte("2"))),
			tframe('k', []byte("é")), tframe('v', tframe('i', []byte("1"))),
		))),
	))
	if got != want {
		t.Fatalf("keys not in UTF-8 byte order")
	}
}

func TestFingerprint_DistinguishesTypes(t *testing.T) {
	// Each pair is equal as a number or text but must hash differently.
	pairs := [][2]string{
		{`{"v":1}`, `{"v":1.0}`},
		{`{"v":1}`, `{"v":1e0}`},
		{`{"v":1}`, `{"v":"1"}`},
		{`{"v":1}`, `{"v":true}`},
		{`{"v":0}`, `{"v":false}`},
		{`{"v":null}`, `{}`},
		{`{"v":0.0}`, `{"v":-0.0}`},
		{`{"v":["ab"]}`, `{"v":["a","b"]}`},
		{`{"v":[]}`, `{"v":{}}`},
		{`{"v":[[]]}`, `{"v":[]}`},
		{`{"ab":"c"}`, `{"a":"bc"}`},
	}
	for _, p := range pairs {
		a := mustFingerprint(t, "h", ev(1, 1, "k", p[0]))
		b := mustFingerprint(t, "h", ev(1, 1, "k", p[1]))
		if a == b {
			t.Errorf("%s and %s share a fingerprint", p[0], p[1])
		}
	}
}

func TestFingerprint_FollowsPythonNumberAndStringReading(t *testing.T) {
	// Each pair reads to the same Python value, so must hash the same.
	pairs := [][2]string{
		{`{"v":-0}`, `{"v":0}`},               // int("-0") is 0
		{`{"v":1E2}`, `{"v":100.0}`},          // exponent makes a float
		{`{"v":1e-400}`, `{"v":0.0}`},         // underflow is 0.0, not an error
		{`{"v":"\ud83d\ude00"}`, `{"v":"😀"}`}, // a surrogate pair is one code point
		{`{"v":"\u00e9"}`, `{"v":"é"}`},       // escapes are decoded before hashing
		{`{"v":1,"v":2}`, `{"v":2}`},          // a repeated key keeps its last value
		{`{"v":123456789012345678901234567890}`, `{"v":123456789012345678901234567890}`},
	}
	for _, p := range pairs {
		a := mustFingerprint(t, "h", ev(1, 1, "k", p[0]))
		b := mustFingerprint(t, "h", ev(1, 1, "k", p[1]))
		if a != b {
			t.Errorf("%s and %s differ", p[0], p[1])
		}
	}
	// Integers keep every digit: no rounding through float64.
	a := mustFingerprint(t, "h", ev(1, 1, "k", `{"v":9007199254740993}`))
	b := mustFingerprint(t, "h", ev(1, 1, "k", `{"v":9007199254740992}`))
	if a == b {
		t.Error("integers beyond 2^53 collide")
	}
}

func TestFingerprint_CommitsEveryField(t *testing.T) {
	base := ev(5, 100.5, "claim", `{"task_id":"T","epoch":1}`)
	want := mustFingerprint(t, "west", base)
	with := func(change func(*Event)) Event { e := base; change(&e); return e }
	cases := map[string]struct {
		hub string
		e   Event
	}{
		"hub":      {"east", base},
		"seq":      {"west", with(func(e *Event) { e.Seq = 6 })},
		"ts":       {"west", with(func(e *Event) { e.TS = math.Nextafter(100.5, 200) })},
		"kind":     {"west", with(func(e *Event) { e.Kind = "handoff" })},
		"a value":  {"west", with(func(e *Event) { e.Payload = json.RawMessage(`{"task_id":"T","epoch":2}`) })},
		"a key":    {"west", with(func(e *Event) { e.Payload = json.RawMessage(`{"task_id":"T","Epoch":1}`) })},
		"an extra": {"west", with(func(e *Event) { e.Payload = json.RawMessage(`{"task_id":"T","epoch":1,"x":null}`) })},
	}
	for name, c := range cases {
		if mustFingerprint(t, c.hub, c.e) == want {
			t.Errorf("changing %s leaves the fingerprint unchanged", name)
		}
	}
}

func TestFingerprint_RefusesWhatTheReferenceCannotEncode(t *testing.T) {
	ok := ev(1, 1, "k", `{}`)
	cases := map[string]struct {
		hub string
		e   Event
	}{
		"empty payload":       {"h", ev(1, 1, "k", ``)},
		"invalid JSON":        {"h", ev(1, 1, "k", `{"a":}`)},
		"NaN literal":         {"h", ev(1, 1, "k", `{"a":NaN}`)},
		"Infinity literal":    {"h", ev(1, 1, "k", `{"a":Infinity}`)},
		"float overflow":      {"h", ev(1, 1, "k", `{"a":1e400}`)},
		"negative overflow":   {"h", ev(1, 1, "k", `{"a":-1.5e309}`)},
		"trailing data":       {"h", ev(1, 1, "k", `{"a":1} {}`)},
		"trailing garbage":    {"h", ev(1, 1, "k", `{"a":1}]`)},
		"not an object":       {"h", ev(1, 1, "k", `[1,2]`)},
		"null payload":        {"h", ev(1, 1, "k", `null`)},
		"invalid UTF-8":       {"h", ev(1, 1, "k", "{\"a\":\"\xff\"}")},
		"lone high surrogate": {"h", ev(1, 1, "k", `{"a":"x\ud800y"}`)},
		"lone low surrogate":  {"h", ev(1, 1, "k", `{"a":"\udc00"}`)},
		"surrogate in key":    {"h", ev(1, 1, "k", `{"\ud800":1}`)},
		"high then non-low":   {"h", ev(1, 1, "k", `{"a":"\ud800\u0041"}`)},
		"empty hub":           {"", ok},
		"hub not UTF-8":       {"\xff", ok},
		"seq zero":            {"h", ev(0, 1, "k", `{}`)},
		"negative seq":        {"h", ev(-1, 1, "k", `{}`)},
		"NaN ts":              {"h", ev(1, math.NaN(), "k", `{}`)},
		"infinite ts":         {"h", ev(1, math.Inf(1), "k", `{}`)},
		"empty kind":          {"h", ev(1, 1, "", `{}`)},
		"kind not UTF-8":      {"h", ev(1, 1, "\xfe", `{}`)},
		"deep bad number":     {"h", ev(1, 1, "k", `{"a":[{"b":[1e999]}]}`)},
	}
	for name, c := range cases {
		if _, err := Fingerprint(c.hub, c.e); !errors.Is(err, ErrBadEvent) {
			t.Errorf("%s: err = %v, want ErrBadEvent", name, err)
		}
	}
	// An escaped backslash before "u" is text, not a surrogate escape.
	if _, err := Fingerprint("h", ev(1, 1, "k", `{"a":"\\ud800"}`)); err != nil {
		t.Errorf("escaped backslash: %v", err)
	}
}

// jsonValue is a generated payload value together with its JSON text and
// its encoding by the test encoder.
type jsonValue struct {
	text string
	enc  []byte
}

func genValue(depth int) *rapid.Generator[jsonValue] {
	return rapid.Custom(func(t *rapid.T) jsonValue {
		max := 6
		if depth <= 0 {
			max = 4
		}
		switch rapid.IntRange(0, max).Draw(t, "type") {
		case 0:
			return jsonValue{"null", []byte("n")}
		case 1:
			if rapid.Bool().Draw(t, "b") {
				return jsonValue{"true", []byte("b1")}
			}
			return jsonValue{"false", []byte("b0")}
		case 2:
			n := rapid.Int64().Draw(t, "int")
			s := strconv.FormatInt(n, 10)
			return jsonValue{s, tframe('i', []byte(s))}
		case 3:
			f := rapid.Float64().Filter(func(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }).Draw(t, "float")
			s := strconv.FormatFloat(f, 'e', -1, 64) // always has an 'e', so it reads as a float
			return jsonValue{s, tframe('f', tdouble(f))}
		case 4:
			s := rapid.String().Draw(t, "str")
			text, _ := json.Marshal(s)
			return jsonValue{string(text), tframe('s', []byte(s))}
		case 5:
			items := rapid.SliceOfN(genValue(depth-1), 0, 4).Draw(t, "items")
			texts, body := make([]string, len(items)), []byte{}
			for i, it := range items {
				texts[i] = it.text
				body = append(body, tframe('v', it.enc)...)
			}
			return jsonValue{"[" + strings.Join(texts, ",") + "]", tframe('l', body)}
		default:
			return genObject(depth-1).Draw(t, "object")
		}
	})
}

func genObject(depth int) *rapid.Generator[jsonValue] {
	return rapid.Custom(func(t *rapid.T) jsonValue {
		members := rapid.MapOfN(rapid.String(), genValue(depth), 0, 4).Draw(t, "members")
		keys := make([]string, 0, len(members))
		for k := range members {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var body []byte
		for _, k := range keys {
			body = append(body, tcat(tframe('k', []byte(k)), tframe('v', members[k].enc))...)
		}
		// Write the members in a drawn order: the digest must not depend on it.
		order := rapid.Permutation(keys).Draw(t, "order")
		texts := make([]string, len(order))
		for i, k := range order {
			kt, _ := json.Marshal(k)
			texts[i] = string(kt) + ":" + members[k].text
		}
		return jsonValue{"{" + strings.Join(texts, ",") + "}", tframe('o', body)}
	})
}

func TestFingerprint_AgreesWithTestEncoder_Property(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		obj := genObject(3).Draw(t, "payload")
		hub := rapid.StringN(1, 16, -1).Draw(t, "hub")
		e := Event{
			Seq:     rapid.Int64Min(1).Draw(t, "seq"),
			TS:      rapid.Float64Range(-1e12, 1e12).Draw(t, "ts"),
			Kind:    rapid.StringN(1, 16, -1).Draw(t, "kind"),
			Payload: json.RawMessage(obj.text),
		}
		got, err := Fingerprint(hub, e)
		if err != nil {
			t.Fatalf("Fingerprint(%s): %v", obj.text, err)
		}
		want := sha256.Sum256(tcat(
			[]byte(fingerprintDomain),
			tframe('h', []byte(hub)),
			tframe('q', []byte(strconv.FormatInt(e.Seq, 10))),
			tframe('t', tdouble(e.TS)),
			tframe('k', []byte(e.Kind)),
			tframe('p', obj.enc),
		))
		if got != want {
			t.Fatalf("payload %s: got %x, test encoder %x", obj.text, got, want)
		}
	})
}
