package sequencer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// Periodic snapshots (docs/journal.md, Snapshots). A snapshot is due when
// the journal holds SnapshotEvery records or more after its newest snapshot
// — counted in the file, not by one process, so the records of many short
// lives add up (INV-RS-1): at New the count starts from the journal's own
// position (SnapshotPosition), and a journal whose restart had to replay
// that many records or more is snapshotted at once, before the first
// batch. After a batch whose append makes one due, the leader takes the
// committed state's image and hands it to one writer goroutine. The image
// is taken between batches, right after the append, so it is the state at
// exactly the last committed seq (the expiry that batch's clock reading did
// included: expiry is volatile, and replay's final Tick recomputes it).
// Close writes one more when records were committed after the newest, so a
// clean stop is followed by a restart that replays nothing.
//
// Who owns what: the seq tracker's fields are the leader's (only the leader
// appends). The writer goroutine owns the image it was handed; a Claim,
// Offer or BoardTask the state holds is never modified in place, so the
// image shares nothing the leader writes. busy, wg and the counters are
// shared. Never two writers at once: while one runs, the leader skips and
// tries again after the next append.
//
// The snapshot costs the leader a short stall: no command is decided while
// State.Capture gathers the stored pointers (see
// BenchmarkSnapshotStall_Image100kClaims), once per SnapshotEvery records.
// Sorting and copying into the Image, encoding and writing happen on the
// writer goroutine; the capture shares only values the state never changes.
// The snapshots at New and at Close stall no batch: no call is decided then.
//
// A failed snapshot is logged and counted, nothing more: the journal is
// still the truth, and replay falls back to an older snapshot or the whole
// log.

// Snapshotter stores snapshots of the committed state. *journal.Store
// implements it.
type Snapshotter interface {
	// WriteSnapshot stores img as the state right after the journal record
	// at seq was applied. createdAt is the clock reading of the batch that
	// committed seq. It is called from one goroutine at a time, never after
	// Close returns.
	WriteSnapshot(seq int64, img coord.Image, createdAt float64) error
}

type snapshots struct {
	w     Snapshotter
	every int64
	track *seqTracker // nil: no snapshots

	busy    atomic.Bool // a writer runs
	wg      sync.WaitGroup
	written atomic.Int64
	failed  atomic.Int64
}

// seqTracker wraps the Journal to learn the last committed seq of each
// append: Append returns the first, and the records then the operations of
// the batch follow it one seq each.
type seqTracker struct {
	Journal
	last     int64 // the last committed seq
	since    int64 // records in the journal after the newest snapshot taken
	known    bool  // last is the journal's (from its position or an append)
	appended bool  // an append committed since maybeSnapshot last looked
}

// positioner is a Journal that can say where its newest snapshot is.
// *journal.Store implements it.
type positioner interface {
	// SnapshotPosition returns the journal's last seq and the seq of the
	// snapshot a state rebuilt from it starts at.
	SnapshotPosition() (last, from int64, err error)
}

func (t *seqTracker) Append(ctx context.Context, b *journal.Batch) (int64, error) {
	first, err := t.Journal.Append(ctx, b)
	if n := int64(len(b.Records)); err == nil && n > 0 { // operations take no seq
		t.last = first + n - 1
		t.since += n
		t.known, t.appended = true, true
	}
	return first, err
}

// setUpSnapshots picks the Snapshotter and puts the seq tracker in front
// of the journal; with no journal, no writer or a negative SnapshotEvery
// there are no snapshots.
func (s *Sequencer) setUpSnapshots() {
	w := s.opts.Snapshotter
	if w == nil {
		w, _ = s.j.(Snapshotter)
	}
	if s.j == nil || w == nil || s.opts.SnapshotEvery < 0 {
		return
	}
	s.snaps.w, s.snaps.every = w, int64(s.opts.SnapshotEvery)
	t := &seqTracker{Journal: s.j}
	s.snaps.track, s.j = t, t
	p, ok := t.Journal.(positioner)
	if !ok {
		return
	}
	last, from, err := p.SnapshotPosition()
	if err != nil {
		s.log.Warn("sequencer: cannot read the journal's snapshot position; counting from now", "err", err)
		return
	}
	t.last, t.since, t.known = last, last-from, true
	if t.since >= s.snaps.every {
		// The restart replayed a long tail: snapshot now, so the next
		// one does not. The state is the journal's as of last (New's
		// contract), and nothing decides yet.
		s.startSnapshot()
	}
}

// maybeSnapshot runs under the leader lock after each batch: if that batch's append
// made a snapshot due and no writer runs, it takes the image and starts
// the writer.
func (s *Sequencer) maybeSnapshot() {
	t := s.snaps.track
	if t == nil || !t.appended {
		return // only right after an append is the state exactly at t.last
	}
	t.appended = false
	if t.since >= s.snaps.every {
		s.startSnapshot()
	}
}

// startSnapshot takes the image and starts the writer, unless the
// sequencer is degraded or a writer runs. The caller owns the state.
func (s *Sequencer) startSnapshot() {
	t := s.snaps.track
	if s.Err() != nil || !s.snaps.busy.CompareAndSwap(false, true) {
		return
	}
	start := time.Now()
	capture := s.state.Capture() // the stall (see above)
	stall := time.Since(start)
	t.since = 0
	at := s.lastNow
	if at == 0 { // no batch yet: the snapshot at New
		at = s.opts.Clock()
	}
	s.snaps.wg.Add(1)
	go s.writeSnapshot(t.last, capture, at, stall)
}

// closingSnapshot runs in Close, once the loop has returned and the writer
// has finished: it writes the state as of the last committed seq when the
// journal holds records after the newest snapshot.
func (s *Sequencer) closingSnapshot() {
	t := s.snaps.track
	if t == nil || !t.known || t.since == 0 {
		return
	}
	s.startSnapshot()
	s.snaps.wg.Wait()
}

// writeSnapshot is the writer goroutine.
func (s *Sequencer) writeSnapshot(seq int64, capture *coord.Capture, at float64, stall time.Duration) {
	defer s.snaps.wg.Done()
	start := time.Now()
	img := capture.Image() // sorting and copying happen here, off the leader
	err := s.snaps.w.WriteSnapshot(seq, img, at)
	s.snaps.busy.Store(false) // before the counters, so a reader that sees them may expect the next one
	if err != nil {
		s.snaps.failed.Add(1)
		s.log.Error("sequencer: snapshot failed; the journal is still the truth, a restart replays more of it",
			"seq", seq, "err", err)
		return
	}
	s.snaps.written.Add(1)
	s.log.Info("sequencer: snapshot written", "seq", seq, "claims", len(img.Claims),
		"image_stall", stall, "write", time.Since(start))
}
