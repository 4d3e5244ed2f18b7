package federation

import "encoding/json"

// Event is one entry of a hub's event log as multihub_log_snapshot carries it.
type Event struct {
	Seq     int64
	TS      float64
	Kind    string
	Payload json.RawMessage
}
