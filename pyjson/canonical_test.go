package pyjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

// decodeNumbers parses JSON text as the hub's decoder does: numbers keep
// their lexeme.
func decodeNumbers(t testing.TB, text string) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", text, err)
	}
	return v
}

// The expected texts below were written by hand from Python's json.dumps
// rules (sort_keys=True, separators=(",", ":")), not produced by running
// Python: sorted keys by code point; floats in repr (shortest round trip,
// integral floats keep ".0", exponent form with a sign and at least two
// digits when the decimal exponent is >= 16 or < -4); ints as written; with
// ensure_ascii=False only '"', '\\' and C0 controls are escaped (\n \r \t \b
// \f short, the rest \u00XX lowercase), nothing HTML-escaped, U+2028/2029
// and astral characters raw; with ensure_ascii=True every non-ASCII
// character is a lowercase \uXXXX, astral ones as a surrogate pair.
func TestAppendCanonical_PythonDumpsVectors(t *testing.T) {
	cases := []struct {
		name, in    string
		utf8, ascii string
	}{
		{
			name:  "brief vector: floats, HTML characters, line separator, controls",
			in:    `{"b":1.0,"a":"é<>&\u2028","c":1e16,"d":0.00001,"e":[true,null],"f":"\u0001\n"}`,
			utf8:  "{\"a\":\"é<>&\u2028\",\"b\":1.0,\"c\":1e+16,\"d\":1e-05,\"e\":[true,null],\"f\":\"\\u0001\\n\"}",
			ascii: `{"a":"\u00e9<>&\u2028","b":1.0,"c":1e+16,"d":1e-05,"e":[true,null],"f":"\u0001\n"}`,
		},
		{
			name:  "float repr boundaries",
			in:    `[0.1,1e15,1e22,123456789.0,0.0001,0.00001234,1.5e300,-0.0,5e-324,1.7976931348623157e308,12345678901234567.0,1E2,2.50]`,
			utf8:  `[0.1,1000000000000000.0,1e+22,123456789.0,0.0001,1.234e-05,1.5e+300,-0.0,5e-324,1.7976931348623157e+308,1.2345678901234568e+16,100.0,2.5]`,
			ascii: `[0.1,1000000000000000.0,1e+22,123456789.0,0.0001,1.234e-05,1.5e+300,-0.0,5e-324,1.7976931348623157e+308,1.2345678901234568e+16,100.0,2.5]`,
		},
		{
			name:  "ints stay ints, beyond 2^53 and beyond int64",
			in:    `[0,-0,1,-17,9007199254740993,123456789012345678901234567890]`,
			utf8:  `[0,0,1,-17,9007199254740993,123456789012345678901234567890]`,
			ascii: `[0,0,1,-17,9007199254740993,123456789012345678901234567890]`,
		},
		{
			name:  "short escapes, other controls, DEL and slash raw",
			in:    `"q\" b\\ \b\f\n\r\t \u0000\u001f\u007f /"`,
			utf8:  "\"q\\\" b\\\\ \\b\\f\\n\\r\\t \\u0000\\u001f\x7f /\"",
			ascii: "\"q\\\" b\\\\ \\b\\f\\n\\r\\t \\u0000\\u001f\\u007f /\"",
		},
		{
			name:  "keys by code point, not UTF-16 order; keys escaped like values",
			in:    `{"😀":1,"\ue000":2,"z":3,"A":4,"a":5,"\n":6}`,
			utf8:  "{\"\\n\":6,\"A\":4,\"a\":5,\"z\":3,\"\ue000\":2,\"😀\":1}",
			ascii: `{"\n":6,"A":4,"a":5,"z":3,"\ue000":2,"\ud83d\ude00":1}`,
		},
		{
			name:  "paragraph separator and nested empties",
			in:    `{"x":["\u2029",{},[]],"w":false}`,
			utf8:  "{\"w\":false,\"x\":[\"\u2029\",{},[]]}",
			ascii: `{"w":false,"x":["\u2029",{},[]]}`,
		},
	}
	for _, c := range cases {
		v := decodeNumbers(t, c.in)
		got, err := AppendCanonical(nil, v, false)
		if err != nil || string(got) != c.utf8 {
			t.Errorf("%s: ensure_ascii=False\n got %q, %v\nwant %q", c.name, got, err, c.utf8)
		}
		got, err = AppendCanonical(nil, v, true)
		if err != nil || string(got) != c.ascii {
			t.Errorf("%s: ensure_ascii=True\n got %q, %v\nwant %q", c.name, got, err, c.ascii)
		}
	}
}

