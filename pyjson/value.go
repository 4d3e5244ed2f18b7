package pyjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrNotCanonical is returned by AppendValue for a value Python's strict
// json.dumps would refuse (NaN, Infinity) or a type JSON has no form for.
var ErrNotCanonical = errors.New("pyjson: value has no canonical JSON form")

// AppendValue appends v as Python's json.dumps(v, sort_keys=True,
// separators=(",", ":"), ensure_ascii=True, allow_nan=False) does: the
// canonical form the idempotency digest hashes (PROTOCOL.md §4.3). v is a
// decoded JSON value: nil, bool, string, json.Number, float64, int64, []any
// or map[string]any. Numbers keep Python's int/float split by their lexeme:
// "1" stays 1, "1.0" and "1e2" become 1.0 and 100.0.
func AppendValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return AppendBool(b, x), nil
	case string:
		return AppendString(b, x), nil
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
			if b, err = AppendValue(b, it); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys) // Python sorts str keys by code point; UTF-8 byte order agrees
		b = append(b, '{')
		for _, k := range keys {
			b = AppendKey(b, k)
			var err error
			if b, err = AppendValue(b, x[k]); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	}
	return b, fmt.Errorf("%w: %T", ErrNotCanonical, v)
}

func appendNumber(b []byte, lex string) ([]byte, error) {
	if !strings.ContainsAny(lex, ".eE") {
		if n, err := strconv.ParseInt(lex, 10, 64); err == nil {
			return AppendInt(b, n), nil
		}
		// Python ints are unbounded: an integer lexeme outside int64 is
		// still an int, written back digit for digit.
		if _, ok := new(bigDigits).parse(lex); ok {
			return append(b, strings.TrimPrefix(lex, "+")...), nil
		}
		return b, fmt.Errorf("%w: number %q", ErrNotCanonical, lex)
	}
	f, err := strconv.ParseFloat(lex, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return b, fmt.Errorf("%w: number %q", ErrNotCanonical, lex)
	}
	return AppendFloat(b, f), nil
}

// bigDigits checks an integer lexeme without allocating a big.Int.
type bigDigits struct{}

func (bigDigits) parse(s string) (string, bool) {
	t := strings.TrimPrefix(s, "-")
	if t == "" {
		return "", false
	}
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return "", false
		}
	}
	return s, true
}
