// Package sequencer is the single writer of a Synapse hub: it owns the live
// coord.State, decides commands in batches, journals each batch in one
// append and only then releases replies and broadcasts (DESIGN.md §2
// principle 2, spec §4 INV-JA-1..3). It also answers idempotent retries
// from their stored response (INV-CR-1, INV-DG-2, PROTOCOL.md §4.3).
//
// Who owns what:
//
//   - Whoever holds the leader lock decides, and owns the coord.State, the
//     idempotency cache, the expiry timer's deadline, the clock's
//     high-water mark and the degraded flag's cause. Nothing else touches
//     them. The holder is the loop goroutine (started by New, ended by
//     Close), or a caller of Submit or Query that found the sequencer idle
//     — nothing queued, the loop not waiting — and decides its own call on
//     its own goroutine (an inline decision). A lone request thus costs no
//     hand-off to the loop and back; under load calls queue and the loop
//     decides them as one batch (group commit).
//   - Other callers own nothing: they hand a call to the loop through the
//     bounded queue and wait on its one-slot reply channel.
//   - The Journal is called only by the leader, one Append at a time, and
//     is never called after Close returns; the caller closes it then.
//   - The published counters (Stats) and the degraded error (Err) are
//     atomics any goroutine may read.
//   - At most one snapshot writer goroutine runs at a time; it owns the
//     image it was handed and nothing else (snapshot.go).
//
// OnCommit, Render, Committed and a Query's function therefore run on the
// leader's goroutine, one at a time, never concurrently with a decision.
// They must not call Submit or Query (the leader would wait for itself).
//
// A batch is everything queued when the leader looks, up to MaxBatch. Its
// commands are decided in order at one clock reading, each Step kept with
// its undo record; their durable events and idempotency records go to the
// journal in one Append. Only when Append returns nil are OnCommit and the
// replies released. When it fails, every outcome is rolled back newest
// first and every request of the batch gets ErrJournal (INV-JA-2).
//
// Degraded mode (fail closed): after a failed append the sequencer refuses
// every later Submit with ErrJournal, idempotent replays included, until
// the hub restarts and replays the journal; Err reports it for /health.
// Query keeps working, and the expiry timer keeps expiring leases, since
// expiry is volatile and replay would expire the same leases.
//
// Whenever the journal holds SnapshotEvery records after its newest
// snapshot (counted across restarts), the leader takes the image of the
// committed state and a background goroutine writes it as a snapshot, so a
// restart replays only the events after it; Close writes one too
// (snapshot.go).
//
// Queries run under the leader lock between batches, so they see committed
// state only and never a batch in flight (INV-JA-1).
package sequencer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// Errors a Submit or Query may return. Compare with errors.Is.
var (
	// ErrJournal means the command was not applied because the journal
	// failed: its batch's append failed (and the whole batch was rolled
	// back, INV-JA-2), or the sequencer is degraded by an earlier failure
	// and refuses mutations until the hub restarts (fail closed).
	ErrJournal = errors.New("sequencer: journal unavailable")
	// ErrIdempotencyConflict means the idempotency key was already used for
	// a different request (PROTOCOL.md §4.3 error_code
	// "idempotency_conflict"). Nothing was applied.
	ErrIdempotencyConflict = errors.New("sequencer: idempotency key reused for a different request")
	// ErrIdempotencyExpired means the idempotency key's record expired: the
	// key committed longer ago than the journal's idempotency window, its
	// first response is no longer kept, and the request was not applied
	// (it may be a late retry of one that was). It wraps the journal's
	// *journal.ExpiredError, which says when the key committed.
	ErrIdempotencyExpired = errors.New("sequencer: idempotency key expired")
	// ErrBadRequest means the request itself was malformed (no command, an
	// empty idempotency key, a Render output that is not JSON). It fails
	// that request alone; nothing was applied.
	ErrBadRequest = errors.New("sequencer: malformed request")
	// ErrClosed means the sequencer was closed before the call was queued.
	ErrClosed = errors.New("sequencer: closed")
	// ErrRetry is what a Journal returns (wrapped) to refuse a batch
	// without failing: nothing was committed, the batch is rolled back and
	// its requests get ErrRetry, and the sequencer stays healthy. A store
	// on etcd returns it when a namespace of the batch is no longer owned
	// by this hub (its owner-key guard failed).
	ErrRetry = errors.New("sequencer: retry: the store refused the batch")
	// ErrUncertain comes with ErrRetry when the store could not say
	// whether it kept the batch (a transaction that timed out may have
	// committed): the requests may or may not have been applied. The
	// state is rolled back all the same and the store re-read before the
	// namespace serves again.
	ErrUncertain = errors.New("sequencer: the store may or may not have kept the batch")
)