func TestAppendCanonical_RefusesNonFinite(t *testing.T) {
	for _, v := range []any{math.NaN(), math.Inf(1), json.Number("1e400"), map[string]any{"a": math.Inf(-1)}, struct{}{}} {
		for _, ascii := range []bool{false, true} {
			if _, err := AppendCanonical(nil, v, ascii); !errors.Is(err, ErrNotCanonical) {
				t.Errorf("AppendCanonical(%#v, %v) err = %v, want ErrNotCanonical", v, ascii, err)
			}
		}
	}
}

func TestAppendCanonical_InvalidUTF8BecomesReplacementCharacter(t *testing.T) {
	got, _ := AppendCanonical(nil, "a\xffb", false)
	if string(got) != "\"a\uFFFDb\"" {
		t.Fatalf("got %q", got)
	}
}

// FuzzCanonical checks the encoder against encoding/json's decoder: our
// output is valid JSON, decoding it (UseNumber) and encoding again gives
// the same bytes in both modes, the two modes decode to the same value,
// and nothing panics. `go test` runs the seed corpus.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1.0,"a":"é<>&\u2028","c":1e16,"d":0.00001,"e":[true,null],"f":"\u0001\n"}`,
		`[0.1,1e15,1e22,-0.0,5e-324,1.7976931348623157e308,12345678901234567.0,1E2,2.50,1e-7]`,
		`[0,-0,9007199254740993,123456789012345678901234567890,-9223372036854775808]`,
		`"q\" b\\ \b\f\n\r\t \u0000\u001f\u007f / \ud800 \udc00x"`,
		`{"😀":1,"\ue000":2,"z":3,"A":4,"a":5,"\n":6,"a\"b":7}`,
		`{"auth":{"alg":"hmac-sha256","kid":"main","nonce":"abc","sequence":1,"timestamp":1782648000.5},"sender":"proj/a","type":"claim"}`,
		"\"\xff\xfe\"",
		`{"a":{"a":{"a":[[[[{}]]]]}}}`,
		`1e400`, `NaN`, `{"a":1,"a":2}`, ``, `[`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		d := json.NewDecoder(strings.NewReader(text))
		d.UseNumber()
		var v any
		if d.Decode(&v) != nil {
			return
		}
		for _, ascii := range []bool{false, true} {
			b1, err := AppendCanonical(nil, v, ascii)
			if err != nil {
				if !errors.Is(err, ErrNotCanonical) {
					t.Fatalf("unexpected error %v", err)
				}
				return // a number Python would not print (out of float range)
			}
			if !json.Valid(b1) {
				t.Fatalf("ascii=%v: invalid JSON %q", ascii, b1)
			}
			v2 := decodeNumbers(t, string(b1))
			b2, err := AppendCanonical(nil, v2, ascii)
			if err != nil || !bytes.Equal(b1, b2) {
				t.Fatalf("ascii=%v: not a fixed point:\n%q\n%q (%v)", ascii, b1, b2, err)
			}
			if ascii {
				for _, c := range b1 {
					if c >= 0x80 {
						t.Fatalf("ensure_ascii output has a non-ASCII byte: %q", b1)
					}
				}
				other, _ := AppendCanonical(nil, v, false)
				if !bytes.Equal(b1, mustCanonical(t, decodeNumbers(t, string(other)), true)) {
					t.Fatalf("the two modes decode to different values: %q vs %q", b1, other)
				}
				if legacy, err := AppendValue(nil, v); err == nil && !hasEscapedKey(v) && !bytes.Equal(legacy, b1) {
					t.Fatalf("ensure_ascii form differs from AppendValue: %q vs %q", b1, legacy)
				}
			}
		}
	})
}

func mustCanonical(t *testing.T, v any, ascii bool) []byte {
	t.Helper()
	b, err := AppendCanonical(nil, v, ascii)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hasEscapedKey reports a key AppendKey would write raw (it assumes ASCII
// literal keys), where the two encoders may rightly differ.
func hasEscapedKey(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			for i := 0; i < len(k); i++ {
				if c := k[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
					return true
				}
			}
			if hasEscapedKey(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasEscapedKey(e) {
				return true
			}
		}
	}
	return false
}

// The idempotency digest's form escapes object keys like any string: a key
// with a quote or a non-ASCII character must still give valid JSON.
func TestAppendValue_EscapesKeys(t *testing.T) {
	got, err := AppendValue(nil, map[string]any{`a"b`: 1.0, "é": json.Number("2")})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a\"b":1.0,"\u00e9":2}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
