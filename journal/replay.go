package journal

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/synapse-hub/synapse/coord"
)

// ReplayOptions tune Replay. The zero value works.
type ReplayOptions struct {
	// Logger gets a warning per skipped snapshot and per quarantined row
	// (nil: slog.Default()).
	Logger *slog.Logger
	// NoSnapshot replays the whole log, ignoring snapshots (tests, Check).
	NoSnapshot bool
	// MaxListed bounds Recovered.Quarantined (default 1000); every bad row
	// is still counted in QuarantinedCount.
	MaxListed int
	// Progress, if set, is told every ProgressEvery rows how many of the
	// rows after the snapshot have been read, so a long replay can say so.
	Progress func(done, total int64)
}

// ProgressEvery is how many rows replay reads between Progress calls.
const ProgressEvery = 100_000

// Quarantined is a journal row replay could not use.
type Quarantined struct {
	Seq  int64
	Kind string
	Err  string
}

// Recovered is the authority rebuilt from a journal.
//
// Idempotency is not rebuilt in memory: the operations table is the guard,
// kept forever and read through (*Store).Operation, so every key committed
// before the restart is still answered with its stored response.
type Recovered struct {
	State       *coord.State
	LastSeq     int64 // highest seq in the journal when replay read it
	SnapshotSeq int64 // seq of the snapshot replay started from; 0 for none
	Events      int   // rows read after the snapshot
	Applied     int   // events applied to the state
	Expired     int   // events of the final Tick (leases and offers past due)

	// Quarantined lists the rows that could not be decoded or applied
	// (at most ReplayOptions.MaxListed); they are skipped.
	Quarantined      []Quarantined
	QuarantinedCount int
	// Incomplete is set when events a snapshot was meant to cover were
	// compacted away and no sound snapshot covers them.
	Incomplete bool
	Warnings   []string
}

// Degraded reports whether the recovered state may not be the journal's
// full truth: some rows were quarantined, or compacted history is missing.
// The hub then refuses mutations and reports /health degraded.
func (r *Recovered) Degraded() bool { return r.QuarantinedCount > 0 || r.Incomplete }

