package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonMaxNesting is encoding/json's own nesting limit. Frames used to be
// decoded with encoding/json, which refused deeper nesting whatever maxDepth
// said, so the parser keeps that ceiling.
const jsonMaxNesting = 10000

// parser reads one JSON text in a single pass, yielding what encoding/json
// with UseNumber yields (map[string]any, []any, string, json.Number, bool,
// nil) and checking as it goes what Decode promises: UTF-8 inside strings,
// the nesting limit and the number ranges. Any failure is ErrMalformedJSON,
// so parse functions just report ok.
type parser struct {
	data     []byte
	pos      int
	depth    int
	maxDepth int
}

// parseObject parses data as one JSON object with only whitespace after it.
// A valid value that is not an object is ErrNotObject.
func parseObject(data []byte, maxDepth int) (map[string]any, error) {
	p := parser{data: data, maxDepth: min(maxDepth, jsonMaxNesting)}
	p.skipSpace()
	v, ok := p.value()
	if !ok || !p.onlySpaceLeft() {
		return nil, ErrMalformedJSON
	}
	m, isObject := v.(map[string]any)
	if !isObject {
		return nil, ErrNotObject
	}
	return m, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (p *parser) skipSpace() {
	for p.pos < len(p.data) && isSpace(p.data[p.pos]) {
		p.pos++
	}
}

// onlySpaceLeft reports whether the rest after the top-level value is JSON
// whitespace (space, tab, newline, carriage return), as Python's json.loads
// has it: anything else after the value, a Unicode space (\v, U+00A0, …)
// included, is "Extra data" there and "Malformed JSON." here.
func (p *parser) onlySpaceLeft() bool {
	p.skipSpace()
	return p.pos == len(p.data)
}

func (p *parser) value() (any, bool) {
	if p.pos >= len(p.data) {
		return nil, false
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.stringValue()
	case c == '-' || ('0' <= c && c <= '9'):
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, false
}

func (p *parser) literal(word string) bool {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return false
	}
	p.pos += len(word)
	return true
}

// open moves past the '{' or '[' at p.pos, counts the level against the
// nesting limit, and reports a container closed right away by close.
func (p *parser) open(close byte) (empty, ok bool) {
	p.pos++
	if p.depth++; p.depth > p.maxDepth {
		return false, false
	}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == close {
		p.pos++
		p.depth--
		return true, true
	}
	return false, true
}

// next moves past the ',' (more) or the close that must follow a member
// or an item.
func (p *parser) next(close byte) (more, ok bool) {
	p.skipSpace()
	if p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
			return true, true
		case close:
			p.pos++
			p.depth--
			return false, true
		}
	}
	return false, false
}

type member struct {
	key   string
	value any
}

// object parses {...}. Members are gathered on the stack first so the map
// is made once at its final size; a repeated key keeps its last value, as
// encoding/json does.
func (p *parser) object() (any, bool) {
	empty, ok := p.open('}')
	if !ok {
		return nil, false
	}
	if empty {
		return map[string]any{}, true
	}
	var stack [16]member
	members := stack[:0]
	for more := true; more; {
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, false
		}
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, false
		}
		p.pos++
		p.skipSpace()
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		members = append(members, member{key, v})
		if more, ok = p.next('}'); !ok {
			return nil, false
		}
	}
	m := make(map[string]any, len(members))
	for _, e := range members {
		m[e.key] = e.value
	}
	return m, true
}

// array parses [...] into a slice of its exact length (never nil: encoding/json
// gives []any{} for []).
func (p *parser) array() (any, bool) {
	empty, ok := p.open(']')
	if !ok {
		return nil, false
	}
	if empty {
		return []any{}, true
	}
	var stack [8]any
	items := stack[:0]
	for more := true; more; {
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		items = append(items, v)
		if more, ok = p.next(']'); !ok {
			return nil, false
		}
	}
	return append([]any(nil), items...), true
}

