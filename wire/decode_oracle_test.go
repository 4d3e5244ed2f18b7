package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// decodeReflect is Decode as it was before the hand-written parser:
// encoding/json into any, with the UTF-8, nesting and number checks as
// separate passes. It stays here as the oracle the parser is compared with.
func decodeReflect(data []byte, maxBytes, maxDepth int) (*Inbound, error) {
	if maxBytes > 0 && len(data) > maxBytes {
		return nil, ErrTooLarge
	}
	if !utf8.Valid(data) || nestingDeeperThan(data, maxDepth) {
		return nil, ErrMalformedJSON
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, ErrMalformedJSON
	}
	if rest := data[dec.InputOffset():]; len(bytes.Trim(rest, " \t\n\r")) > 0 {
		return nil, ErrMalformedJSON
	}
	if !numbersInRange(v) {
		return nil, ErrMalformedJSON
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, ErrNotObject
	}
	for _, k := range []string{"sender", "target", "type", "channel"} {
		if x, present := m[k]; present && x != nil {
			if _, isStr := x.(string); !isStr {
				return nil, FieldError(k, "a string")
			}
		}
	}
	return &Inbound{m: m}, nil
}

// nestingDeeperThan scans brackets outside strings.
func nestingDeeperThan(data []byte, max int) bool {
	depth, inStr, esc := 0, false, false
	for _, c := range data {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			if depth++; depth > max {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

func numbersInRange(v any) bool {
	switch x := v.(type) {
	case json.Number:
		s := string(x)
		if isIntLexeme(s) {
			_, err := strconv.ParseInt(s, 10, 64)
			return err == nil
		}
		f, err := strconv.ParseFloat(s, 64)
		return err == nil && !math.IsInf(f, 0)
	case map[string]any:
		for _, e := range x {
			if !numbersInRange(e) {
				return false
			}
		}
	case []any:
		for _, e := range x {
			if !numbersInRange(e) {
				return false
			}
		}
	}
	return true
}
