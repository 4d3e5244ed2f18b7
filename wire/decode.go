package wire

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
)

// Decoding limits (PROTOCOL.md §1.1–1.2).
const (
	DefaultMaxFrameBytes = 1 << 20 // --max-msg-kb 1024
	DefaultMaxDepth      = 64
)

// DecodeError is a frame refused before routing. Message is the payload of
// the error frame the reference sends; Code is our stable machine code. The
// connection stays usable.
type DecodeError struct {
	Code    string
	Message string
}

func (e *DecodeError) Error() string { return e.Message }

// The decode refusals. Compare with errors.Is.
var (
	ErrMalformedJSON = &DecodeError{"malformed_json", "Malformed JSON."}
	ErrNotObject     = &DecodeError{"not_an_object", "Malformed frame: expected a JSON object."}
	ErrTooLarge      = &DecodeError{"frame_too_large", "Malformed JSON."}
)

// FieldError is a field of the wrong JSON type: "Malformed frame: 'F' must be a T."
func FieldError(field, want string) *DecodeError {
	return &DecodeError{"malformed_field", "Malformed frame: '" + field + "' must be " + want + "."}
}

// Inbound is one decoded agent frame: a JSON object whose numbers keep
// their lexeme (json.Number), so ints and floats stay apart as Python keeps
// them (PROTOCOL.md §9.1).
type Inbound struct {
	m map[string]any
}

// Decode parses one agent frame under the reference's rules: valid UTF-8,
// nesting at most maxDepth, no NaN or Infinity, no number outside float64
// or int64 range, one object and nothing after it; sender, target, type and
// channel must be strings or null. It reads the frame in one pass (parse.go)
// and yields what encoding/json with UseNumber would.
func Decode(data []byte, maxBytes, maxDepth int) (*Inbound, error) {
	if maxBytes > 0 && len(data) > maxBytes {
		return nil, ErrTooLarge
	}
	m, err := parseObject(data, maxDepth)
	if err != nil {
		return nil, err
	}
	for _, k := range [...]string{"sender", "target", "type", "channel"} {
		if x, present := m[k]; present && x != nil {
			if _, isStr := x.(string); !isStr {
				return nil, FieldError(k, "a string")
			}
		}
	}
	return &Inbound{m: m}, nil
}

func isIntLexeme(s string) bool { return !strings.ContainsAny(s, ".eE") }

// Has reports whether the frame carries key k (even as null).
func (in *Inbound) Has(k string) bool { _, ok := in.m[k]; return ok }

// Value returns the decoded value of k: nil, bool, string, json.Number,
// []any or map[string]any.
func (in *Inbound) Value(k string) any { return in.m[k] }

// Delete removes k (the connect token is dropped before routing).
func (in *Inbound) Delete(k string) { delete(in.m, k) }

// Set replaces k (the hub overwrites sender and type before routing).
func (in *Inbound) Set(k string, v any) { in.m[k] = v }

// Map returns the frame's fields. Callers must not keep or change it.
func (in *Inbound) Map() map[string]any { return in.m }

// Type is the verb, lower-cased and stripped; a frame with no type is a chat.
func (in *Inbound) Type() string {
	t, _ := in.m["type"].(string)
	t = strings.ToLower(strings.TrimSpace(t))
	if t == "" {
		return "chat"
	}
	return t
}

// Str returns k if it is a string, else "".
func (in *Inbound) Str(k string) string {
	s, _ := in.m[k].(string)
	return s
}

// Text returns k as text: a string as is, a number as its lexeme, other
// values as "" (most verbs read payload as text).
func (in *Inbound) Text(k string) string {
	switch x := in.m[k].(type) {
	case string:
		return x
	case json.Number:
		return string(x)
	}
	return ""
}

// Strings returns k as a list of strings: a list's string and number items,
// in order; anything that is not a list gives nil.
func (in *Inbound) Strings(k string) []string {
	list, ok := in.m[k].([]any)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		switch v := x.(type) {
		case string:
			out = append(out, v)
		case json.Number:
			out = append(out, string(v))
		}
	}
	return out
}

// StringOrList returns k as a list when it is one, as a one-item list when
// it is a non-empty string (release evidence accepts both).
func (in *Inbound) StringOrList(k string) []string {
	if s, ok := in.m[k].(string); ok {
		if s == "" {
			return nil
		}
		return []string{s}
	}
	return in.Strings(k)
}

// ErrNotNumber is returned by StrictInt for a present value that is not a
// JSON number; ErrNotInteger for a number that is not an integer lexeme.
var (
	ErrNotNumber  = errors.New("wire: not a number")
	ErrNotInteger = errors.New("wire: not an integer")
)

// StrictInt reads a fencing integer (epoch, expected_version): absent or
// null gives present=false; only an integer lexeme is accepted, so 7.5, 7.0
// and 7e0 are ErrNotInteger (a fence is compared exactly, never truncated:
// INV-EF-2, INV-EF-3) and a string, bool, list or object is ErrNotNumber.
func (in *Inbound) StrictInt(k string) (v int64, present bool, err error) {
	x, ok := in.m[k]
	if !ok || x == nil {
		return 0, false, nil
	}
	n, isNum := x.(json.Number)
	if !isNum {
		return 0, true, ErrNotNumber
	}
	if !isIntLexeme(string(n)) {
		return 0, true, ErrNotInteger
	}
	i, err := n.Int64()
	if err != nil {
		return 0, true, ErrNotInteger
	}
	return i, true, nil
}

// LenientFloat reads ttl_seconds-like fields: a number or a numeric string;
// ok is false when absent, a bool, garbage or not finite (callers then use
// their default).
func (in *Inbound) LenientFloat(k string) (v float64, ok bool) {
	var s string
	switch x := in.m[k].(type) {
	case json.Number:
		s = string(x)
	case string:
		s = strings.TrimSpace(x)
	default:
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// LenientInt reads limit/since/capacity-like fields: LenientFloat truncated.
func (in *Inbound) LenientInt(k string) (v int64, ok bool) {
	f, ok := in.LenientFloat(k)
	if !ok || math.Abs(f) >= 1<<63 {
		return 0, false
	}
	return int64(f), true
}

// Truthy is Python truthiness of k: absent, null, false, 0, "", [] and {}
// are false; everything else, the string "false" included, is true
// (PROTOCOL.md §9.5).
func (in *Inbound) Truthy(k string) bool {
	switch x := in.m[k].(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case json.Number:
		f, err := x.Float64()
		return err != nil || f != 0
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return false
}

// IsTrue reports whether k is the literal true (mailbox must be).
func (in *Inbound) IsTrue(k string) bool { b, _ := in.m[k].(bool); return b }

// Bool reads a field that must be a boolean when present (advertise's
// persist): ok is false for any other type.
func (in *Inbound) Bool(k string) (v, present, ok bool) {
	x, has := in.m[k]
	if !has || x == nil {
		return false, false, true
	}
	b, isBool := x.(bool)
	return b, true, isBool
}

// RawJSON returns k re-encoded as compact JSON text, or "" when absent or
// null (for opaque values: meta, path_identity, causal_parent).
func (in *Inbound) RawJSON(k string) string {
	x, ok := in.m[k]
	if !ok || x == nil {
		return ""
	}
	b, err := json.Marshal(x)
	if err != nil {
		return ""
	}
	return string(b)
}
