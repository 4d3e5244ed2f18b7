package federation

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrBadEvent is an event that cannot be fingerprinted or folded: an empty
// hub id or kind, a seq below 1, a non-finite timestamp, a payload that is not
// a JSON object of finite numbers and UTF-8 strings, or (in a batch) a seq
// that does not follow the one before it.
var ErrBadEvent = errors.New("bad event")

// Event is one entry of a hub's event log as multihub_log_snapshot carries it.
type Event struct {
	Seq     int64
	TS      float64
	Kind    string
	Payload json.RawMessage // a JSON value (normally an object)
}

// fingerprintDomain separates these digests from every other SHA-256 a hub
// computes, so no other hashed structure can collide with an event.
const fingerprintDomain = "synapse-channel:multihub-event-fingerprint:v1\x00"

// Fingerprint is the reference's content-bound identity of one event of
// hubID's log (PROTOCOL.md §6.4): two events with the same (hubID, seq) and
// different fingerprints are equivocation.
//
// It is SHA-256 over the domain "synapse-channel:multihub-event-fingerprint:v1\x00"
// followed by five frames, in this order:
//
//	h  hubID as UTF-8
//	q  Seq as ASCII decimal
//	t  TS as an 8-byte big-endian IEEE-754 double
//	k  Kind as UTF-8
//	p  the encoded payload value
//
// A frame is a 1-byte tag, the body's length as an 8-byte big-endian
// unsigned integer, then the body. A value encodes as:
//
//	null          the bare byte 'n' (no frame)
//	true, false   the bare bytes "b1", "b0" (no frame)
//	integer       frame 'i', body the canonical decimal ("-0" is "0")
//	float         frame 'f', body the 8-byte big-endian double
//	string        frame 's', body the UTF-8 bytes
//	array         frame 'l', body the concatenation of one frame 'v' per
//	              element, whose body is the element's encoding
//	object        frame 'o', body the concatenation, in key order, of
//	              frame 'k' (body the key's UTF-8 bytes) then frame 'v'
//	              (body the member value's encoding)
//
// So every container and the p frame nest whole encodings inside a
// length-prefixed body; that is the reference's layout, and it keeps the
// encoding unambiguous without escaping. Keys sort by their UTF-8 bytes; a
// repeated key keeps its last value, as Python's json does.
//
// A JSON number is a float when its text has '.', 'e' or 'E' and an integer
// otherwise, as Python's json module decides, so 1 and 1.0 differ. Like the
// reference, Fingerprint refuses (with an error wrapping ErrBadEvent) an
// empty hubID or kind, a Seq below 1, a non-finite TS, a payload that is not
// a JSON object, a float that overflows a double, and strings that are not
// UTF-8 (including escaped lone surrogates): the reference cannot encode
// these, so no digest of ours could ever match one of its own.
func Fingerprint(hubID string, e Event) ([32]byte, error) {
	sum, err := fingerprint(hubID, e)
	if err != nil {
		return sum, fmt.Errorf("federation: fingerprint: %w", err)
	}
	return sum, nil
}

// fingerprint is Fingerprint without the package prefix on its errors, so
// callers that add their own context do not repeat it.
func fingerprint(hubID string, e Event) ([32]byte, error) {
	switch {
	case hubID == "" || !utf8.ValidString(hubID):
		return [32]byte{}, badEvent("hub id is empty or not UTF-8")
	case e.Seq < 1:
		return [32]byte{}, badEvent("seq %d is below 1", e.Seq)
	case math.IsNaN(e.TS) || math.IsInf(e.TS, 0):
		return [32]byte{}, badEvent("timestamp is not finite")
	case e.Kind == "" || !utf8.ValidString(e.Kind):
		return [32]byte{}, badEvent("kind is empty or not UTF-8")
	}
	payload, err := decodePayload(e.Payload)
	if err != nil {
		return [32]byte{}, err
	}
	if _, ok := payload.(map[string]any); !ok {
		return [32]byte{}, badEvent("payload is not a JSON object")
	}

	buf := make([]byte, 0, len(fingerprintDomain)+len(e.Payload)*2+128)
	buf = append(buf, fingerprintDomain...)
	buf = appendFrame(buf, 'h', []byte(hubID))
	buf = appendFrame(buf, 'q', strconv.AppendInt(nil, e.Seq, 10))
	buf = appendFrame(buf, 't', binary.BigEndian.AppendUint64(nil, math.Float64bits(e.TS)))
	buf = appendFrame(buf, 'k', []byte(e.Kind))
	at := openFrame(&buf, 'p')
	if buf, err = appendValue(buf, payload); err != nil {
		return [32]byte{}, err
	}
	closeFrame(buf, at)
	return sha256.Sum256(buf), nil
}

