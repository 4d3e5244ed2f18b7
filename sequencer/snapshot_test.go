package sequencer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// snapshotRecorder is a Snapshotter that remembers what it was given,
// counts overlapping calls and, when next is set, passes the call on.
type snapshotRecorder struct {
	next Snapshotter
	err  error // returned when next is nil

	// When hold is set, each call signals entered and waits on release.
	hold    bool
	entered chan struct{}
	release chan struct{}

	active, maxActive atomic.Int32
	finished          atomic.Int32

	mu    sync.Mutex
	calls []recordedSnapshot
}

type recordedSnapshot struct {
	seq int64
	img coord.Image
	at  float64
}

func (r *snapshotRecorder) holding() *snapshotRecorder {
	r.hold = true
	r.entered = make(chan struct{}, 16)
	r.release = make(chan struct{})
	return r
}

func (r *snapshotRecorder) WriteSnapshot(seq int64, img coord.Image, at float64) error {
	n := r.active.Add(1)
	defer r.active.Add(-1)
	for m := r.maxActive.Load(); n > m && !r.maxActive.CompareAndSwap(m, n); m = r.maxActive.Load() {
	}
	r.mu.Lock()
	r.calls = append(r.calls, recordedSnapshot{seq, img, at})
	r.mu.Unlock()
	if r.hold {
		r.entered <- struct{}{}
		<-r.release
	}
	defer r.finished.Add(1)
	if r.next != nil {
		return r.next.WriteSnapshot(seq, img, at)
	}
	return r.err
}

func (r *snapshotRecorder) recorded() []recordedSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recordedSnapshot(nil), r.calls...)
}

// seqLog records the journal's last seq after every committed append: the
// seqs a snapshot may be taken at.
type seqLog struct {
	*journal.Store
	committed map[int64]bool // only the loop appends; read after Close
}

func (l *seqLog) Append(ctx context.Context, b *journal.Batch) (int64, error) {
	first, err := l.Store.Append(ctx, b)
	if err == nil {
		last, err := l.Store.LastSeq()
		if err != nil {
			panic(err)
		}
		l.committed[last] = true
	}
	return first, err
}

// busyHub submits a mix of commands, keyed ones included (their
// idempotency records take seqs too), one batch each.
func busyHub(t *testing.T, s *Sequencer, n int) {
	t.Helper()
	for i := range n {
		agent, task := agentName(i%7), fmt.Sprintf("S%03d", i)
		switch i % 4 {
		case 0:
			submit(t, s, keyed(claim(agent, task), idemKey(agent, "claim", task), "d"+task))
		case 1:
			submit(t, s, Request{Cmd: claim(agent, task)})
		case 2:
			prev := fmt.Sprintf("S%03d", i-1)
			submit(t, s, Request{Cmd: coord.CheckpointRequest{Agent: agentName((i - 1) % 7), TaskID: prev, Checkpoint: "cp" + task}})
		case 3:
			prev := fmt.Sprintf("S%03d", i-3)
			submit(t, s, Request{Cmd: coord.ReleaseRequest{Agent: agentName((i - 3) % 7), TaskID: prev}})
			submit(t, s, Request{Cmd: coord.PostProgress{Agent: agent, TaskID: prev, Text: "released " + prev}})
		}
	}
}

// replayUpTo replays the journal at path as if it ended at seq: a copy with
// every later event and every snapshot removed.
func replayUpTo(t *testing.T, path string, seq int64, now float64) coord.Image {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "upto.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`VACUUM INTO ?`, cp)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	db, err = sql.Open("sqlite", cp)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`DELETE FROM events WHERE seq > ?; DELETE FROM snapshots`, seq)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	st := openJournal(t, cp, journal.Options{})
	defer st.Close()
	rec, err := journal.Replay(st, coord.Limits{}, now, journal.ReplayOptions{Logger: quiet, NoSnapshot: true})
	if err != nil || rec.Degraded() {
		t.Fatalf("replay up to %d: %v %+v", seq, err, rec)
	}
	return rec.State.Image()
}

func replayImage(t *testing.T, st *journal.Store, now float64, noSnapshot bool) (coord.Image, *journal.Recovered) {
	t.Helper()
	rec, err := journal.Replay(st, coord.Limits{}, now, journal.ReplayOptions{Logger: quiet, NoSnapshot: noSnapshot})
	if err != nil || rec.Degraded() {
		t.Fatalf("replay: %v %+v", err, rec)
	}
	return rec.State.Image(), rec
}

