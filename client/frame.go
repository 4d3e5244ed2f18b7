package client

import (
	"encoding/json"
	"strings"
)

// Frame is one frame the hub sent: the envelope fields decoded, the rest
// reachable by key. Frames are values; a subscriber may keep them.
type Frame struct {
	Type      string
	Sender    string
	Target    string
	Payload   string // the payload when it is text (it nearly always is)
	Timestamp float64
	HubID     string
	Raw       json.RawMessage // the whole frame as received

	fields map[string]json.RawMessage
}

// parseFrame decodes one text frame; anything but a JSON object is an error.
func parseFrame(data []byte) (Frame, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return Frame{}, err
	}
	f := Frame{Raw: json.RawMessage(data), fields: fields}
	f.Type = strings.ToLower(strings.TrimSpace(f.String("type")))
	if f.Type == "" {
		f.Type = "chat" // a missing type is chat (PROTOCOL.md §1.3)
	}
	f.Sender = f.String("sender")
	f.Target = f.String("target")
	f.Payload = f.String("payload")
	f.HubID = f.String("hub_id")
	f.Timestamp = f.Float("timestamp")
	return f, nil
}

// Has reports whether the frame carries key.
func (f Frame) Has(key string) bool { _, ok := f.fields[key]; return ok }

// Field returns the raw JSON of key, or nil when it is absent.
func (f Frame) Field(key string) json.RawMessage { return f.fields[key] }

// String returns key as a string; "" when absent or not a string.
func (f Frame) String(key string) string {
	var s string
	if raw, ok := f.fields[key]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

// Float returns key as a number; 0 when absent or not a number.
func (f Frame) Float(key string) float64 {
	var v float64
	if raw, ok := f.fields[key]; ok {
		_ = json.Unmarshal(raw, &v)
	}
	return v
}

// Int returns key as an integer; 0 when absent or not an integer.
func (f Frame) Int(key string) int64 {
	var v int64
	if raw, ok := f.fields[key]; ok {
		_ = json.Unmarshal(raw, &v)
	}
	return v
}

// Decode unmarshals the whole frame into v (a struct with json tags).
func (f Frame) Decode(v any) error { return json.Unmarshal(f.Raw, v) }

// DecodeField unmarshals the value of key into v.
func (f Frame) DecodeField(key string, v any) error {
	raw, ok := f.fields[key]
	if !ok {
		return nil
	}
	return json.Unmarshal(raw, v)
}

// broadcast reports whether the hub sent the frame to every socket (or to
// every socket a scoped fan-out lets it reach), as opposed to a private
// reply.
func (f Frame) broadcast() bool { return f.Target == "all" }

// Replayed reports a chat re-sent by mailbox replay (PROTOCOL.md §2.3).
func (f Frame) Replayed() bool {
	var b bool
	return json.Unmarshal(f.fields["replayed"], &b) == nil && b
}

// Seq is a chat's durable journal seq (0 on a hub without a journal): the
// mailbox cursor Ack takes, and the key mailbox clients dedup on.
func (f Frame) Seq() int64 { return f.Int("seq") }