// Replay rebuilds the state from st: the newest sound snapshot (a damaged
// one is skipped with a warning, falling back to an older one or to the
// whole log), then every event after it in seq order, then Tick(now), so
// leases and offers past due at now are gone (INV-RR-1). Applying the
// events re-applies the caps (INV-RR-2), and claim_denial rows change
// nothing (INV-RR-3). Bad rows are quarantined, never fatal; only a failure
// to read the store is an error.
func Replay(st *Store, lim coord.Limits, now float64, opts ReplayOptions) (*Recovered, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.MaxListed <= 0 {
		opts.MaxListed = 1000
	}
	r := &Recovered{}
	warn := func(msg string, args ...any) {
		r.Warnings = append(r.Warnings, fmt.Sprintf(msg, args...))
		log.Warn("journal replay: " + fmt.Sprintf(msg, args...))
	}
	last, err := st.LastSeq()
	if err != nil {
		return nil, err
	}
	r.LastSeq = last

	var pre *prefetch
	defer func() { pre.stop() }()
	if !opts.NoSnapshot {
		infos, bodies, err := st.snapshots()
		if err != nil {
			return nil, err
		}
		// The tail after the newest sound snapshot is read and decoded on
		// a second goroutine while this one decodes the snapshot and
		// builds the state from it; a fallback to an older snapshot
		// drops it and reads from there.
		for _, in := range infos {
			if in.Err == "" {
				pre = startPrefetch(st, in.Seq)
				break
			}
		}
		for i, in := range infos {
			if in.Err != "" {
				warn("snapshot at seq %d skipped: %s", in.Seq, in.Err)
				continue
			}
			img, err := DecodeImage(bodies[i])
			if err != nil {
				warn("snapshot at seq %d skipped: %v", in.Seq, err)
				continue
			}
			r.State, r.SnapshotSeq = coord.FromImage(lim, img), in.Seq
			break
		}
	}
	if r.State == nil {
		r.State = coord.New(lim)
	}
	floor, err := st.compactedThrough()
	if err != nil {
		return nil, fmt.Errorf("journal: replay: %w", err)
	}
	if floor > r.SnapshotSeq {
		r.Incomplete = true
		warn("events up to seq %d were compacted but replay starts at seq %d: claims and board may be missing", floor, r.SnapshotSeq)
	}

	quarantine := func(seq int64, kind string, err error) {
		r.QuarantinedCount++
		if len(r.Quarantined) < opts.MaxListed {
			r.Quarantined = append(r.Quarantined, Quarantined{Seq: seq, Kind: kind, Err: err.Error()})
			log.Warn("journal replay: row quarantined", "seq", seq, "kind", kind, "err", err)
		}
	}
	each := func(d decoded) {
		r.Events++
		if opts.Progress != nil && r.Events%ProgressEvery == 0 {
			opts.Progress(d.seq-r.SnapshotSeq, last-r.SnapshotSeq)
		}
		switch {
		case d.err != nil:
			quarantine(d.seq, d.kind, d.err)
		case !d.ok:
		default:
			if err := apply(r.State, d.ev); err != nil {
				quarantine(d.seq, d.kind, err)
				return
			}
			r.Applied++
		}
	}
	if pre != nil && pre.from == r.SnapshotSeq {
		err = pre.drain(each)
	} else {
		err = st.Scan(r.SnapshotSeq, func(seq int64, _ float64, kind string, payload []byte) error {
			ev, ok, err := Decode(kind, payload)
			each(decoded{seq: seq, kind: kind, ev: ev, ok: ok, err: err})
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("journal: replay: %w", err)
	}
	r.Expired = len(r.State.Tick(now).Events)
	st.replayFrom.Store(r.SnapshotSeq)
	st.replayed.Store(true)
	st.endReplay()
	return r, nil
}

// apply applies ev, turning a panic of the core (a row it cannot take)
// into an error so one bad row cannot stop the hub from starting.
func apply(s *coord.State, ev coord.Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("apply: %v", p)
		}
	}()
	s.Apply(ev)
	return nil
}

// decoded is one row of the tail, decoded.
type decoded struct {
	seq  int64
	kind string
	ev   coord.Event
	ok   bool
	err  error
}

// prefetch reads and decodes the rows after seq from on a goroutine of
// its own, in pages, while the replay builds the state from the snapshot
// at from (Replay).
type prefetch struct {
	from  int64
	pages chan []decoded
	quit  chan struct{}
	done  chan error
}

const prefetchPage = 1024

func startPrefetch(st *Store, from int64) *prefetch {
	p := &prefetch{from: from, pages: make(chan []decoded, 64), quit: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		defer close(p.pages)
		page := make([]decoded, 0, prefetchPage)
		send := func() bool {
			select {
			case p.pages <- page:
				page = make([]decoded, 0, prefetchPage)
				return true
			case <-p.quit:
				return false
			}
		}
		errStop := errors.New("stopped")
		err := st.Scan(from, func(seq int64, _ float64, kind string, payload []byte) error {
			ev, ok, err := Decode(kind, payload)
			if page = append(page, decoded{seq, kind, ev, ok, err}); len(page) == prefetchPage && !send() {
				return errStop
			}
			return nil
		})
		if err == nil && len(page) > 0 && !send() {
			err = errStop
		}
		p.done <- err
	}()
	return p
}

// drain hands every prefetched row to fn in seq order and returns the
// scan's error.
func (p *prefetch) drain(fn func(decoded)) error {
	for page := range p.pages {
		for _, d := range page {
			fn(d)
		}
	}
	return <-p.done
}

// stop ends a prefetch that is no longer wanted and waits for it (nil: none).
func (p *prefetch) stop() {
	if p == nil {
		return
	}
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	for range p.pages {
	}
}
