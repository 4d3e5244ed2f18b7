package pyjson

import (
	"errors"
	"fmt"
	"math"
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
func AppendValue(b []byte, v any) ([]byte, error) { return AppendCanonical(b, v, true) }

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
