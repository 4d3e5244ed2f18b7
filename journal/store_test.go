package journal

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func openTemp(t testing.TB) *Store {
	t.Helper()
	st, err := Open(filepath.Join(t.TempDir(), "journal.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func rec(kind, payload string, durable bool) Record {
	return Record{Kind: kind, Payload: []byte(payload), Durable: durable}
}

type row struct {
	seq     int64
	ts      float64
	kind    string
	payload string
}

func scanAll(t testing.TB, st *Store, after int64) []row {
	t.Helper()
	var rows []row
	if err := st.Scan(after, func(seq int64, ts float64, kind string, p []byte) error {
		rows = append(rows, row{seq, ts, kind, string(p)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestAppendScan_RoundTrip(t *testing.T) {
	st := openTemp(t)
	ctx := context.Background()
	first, err := st.Append(ctx, &Batch{TS: 10.5, Records: []Record{
		rec("release", `{"task_id":"a"}`, true),
		rec("ledger_progress", `{"task_id":"b"}`, false),
	}})
	if err != nil || first != 1 {
		t.Fatal(first, err)
	}
	first, err = st.Append(ctx, &Batch{TS: 11, Records: []Record{rec("chat", `{"x":1}`, false)}})
	if err != nil || first != 3 {
		t.Fatal(first, err)
	}
	want := []row{{1, 10.5, "release", `{"task_id":"a"}`}, {2, 10.5, "ledger_progress", `{"task_id":"b"}`}, {3, 11, "chat", `{"x":1}`}}
	if got := scanAll(t, st, 0); !equalRows(got, want) {
		t.Errorf("scan\n got %v\nwant %v", got, want)
	}
	if got := scanAll(t, st, 2); !equalRows(got, want[2:]) {
		t.Errorf("scan after 2: %v", got)
	}
	if last, _ := st.LastSeq(); last != 3 {
		t.Errorf("last seq %d", last)
	}
	// Reopen: the rows and the sequence survive.
	st.Close()
	st2, err := Open(st.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if st2.HubID() != st.HubID() || !strings.HasPrefix(st2.HubID(), "syn-") {
		t.Errorf("hub id %q then %q", st.HubID(), st2.HubID())
	}
	if got := scanAll(t, st2, 0); !equalRows(got, want) {
		t.Errorf("after reopen: %v", got)
	}
	if first, err := st2.Append(ctx, &Batch{TS: 12, Records: []Record{rec("chat", `{}`, false)}}); err != nil || first != 4 {
		t.Errorf("append after reopen: %d %v", first, err)
	}
}

func TestScan_ManyBatches(t *testing.T) {
	defer func(n int) { scanBatch = n }(scanBatch)
	scanBatch = 7
	st := openTemp(t)
	b := &Batch{TS: 1}
	for range 100 {
		b.Records = append(b.Records, rec("chat", `{}`, false))
	}
	st.Append(context.Background(), b)
	rows := scanAll(t, st, 0)
	if len(rows) != 100 || rows[99].seq != 100 {
		t.Fatalf("%d rows", len(rows))
	}
	stop := errors.New("stop")
	n := 0
	err := st.Scan(0, func(int64, float64, string, []byte) error {
		if n++; n == 10 {
			return stop
		}
		return nil
	})
	if err != stop || n != 10 {
		t.Errorf("scan stop: %v after %d", err, n)
	}
}

func equalRows(a, b []row) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// INV-JA-4: a batch with a durable record or an operation commits at
// synchronous=FULL, any other at NORMAL, and NORMAL is restored after.
func TestAppend_SynchronousLevel_INV_JA_4(t *testing.T) {
	st := openTemp(t)
	var seen []int
	st.beforeCommit = func(c *sql.Conn) {
		var v int
		if err := c.QueryRowContext(context.Background(), "PRAGMA synchronous").Scan(&v); err != nil {
			t.Error(err)
		}
		seen = append(seen, v)
	}
	ctx := context.Background()
	batches := []*Batch{
		{TS: 1, Records: []Record{rec("ledger_progress", `{}`, false)}},
		{TS: 2, Records: []Record{rec("ledger_progress", `{}`, false), rec("claim", `{}`, true)}},
		{TS: 3, Records: []Record{rec("resource", `{}`, false)}},
		{TS: 4, Operations: []Operation{{Key: "k", RequestDigest: "d", Response: []byte(`{}`)}}},
	}
	for _, b := range batches {
		if _, err := st.Append(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	const normal, full = 1, 2
	if want := []int{normal, full, normal, full}; !equalInts(seen, want) {
		t.Errorf("synchronous inside the transactions %v, want %v", seen, want)
	}
	var v int
	st.wc.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&v)
	if v != normal {
		t.Errorf("synchronous after a durable batch = %d, want NORMAL", v)
	}
	var mode string
	st.wc.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode)
	if mode != "wal" {
		t.Errorf("journal_mode %q", mode)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// INV-CR-1: an operation's operations row commits with the batch's events,
// stored once (no `idempotency` event repeats its response), and a failure
// anywhere rolls all of it back.
func TestAppend_OperationsAtomicWithEvents_INV_CR_1(t *testing.T) {
	st := openTemp(t)
	ctx := context.Background()
	first, err := st.Append(ctx, &Batch{TS: 5, Records: []Record{rec("claim", `{"a":1}`, true), rec("ledger_progress", `{}`, false)},
		Operations: []Operation{{Key: "a\x00claim\x00k1", RequestDigest: "abc", Response: []byte(`{"type": "claim_granted", "payload": "ça"}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	rows := scanAll(t, st, 0)
	if len(rows) != 2 || rows[0].kind != "claim" || rows[1].kind != "ledger_progress" {
		t.Fatalf("rows %v: want the batch's two events and no idempotency copy", rows)
	}
	op, ok, err := st.Operation("a\x00claim\x00k1")
	if err != nil || !ok || op.RequestDigest != "abc" || string(op.Response) != `{"type":"claim_granted","payload":"\u00e7a"}` {
		t.Errorf("operation %+v %v %v", op, ok, err)
	}
	var fs, cs int64
	var at float64
	st.rdb.QueryRow(`SELECT first_event_seq, commit_seq, committed_at FROM operations`).Scan(&fs, &cs, &at)
	if fs != first || cs != 2 || at != 5 {
		t.Errorf("operations row: first %d commit %d at %v", fs, cs, at)
	}
	if _, ok, _ := st.Operation("nope"); ok {
		t.Error("unknown key found")
	}

	// The same key again: the operations insert fails and the whole batch,
	// events included, is rolled back.
	_, err = st.Append(ctx, &Batch{TS: 6, Records: []Record{rec("claim", `{"b":2}`, true)},
		Operations: []Operation{{Key: "other", Response: []byte(`{}`)}, {Key: "a\x00claim\x00k1", Response: []byte(`{}`)}}})
	if err == nil {
		t.Fatal("duplicate operation key accepted")
	}
	if rows := scanAll(t, st, 0); len(rows) != 2 {
		t.Errorf("rolled-back batch left %d rows", len(rows)-2)
	}
	if _, ok, _ := st.Operation("other"); ok {
		t.Error("rolled-back operation is visible")
	}
	// The sequence continues without a gap the reader can see.
	if first, err := st.Append(ctx, &Batch{TS: 7, Records: []Record{rec("chat", `{}`, false)}}); err != nil || first != 3 {
		t.Errorf("append after rollback: %d %v", first, err)
	}
	// A response that is not JSON is refused before anything is written.
	if _, err := st.Append(ctx, &Batch{TS: 8, Operations: []Operation{{Key: "x", Response: []byte(`{`)}}}); !errors.Is(err, ErrBadBatch) {
		t.Errorf("bad response: %v", err)
	}
}

// A read-only journal refuses appends with an error, and changes nothing:
// the fault the sequencer must turn into a rolled-back batch.
func TestAppend_ReadOnlyFails(t *testing.T) {
	st := openTemp(t)
	st.Append(context.Background(), &Batch{TS: 1, Records: []Record{rec("chat", `{}`, true)}})
	st.Close()
	ro, err := Open(st.Path(), Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.Append(context.Background(), &Batch{TS: 2, Records: []Record{rec("claim", `{}`, true)}}); err == nil {
		t.Fatal("append to a read-only journal succeeded")
	}
	if rows := scanAll(t, ro, 0); len(rows) != 1 {
		t.Errorf("%d rows", len(rows))
	}
	if os.Geteuid() != 0 { // root ignores file modes
		os.Chmod(st.Path(), 0o400)
		defer os.Chmod(st.Path(), 0o600)
		if s, err := Open(st.Path(), Options{}); err == nil {
			_, err = s.Append(context.Background(), &Batch{TS: 2, Records: []Record{rec("claim", `{}`, true)}})
			s.Close()
			if err == nil {
				t.Error("append to a 0400 file succeeded")
			}
		}
	}
}

func TestAppend_CancelledContextAndClosedStore(t *testing.T) {
	st := openTemp(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := st.Append(ctx, &Batch{TS: 1, Records: []Record{rec("chat", `{}`, true)}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	st.Close()
	if _, err := st.Append(context.Background(), &Batch{TS: 1, Records: []Record{rec("chat", `{}`, true)}}); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}
}