func badEvent(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadEvent, fmt.Sprintf(format, args...))
}

// decodePayload parses one JSON value, keeping numbers as their text so the
// int/float distinction survives. encoding/json silently replaces invalid
// UTF-8 and lone surrogates with U+FFFD, which would hash text the reference
// refuses, so both are checked on the raw bytes first.
func decodePayload(raw []byte) (any, error) {
	if !utf8.Valid(raw) {
		return nil, badEvent("payload is not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, badEvent("payload is not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badEvent("payload has data after its JSON value")
	}
	if loneSurrogate(raw) {
		return nil, badEvent("payload has a lone UTF-16 surrogate escape")
	}
	return v, nil
}

// loneSurrogate reports whether valid JSON text escapes half a surrogate pair.
// In valid JSON a backslash only occurs inside a string, so no string
// tracking is needed.
func loneSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped byte
		if raw[i] != 'u' {
			continue
		}
		r := hex4(raw[i+1 : i+5])
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
				return true
			}
			if lo := hex4(raw[i+3 : i+7]); lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 6
		}
	}
	return false
}

func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 16) // valid JSON guarantees four hex digits
	return rune(n)
}

// appendFrame appends tag, the 8-byte length of body, and body.
func appendFrame(buf []byte, tag byte, body []byte) []byte {
	buf = append(buf, tag)
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(body)))
	return append(buf, body...)
}

// openFrame starts a frame whose body is appended next and returns where its
// length goes; closeFrame fills the length in. Nested values are thus
// written once into one buffer instead of encoded and copied per level.
func openFrame(buf *[]byte, tag byte) int {
	*buf = append(*buf, tag, 0, 0, 0, 0, 0, 0, 0, 0)
	return len(*buf) - 8
}

func closeFrame(buf []byte, at int) {
	binary.BigEndian.PutUint64(buf[at:], uint64(len(buf)-at-8))
}

// appendValue appends the encoding of one value as produced by decodePayload.
func appendValue(buf []byte, v any) ([]byte, error) {
	var err error
	switch v := v.(type) {
	case nil:
		return append(buf, 'n'), nil
	case bool:
		if v {
			return append(buf, 'b', '1'), nil
		}
		return append(buf, 'b', '0'), nil
	case json.Number:
		return appendNumber(buf, string(v))
	case string:
		return appendFrame(buf, 's', []byte(v)), nil
	case []any:
		at := openFrame(&buf, 'l')
		for _, item := range v {
			vat := openFrame(&buf, 'v')
			if buf, err = appendValue(buf, item); err != nil {
				return nil, err
			}
			closeFrame(buf, vat)
		}
		closeFrame(buf, at)
		return buf, nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys) // Go orders strings by their bytes, as the reference sorts encoded keys
		at := openFrame(&buf, 'o')
		for _, k := range keys {
			buf = appendFrame(buf, 'k', []byte(k))
			vat := openFrame(&buf, 'v')
			if buf, err = appendValue(buf, v[k]); err != nil {
				return nil, err
			}
			closeFrame(buf, vat)
		}
		closeFrame(buf, at)
		return buf, nil
	}
	return nil, badEvent("unsupported payload value %T", v) // unreachable for decoder output
}

// appendNumber encodes a JSON number lexeme the way Python's json would have
// typed it: a fraction or exponent makes a float, anything else an int.
func appendNumber(buf []byte, lexeme string) ([]byte, error) {
	if strings.ContainsAny(lexeme, ".eE") {
		f, err := strconv.ParseFloat(lexeme, 64)
		if err != nil || math.IsInf(f, 0) { // underflow to zero is fine: Python reads it as 0.0 too
			return nil, badEvent("number %s is not a finite double", lexeme)
		}
		return appendFrame(buf, 'f', binary.BigEndian.AppendUint64(nil, math.Float64bits(f))), nil
	}
	// JSON forbids leading zeros and '+', so the lexeme is already Python's
	// str(int) except for negative zero.
	if lexeme == "-0" {
		lexeme = "0"
	}
	return appendFrame(buf, 'i', []byte(lexeme)), nil
}