// Tunables with their defaults.
const (
	// DefaultMaxBatch bounds how many commands share one append.
	DefaultMaxBatch = 512
	// DefaultQueueSize bounds the submit queue; a full queue makes Submit
	// wait (on its context), it never drops a request.
	DefaultQueueSize = 4096
	// DefaultIdemCacheSize is the reference's in-memory idempotency LRU:
	// 1024 successful responses.
	DefaultIdemCacheSize = 1024
	// DefaultSnapshotEvery is how many journal records after the newest
	// snapshot make the next one due: at ~165,000 replayed rows/s it keeps
	// the replay after the newest snapshot near 120 ms, so a restart stays
	// within 300 ms (issue 24). At 100k claims a snapshot stalls the loop
	// ~1 ms (State.Capture), at most once per this many records.
	DefaultSnapshotEvery = 10_000
	// maxTimerWait caps one sleep of the expiry timer, so a clock that jumps
	// is noticed within this.
	maxTimerWait = time.Minute
	// retryBackoff spaces expiry attempts after the store refused a batch
	// with ErrRetry, so a moved namespace's due expiries do not spin.
	retryBackoff = 100 * time.Millisecond
)

// Journal is the durable store the sequencer commits to. *journal.Store
// implements it.
type Journal interface {
	// Append commits every record and operation of b in one transaction and
	// returns the seq of the first record; records are numbered
	// consecutively in b.Records order, then one idempotency record per
	// operation. On error nothing was committed.
	Append(ctx context.Context, b *journal.Batch) (firstSeq int64, err error)
	// Operation returns the committed idempotency record for key, if any;
	// an error matching journal.ErrIdempotencyExpired for a key whose
	// record expired.
	Operation(key string) (journal.Operation, bool, error)
}

// windowed is a Journal that expires idempotency records after a window
// (*journal.Store with Options.IdempotencyWindow): the cache then forgets
// a record as old, so it answers no longer than the journal would.
type windowed interface {
	IdempotencyWindow() time.Duration
}

// Options tunes a Sequencer. The zero value works.
type Options struct {
	// Clock returns the wall clock in unix seconds (default time.Now). The
	// sequencer reads it once per batch and never lets it go backwards.
	Clock func() float64
	// MaxBatch bounds the commands of one batch (default DefaultMaxBatch).
	MaxBatch int
	// QueueSize bounds the submit queue (default DefaultQueueSize).
	QueueSize int
	// IdemCacheSize bounds the in-memory idempotency cache (default
	// DefaultIdemCacheSize). Without a journal it is the only record of
	// used keys; with one it saves a read of the operations table.
	IdemCacheSize int
	// OnCommit, if set, gets the events of each committed request (and of
	// each timer tick) in commit order, volatile ones included, so the hub
	// can broadcast them. It runs on the sequencer goroutine: it must not
	// block, call Submit, Query or Close, or keep the slice.
	OnCommit func(events []coord.Event)
	// Logger receives journal and snapshot failures (default
	// slog.Default()).
	Logger *slog.Logger
	// SnapshotEvery is how many journal records after the newest snapshot
	// make a snapshot due, counted in the journal (across restarts) when it
	// can say where its newest snapshot is (0: DefaultSnapshotEvery;
	// negative: no snapshots). Taking one stalls the loop for
	// State.Capture(): about 1 ms at 100k claims.
	SnapshotEvery int
	// Snapshotter writes the snapshots (default: the Journal, when it
	// implements Snapshotter, as *journal.Store does). A memory-only hub
	// takes none.
	Snapshotter Snapshotter
}

// Idem makes a request idempotent (PROTOCOL.md §4.3).
type Idem struct {
	// Key is sender + "\x00" + type + "\x00" + idem_key: the caller
	// namespaces it, so keys of different agents or verbs never meet.
	Key string
	// Digest identifies the request (sha256 of its canonical JSON). A reuse
	// of Key with another digest is an ErrIdempotencyConflict.
	Digest string
}

