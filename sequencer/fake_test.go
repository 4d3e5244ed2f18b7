package sequencer

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// errDisk is the failure fake journals are told to report.
var errDisk = errors.New("disk I/O error")

// fakeJournal is an in-memory Journal that records every batch it is given
// (failed ones too). It can fail the Nth append, and it can hold every
// append until the test releases it.
type fakeJournal struct {
	mu       sync.Mutex
	batches  []journal.Batch // every batch Append was called with
	failed   []bool          // whether that append failed
	ops      map[string]journal.Operation
	seq      int64
	failNth  int  // 1-based number of the append to fail; 0: none
	closed   bool // set by the test once the journal is "closed"
	afterEnd bool // an Append ran after closed was set

	// When hold is set, Append signals entered and then waits for the
	// test's verdict on release (nil: commit).
	hold    bool
	entered chan struct{}
	release chan error
}

func newFakeJournal() *fakeJournal {
	return &fakeJournal{ops: make(map[string]journal.Operation)}
}

// holding makes every Append wait for the test: it reports on entered and
// takes its verdict from release.
func (f *fakeJournal) holding() *fakeJournal {
	f.hold = true
	f.entered = make(chan struct{}, 16)
	f.release = make(chan error)
	return f
}

func (f *fakeJournal) Append(_ context.Context, b *journal.Batch) (int64, error) {
	f.mu.Lock()
	f.batches = append(f.batches, cloneBatch(b))
	n := len(f.batches)
	if f.closed {
		f.afterEnd = true
	}
	hold := f.hold
	f.mu.Unlock()

	var err error
	if hold {
		f.entered <- struct{}{}
		err = <-f.release
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failNth == n {
		err = errDisk
	}
	f.failed = append(f.failed, err != nil)
	if err != nil {
		return 0, err
	}
	first := f.seq + 1
	f.seq += int64(len(b.Records))
	for _, op := range b.Operations {
		f.ops[op.Key] = op
	}
	return first, nil
}

func (f *fakeJournal) Operation(key string) (journal.Operation, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	op, ok := f.ops[key]
	return op, ok, nil
}

func (f *fakeJournal) appendCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.batches)
}

func (f *fakeJournal) batch(i int) journal.Batch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.batches[i]
}

func cloneBatch(b *journal.Batch) journal.Batch {
	return journal.Batch{TS: b.TS, Records: slices.Clone(b.Records), Operations: slices.Clone(b.Operations)}
}

func kinds(b journal.Batch) []string {
	var out []string
	for _, r := range b.Records {
		out = append(out, r.Kind)
	}
	return out
}

// fakeEncode stands in for journal.Encode while the codec is incomplete:
// the kind is all the sequencer's tests look at.
func fakeEncode(ev coord.Event) (journal.Record, bool) {
	if ev.Durability() == coord.Volatile {
		return journal.Record{}, false
	}
	return journal.Record{Kind: ev.Kind(), Payload: []byte("{}"), Durable: ev.Durability() == coord.Full}, true
}

// TestMain uses the real codec once it exists.
func TestMain(m *testing.M) {
	if !codecReady() {
		encode = fakeEncode
	}
	m.Run()
}

func codecReady() (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_, ok = journal.Encode(coord.Released{TaskID: "t", Owner: "a", Epoch: 1})
	return ok
}

const t0 = 1_800_000_000.0

// quiet drops the logs of the failures tests provoke.
var quiet = slog.New(slog.DiscardHandler)

// fixedClock is a clock tests move by hand.
type fixedClock struct {
	mu sync.Mutex
	t  float64
}

func (c *fixedClock) now() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fixedClock) set(t float64) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// start returns a sequencer over state and j at a fixed clock; it is closed
// when the test ends.
func start(t *testing.T, state *coord.State, j Journal, opts Options) *Sequencer {
	t.Helper()
	if opts.Clock == nil {
		opts.Clock = (&fixedClock{t: t0}).now
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s := New(state, j, opts)
	t.Cleanup(func() { s.Close() })
	return s
}

// claim asks for task with a scope of its own (src/<task>) unless paths
// are given.
func claim(agent, task string, paths ...string) coord.ClaimRequest {
	if len(paths) == 0 {
		paths = []string{"src/" + task}
	}
	return coord.ClaimRequest{Agent: agent, TaskID: task, Worktree: "/repo", Paths: paths, TTL: 600, HasTTL: true}
}

func keyed(cmd coord.Command, key, digest string) Request {
	return Request{
		Cmd:  cmd,
		Idem: &Idem{Key: key, Digest: digest},
		Render: func(o coord.Outcome) []byte {
			if g, ok := o.Events[len(o.Events)-1].(coord.ClaimGranted); ok {
				return []byte(`"granted ` + g.Claim.TaskID + ` to ` + g.Claim.Owner + `"`)
			}
			return []byte(`"` + o.Events[len(o.Events)-1].Kind() + `"`)
		},
	}
}

func idemKey(sender, typ, key string) string { return sender + "\x00" + typ + "\x00" + key }

func submit(t *testing.T, s *Sequencer, req Request) Reply {
	t.Helper()
	r, err := s.Submit(context.Background(), req)
	if err != nil {
		t.Fatalf("submit %T: %v", req.Cmd, err)
	}
	return r
}

// async submits req on its own goroutine; the result arrives on the channel.
func async(s *Sequencer, ctx context.Context, req Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		r, err := s.Submit(ctx, req)
		ch <- result{reply: r, err: err}
	}()
	return ch
}

// plugged submits cmd and waits until its append is held in j, so that
// what the test submits next queues up into the following batch.
func plugged(t *testing.T, s *Sequencer, j *fakeJournal, cmd coord.Command) <-chan result {
	t.Helper()
	ch := async(s, context.Background(), Request{Cmd: cmd})
	recv(t, j.entered)
	return ch
}

// waitQueued waits until n calls wait for the leader: in the submit queue,
// or taken by the loop, which waits for the lock while a plugged or parked
// call holds it. It polls, but only for an ordering the test has set up:
// no timing is asserted.
func waitQueued(t *testing.T, s *Sequencer, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for queued(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", queued(s), n)
		}
		runtime.Gosched()
	}
}

func queued(s *Sequencer) int {
	n := len(s.in)
	if s.loopWaits.Load() {
		n++
	}
	return n
}

// image reads the committed state through the sequencer.
func image(t *testing.T, s *Sequencer) coord.Image {
	t.Helper()
	v, err := s.Query(context.Background(), func(st *coord.State) any { return st.Image() })
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	return v.(coord.Image)
}

func claimOf(t *testing.T, s *Sequencer, task string) *coord.Claim {
	t.Helper()
	v, err := s.Query(context.Background(), func(st *coord.State) any { return st.Claim(task) })
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	return v.(*coord.Claim)
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting")
		panic("unreachable")
	}
}