// number parses a JSON number lexeme and refuses one outside int64 (an
// integer lexeme) or float64 (one with '.', 'e' or 'E') range, as the
// reflective decoder's range walk did.
func (p *parser) number() (any, bool) {
	data, start, i := p.data, p.pos, p.pos
	if data[i] == '-' {
		i++
	}
	intStart := i
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && '1' <= data[i] && data[i] <= '9':
		i = digits(data, i+1)
	default:
		return nil, false
	}
	intDigits := i - intStart
	fraction, exponent := false, false
	if i < len(data) && data[i] == '.' {
		fraction = true
		from := i + 1
		if i = digits(data, from); i == from {
			return nil, false
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		exponent = true
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		from := i
		if i = digits(data, i); i == from {
			return nil, false
		}
	}
	p.pos = i
	s := string(data[start:i])
	switch {
	case !fraction && !exponent:
		// 18 digits always fit in an int64; longer ones need a look.
		if intDigits > 18 {
			if _, err := strconv.ParseInt(s, 10, 64); err != nil {
				return nil, false
			}
		}
	case exponent || intDigits > 308:
		// Without an exponent, 308 integer digits stay below 1e308, which
		// is finite; anything else needs the real conversion.
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, false
		}
	}
	return json.Number(s), true
}

func digits(data []byte, i int) int {
	for i < len(data) && '0' <= data[i] && data[i] <= '9' {
		i++
	}
	return i
}

// stringValue parses a string; the few values most frames carry come back
// pre-boxed, so they cost no allocation.
func (p *parser) stringValue() (any, bool) {
	raw, escaped, ok := p.scanString()
	if !ok {
		return nil, false
	}
	if escaped {
		return unescape(raw), true
	}
	if v, ok := commonValue(raw); ok {
		return v, true
	}
	return string(raw), true
}

// key parses an object key; the protocol's common field names are shared
// constants rather than fresh strings.
func (p *parser) key() (string, bool) {
	raw, escaped, ok := p.scanString()
	if !ok {
		return "", false
	}
	if escaped {
		return unescape(raw), true
	}
	return fieldName(raw), true
}

// scanString moves past the string at p.pos and returns its contents
// without the quotes. It checks what encoding/json refuses (control bytes,
// unknown escapes, \u without four hex digits) and what Decode refuses on
// top (invalid UTF-8), so unescape cannot fail.
func (p *parser) scanString() (raw []byte, escaped, ok bool) {
	data := p.data
	start := p.pos + 1
	for i := start; i < len(data); {
		c := data[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return data[start:i], escaped, true
		case c == '\\':
			escaped = true
			if i+1 >= len(data) {
				return nil, false, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if hex4(data[i+2:]) < 0 {
					return nil, false, false
				}
				i += 6
			default:
				return nil, false, false
			}
		case c < ' ':
			return nil, false, false
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n == 1 {
				return nil, false, false
			}
			i += n
		}
	}
	return nil, false, false
}

// hex4 reads the four hex digits of a \u escape, or gives -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// unescape decodes the contents of a string scanString accepted. A \u
// surrogate not followed by the \u escape that completes its pair becomes
// U+FFFD, as encoding/json makes it.
func unescape(raw []byte) string {
	var b strings.Builder
	b.Grow(len(raw)) // decoded text is never longer than its escaped form
	for {
		n := bytes.IndexByte(raw, '\\')
		if n < 0 {
			b.Write(raw)
			return b.String()
		}
		b.Write(raw[:n])
		raw = raw[n:]
		switch raw[1] {
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r := hex4(raw[2:])
			raw = raw[6:]
			if utf16.IsSurrogate(r) {
				var next rune = -1
				if len(raw) >= 2 && raw[0] == '\\' && raw[1] == 'u' {
					next = hex4(raw[2:])
				}
				if pair := utf16.DecodeRune(r, next); pair != utf8.RuneError {
					r = pair
					raw = raw[6:]
				} else {
					r = utf8.RuneError
				}
			}
			b.WriteRune(r)
			continue
		default: // '"', '\\', '/'
			b.WriteByte(raw[1])
		}
		raw = raw[2:]
	}
}