func TestSnapshot_TakenAtACommittedSeq_EqualsReplayUpToIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	st := openJournal(t, path, journal.Options{})
	t.Cleanup(func() { st.Close() })
	j := &seqLog{Store: st, committed: map[int64]bool{}}
	rec := &snapshotRecorder{next: st}
	s := start(t, coord.New(coord.Limits{}), j, Options{SnapshotEvery: 10, Snapshotter: rec})
	busyHub(t, s, 80)
	live := image(t, s)
	s.Close()

	snaps := rec.recorded()
	if len(snaps) == 0 {
		t.Fatal("no snapshot after 100 commits at SnapshotEvery 10")
	}
	if got := s.Stats().Snapshots; got != int64(len(snaps)) {
		t.Errorf("Stats().Snapshots = %d, the writer was called %d times", got, len(snaps))
	}
	for i, sn := range snaps {
		if !j.committed[sn.seq] {
			t.Fatalf("snapshot %d at seq %d, which no append ended at", i, sn.seq)
		}
		if i > 0 && i < len(snaps)-1 && sn.seq-snaps[i-1].seq < 10 { // the last is Close's: the tail, however short
			t.Errorf("snapshots at seqs %d and %d: fewer than 10 records apart", snaps[i-1].seq, sn.seq)
		}
	}
	last := snaps[len(snaps)-1]
	if got := replayUpTo(t, path, last.seq, last.at); !reflect.DeepEqual(got, last.img) {
		t.Fatalf("snapshot at seq %d differs from the journal replayed up to it:\n got %+v\nwant %+v", last.seq, last.img, got)
	}

	stored, err := st.Snapshots()
	if err != nil || len(stored) == 0 || stored[0].Seq != last.seq {
		t.Fatalf("stored snapshots %+v (%v), want the newest at seq %d", stored, err, last.seq)
	}
	withSnap, r := replayImage(t, st, t0, false)
	whole, _ := replayImage(t, st, t0, true)
	if r.SnapshotSeq != last.seq {
		t.Fatalf("replay started from seq %d, want %d", r.SnapshotSeq, last.seq)
	}
	if !reflect.DeepEqual(withSnap, whole) || !reflect.DeepEqual(whole, live) {
		t.Fatalf("replay from the snapshot, whole replay and the live state differ:\nsnap  %+v\nwhole %+v\nlive  %+v", withSnap, whole, live)
	}
}

