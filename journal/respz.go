package journal

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"sync"
)

// Stored responses (docs/journal.md, Idempotency records). An idempotency
// record keeps the response its first request got, byte for byte, to send
// again to a retry: most of a busy journal is these (a claim's is ~400
// bytes). With Options.CompressResponses a store keeps each in
// operations.response_json as a BLOB: the byte respZ1, then the response
// deflated against respDict1, a dictionary of the frames the idempotent
// verbs answer with — about a quarter of the size. A response that does not
// shrink, and every row the reference or an older synapse wrote, is kept as
// the JSON text it is (its first byte is '{'), and read either way. The
// dictionary is part of the format: a new one is a new leading byte.

// respZ1 leads a response deflated against respDict1.
const respZ1 = 0x01

// respDict1 holds the strings the answers of the idempotent verbs repeat
// (PROTOCOL.md §4.3), the most frequent last, where deflate reaches them
// with the shortest distances. Never change it: stored rows need it as it
// is.
var respDict1 = []byte(`{"type":"error","error_code":"","payload":"","request_id":"","idem_key":"",` +
	`"type":"resource_offered","kind":"","name":"","capacity":1,"meta":{},"offered_at":` +
	`"type":"ledger_task_posted","type":"ledger_task_updated","type":"ledger_progress_posted","title":"","description":"",` +
	`"depends_on":[],"assignee":"","priority":"","author":"","text":"","posted_at":"created_at":"updated_at":` +
	`"type":"checkpoint_saved","type":"handoff_granted","from":"","to":"","reason":"",` +
	`"receipt":{"task_id":"","owner":"","released":true,"evidence":[],"artifacts":[],"known_failures":[],"changed_files":[],` +
	`"generated_artifacts":[],"approvals":[],"epistemic_status":"needs_freshness","epistemic_reasons":["positive evidence present",` +
	`"evidence freshness not supplied"]}}` +
	`{"sender":"SynapseHub","target":"all","type":"release_granted","payload":"Task '' released by .","timestamp":` +
	`{"sender":"SynapseHub","target":"all","type":"task_updated","payload":"Task '' updated by .","timestamp":` +
	`,"status":"working","data_ref":"","version":1}` +
	`{"sender":"SynapseHub","target":"all","type":"claim_granted","payload":"Task '' claimed by .","timestamp":` +
	`,"hub_id":"syn-","task_id":"","owner":"","note":"","lease_expires_at":,"status":"claimed","worktree":"",` +
	`"paths":[""],"epoch":,"version":0,"checkpoint":"","git":null}`)

var (
	deflaters = sync.Pool{New: func() any {
		w, err := flate.NewWriterDict(io.Discard, flate.DefaultCompression, respDict1)
		if err != nil {
			panic(err) // only for a bad level
		}
		return w
	}}
	inflaters = sync.Pool{New: func() any { return flate.NewReaderDict(bytes.NewReader(nil), respDict1) }}
)

// encodeResponse is what the operations row stores for a canonical
// response: deflated behind respZ1 when that is shorter, else as it is.
func encodeResponse(canon []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(canon)/2 + 16)
	b.WriteByte(respZ1)
	w := deflaters.Get().(*flate.Writer)
	w.Reset(&b)
	w.Write(canon) // a bytes.Buffer does not fail
	w.Close()
	deflaters.Put(w)
	if b.Len() >= len(canon) {
		return canon
	}
	return b.Bytes()
}

// decodeResponse reads a stored response back: JSON text as it is, a
// deflated one inflated.
func decodeResponse(stored []byte) ([]byte, error) {
	if len(stored) == 0 || stored[0] != respZ1 {
		return stored, nil
	}
	r := inflaters.Get().(io.ReadCloser)
	defer inflaters.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(stored[1:]), respDict1); err != nil {
		return nil, err
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%w: a stored response does not inflate: %v", ErrDamaged, err)
	}
	return out, nil
}