// Request is one command for the sequencer.
type Request struct {
	Cmd  coord.Command
	Idem *Idem // nil: not keyed (at-least-once)
	// Render builds the response stored for an idempotent replay: one JSON
	// value (nil Render stores null). It is called on the sequencer
	// goroutine, only for a keyed command that was applied and not refused,
	// and must not keep the outcome. Output that is not JSON fails the
	// request with ErrBadRequest.
	Render func(coord.Outcome) []byte
	// Records are journal records of the request's own (a chat row, a
	// mailbox watermark, a receipt), committed in the batch right after the
	// command's events; with no Cmd the request is only these records. A
	// refused command's records are not written. A memory-only hub writes
	// none.
	Records []journal.Record
	// Committed, if set, runs on the sequencer goroutine once the request
	// is committed, in commit order with OnCommit (after the request's own
	// events were published), with the reply the caller will get: the hub
	// stamps Reply.Seq on a chat and fans it out here. It must not block
	// or call the sequencer. It does not run for a failed or replayed
	// request.
	Committed func(Reply)
}

// Reply is what a committed request got.
type Reply struct {
	// Outcome is what the command did: the events applied (the expirations
	// due first, then the command's) and the refusal, if any. Empty for a
	// replay.
	Outcome coord.Outcome
	// Response is the stored response: Render's bytes for an applied keyed
	// command, the first request's bytes for a replay; nil otherwise.
	Response []byte
	// Replayed reports an idempotent duplicate: nothing was applied and
	// Response is what the first request got.
	Replayed bool
	// Seq is the journal seq of the request's first record (its command's
	// first event, else its first own Record), 0 if it wrote none (or the
	// hub has no journal).
	Seq int64
}

// Stats are counters the sequencer publishes after each batch.
type Stats struct {
	Batches  int64 // batches decided, ticks included
	Appends  int64 // successful journal appends
	Commands int64 // requests answered (applied, replayed or refused)
	MaxBatch int64 // most requests one batch carried
	Inline   int64 // calls decided on their caller's goroutine (the sequencer was idle)

	Snapshots      int64 // snapshots written
	SnapshotErrors int64 // snapshots that failed (logged; the journal stays the truth)
}

// Sequencer is the single writer of a coord.State. Its methods are safe for
// concurrent use.
type Sequencer struct {
	j    Journal
	opts Options
	log  *slog.Logger

	// mu guards closed and the send side of in: Submit and Query hold it for
	// reading while they queue, Close takes it for writing to close in.
	mu     sync.RWMutex
	closed bool
	in     chan *call
	done   chan struct{} // closed when the loop has returned

	// leader is held by whoever decides: the loop, or a caller that found
	// the sequencer idle and decides its own call inline (do). Everything
	// "owned by the loop" below is owned by the holder of leader.
	leader      sync.Mutex
	loopWaits   atomic.Bool   // the loop has taken a call and waits for leader
	poke        chan struct{} // one slot: an inline decision moved the next deadline closer
	inlineBatch []*call       // the inline decider's batch buffer (leader)
	armedFor    time.Time     // when the expiry timer fires (leader)
	inline      atomic.Int64  // calls decided inline

	degraded atomic.Pointer[error] // the journal failure that stopped mutations
	batches  atomic.Int64
	appends  atomic.Int64
	commands atomic.Int64
	maxBatch atomic.Int64

	// Owned by the holder of leader (the loop, or an inline decider).
	state      *coord.State
	lastNow    float64
	retryAfter time.Time // after an ErrRetry the expiry timer waits this long
	cache      *idemCache

	snaps     snapshots // see snapshot.go
	closeOnce sync.Once // the snapshot at Close
}

// call is one Submit or Query in the queue.
type call struct {
	req   Request
	query func(*coord.State) any // a Query when not nil
	reply chan result            // one slot: the loop never blocks on it
}

type result struct {
	reply Reply
	value any // a Query's result
	err   error
}