// A keyed command's idempotency record is stored beside its events and
// takes no seq of its own: keyed claims get consecutive seqs, and every
// snapshot sits at the end of a committed batch (INV-RR-1).
func TestSnapshot_SeqCountsEventsNotIdempotencyRecords_INV_RR_1(t *testing.T) {
	st := openJournal(t, filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	t.Cleanup(func() { st.Close() })
	j := &seqLog{Store: st, committed: map[int64]bool{}}
	rec := &snapshotRecorder{next: st}
	s := start(t, coord.New(coord.Limits{}), j, Options{SnapshotEvery: 1, Snapshotter: rec})
	for i := range 5 {
		task := taskName(i)
		r := submit(t, s, keyed(claim("a", task), idemKey("a", "claim", task), "d"))
		if r.Seq != int64(i+1) {
			t.Fatalf("claim %d at seq %d, want %d (idempotency records take no seq)", i, r.Seq, i+1)
		}
	}
	s.Close()
	snaps := rec.recorded()
	if len(snaps) == 0 {
		t.Fatal("no snapshot")
	}
	for _, sn := range snaps {
		if !j.committed[sn.seq] {
			t.Fatalf("snapshot at seq %d: not the end of a batch (committed: %v)", sn.seq, j.committed)
		}
	}
	if last, _ := st.LastSeq(); snaps[len(snaps)-1].seq != last {
		t.Fatalf("newest snapshot at seq %d, want the last event's seq %d", snaps[len(snaps)-1].seq, last)
	}
}

func TestSnapshot_DefaultWriterIsTheJournal_NegativeDisables(t *testing.T) {
	for _, c := range []struct {
		every int
		want  bool
	}{{3, true}, {-1, false}} {
		t.Run(fmt.Sprint(c.every), func(t *testing.T) {
			st := openJournal(t, filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
			t.Cleanup(func() { st.Close() })
			s := start(t, coord.New(coord.Limits{}), st, Options{SnapshotEvery: c.every})
			busyHub(t, s, 12)
			s.Close()
			snaps, err := st.Snapshots()
			if err != nil {
				t.Fatal(err)
			}
			if got := len(snaps) > 0; got != c.want {
				t.Fatalf("SnapshotEvery %d: %d snapshots stored", c.every, len(snaps))
			}
		})
	}
}

func TestSnapshot_FailingWriterDoesNotAffectCommits(t *testing.T) {
	st := openJournal(t, filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	t.Cleanup(func() { st.Close() })
	rec := &snapshotRecorder{err: errors.New("snapshot disk full")}
	s := start(t, coord.New(coord.Limits{}), st, Options{SnapshotEvery: 1, Snapshotter: rec})
	busyHub(t, s, 40)
	if err := s.Err(); err != nil {
		t.Fatalf("a failed snapshot degraded the sequencer: %v", err)
	}
	live := image(t, s)
	s.Close()
	stats := s.Stats()
	if stats.SnapshotErrors == 0 || stats.Snapshots != 0 || stats.SnapshotErrors != int64(len(rec.recorded())) {
		t.Fatalf("stats %+v after %d failing snapshot calls", stats, len(rec.recorded()))
	}
	if got, _ := replayImage(t, st, t0, false); !reflect.DeepEqual(got, live) {
		t.Fatalf("journal after failing snapshots:\n got %+v\nwant %+v", got, live)
	}
}

func TestSnapshot_OneWriterAtATime_CommitsDoNotWaitForIt(t *testing.T) {
	st := openJournal(t, filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	t.Cleanup(func() { st.Close() })
	rec := (&snapshotRecorder{next: st}).holding()
	s := start(t, coord.New(coord.Limits{}), st, Options{SnapshotEvery: 1, Snapshotter: rec})

	submit(t, s, Request{Cmd: claim("a", "T1")})
	recv(t, rec.entered) // the first snapshot is held
	for i := range 10 {  // every one of these commits while it is held
		submit(t, s, Request{Cmd: claim("b", fmt.Sprintf("T%d", i+2))})
	}
	image(t, s) // a reply comes before its batch's snapshot check; the query comes after
	if n := len(rec.recorded()); n != 1 {
		t.Fatalf("%d snapshot writes started while the first was running", n)
	}
	close(rec.release) // from now on writers pass straight through
	for s.Stats().Snapshots < 1 {
		runtime.Gosched() // ordering only: the writer has returned
	}
	submit(t, s, Request{Cmd: claim("c", "T99")})
	s.Close()
	snaps := rec.recorded()
	if len(snaps) != 2 || snaps[1].seq != 12 || rec.maxActive.Load() != 1 {
		t.Fatalf("snapshots at %v (max %d at once), want seqs [1 12], one at a time",
			[]int64{snaps[0].seq, snaps[len(snaps)-1].seq}, rec.maxActive.Load())
	}
}

func TestSnapshot_CloseWaitsForTheWriter(t *testing.T) {
	st := openJournal(t, filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	t.Cleanup(func() { st.Close() })
	rec := (&snapshotRecorder{next: st}).holding()
	s := start(t, coord.New(coord.Limits{}), st, Options{SnapshotEvery: 1, Snapshotter: rec})
	submit(t, s, Request{Cmd: claim("a", "T1")})
	recv(t, rec.entered)

	closed := make(chan int32, 1)
	go func() {
		s.Close()
		closed <- rec.finished.Load()
	}()
	<-s.done // the loop has stopped; Close now waits only for the writer
	select {
	case <-closed:
		t.Fatal("Close returned while the snapshot was being written")
	default:
	}
	close(rec.release)
	if finished := recv(t, closed); finished != 1 {
		t.Fatalf("Close returned before the writer finished (%d finished)", finished)
	}
	if snaps, err := st.Snapshots(); err != nil || len(snaps) != 1 || snaps[0].Seq != 1 {
		t.Fatalf("stored snapshots %+v (%v), want one at seq 1", snaps, err)
	}
}

// BenchmarkSnapshotStall_Image100kClaims measures what a snapshot costs the
// loop: State.Capture() runs on it, and no command is decided meanwhile
// (the Image is built from the capture on the writer goroutine).
func BenchmarkSnapshotStall_Image100kClaims(b *testing.B) {
	st := coord.New(coord.Limits{})
	for i := range 100_000 {
		if o := st.Step(claim(agentName(i%2000), fmt.Sprintf("B%06d", i)), t0); o.Refusal != nil {
			b.Fatal(o.Refusal)
		}
	}
	b.ResetTimer()
	var worst time.Duration
	for b.Loop() {
		start := time.Now()
		st.Capture()
		worst = max(worst, time.Since(start))
	}
	b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
}
