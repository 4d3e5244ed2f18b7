package federation

import (
	"errors"
	"fmt"
	"slices"
)

// Errors of PeerLog.Accept. Callers compare with errors.Is; an equivocation
// also comes as an *EquivocationError carrying the evidence to journal.
var (
	// ErrEquivocation is a seq served with two different fingerprints. It
	// is proof the peer rewrote its log, so the caller quarantines it.
	ErrEquivocation = errors.New("equivocation")
	// ErrSequenceGap is a batch that breaks the append-only cursor
	// contract: a new seq that is not the next one, or an old seq this log
	// cannot verify (below its window or before a restart gap).
	ErrSequenceGap = errors.New("sequence gap")
)

// DefaultWindow is the number of recent fingerprints a PeerLog keeps when it
// is given no window. A poll re-serves nothing older than its cursor, so
// the window only has to cover what a caller deliberately asks for again.
const DefaultWindow = 1024

// EquivocationError is the evidence of one equivocation: the fingerprint
// this hub accepted first for Seq and the one the peer served later.
type EquivocationError struct {
	Hub         string
	Seq         int64
	Accepted    [32]byte
	Conflicting [32]byte
}

func (e *EquivocationError) Error() string {
	return fmt.Sprintf("federation: peer %q equivocated at seq %d (accepted %x, served %x)",
		e.Hub, e.Seq, e.Accepted, e.Conflicting)
}

// Unwrap makes errors.Is(err, ErrEquivocation) hold.
func (e *EquivocationError) Unwrap() error { return ErrEquivocation }

// PeerLog is what this hub has verified of one peer's log: a cursor and the
// fingerprints of recent seqs. It is not safe for concurrent use; the
// goroutine polling the peer owns it.
type PeerLog struct {
	hub    string
	cursor int64 // every seq up to here is accepted (or skipped by a restart gap)
	// floor is the cursor the log started from or last jumped to: seqs at
	// or below it were never seen here, so they have no fingerprint.
	floor int64
	// ring[seq % len(ring)] is seq's fingerprint for every remembered seq,
	// that is floor < seq <= cursor and seq > cursor-len(ring).
	ring [][32]byte
}

// NewPeerLog returns the log of hubID verified up to cursor (0 for a peer
// never polled; a negative cursor counts as 0). It remembers the
// fingerprints of the latest window seqs it accepts (DefaultWindow when
// window < 1), 32 bytes each, allocated up front.
func NewPeerLog(hubID string, cursor int64, window int) *PeerLog {
	if window < 1 {
		window = DefaultWindow
	}
	cursor = max(cursor, 0)
	return &PeerLog{hub: hubID, cursor: cursor, floor: cursor, ring: make([][32]byte, window)}
}

// Hub returns the peer's hub id.
func (l *PeerLog) Hub() string { return l.hub }

// Cursor returns the last seq accepted: the after_seq of the next poll.
func (l *PeerLog) Cursor() int64 { return l.cursor }

// Accept verifies a batch (events in seq order as served after some cursor)
// and, if it is sound, advances the cursor past it. Seqs already accepted
// must carry an identical fingerprint (else an *EquivocationError); new seqs
// must be contiguous from Cursor()+1 (else ErrSequenceGap); an event that
// cannot be fingerprinted, or a seq not above the one before it, is
// ErrBadEvent. On any error nothing is accepted and the cursor is unchanged.
// It returns the new events (those above the old cursor) as a subslice of
// events.
func (l *PeerLog) Accept(events []Event) ([]Event, error) {
	return l.accept(l.cursor, l.floor, events)
}

// AcceptFrom is Accept for a peer that says its log now begins at start
// (older entries compacted away). If start-1 is beyond the cursor, the cursor
// jumps to start-1 and the batch must continue from start. The seqs jumped
// over were never verified and never will be: that is a gap in what this
// hub observed of the peer, which the caller must log (compare Cursor()
// before and after). The jump also forgets the remembered fingerprints, as
// the peer can no longer serve those seqs. A start at or below Cursor()+1
// jumps nothing. On error neither the jump nor the batch is applied.
func (l *PeerLog) AcceptFrom(start int64, events []Event) ([]Event, error) {
	if start-1 <= l.cursor {
		return l.Accept(events)
	}
	return l.accept(start-1, start-1, events)
}

// accept verifies events against a log at cursor with fingerprints held
// above floor, and commits only once the whole batch has passed.
func (l *PeerLog) accept(cursor, floor int64, events []Event) ([]Event, error) {
	fps := make([][32]byte, len(events))
	for i, e := range events {
		fp, err := fingerprint(l.hub, e)
		if err != nil {
			return nil, l.errorf(e.Seq, err)
		}
		fps[i] = fp
	}

	// Equivocation is checked before order and contiguity: a seq served
	// twice with different content is proof whatever else is wrong with
	// the batch, and it is the finding that quarantines the peer.
	inBatch := make(map[int64]int, len(events))
	for i, e := range events {
		if j, dup := inBatch[e.Seq]; dup && fps[j] != fps[i] {
			return nil, &EquivocationError{Hub: l.hub, Seq: e.Seq, Accepted: fps[j], Conflicting: fps[i]}
		}
		inBatch[e.Seq] = i
		if old, ok := l.remembered(cursor, floor, e.Seq); ok && old != fps[i] {
			return nil, &EquivocationError{Hub: l.hub, Seq: e.Seq, Accepted: old, Conflicting: fps[i]}
		}
	}

	first := len(events) // index of the first new event
	next := cursor + 1
	for i, e := range events {
		if i > 0 && e.Seq <= events[i-1].Seq {
			return nil, l.errorf(e.Seq, fmt.Errorf("%w: follows seq %d", ErrBadEvent, events[i-1].Seq))
		}
		if e.Seq <= cursor {
			if _, ok := l.remembered(cursor, floor, e.Seq); !ok {
				return nil, l.errorf(e.Seq, fmt.Errorf("%w: at or below cursor %d and not remembered", ErrSequenceGap, cursor))
			}
			continue
		}
		if e.Seq != next {
			return nil, l.errorf(e.Seq, fmt.Errorf("%w: expected seq %d after cursor %d", ErrSequenceGap, next, cursor))
		}
		first = min(first, i)
		next++
	}

	l.cursor, l.floor = next-1, floor
	for i := first; i < len(events); i++ {
		l.ring[events[i].Seq%int64(len(l.ring))] = fps[i]
	}
	return slices.Clip(events[first:]), nil
}

// remembered returns seq's fingerprint if a log at cursor with the given
// floor still holds it.
func (l *PeerLog) remembered(cursor, floor, seq int64) ([32]byte, bool) {
	if seq <= floor || seq > cursor || seq <= cursor-int64(len(l.ring)) {
		return [32]byte{}, false
	}
	return l.ring[seq%int64(len(l.ring))], true
}

func (l *PeerLog) errorf(seq int64, err error) error {
	return fmt.Errorf("federation: peer %q: seq %d: %w", l.hub, seq, err)
}