// New starts the sequencer that owns state from now on and commits to j (nil
// for a memory-only hub: no durability, idempotency in the bounded cache
// only). With a journal, state must be the journal's state as of its last
// record (what journal.Replay rebuilt): snapshots are taken of it at the
// journal's seqs, the first one at once when the journal's tail after its
// newest snapshot is SnapshotEvery records or longer. The caller must not
// touch state again except through Query.
func New(state *coord.State, j Journal, opts Options) *Sequencer {
	if opts.Clock == nil {
		opts.Clock = func() float64 { return float64(time.Now().UnixNano()) / 1e9 }
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.IdemCacheSize <= 0 {
		opts.IdemCacheSize = DefaultIdemCacheSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.SnapshotEvery == 0 {
		opts.SnapshotEvery = DefaultSnapshotEvery
	}
	s := &Sequencer{
		j:     j,
		opts:  opts,
		log:   opts.Logger,
		in:    make(chan *call, opts.QueueSize),
		done:  make(chan struct{}),
		poke:  make(chan struct{}, 1),
		state: state,

		inlineBatch: make([]*call, 0, opts.MaxBatch),
		cache:       newIdemCache(opts.IdemCacheSize),
	}
	if w, ok := j.(windowed); ok {
		s.cache.window = w.IdempotencyWindow().Seconds()
	}
	s.setUpSnapshots()
	go s.run()
	return s
}

// Submit runs req in the next batch and returns its reply once the batch is
// committed (INV-JA-1). If ctx ends first Submit returns ctx.Err(), but a
// request already queued is still committed or rolled back by the
// sequencer, never half-applied (INV-JA-3). Errors: ErrJournal,
// ErrIdempotencyConflict, ErrBadRequest, ErrClosed, or ctx.Err().
func (s *Sequencer) Submit(ctx context.Context, req Request) (Reply, error) {
	if err := s.Err(); err != nil {
		return Reply{}, err
	}
	if req.Cmd == nil && len(req.Records) == 0 || req.Idem != nil && req.Idem.Key == "" {
		return Reply{}, fmt.Errorf("%w: no command or records, or an empty idempotency key", ErrBadRequest)
	}
	r, err := s.do(ctx, &call{req: req, reply: make(chan result, 1)})
	return r.reply, err
}

// Query runs fn on the sequencer goroutine between batches and returns its
// result: fn sees committed state only, never a batch in flight. fn must
// not change the state or keep a reference to it, and should be quick: no
// command is decided while it runs. Query works in degraded mode.
func (s *Sequencer) Query(ctx context.Context, fn func(*coord.State) any) (any, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil query", ErrBadRequest)
	}
	r, err := s.do(ctx, &call{query: fn, reply: make(chan result, 1)})
	return r.value, err
}

func (s *Sequencer) do(ctx context.Context, c *call) (result, error) {
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return result{}, ErrClosed
	}
	// Nobody deciding and nothing queued: decide c on this goroutine,
	// sparing two hand-offs (to the loop and back) on the request path.
	// Holding mu for reading keeps Close waiting until it is decided. A
	// queued call or a loop waiting for the lock goes first, so callers
	// do not barge past a forming group commit. Only a caller that cannot
	// be cancelled decides inline: one that can must be free to stop
	// waiting while its batch is appended (INV-JA-3).
	if ctx.Done() == nil && len(s.in) == 0 && !s.loopWaits.Load() && s.leader.TryLock() {
		s.inline.Add(1)
		s.decide(c, s.inlineBatch[:0])
		s.rearm()
		s.leader.Unlock()
		s.mu.RUnlock()
		r := <-c.reply // answered by decide
		return r, r.err
	}
	select {
	case s.in <- c:
		s.mu.RUnlock()
	case <-ctx.Done():
		s.mu.RUnlock()
		return result{}, ctx.Err()
	}
	select {
	case r := <-c.reply:
		return r, r.err
	case <-ctx.Done():
		// The loop still decides, commits or rolls back c; only this
		// caller stops waiting (INV-JA-3).
		return result{}, ctx.Err()
	}
}

// Close stops accepting calls, lets the sequencer finish the batch in
// flight and every queued call, waits for a snapshot being written, and
// returns when it has stopped. Neither the journal nor the Snapshotter is
// called after Close returns, so the caller may close them then. Close is
// idempotent.
func (s *Sequencer) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.in) // Lock waited out every sender, and later ones see closed
	}
	s.mu.Unlock()
	<-s.done
	s.snaps.wg.Wait() // leaders start writers: the loop has returned, and Lock waited out inline ones
	s.closeOnce.Do(s.closingSnapshot)
	return nil
}

