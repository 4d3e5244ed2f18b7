package bench

// match.go is how the load client recognises a hub's frames where they lie
// in its read buffer, without decoding them: a frame matches when it holds
// each of a few "key": value pairs. Any protocol-v2 hub may write JSON its
// own way; the two that matter differ in spacing. Ours writes compact JSON
// ({"type":"claim_granted",…}); the reference writes Python's json.dumps
// default ({"type": "claim_granted", …}, hub_broadcast.py). A pair is found
// with or without white space around its colon.

import (
	"bytes"

	"github.com/synapse-hub/synapse/pyjson"
)

// A frameField is one pair a frame must hold: key and value as JSON text
// (`"type"`, `"claim_granted"`).
type frameField struct {
	key, val []byte
}

// A frameMatch is the pairs a frame must hold, all of them, anywhere in it.
// Keys are looked for at any depth: the load client's pairs (type, owner,
// task_id, agent, event, target) are top-level in every frame it waits for,
// and where a nested object repeats a key (a receipt's owner) it repeats
// the value too.
type frameMatch []frameField

// fields builds a frameMatch from key, value, key, value… (string values).
func fields(kv ...string) frameMatch {
	m := make(frameMatch, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m = append(m, frameField{key: pyjson.AppendString(nil, kv[i]), val: pyjson.AppendString(nil, kv[i+1])})
	}
	return m
}

// in reports whether frame b holds every pair of m.
func (m frameMatch) in(b []byte) bool {
	for _, f := range m {
		if !f.in(b) {
			return false
		}
	}
	return true
}

// in reports whether b holds f: its key, then optional white space, a colon,
// optional white space, and its value. A key inside a string value cannot
// match: its quotes would be escaped there.
func (f frameField) in(b []byte) bool {
	for off := 0; off < len(b); {
		i := bytes.Index(b[off:], f.key)
		if i < 0 {
			return false
		}
		j := skipSpace(b, off+i+len(f.key))
		if j < len(b) && b[j] == ':' && bytes.HasPrefix(b[skipSpace(b, j+1):], f.val) {
			return true
		}
		off += i + 1
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
