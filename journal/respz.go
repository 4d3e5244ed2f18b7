package journal

import (
	"bytes"
	"compress/flate"
	"context"
	"fmt"
	"io"
	"sync"
)

// Stored responses (docs/journal.md, Idempotency records). An idempotency
// record keeps the response its first request got, byte for byte, to send
// again to a retry: most of a busy journal is these (a claim's is ~400
// bytes). Append stores it as text; with Options.CompressResponses the
// store's background goroutine (CompressStored, in each retention round)
// rewrites it in operations.response_json as a BLOB: the byte respZ1, then the response
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

// CompressStored deflates at most limit responses still stored as text,
// oldest first from the goroutine's cursor, and returns how many it read.
// The deflating (~20 µs a response, most of it flate's reset) runs outside
// the writer mutex; the rewrite of the batch is one short transaction, and
// a row that expired or was rewritten meanwhile is left alone. A SIGKILL
// at any point leaves rows of either form, both read alike.
func (s *Store) CompressStored(ctx context.Context, limit int) (int, error) {
	if s.opts.ReadOnly || !s.opts.CompressResponses {
		return 0, nil
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT rowid, operation_key, response_json FROM operations
		WHERE rowid > ? AND typeof(response_json) = 'text' ORDER BY rowid LIMIT ?`, s.compressFrom.Load(), limit)
	if err != nil {
		return 0, fmt.Errorf("journal: compress responses: %w", classify(err))
	}
	type row struct {
		key string
		z   []byte
	}
	var batch []row
	var last int64
	n := 0
	for rows.Next() {
		var resp []byte
		var key string
		if err := rows.Scan(&last, &key, &resp); err != nil {
			rows.Close()
			return 0, fmt.Errorf("journal: compress responses: %w", classify(err))
		}
		n++
		if z := encodeResponse(resp); len(z) > 0 && z[0] == respZ1 {
			batch = append(batch, row{key, z})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("journal: compress responses: %w", classify(err))
	}
	if len(batch) > 0 {
		_, err = s.inWriteTx(ctx, func(ctx context.Context) (RetainStats, error) {
			for _, r := range batch {
				if _, err := s.wc.ExecContext(ctx, `UPDATE operations SET response_json = ? WHERE operation_key = ? AND typeof(response_json) = 'text'`, r.z, r.key); err != nil {
					return RetainStats{}, err
				}
			}
			return RetainStats{}, nil
		})
		if err != nil {
			return 0, fmt.Errorf("journal: compress responses: %w", classify(err))
		}
	}
	if n > 0 {
		s.compressFrom.Store(last)
	}
	return n, nil
}
