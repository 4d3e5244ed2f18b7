package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

const t0 = 1_800_000_000.0

// runCmd runs the binary in-process and returns its exit code and output.
func runCmd(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// sampleJournal writes a journal the way the hub does: claims, checkpoints,
// notes and releases, with a snapshot part-way and more events after it.
// It returns the path and the time of its last batch.
func sampleJournal(t *testing.T) (string, float64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hub.db")
	st, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	live := coord.New(coord.Limits{})
	now := t0
	step := func(cmd coord.Command) {
		now++
		o := live.Step(cmd, now)
		if o.Refusal != nil {
			t.Fatalf("%T: %v", cmd, o.Refusal)
		}
		b := &journal.Batch{TS: now}
		for _, ev := range o.Events {
			if rec, ok := journal.Encode(ev); ok {
				b.Records = append(b.Records, rec)
			}
		}
		if _, err := st.Append(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		for i := range 20 {
			agent, task := "agent-"+string(rune('a'+i%5)), "task-"+string(rune('A'+i))
			switch round {
			case 0:
				step(coord.ClaimRequest{Agent: agent, TaskID: task, Worktree: "/repo", Paths: []string{"src/" + task}, TTL: 3600, HasTTL: true})
			case 1:
				step(coord.CheckpointRequest{Agent: agent, TaskID: task, Checkpoint: "cp-" + task})
				step(coord.PostProgress{Agent: agent, TaskID: task, Text: "half way"})
			case 2:
				if i%2 == 0 {
					step(coord.ReleaseRequest{Agent: agent, TaskID: task})
				}
			}
		}
		if round == 1 {
			last, err := st.LastSeq()
			if err != nil {
				t.Fatal(err)
			}
			if err := st.WriteSnapshot(last, live.Image(), now); err != nil {
				t.Fatal(err)
			}
		}
	}
	return path, now
}

func replayed(t *testing.T, path string, now float64) coord.Image {
	t.Helper()
	st, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, err := journal.Replay(st, coord.Limits{}, now, journal.ReplayOptions{})
	if err != nil || rec.Degraded() {
		t.Fatalf("replay: %v %+v", err, rec)
	}
	return rec.State.Image()
}

func TestJournalCheck_SoundFileExitsZero(t *testing.T) {
	path, _ := sampleJournal(t)
	code, out, errOut := runCmd("journal", "check", path)
	if code != 0 || !strings.Contains(out, "OK:") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runCmd("journal", "check", "--json", path)
	var r checkJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || !r.OK || r.Events == 0 || len(r.Snapshots) != 1 {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
}

func TestJournalCheck_CorruptRowExitsOneAndNamesIt(t *testing.T) {
	path, _ := sampleJournal(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`INSERT INTO events(seq, ts, kind, payload) VALUES(1000, ?, 'claim', '{"task_id": 7}')`, t0)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCmd("journal", "check", path)
	if code != 1 || !strings.Contains(out, "seq 1000 (claim)") || !strings.Contains(out, "What to do") {
		t.Fatalf("exit %d, want 1 naming seq 1000:\n%s", code, out)
	}
	code, out, _ = runCmd("journal", "check", path, "--json")
	var r checkJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || r.OK || r.BadCount != 1 || r.BadRows[0].Seq != 1000 {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
}

func TestJournalCheck_MissingFileSaysSo(t *testing.T) {
	code, _, errOut := runCmd("journal", "check", filepath.Join(t.TempDir(), "nope.db"))
	if code != 1 || !strings.Contains(errOut, "no file at") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

func TestJournalCompact_ReplaysToTheSameState(t *testing.T) {
	path, now := sampleJournal(t)
	before := replayed(t, path, now)
	code, out, errOut := runCmd("journal", "compact", path, "--vacuum", "--json")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	var r compactJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// Events followed the snapshot, so a fresh one was written at the end
	// and rows up to the older one (the oldest kept) were removed.
	if !r.SnapshotWritten || r.RowsRemoved == 0 || r.CompactedThrough == 0 || r.CompactedThrough >= r.SnapshotSeq || !r.Vacuumed {
		t.Fatalf("compact: %+v", r)
	}
	if after := replayed(t, path, now); !reflect.DeepEqual(after, before) {
		t.Fatalf("state after compaction:\n got %+v\nwant %+v", after, before)
	}
	if code, out, _ := runCmd("journal", "check", path); code != 0 {
		t.Fatalf("check after compact: exit %d\n%s", code, out)
	}

	// Run again: the newest snapshot is current, the rest of the covered rows go.
	code, out, _ = runCmd("journal", "compact", path)
	if code != 0 || !strings.Contains(out, "is current") || !strings.Contains(out, "rows removed") {
		t.Fatalf("second compact: exit %d\n%s", code, out)
	}
	if after := replayed(t, path, now); !reflect.DeepEqual(after, before) {
		t.Fatalf("state after the second compaction differs")
	}
}

func TestJournalCompact_RefusesALockedFile(t *testing.T) {
	path, _ := sampleJournal(t)
	// A running hub holds a write transaction while it appends.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd("journal", "compact", path, "--busy-timeout", "50ms")
	if code != 1 || !strings.Contains(errOut, "locked by another process") || !strings.Contains(errOut, "Stop the hub") {
		t.Fatalf("exit %d, want 1 with the lock explained\n%s%s", code, out, errOut)
	}
	conn.ExecContext(context.Background(), "ROLLBACK")
	if code, out, errOut := runCmd("journal", "compact", path); code != 0 {
		t.Fatalf("once unlocked: exit %d\n%s%s", code, out, errOut)
	}
}

func TestJournalCompact_RefusesADegradedReplay(t *testing.T) {
	path, _ := sampleJournal(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`INSERT INTO events(seq, ts, kind, payload) VALUES(1000, ?, 'claim', 'not json')`, t0)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCmd("journal", "compact", path)
	if code != 1 || !strings.Contains(errOut, "degraded") || !strings.Contains(errOut, "synapse journal check") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

func TestJournalStats_JSONParses(t *testing.T) {
	path, _ := sampleJournal(t)
	code, out, errOut := runCmd("journal", "stats", "--json", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r statsJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Kinds["claim"] != 20 || r.Kinds["release"] != 10 || r.LastSeq != r.Events || r.FileBytes == 0 || len(r.Snapshots) != 1 {
		t.Fatalf("stats: %+v", r)
	}
	if code, out, _ := runCmd("journal", "stats", path); code != 0 || !strings.Contains(out, "ledger_progress") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestJournal_UsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"journal"},
		{"journal", "fix"},
		{"journal", "check"},
		{"journal", "check", "a.db", "b.db"},
		{"journal", "check", ""},
		{"journal", "stats", "--bogus", "a.db"},
	} {
		if code, _, errOut := runCmd(args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 with a message", args, code, errOut)
		}
	}
	if code, out, _ := runCmd("journal", "--help"); code != 0 || !strings.Contains(out, "compact PATH") {
		t.Errorf("journal --help: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCmd("journal", "compact", "--help"); code != 0 || !strings.Contains(errOut, "--vacuum") {
		t.Errorf("journal compact --help: exit %d\n%s", code, errOut)
	}
}

// journal stats says what the journal keeps and why: the rows a restart
// replays now, and the idempotency records under the window the last hub
// kept with the expired keys it still refuses (INV-CR-1's window).
func TestJournalStats_SaysWhatIsKeptAndWhy_INV_CR_1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hub.db")
	st, err := journal.Open(path, journal.Options{IdempotencyWindow: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const at = 4_000_000_000.0
	for i, ts := range []float64{at, at + 100} {
		key := fmt.Sprintf("k%d", i)
		if _, err := st.Append(context.Background(), &journal.Batch{TS: ts, Records: []journal.Record{{Kind: "chat", Payload: []byte(`{}`)}},
			Operations: []journal.Operation{{Key: key, RequestDigest: "d", Response: []byte(`{}`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.ExpireOperations(context.Background(), at+100, 10); err != nil {
		t.Fatal(err)
	}
	st.Close()
	code, out, errOut := runCmd("journal", "stats", "--json", path)
	var r statsJSON
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	if k := r.Kept; k.Operations != 1 || k.Tombstones != 1 || !k.WindowKnown || k.Window != 90*time.Second || k.ReplayRows != 2 {
		t.Fatalf("kept %+v; want 1 record, 1 expired key, the 90 s window, 2 rows to replay (the events; records take no row)", k)
	}
	code, out, _ = runCmd("journal", "stats", path)
	for _, want := range []string{"replays 2 rows", "1 records kept (--idempotency-window 1m30s", "1 expired keys refused as idempotency_expired"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("exit %d, no %q in:\n%s", code, want, out)
		}
	}
}
