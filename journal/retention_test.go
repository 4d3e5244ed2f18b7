package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openWindowed(t *testing.T, path string, window time.Duration) *Store {
	t.Helper()
	st, err := Open(path, Options{IdempotencyWindow: window})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func keyedBatch(ts float64, key string) *Batch {
	return &Batch{TS: ts, Records: []Record{rec("claim", `{"task_id":"`+key+`"}`, true)},
		Operations: []Operation{{Key: key, RequestDigest: "d-" + key, Response: []byte(`{"type":"claim_granted","key":"` + key + `"}`)}}}
}

func countRows(t *testing.T, st *Store, q string, args ...any) int {
	t.Helper()
	var n int
	if err := st.rdb.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A record is answered with its stored response while it is inside the
// window; past it, expiry drops its operations row and its idempotency
// event and Operation says ErrIdempotencyExpired (with when it committed)
// for one more window; after that the key is unknown (INV-CR-1 within the
// window, a typed answer outside it).
func TestExpireOperations_StoredInsideTheWindowExpiredOutside_INV_CR_1(t *testing.T) {
	// Far from the wall clock: the store's own goroutine expires by it, so
	// it never touches these records (nothing of theirs is past its window
	// by the wall clock), and the test decides now.
	const t0, window = 4_000_000_000.0, 100.0
	st := openWindowed(t, filepath.Join(t.TempDir(), "journal.db"), window*time.Second)
	ctx := context.Background()
	for i, ts := range []float64{t0, t0 + 50, t0 + 150} {
		if _, err := st.Append(ctx, keyedBatch(ts, fmt.Sprintf("k%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := st.ExpireOperations(ctx, t0+99, 10); err != nil || n != 0 {
		t.Fatalf("expire at t0+99: %d, %v; want none (every record is inside its window)", n, err)
	}
	if n, err := st.ExpireOperations(ctx, t0+120, 10); err != nil || n != 1 {
		t.Fatalf("expire at t0+120: %d, %v; want k0 alone", n, err)
	}
	_, ok, err := st.Operation("k0")
	var exp *ExpiredError
	if ok || !errors.Is(err, ErrIdempotencyExpired) || !errors.As(err, &exp) || exp.CommittedAt != t0 {
		t.Fatalf("Operation(k0) after its window: ok %v, %v; want ErrIdempotencyExpired committed at t0", ok, err)
	}
	if op, ok, err := st.Operation("k1"); !ok || err != nil || string(op.Response) != `{"type":"claim_granted","key":"k1"}` || op.CommittedAt != t0+50 {
		t.Fatalf("Operation(k1) inside its window: %+v %v %v; want the stored response", op, ok, err)
	}
	if n := countRows(t, st, `SELECT count(*) FROM operations`); n != 2 {
		t.Errorf("%d operations rows left; want 2 (k0's dropped)", n)
	}
	if n := countRows(t, st, `SELECT count(*) FROM events WHERE kind = 'claim'`); n != 3 {
		t.Errorf("%d claim events left; want all 3: expiry drops idempotency rows only", n)
	}
	// Two windows after k0 committed its tombstone goes too: the key is
	// unknown, as one never used.
	if _, err := st.ExpireOperations(ctx, t0+201, 10); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := st.Operation("k0"); ok || err != nil {
		t.Fatalf("Operation(k0) two windows on: ok %v, %v; want unknown", ok, err)
	}
	if _, _, err := st.Operation("k1"); !errors.Is(err, ErrIdempotencyExpired) {
		t.Fatalf("Operation(k1) past its window: %v; want ErrIdempotencyExpired", err)
	}
	if last, _ := st.LastSeq(); last != 3 {
		t.Errorf("last seq %d after expiry; want 3 (expiry never lowers it)", last)
	}
}

// Expiry goes in batches of at most limit, oldest first; a store without a
// window expires nothing (records kept forever, as before).
func TestExpireOperations_BatchesOldestFirstAndNoWindowKeepsAll_INV_CR_1(t *testing.T) {
	const t0 = 4_000_000_000.0
	ctx := context.Background()
	for _, window := range []time.Duration{0, 10 * time.Second} {
		st := openWindowed(t, filepath.Join(t.TempDir(), "journal.db"), window)
		for i := range 7 {
			if _, err := st.Append(ctx, keyedBatch(t0+float64(i), fmt.Sprintf("k%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		n1, err1 := st.ExpireOperations(ctx, t0+1000, 3)
		n2, err2 := st.ExpireOperations(ctx, t0+1000, 3)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		want := [2]int{3, 3}
		if window == 0 {
			want = [2]int{0, 0}
		}
		if [2]int{n1, n2} != want {
			t.Fatalf("window %s: batches of %d and %d; want %v", window, n1, n2, want)
		}
		if window > 0 {
			if _, ok, _ := st.Operation("k6"); !ok {
				t.Fatal("the newest record went before older ones")
			}
		}
	}
}

// A store with a window expires on its own: a record the wall clock puts
// past the window is gone from the file without anyone asking (INV-CR-1
// holds inside the window only).
func TestExpiry_RunsInTheBackground_INV_CR_1(t *testing.T) {
	defer func(e time.Duration) { expireEvery = e }(expireEvery)
	expireEvery = 10 * time.Millisecond
	st := openWindowed(t, filepath.Join(t.TempDir(), "journal.db"), time.Hour)
	now := float64(time.Now().UnixNano()) / 1e9
	if _, err := st.Append(context.Background(), keyedBatch(now-2*3600+60, "old")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(context.Background(), keyedBatch(now, "young")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); st.ExpiredOperations() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the background expiry did not run within a minute")
		}
	}
	if _, _, err := st.Operation("old"); !errors.Is(err, ErrIdempotencyExpired) {
		t.Fatalf("Operation(old): %v; want ErrIdempotencyExpired", err)
	}
	if _, ok, err := st.Operation("young"); !ok || err != nil {
		t.Fatalf("Operation(young): %v %v; want its record", ok, err)
	}
	if err := st.Close(); err != nil { // stops the goroutine first
		t.Fatal(err)
	}
}

// An older file (schema 2) is upgraded when opened for writing: the index
// and the tombstones appear, its records stay; a file of a newer schema is
// refused, writable or read-only, with a sentence saying what to do.
func TestOpen_UpgradesSchema2RefusesNewer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	st := openWindowed(t, path, 0)
	if _, err := st.Append(context.Background(), keyedBatch(5, "k")); err != nil {
		t.Fatal(err)
	}
	st.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	mustExec := func(q string) {
		t.Helper()
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(`DROP INDEX operations_committed_idx; DROP TABLE idempotency_expired; UPDATE meta SET value = '2' WHERE key = 'schema_version'`)
	st = openWindowed(t, path, 0)
	if n := countRows(t, st, `SELECT count(*) FROM sqlite_master WHERE name IN ('operations_committed_idx', 'idempotency_expired')`); n != 2 {
		t.Fatalf("schema 2 opened: %d of the index and table; want both", n)
	}
	if v := countRows(t, st, `SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'schema_version'`); v != SchemaVersion {
		t.Fatalf("schema_version %d after the upgrade; want %d", v, SchemaVersion)
	}
	if _, ok, err := st.Operation("k"); !ok || err != nil {
		t.Fatalf("the record did not survive the upgrade: %v %v", ok, err)
	}
	st.Close()

	mustExec(fmt.Sprintf(`UPDATE meta SET value = '%d' WHERE key = 'schema_version'`, SchemaVersion+1))
	db.Close()
	for _, ro := range []bool{false, true} {
		_, err := Open(path, Options{ReadOnly: ro})
		if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), "newer synapse") || !strings.Contains(err.Error(), fmt.Sprint(SchemaVersion+1)) {
			t.Fatalf("read-only %v: a newer file opened with %v; want ErrNewerSchema naming its version", ro, err)
		}
	}
}

// A file written before records were stored once holds each record twice:
// the operations row and an `idempotency` event at its commit_seq. Expiry
// drops both, and leaves every other event (INV-CR-1 outside the window:
// nothing of an old file's record outlives it).
func TestExpireOperations_OldFileDropsTheIdempotencyEventToo_INV_CR_1(t *testing.T) {
	const t0, window = 4_000_000_000.0, 100.0
	st := openWindowed(t, filepath.Join(t.TempDir(), "journal.db"), window*time.Second)
	ctx := context.Background()
	if _, err := st.Append(ctx, &Batch{TS: t0, Records: []Record{rec("claim", `{"task_id":"k0"}`, true)}}); err != nil {
		t.Fatal(err)
	}
	// The old form, as an earlier binary wrote it: event 2 and its row.
	if _, err := st.wc.ExecContext(ctx, `INSERT INTO events(seq, ts, kind, payload) VALUES(2, ?, 'idempotency', '{"key":"k0"}')`, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.wc.ExecContext(ctx, `INSERT INTO operations VALUES('k0', 'd', '{}', 'x', 1, 2, ?)`, t0); err != nil {
		t.Fatal(err)
	}
	if n, err := st.ExpireOperations(ctx, t0+101, 10); err != nil || n != 1 {
		t.Fatalf("expire: %d, %v; want k0", n, err)
	}
	if n := countRows(t, st, `SELECT count(*) FROM events WHERE kind = 'idempotency'`); n != 0 {
		t.Errorf("%d idempotency events left; want 0", n)
	}
	if n := countRows(t, st, `SELECT count(*) FROM events WHERE kind = 'claim'`); n != 1 {
		t.Errorf("%d claim events; want the claim kept", n)
	}
}
