// Package wire is the SYNAPSE CHANNEL protocol v2 on the wire: the bounded
// decoder of agent frames, the builder of hub frames, and the entity dicts
// both the wire and the journal use. It knows nothing of sockets.
package wire

import "github.com/synapse-hub/synapse/pyjson"

// HubSender is the sender of every frame the hub originates.
const HubSender = "SynapseHub"

// ProtocolVersion is the wire protocol this package speaks.
const ProtocolVersion = 2

// PresenceHeader is the HTTP header of a WebSocket upgrade that asks a hub
// for a presence form ("none", "compact", "full": the registration's
// presence field) before it sends its welcome: on an open hub the welcome
// goes out at connect, so the header is the only way to be spared its
// online list (docs/protocol.md "Presence"). Additive: other hubs ignore it.
const PresenceHeader = "Synapse-Presence"

// Frame builds one JSON object as text, keys in the order they are added,
// written as the reference's Python does (see package pyjson). The zero
// value is not usable; start with NewFrame or Object.
type Frame struct{ b []byte }

// NewFrame starts a hub frame with the reference's envelope: sender
// "SynapseHub", target ("all" for broadcasts, the agent's name for private
// replies, "self" for welcome), type, payload (human text), timestamp (hub
// clock) and hub_id. Verb fields follow, flat.
func NewFrame(typ, target, payload string, ts float64, hubID string) *Frame {
	f := Object()
	return f.Str("sender", HubSender).Str("target", target).Str("type", typ).
		Str("payload", payload).Float("timestamp", ts).Str("hub_id", hubID)
}

// Object starts an empty JSON object.
func Object() *Frame {
	f := &Frame{b: make([]byte, 0, 256)}
	f.b = append(f.b, '{')
	return f
}

// Str adds a string field.
func (f *Frame) Str(k, v string) *Frame {
	f.b = pyjson.AppendString(pyjson.AppendKey(f.b, k), v)
	return f
}

// Int adds an integer field.
func (f *Frame) Int(k string, v int64) *Frame {
	f.b = pyjson.AppendInt(pyjson.AppendKey(f.b, k), v)
	return f
}

// Float adds a float field, written as Python writes floats (1.0, 1e+16).
func (f *Frame) Float(k string, v float64) *Frame {
	f.b = pyjson.AppendFloat(pyjson.AppendKey(f.b, k), v)
	return f
}

// Bool adds a boolean field.
func (f *Frame) Bool(k string, v bool) *Frame {
	f.b = pyjson.AppendBool(pyjson.AppendKey(f.b, k), v)
	return f
}

// Null adds a null field.
func (f *Frame) Null(k string) *Frame {
	f.b = append(pyjson.AppendKey(f.b, k), "null"...)
	return f
}

// Strs adds an array of strings (never null: a nil slice is []).
func (f *Frame) Strs(k string, v []string) *Frame {
	f.b = pyjson.AppendStrings(pyjson.AppendKey(f.b, k), v)
	return f
}

// Raw adds a field whose value is already JSON text (a dict built with the
// Append* functions, a nested Frame's Bytes, or a list).
func (f *Frame) Raw(k string, json []byte) *Frame {
	f.b = append(pyjson.AppendKey(f.b, k), json...)
	return f
}

// Append adds a field whose value an appender writes, such as AppendClaim.
func (f *Frame) Append(k string, appendValue func([]byte) []byte) *Frame {
	f.b = appendValue(pyjson.AppendKey(f.b, k))
	return f
}

// Bytes closes the object and returns its text. The Frame must not be used
// afterwards.
func (f *Frame) Bytes() []byte { return append(f.b, '}') }

// List appends a JSON array whose items an appender writes one by one.
func List[T any](b []byte, items []T, appendItem func([]byte, T) []byte) []byte {
	b = append(b, '[')
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendItem(b, it)
	}
	return append(b, ']')
}
