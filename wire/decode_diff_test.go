package wire

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// checkSameAsReflective decodes data with Decode and with the reflective
// oracle and reports any difference: the error (the same sentinel, or a
// FieldError with the same text) or the decoded map, json.Number lexemes
// included.
func checkSameAsReflective(t *testing.T, data []byte, maxBytes, maxDepth int) error {
	t.Helper()
	want, wantErr := decodeReflect(data, maxBytes, maxDepth)
	got, gotErr := Decode(data, maxBytes, maxDepth)
	if !sameDecodeError(gotErr, wantErr) {
		t.Fatalf("Decode(%q, %d, %d): error %v, the reflective decoder gives %v", data, maxBytes, maxDepth, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got.m, want.m) {
		t.Fatalf("Decode(%q, %d, %d):\n got  %#v\n want %#v", data, maxBytes, maxDepth, got.m, want.m)
	}
	return gotErr
}

func sameDecodeError(got, want error) bool {
	switch want {
	case nil, ErrMalformedJSON, ErrNotObject, ErrTooLarge:
		return got == want
	}
	var g, w *DecodeError
	return errors.As(got, &g) && errors.As(want, &w) && *g == *w
}

func TestDecode_MatchesReflectiveDecoderOnTraces(t *testing.T) {
	sends := traceSends(t, "*.jsonl")
	if len(sends) < 200 {
		t.Fatalf("only %d trace frames; want the raw and normalised sends of all nine scenarios", len(sends))
	}
	for _, s := range sends {
		checkSameAsReflective(t, s.data, DefaultMaxFrameBytes, DefaultMaxDepth)
	}
}

// The outcome an edge case must have (as well as matching the oracle).
const (
	accepted  = "accepted"
	malformed = "malformed"
	notObject = "not an object"
	badField  = "bad field"
)

var nest = func(open, close string, n int, inner string) string {
	return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
}

// decodeEdgeCases are frames at the edges of the decoding rules, each with
// the outcome it must have.
var decodeEdgeCases = []struct{ frame, want string }{
	// empty objects, whitespace, structure
	{`{}`, accepted},
	{` {} `, accepted},
	{"\t\r\n{ }\n", accepted},
	{`{ "a" : 1 , "b" : [ 1 , 2 ] , "c" : { } }`, accepted},
	{"", malformed},
	{"   ", malformed},
	{"\v{}", malformed},
	{"\f{}", malformed},
	{"\ufeff{}", malformed},
	{"{\f}", malformed},
	{`{"a"}`, malformed},
	{`{"a":}`, malformed},
	{`{:1}`, malformed},
	{`{"a":1,}`, malformed},
	{`{,}`, malformed},
	{`[1,]`, malformed},
	{`[,1]`, malformed},
	{`[1 2]`, malformed},
	{`{1:2}`, malformed},
	{`{'a':1}`, malformed},
	{`{"a" 1}`, malformed},
	{`{"a":1 "b":2}`, malformed},
	{`{"a":1`, malformed},
	{`{"a":"b`, malformed},
	{`{"a`, malformed},
	{`{`, malformed},
	{`[`, malformed},
	{`}`, malformed},
	{`{"a":[}`, malformed},
	{`{"a":{]}`, malformed},
	// trailing bytes: only JSON whitespace passes, as in Python's json.loads
	// ("Extra data" for a Unicode space after the value)
	{"{} \t\r\n", accepted},
	{"{}\v", malformed},
	{"{}\f \u0085\u00a0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000", malformed},
	{"{}\ufeff", malformed},
	{"{}\u200b", malformed},
	{`{}x`, malformed},
	{`{} x`, malformed},
	{`{}{}`, malformed},
	{`{},`, malformed},
	{`{}]`, malformed},
	{`{"a":1}}`, malformed},
	{"{}\x00", malformed},
	{"[]\v", malformed},
	{"[] \u00a0", malformed},
	{"1 \v", malformed},
	{"1\t\u3000", malformed},
	{"1\v", malformed},
	{"1\u00a0", malformed},
	{`"s"` + "\v", malformed},
	{`"s" ` + "\v", malformed},
	{"true\u2028", malformed},
	{"null \n", notObject},
	{`1 2`, malformed},
	{`1x`, malformed},
	{`"a""b"`, malformed},
	// non-object tops
	{`[]`, notObject},
	{`[ ]`, notObject},
	{`[1,"a",null,{}]`, notObject},
	{`"s"`, notObject},
	{`1`, notObject},
	{`-0`, notObject},
	{`true`, notObject},
	{`false`, notObject},
	{`null`, notObject},
	{`["A", "chat"]`, notObject},
	{`[1e400]`, malformed},
	{`1e400`, malformed},
	// literals
	{`{"a":true,"b":false,"c":null}`, accepted},
	{`{"a":tru}`, malformed},
	{`{"a":truee}`, malformed},
	{`{"a":True}`, malformed},
	{`{"a":nul}`, malformed},
	{`{"a":nulll}`, malformed},
	{`{"a":NaN}`, malformed},
	{`{"a":nan}`, malformed},
	{`{"a":Infinity}`, malformed},
	{`{"a":-Infinity}`, malformed},
	{`{"a":undefined}`, malformed},
	// numbers
	{`{"n":0}`, accepted},
	{`{"n":-0}`, accepted},
	{`{"n":-0.0}`, accepted},
	{`{"n":-0.0e-0}`, accepted},
	{`{"n":1.0}`, accepted},
	{`{"n":1e2}`, accepted},
	{`{"n":1E2}`, accepted},
	{`{"n":1e+2}`, accepted},
	{`{"n":1E-2}`, accepted},
	{`{"n":1795983585.8703616}`, accepted},
	{`{"n":01}`, malformed},
	{`{"n":-01}`, malformed},
	{`{"n":00}`, malformed},
	{`{"n":+1}`, malformed},
	{`{"n":.5}`, malformed},
	{`{"n":1.}`, malformed},
	{`{"n":1.e5}`, malformed},
	{`{"n":-}`, malformed},
	{`{"n":--1}`, malformed},
	{`{"n":-a}`, malformed},
	{`{"n":1e}`, malformed},
	{`{"n":1e+}`, malformed},
	{`{"n":1e-}`, malformed},
	{`{"n":1ee2}`, malformed},
	{`{"n":1e2.5}`, malformed},
	{`{"n":1.5.}`, malformed},
	{`{"n":0x10}`, malformed},
	{`{"n":1_000}`, malformed},
	{`{"n":123456789012345678}`, accepted},
	{`{"n":1234567890123456789}`, accepted},
	{`{"n":9223372036854775807}`, accepted},
	{`{"n":-9223372036854775808}`, accepted},
	{`{"n":9223372036854775808}`, malformed},
	{`{"n":-9223372036854775809}`, malformed},
	{`{"n":99999999999999999999}`, malformed},
	{`{"epoch": 123456789012345678901234567890}`, malformed},
	{`{"n":9223372036854775808.0}`, accepted},
	{`{"n":9223372036854775808e0}`, accepted},
	{`{"n":1e308}`, accepted},
	{`{"n":1e309}`, malformed},
	{`{"n":1.7976931348623157e308}`, accepted},
	{`{"n":1.7976931348623159e308}`, malformed},
	{`{"n":-1.7976931348623159e308}`, malformed},
	{`{"n":1e400}`, malformed},
	{`{"n":-1e400}`, malformed},
	{`{"n":1e-400}`, accepted},
	{`{"n":4.9e-324}`, accepted},
	{`{"n":0e999999999}`, accepted},
	{`{"n":1e-99999999999}`, accepted},
	{`{"n":0.` + strings.Repeat("0", 400) + `1}`, accepted},
	{`{"n":` + strings.Repeat("9", 308) + `.9}`, accepted},
	{`{"n":` + strings.Repeat("9", 309) + `.0}`, malformed},
	{`{"n":1` + strings.Repeat("0", 308) + `.0}`, accepted},
	{`{"n":1` + strings.Repeat("0", 400) + `e-300}`, accepted},
	{`{"n":1` + strings.Repeat("0", 400) + `}`, malformed},
	{`{"n":[1,-2,3.5,4e1]}`, accepted},
	// strings and escapes
	{`{"s":""}`, accepted},
	{`{"s":"\"\\\/\b\f\n\r\t"}`, accepted},
	{`{"s":"\u0041\u00e9\u4E2D\u0000"}`, accepted},
	{`{"s":"caf\u00e9 and more text after the escape"}`, accepted},
	{`{"s":"\uD83D\uDE00"}`, accepted},
	{`{"s":"\ud83d\ude00"}`, accepted},
	{`{"s":"\uD83D"}`, accepted},
	{`{"s":"\uDE00"}`, accepted},
	{`{"s":"\uD83Dx"}`, accepted},
	{`{"s":"\uD83D\n"}`, accepted},
	{`{"s":"\uD83D\u0041"}`, accepted},
	{`{"s":"\uD83D\uD83D\uDE00"}`, accepted},
	{`{"s":"\uDE00\uD83D"}`, accepted},
	{`{"s":"\uD83D\\uDE00"}`, accepted},
	{`{"s":"\uD83D\uDE0"}`, malformed},
	{`{"s":"\uD83D\uZZZZ"}`, malformed},
	{`{"s":"\uZZZZ"}`, malformed},
	{`{"s":"\u12"}`, malformed},
	{`{"s":"\u`, malformed},
	{`{"s":"\x41"}`, malformed},
	{`{"s":"\'"}`, malformed},
	{`{"s":"\a"}`, malformed},
	{`{"s":"\`, malformed},
	{`{"s":"\"}`, malformed},
	{"{\"s\":\"a\x01b\"}", malformed},
	{"{\"s\":\"a\tb\"}", malformed},
	{"{\"s\":\"a\nb\"}", malformed},
	{"{\"s\":\"a\x7fb\"}", accepted},
	{`{"s":"[[[[{{{{\"]]]]"}`, accepted},
	{`{"s":"` + strings.Repeat("x", 300) + `\n"}`, accepted},
	{`{"s":"` + strings.Repeat(`\u00e9`, 100) + `"}`, accepted},
	{`{"s\u0065nder":1}`, badField},
	{`{"\u0074ype":"claim"}`, accepted},
	{`{"\uD800":1,"\uDC00":2}`, accepted},
	// UTF-8
	{"{\"s\":\"\u00e9\u4e2d\U0001F600\ufffd\"}", accepted},
	{"{\"\u00e9\":\"\u00e9\"}", accepted},
	{"{\"payload\": \"\xff\"}", malformed},
	{"{\"s\":\"\xc3\"}", malformed},
	{"{\"s\":\"\xc3(\"}", malformed},
	{"{\"s\":\"\xc0\xaf\"}", malformed},
	{"{\"s\":\"\xe0\x80\xaf\"}", malformed},
	{"{\"s\":\"\xed\xa0\x80\"}", malformed},
	{"{\"s\":\"\xf4\x90\x80\x80\"}", malformed},
	{"{\"s\":\"\xf8\x88\x80\x80\x80\"}", malformed},
	{"{\"\xff\":1}", malformed},
	{"{\"s\":\"\xe4\xb8\"}", malformed},
	{"{\xc3\xa9:1}", malformed},
	{"{}\xff", malformed},
	{"{}\xc2", malformed},
	{"\xef\xbb\xbf{}", malformed},
	// duplicate keys: the last one stands
	{`{"a":1,"a":2}`, accepted},
	{`{"a":{"x":1},"a":[1]}`, accepted},
	{`{"type":1,"type":"chat"}`, accepted},
	{`{"type":"chat","type":1}`, badField},
	{`{"sender":"A","sender":null}`, accepted},
	{`{"sender":null,"sender":false}`, badField},
	// the typed fields
	{`{"sender":null,"target":null,"type":null,"channel":null}`, accepted},
	{`{"sender":"A","target":"all","type":"chat","channel":"c"}`, accepted},
	{`{"sender":1}`, badField},
	{`{"target":123}`, badField},
	{`{"type":["chat"]}`, badField},
	{`{"channel":{}}`, badField},
	{`{"sender":true}`, badField},
	{`{"channel":1,"type":2,"target":3,"sender":4}`, badField},
	{`{"channel":1,"type":2}`, badField},
	{`{"payload":{"sender":1},"meta":[1]}`, accepted},
	// wide objects and arrays (past the parser's stack buffers)
	{`{` + wideObject(40) + `}`, accepted},
	{`{"a":[` + strings.Repeat(`1,"x",null,`, 30) + `{}]}`, accepted},
	// nesting: 64 levels pass, 65 do not, brackets inside strings do not count
	{`{"nest":` + nest("[", "]", 63, "") + `}`, accepted},
	{`{"nest":` + nest("[", "]", 64, "") + `}`, malformed},
	{nest(`{"d":`, `}`, 63, `{}`), accepted},
	{nest(`{"d":`, `}`, 64, `{}`), malformed},
	{`{"sender":"A","nest":` + nest(`{"d":`, `}`, 70, "1") + `}`, malformed},
	{nest("[", "]", 64, ""), notObject},
	{nest("[", "]", 65, ""), malformed},
	{`{"a":[[[[` + `"` + strings.Repeat("[", 100) + `"]]]]}`, accepted},
	{`{"a":"` + strings.Repeat("{", 100) + `"}`, accepted},
	{`{"a":` + nest("[", "]", 63, "") + `,"b":` + nest("[", "]", 63, "") + `}`, accepted},
}

func wideObject(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + strings.Repeat("x", i) + `":` + strings.Repeat("1", i%5+1))
	}
	b.WriteString(`,"k":"dup"`)
	return b.String()
}

func TestDecode_MatchesReflectiveDecoderOnEdgeCases(t *testing.T) {
	for _, c := range decodeEdgeCases {
		err := checkSameAsReflective(t, []byte(c.frame), DefaultMaxFrameBytes, DefaultMaxDepth)
		var de *DecodeError
		got := accepted
		switch {
		case err == ErrMalformedJSON:
			got = malformed
		case err == ErrNotObject:
			got = notObject
		case errors.As(err, &de) && de.Code == "malformed_field":
			got = badField
		case err != nil:
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("Decode(%.80q): %s, want %s", c.frame, got, c.want)
		}
	}
}

// The limits: maxBytes, maxDepth (0 refuses any object), and encoding/json's
// own nesting ceiling of 10000, which the reflective decoder imposed even
// under a larger maxDepth.
func TestDecode_MatchesReflectiveDecoderAtTheLimits(t *testing.T) {
	cases := []struct {
		frame              string
		maxBytes, maxDepth int
		want               error
	}{
		{`{"a":1}`, 7, 64, nil},
		{`{"a":1}`, 6, 64, ErrTooLarge},
		{`{"a":1} `, 7, 64, ErrTooLarge},
		{`not json at all`, 3, 64, ErrTooLarge},
		{`{"a":1}`, 0, 64, nil},
		{`{"a":1}`, -1, 64, nil},
		{`{}`, 0, 0, ErrMalformedJSON},
		{`{}`, 0, -5, ErrMalformedJSON},
		{`1`, 0, 0, ErrNotObject},
		{`{}`, 0, 1, nil},
		{`{"a":[]}`, 0, 1, ErrMalformedJSON},
		{`{"a":[]}`, 0, 2, nil},
		{nest("[", "]", 10000, ""), 0, 20000, ErrNotObject},
		{nest("[", "]", 10001, ""), 0, 20000, ErrMalformedJSON},
		{nest(`{"a":`, `}`, 9999, `{}`), 0, 1 << 30, nil},
		{nest(`{"a":`, `}`, 10000, `{}`), 0, 1 << 30, ErrMalformedJSON},
	}
	for _, c := range cases {
		if err := checkSameAsReflective(t, []byte(c.frame), c.maxBytes, c.maxDepth); err != c.want {
			t.Errorf("Decode(%.40q, %d, %d): %v, want %v", c.frame, c.maxBytes, c.maxDepth, err, c.want)
		}
	}
}

// Decoded maps are the caller's: Set and Delete on one frame's map must not
// reach another frame's (the interned strings are shared, maps are not).
func TestDecode_FramesDoNotShareMaps(t *testing.T) {
	frame := []byte(`{"sender":"A","target":"System","type":"heartbeat","payload":"online","paths":["a"],"meta":{"k":1}}`)
	a, err := Decode(frame, 0, DefaultMaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	a.Set("sender", "B")
	a.Delete("payload")
	a.Value("paths").([]any)[0] = "changed"
	a.Value("meta").(map[string]any)["k"] = "changed"
	b, err := Decode(frame, 0, DefaultMaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := decodeReflect(frame, 0, DefaultMaxDepth)
	if !reflect.DeepEqual(b.m, want.m) {
		t.Fatalf("second decode %#v, want %#v", b.m, want.m)
	}
}

// FuzzDecode compares Decode with the reflective decoder on arbitrary bytes
// and nesting limits.
func FuzzDecode(f *testing.F) {
	for _, s := range traceSends(f, "*.raw.jsonl") {
		f.Add(s.data, uint8(DefaultMaxDepth))
	}
	for _, c := range decodeEdgeCases {
		if len(c.frame) < 1000 {
			f.Add([]byte(c.frame), uint8(DefaultMaxDepth))
		}
	}
	f.Add([]byte(`{"a":[[{"b":[]}]]}`), uint8(3))
	f.Add([]byte(`{"a":[[{"b":[]}]]}`), uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, maxDepth uint8) {
		checkSameAsReflective(t, data, DefaultMaxFrameBytes, int(maxDepth))
	})
}

// A frame of interned names and values costs only its Inbound and map: no
// per-field copies (intern.go).
func TestDecode_InternedFieldsDoNotAllocate(t *testing.T) {
	frame := []byte(`{"target":"System","type":"heartbeat","payload":"online","channel":null,"mailbox":true}`)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Decode(frame, DefaultMaxFrameBytes, DefaultMaxDepth); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 3 {
		t.Fatalf("%v allocations per decode, want at most 3 (the Inbound and the map)", allocs)
	}
}
