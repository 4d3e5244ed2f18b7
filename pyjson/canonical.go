package pyjson

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
)

// AppendCanonical appends v as Python's json.dumps(v, sort_keys=True,
// separators=(",", ":"), ensure_ascii=asciiOnly, allow_nan=False) writes it.
//
// With asciiOnly it is the idempotency digest's form (AppendValue's). Without
// it, it is the per-message HMAC's form (PROTOCOL.md §5.2, §9.2): strings
// keep their UTF-8 raw — no HTML escaping of < > &, U+2028 and U+2029 left
// as they are — and only '"', '\\' and the C0 controls are escaped, the
// short escapes (\n, \t, \r, \b, \f) where Python has one and lowercase
// \u00XX otherwise. Numbers and key order are AppendValue's: json.Number
// keeps Python's int/float split by its lexeme, floats print in repr form,
// keys sort by code point (UTF-8 byte order agrees). Unlike AppendKey, keys
// are escaped like any other string.
func AppendCanonical(b []byte, v any, asciiOnly bool) ([]byte, error) {
	str := appendStringUTF8
	if asciiOnly {
		str = AppendString
	}
	return appendCanonical(b, v, str)
}

func appendCanonical(b []byte, v any, str func([]byte, string) []byte) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return AppendBool(b, x), nil
	case string:
		return str(b, x), nil
	case json.Number:
		return appendNumber(b, string(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return b, fmt.Errorf("%w: non-finite float", ErrNotCanonical)
		}
		return AppendFloat(b, x), nil
	case int64:
		return AppendInt(b, x), nil
	case int:
		return AppendInt(b, int64(x)), nil
	case []any:
		b = append(b, '[')
		for i, it := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendCanonical(b, it, str); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(str(b, k), ':')
			var err error
			if b, err = appendCanonical(b, x[k], str); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	}
	return b, fmt.Errorf("%w: %T", ErrNotCanonical, v)
}

// appendStringUTF8 appends s as Python's ensure_ascii=False encoder does.
// Invalid UTF-8 bytes become U+FFFD, as in AppendString.
func appendStringUTF8(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, s[start:i]...)
				b = utf8.AppendRune(b, utf8.RuneError)
				i++
				start = i
				continue
			}
			i += n
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		b = appendASCIIEscape(b, c)
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