// Err returns the journal failure that put the sequencer in degraded mode
// (it wraps ErrJournal), or nil while it accepts mutations. /health reports
// degraded when it is not nil.
func (s *Sequencer) Err() error {
	if p := s.degraded.Load(); p != nil {
		return *p
	}
	return nil
}

// Stats returns the sequencer's counters.
func (s *Sequencer) Stats() Stats {
	return Stats{
		Batches:  s.batches.Load(),
		Appends:  s.appends.Load(),
		Commands: s.commands.Load(),
		MaxBatch: s.maxBatch.Load(),
		Inline:   s.inline.Load(),

		Snapshots:      s.snaps.written.Load(),
		SnapshotErrors: s.snaps.failed.Load(),
	}
}

// run is the loop goroutine: it decides what callers queued (as one batch,
// under the leader lock), and wakes on the expiry timer when nothing is
// queued, or when an inline decision moved the next deadline closer.
func (s *Sequencer) run() {
	defer close(s.done)
	timer := time.NewTimer(maxTimerWait)
	defer timer.Stop()
	batch := make([]*call, 0, s.opts.MaxBatch)
	for {
		s.leader.Lock()
		s.armTimer(timer)
		s.leader.Unlock()
		select {
		case c, ok := <-s.in:
			if !ok {
				return
			}
			s.loopWaits.Store(true)
			s.leader.Lock()
			s.loopWaits.Store(false)
			open := s.decide(c, batch)
			s.leader.Unlock()
			if !open {
				return
			}
		case <-timer.C:
			s.leader.Lock()
			s.tick()
			s.leader.Unlock()
		case <-s.poke:
		}
	}
}

// decide runs first and, unless it is a query, everything already queued
// behind it as one batch (group commit), up to MaxBatch; a query ends the
// batch, so it runs after the commit and sees everything queued before it.
// The caller holds the leader lock. It reports false once the queue is
// closed.
func (s *Sequencer) decide(first *call, batch []*call) (open bool) {
	batch = append(batch[:0], first)
	open = true
	for first.query == nil && len(batch) < s.opts.MaxBatch {
		var c *call
		select {
		case c, open = <-s.in:
		default:
		}
		if c == nil {
			break
		}
		if c.query != nil {
			s.runBatch(batch)
			batch = append(batch[:0], c)
			break
		}
		batch = append(batch, c)
	}
	if batch[0].query != nil {
		s.runQuery(batch[0])
	} else {
		s.runBatch(batch)
	}
	s.maybeSnapshot()
	clear(batch) // drop references to answered calls
	return open
}

func (s *Sequencer) runQuery(c *call) {
	c.reply <- result{value: c.query(s.state)}
}

// now reads the clock once, never going back behind the last reading.
func (s *Sequencer) now() float64 {
	s.lastNow = max(s.lastNow, s.opts.Clock())
	return s.lastNow
}

// armTimer sets the timer to the state's next deadline, so expirations are
// published without any command (INV-LL-2 waits wake on time). The caller
// holds the leader lock.
func (s *Sequencer) armTimer(t *time.Timer) {
	wait := s.timerWait()
	s.armedFor = time.Now().Add(wait)
	t.Reset(wait)
}

// timerWait is how long the expiry timer may sleep from now.
func (s *Sequencer) timerWait() time.Duration {
	wait := maxTimerWait
	if at, ok := s.state.NextDeadline(); ok {
		d := time.Duration((at - max(s.lastNow, s.opts.Clock())) * float64(time.Second))
		wait = min(max(d, 0, time.Until(s.retryAfter)), maxTimerWait)
	}
	return wait
}

// rearm, after an inline decision, wakes the loop to re-arm its timer if
// the decision brought the next deadline closer than the timer is set for
// (a grant with a lease shorter than any before it). Usually it did not,
// and the loop sleeps on. The caller holds the leader lock.
func (s *Sequencer) rearm() {
	if time.Now().Add(s.timerWait()).Before(s.armedFor) {
		select {
		case s.poke <- struct{}{}:
		default:
		}
	}
}

// tick expires what is due with no command and publishes it.
func (s *Sequencer) tick() {
	now := s.now()
	o := s.state.Tick(now)
	if len(o.Events) == 0 {
		return
	}
	p := &pending{out: o, applied: true, firstRec: -1}
	b := &journal.Batch{TS: now}
	s.encodeInto(p, b)
	s.commit([]*pending{p}, b)
}
