package bench

import "testing"

// Frames are matched as our hub writes them (compact) and as the reference
// does (Python's json.dumps: a space after each colon and comma).
func TestFrameMatch_CompactAndPythonSpacing(t *testing.T) {
	m := fields("type", "claim_granted", "owner", "load/a1", "task_id", "load/a1/T")
	for _, tc := range []struct {
		frame string
		want  bool
	}{
		{`{"sender":"SynapseHub","target":"all","type":"claim_granted","task_id":"load/a1/T","owner":"load/a1","epoch":3}`, true},
		{`{"sender": "SynapseHub", "target": "all", "type": "claim_granted", "payload": "Task 'load/a1/T' claimed by load/a1.", "task_id": "load/a1/T", "owner": "load/a1"}`, true},
		{"{\"type\" :\t\"claim_granted\",\n\"owner\":  \"load/a1\", \"task_id\": \"load/a1/T\"}", true},
		// Another owner or task whose name starts with the same characters.
		{`{"type": "claim_granted", "owner": "load/a10", "task_id": "load/a10/T"}`, false},
		{`{"type": "claim_granted", "owner": "load/a1", "task_id": "load/a1/T2"}`, false},
		// A key that appears inside a string value is not a key.
		{`{"type": "claim_denied", "payload": "\"type\": \"claim_granted\", \"owner\": \"load/a1\"", "task_id": "load/a1/T"}`, false},
		// The value of another key.
		{`{"type": "claim_granted", "note": "owner", "previous_owner": "load/a1", "task_id": "load/a1/T"}`, false},
	} {
		if got := m.in([]byte(tc.frame)); got != tc.want {
			t.Errorf("%s: matched %v, want %v", tc.frame, got, tc.want)
		}
	}
}
