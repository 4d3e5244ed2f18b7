package journal

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// Responses the idempotent verbs answer with, as the hub stores them.
var sampleResponses = []string{
	`{"sender":"SynapseHub","target":"all","type":"claim_granted","payload":"Task 'crash/a13/t4069' claimed by crash/a13.","timestamp":1796174400.364599,"hub_id":"syn-7ea327ea","task_id":"crash/a13/t4069","owner":"crash/a13","note":"crash loop","lease_expires_at":1796178000.364124,"status":"claimed","worktree":"","paths":["src/crash/a13/f5.go"],"epoch":65211,"version":0,"checkpoint":"","git":null}`,
	`{"sender":"SynapseHub","target":"all","type":"task_updated","payload":"Task 'p/t1' updated by p/a.","timestamp":1796174150.1681418,"hub_id":"syn-0af5119e","task_id":"p/t1","owner":"p/a","status":"working","data_ref":"","version":1}`,
	`{"type":"claim_granted","payload":"\u00e7a"}`,
	`{}`,
}

// A deflated response reads back byte for byte, and is much smaller: a
// claim's answer to under 40 % (INV-CR-1: a retry gets exactly the first
// answer).
func TestResponse_DeflatedReadsBackExactly_INV_CR_1(t *testing.T) {
	for _, r := range sampleResponses {
		z := encodeResponse([]byte(r))
		back, err := decodeResponse(z)
		if err != nil || string(back) != r {
			t.Fatalf("%s: read back %q, %v", r, back, err)
		}
		if z[0] == respZ1 && len(z) >= len(r) {
			t.Errorf("%s: deflated to %d bytes, not shorter", r, len(z))
		}
	}
	if z := encodeResponse([]byte(sampleResponses[0])); len(z)*10 > len(sampleResponses[0])*4 {
		t.Errorf("a claim's answer deflates to %d of %d bytes, want under 40%%", len(z), len(sampleResponses[0]))
	}
	if z := encodeResponse([]byte(`{}`)); string(z) != `{}` {
		t.Errorf("a response that would not shrink is stored as %q, want as it is", z)
	}
}

// Rows stored either way are read by either store: a file of the
// reference (or kept uncompressed) and one written compressed mix, and a
// damaged deflated row is ErrDamaged, never a wrong answer.
func TestResponse_StoredEitherWayReadByEither_INV_CR_1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	ctx := context.Background()
	for i, compress := range []bool{false, true} {
		st, err := Open(path, Options{CompressResponses: compress})
		if err != nil {
			t.Fatal(err)
		}
		key := []string{"plain", "deflated"}[i]
		if _, err := st.Append(ctx, &Batch{TS: 1, Operations: []Operation{{Key: key, RequestDigest: "d", Response: []byte(sampleResponses[0])}}}); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, key := range []string{"plain", "deflated"} {
		op, ok, err := st.Operation(key)
		if !ok || err != nil || string(op.Response) != sampleResponses[0] {
			t.Errorf("%s: %q %v %v", key, op.Response, ok, err)
		}
	}
	var typ string
	st.rdb.QueryRow(`SELECT typeof(response_json) FROM operations WHERE operation_key = 'deflated'`).Scan(&typ)
	if typ != "blob" {
		t.Errorf("deflated row stored as %s", typ)
	}
	if _, err := st.wc.ExecContext(ctx, `UPDATE operations SET response_json = x'01ffffffff' WHERE operation_key = 'deflated'`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Operation("deflated"); !errors.Is(err, ErrDamaged) {
		t.Errorf("damaged deflated row: %v, want ErrDamaged", err)
	}
}

// Whatever a response holds, it reads back as it was (against inflating
// the stored form, an independent definition: the stored row is either the
// text itself or respZ1 and a deflate stream of it).
func FuzzResponseRoundTrip(f *testing.F) {
	for _, r := range sampleResponses {
		f.Add([]byte(r))
	}
	f.Add([]byte{respZ1, 0, 1})
	f.Fuzz(func(t *testing.T, resp []byte) {
		if len(resp) == 0 || resp[0] == respZ1 { // canonical JSON never starts with it
			return
		}
		z := encodeResponse(resp)
		back, err := decodeResponse(z)
		if err != nil || !bytes.Equal(back, resp) {
			t.Fatalf("%q: read back %q, %v", resp, back, err)
		}
		if z[0] != respZ1 && !bytes.Equal(z, resp) {
			t.Fatalf("%q: stored %q, neither itself nor deflated", resp, z)
		}
	})
}
