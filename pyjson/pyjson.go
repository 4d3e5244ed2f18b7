// Package pyjson writes JSON text the way the reference hub's Python does,
// so what we store and send reads byte for byte like the reference's.
package pyjson

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/synapse-hub/synapse/coord"
)

// The text is what Python's json.dumps(ensure_ascii=True,
// separators=(",", ":")) writes: compact, every character outside printable
// ASCII escaped (lowercase \uXXXX, astral characters as surrogate pairs),
// floats in repr form. These helpers append it to a byte slice; objects are
// written key by key so the key order is the reference's dict order.

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string with ensure_ascii escaping.
// Invalid UTF-8 bytes become U+FFFD, as Go's own encoder does.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		if c < utf8.RuneSelf {
			b = appendASCIIEscape(b, c)
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r >= 0x10000 {
			r -= 0x10000
			b = appendU(b, 0xd800+(r>>10))
			b = appendU(b, 0xdc00+(r&0x3ff))
		} else {
			b = appendU(b, r)
		}
		i += n
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendASCIIEscape appends the escape of an ASCII byte that JSON text may
// not carry raw: the short escapes Python uses, else lowercase \u00XX.
func appendASCIIEscape(b []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(b, '\\', c)
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	case '\b':
		return append(b, '\\', 'b')
	case '\f':
		return append(b, '\\', 'f')
	}
	return appendU(b, rune(c))
}

func appendU(b []byte, r rune) []byte {
	return append(b, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
}

// AppendFloat appends f as Python's json module does: repr digits, integral
// values with ".0", and NaN/Infinity spelled as Python spells them (which
// Decode refuses, so such a row is quarantined rather than misread).
func AppendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	return append(b, coord.PyFloat(f)...)
}

// AppendInt appends n in decimal.
func AppendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }

// AppendBool appends true or false.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

// AppendStrings appends ss as a JSON array of strings.
func AppendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, s)
	}
	return append(b, ']')
}

// AppendKey appends `"k":`, preceded by a comma unless it opens the object.
func AppendKey(b []byte, k string) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, k...) // keys are ASCII literals
	return append(b, '"', ':')
}

// CanonicalRaw returns opaque JSON text in this form: compact and
// ASCII-escaped, with its key order kept. ok is false when raw is not JSON.
func CanonicalRaw(raw []byte) (out []byte, ok bool) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, false
	}
	c := buf.Bytes()
	ascii := true
	for _, x := range c {
		if x >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return c, true
	}
	// Outside strings compact JSON is ASCII, so escaping every non-ASCII
	// rune in place escapes exactly the string contents that need it.
	out = make([]byte, 0, len(c)+16)
	for i := 0; i < len(c); {
		if c[i] < utf8.RuneSelf {
			out = append(out, c[i])
			i++
			continue
		}
		r, n := utf8.DecodeRune(c[i:])
		if r >= 0x10000 {
			r -= 0x10000
			out = appendU(out, 0xd800+(r>>10))
			out = appendU(out, 0xdc00+(r&0x3ff))
		} else {
			out = appendU(out, r)
		}
		i += n
	}
	return out, true
}
