package pyjson

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
)

func TestAppendValue_CanonicalFormOfPythonDumps(t *testing.T) {
	cases := []struct {
		in   any
		want string
	}{
		{nil, `null`},
		{true, `true`},
		{"é<&>", `"\u00e9<&>"`},
		{json.Number("1"), `1`},
		{json.Number("-0"), `0`},
		{json.Number("1.0"), `1.0`},
		{json.Number("1e2"), `100.0`},
		{json.Number("1e16"), `1e+16`},
		{json.Number("123456789012345678901234567890"), `123456789012345678901234567890`},
		{[]any{json.Number("2"), "a", nil}, `[2,"a",null]`},
		{map[string]any{"b": json.Number("1"), "a": map[string]any{"z": false, "y": []any{}}}, `{"a":{"y":[],"z":false},"b":1}`},
		{"😀", `"\ud83d\ude00"`},
	}
	for _, c := range cases {
		got, err := AppendValue(nil, c.in)
		if err != nil || string(got) != c.want {
			t.Errorf("AppendValue(%#v) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
}

func TestAppendValue_RefusesNaN(t *testing.T) {
	for _, v := range []any{math.NaN(), math.Inf(1), json.Number("NaN"), []any{math.Inf(-1)}, struct{}{}} {
		if _, err := AppendValue(nil, v); !errors.Is(err, ErrNotCanonical) {
			t.Errorf("AppendValue(%#v) err = %v, want ErrNotCanonical", v, err)
		}
	}
}
