package sequencer

import (
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// crashedLife is a process that committed n claims (and their releases) to
// the journal at path and died without a clean stop: its records are in
// the file, and it took no snapshot.
func crashedLife(t *testing.T, path string, life, n int) {
	t.Helper()
	st := openJournal(t, path, journal.Options{})
	defer st.Close()
	rec, err := journal.Replay(st, coord.Limits{}, t0, journal.ReplayOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s := New(rec.State, st, Options{Logger: quiet, Clock: func() float64 { return t0 }, SnapshotEvery: -1})
	for i := range n {
		submit(t, s, Request{Cmd: claim("a", fmt.Sprintf("L%d-%d", life, i))})
	}
	s.Close() // SnapshotEvery -1: nothing written at Close, as after a SIGKILL
}

// reopen opens the journal and replays it, as a hub starting on it.
func reopen(t *testing.T, path string) (*journal.Store, *journal.Recovered) {
	t.Helper()
	st := openJournal(t, path, journal.Options{})
	t.Cleanup(func() { st.Close() })
	rec, err := journal.Replay(st, coord.Limits{}, t0, journal.ReplayOptions{Logger: quiet})
	if err != nil || rec.Degraded() {
		t.Fatalf("replay: %v %+v", err, rec)
	}
	return st, rec
}

// Records of earlier lives count towards the next snapshot: three lives of
// 20 records each, none reaching SnapshotEvery 50 alone, and the third
// process snapshots after its append takes the file past 50 records after
// its (absent) newest snapshot. The snapshot equals the journal replayed up
// to its seq (INV-RR-1).
func TestSnapshot_RecordsOfEarlierLivesCount_INV_RR_1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	crashedLife(t, path, 1, 20)
	crashedLife(t, path, 2, 20)
	st, rec := reopen(t, path)
	if rec.SnapshotSeq != 0 || rec.LastSeq != 40 {
		t.Fatalf("after two lives: snapshot %d, last seq %d; want none and 40", rec.SnapshotSeq, rec.LastSeq)
	}
	w := &snapshotRecorder{next: st}
	s := start(t, rec.State, st, Options{SnapshotEvery: 50, Snapshotter: w})
	for i := range 9 {
		submit(t, s, Request{Cmd: claim("b", fmt.Sprintf("L3-%d", i))})
	}
	image(t, s) // after the ninth batch's snapshot check
	if n := len(w.recorded()); n != 0 {
		t.Fatalf("%d snapshots at 49 records in the file; want none", n)
	}
	submit(t, s, Request{Cmd: claim("b", "L3-9")})
	live := image(t, s)
	waitSnapshots(s, 1)
	snaps := w.recorded()
	if len(snaps) != 1 || snaps[0].seq != 50 {
		t.Fatalf("snapshots %v; want one at seq 50, though this process committed only 10 records", seqsOf(snaps))
	}
	if !reflect.DeepEqual(snaps[0].img, live) {
		t.Fatalf("snapshot at 50 is not the committed state:\n got %+v\nwant %+v", snaps[0].img, live)
	}
	if got := replayUpTo(t, path, 50, snaps[0].at); !reflect.DeepEqual(got, snaps[0].img) {
		t.Fatalf("snapshot at 50 differs from the journal replayed up to it:\n got %+v\nwant %+v", snaps[0].img, got)
	}
}

// A restart that replayed SnapshotEvery records or more snapshots at once,
// before any command, at the journal's last seq; one that replayed fewer
// does not (INV-RR-1: the next restart starts from it and rebuilds the
// same state).
func TestSnapshot_LongReplaySnapshotsAtStart_INV_RR_1(t *testing.T) {
	for _, c := range []struct {
		records int
		want    []int64
	}{{29, nil}, {30, []int64{30}}, {45, []int64{45}}} {
		t.Run(fmt.Sprint(c.records), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			crashedLife(t, path, 1, c.records)
			st, rec := reopen(t, path)
			want := rec.State.Image()
			w := &snapshotRecorder{next: st}
			s := New(rec.State, st, Options{Logger: quiet, Clock: func() float64 { return t0 }, SnapshotEvery: 30, Snapshotter: w})
			s.snaps.wg.Wait() // the writer New started, if any
			snaps := w.recorded()
			if !reflect.DeepEqual(seqsOf(snaps), c.want) {
				t.Fatalf("%d records replayed: snapshots %v at start; want %v", c.records, seqsOf(snaps), c.want)
			}
			if len(snaps) == 1 && !reflect.DeepEqual(snaps[0].img, want) {
				t.Fatalf("the snapshot at start is not the replayed state:\n got %+v\nwant %+v", snaps[0].img, want)
			}
			// Close writes one only when records follow the newest: the
			// short replay's tail, not again the long one's.
			s.Close()
			if got := seqsOf(w.recorded()); len(got) != 1 || got[0] != int64(c.records) {
				t.Fatalf("snapshots %v after Close; want one, at seq %d", got, c.records)
			}
			_, again := reopen(t, path)
			if again.SnapshotSeq != int64(c.records) || again.Events != 0 {
				t.Fatalf("the next restart started at snapshot %d and replayed %d rows; want %d and none", again.SnapshotSeq, again.Events, c.records)
			}
			if !reflect.DeepEqual(again.State.Image(), want) {
				t.Fatalf("the next restart rebuilt another state:\n got %+v\nwant %+v", again.State.Image(), want)
			}
		})
	}
}

// A clean stop writes a snapshot at the last committed seq, so the restart
// after it replays nothing and rebuilds the same state (INV-RR-1).
func TestSnapshot_CleanStopSnapshotsTheTail_INV_RR_1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	st := openJournal(t, path, journal.Options{})
	s := start(t, coord.New(coord.Limits{}), st, Options{}) // the default bound: never reached here
	busyHub(t, s, 24)
	live := image(t, s)
	s.Close()
	st.Close()
	_, rec := reopen(t, path)
	if rec.SnapshotSeq != rec.LastSeq || rec.Events != 0 {
		t.Fatalf("after a clean stop: snapshot at %d of %d, %d rows replayed; want the last seq and none", rec.SnapshotSeq, rec.LastSeq, rec.Events)
	}
	if got := rec.State.Image(); !reflect.DeepEqual(got, live) {
		t.Fatalf("restart after a clean stop:\n got %+v\nwant %+v", got, live)
	}
}

// waitSnapshots waits for n snapshot writers to have finished (ordering
// only: the writer runs on its own goroutine).
func waitSnapshots(s *Sequencer, n int64) {
	for st := s.Stats(); st.Snapshots+st.SnapshotErrors < n; st = s.Stats() {
		runtime.Gosched()
	}
}

func seqsOf(snaps []recordedSnapshot) []int64 {
	var out []int64
	for _, s := range snaps {
		out = append(out, s.seq)
	}
	return out
}
