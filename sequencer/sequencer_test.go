package sequencer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

func TestSubmit_RepliesOnlyAfterAppendCommits_INV_JA_1(t *testing.T) {
	j := newFakeJournal().holding()
	var published []coord.Event
	s := start(t, coord.New(coord.Limits{}), j, Options{OnCommit: func(evs []coord.Event) { published = append(published, evs...) }})

	done := async(s, context.Background(), Request{Cmd: claim("a", "T1")})
	recv(t, j.entered) // the claim is applied provisionally; its append is in flight

	queried := make(chan *coord.Claim, 1)
	go func() {
		v, _ := s.Query(context.Background(), func(st *coord.State) any { return st.Claim("T1") })
		queried <- v.(*coord.Claim)
	}()
	waitQueued(t, s, 1)
	select {
	case r := <-done:
		t.Fatalf("Submit returned before the append committed: %+v", r)
	case c := <-queried:
		t.Fatalf("a query ran during the append and saw %v", c)
	default:
	}
	if published != nil { // read only after the loop is parked in Append
		t.Fatalf("OnCommit ran before the commit: %v", published)
	}

	j.release <- nil
	r := recv(t, done)
	if r.err != nil || r.reply.Outcome.Refusal != nil {
		t.Fatalf("claim: %+v", r)
	}
	if r.reply.Seq != 1 {
		t.Errorf("seq = %d, want 1", r.reply.Seq)
	}
	if c := recv(t, queried); c == nil || c.Owner != "a" {
		t.Fatalf("query after commit saw %v, want a's claim", c)
	}
	if len(published) != 1 || published[0].Kind() != "claim" {
		t.Fatalf("published %v", published)
	}
}

func TestSubmit_FailedAppendIsNeverVisible_INV_JA_1(t *testing.T) {
	j := newFakeJournal().holding()
	s := start(t, coord.New(coord.Limits{}), j, Options{})

	done := async(s, context.Background(), Request{Cmd: claim("a", "T1")})
	recv(t, j.entered)
	queried := make(chan *coord.Claim, 1)
	go func() {
		v, _ := s.Query(context.Background(), func(st *coord.State) any { return st.Claim("T1") })
		queried <- v.(*coord.Claim)
	}()
	waitQueued(t, s, 1)
	j.release <- errDisk
	if r := recv(t, done); !errors.Is(r.err, ErrJournal) || !errors.Is(r.err, errDisk) {
		t.Fatalf("err = %v, want ErrJournal wrapping the disk error", r.err)
	}
	if c := recv(t, queried); c != nil {
		t.Fatalf("a reader saw the provisional claim %v", c)
	}
}

// mixedBatchState holds a's claim on T1 and b's on T2.
func mixedBatchState() *coord.State {
	st := coord.New(coord.Limits{})
	st.Step(claim("a", "T1", "src/a"), t0-10)
	st.Step(claim("b", "T2", "src/b"), t0-10)
	return st
}

// mixedBatch is a claim, a checkpoint, a wait, a handoff, a task update and
// a board declaration, all admissible against mixedBatchState.
func mixedBatch() []coord.Command {
	return []coord.Command{
		claim("a", "T3", "src/c"),
		coord.CheckpointRequest{Agent: "a", TaskID: "T1", Checkpoint: "step-7"},
		coord.WaitRequest{Agent: "c", TaskID: "T1"},
		coord.HandoffRequest{Agent: "b", TaskID: "T2", To: "d", ToOnline: true},
		coord.UpdateRequest{Agent: "a", TaskID: "T1", Status: "working"},
		coord.DeclareTask{Agent: "a", TaskID: "B1", Title: "board task"},
	}
}

func TestAppendFailure_RollsBackTheWholeBatch_INV_JA_2(t *testing.T) {
	// Control: the same batch, committed, applies every command.
	ctl := start(t, mixedBatchState(), newFakeJournal(), Options{})
	for _, cmd := range mixedBatch() {
		if r := submit(t, ctl, Request{Cmd: cmd}); r.Outcome.Refusal != nil {
			t.Fatalf("control %T refused: %v", cmd, r.Outcome.Refusal)
		}
	}

	j := newFakeJournal().holding()
	j.failNth = 2
	var published []coord.Event
	s := start(t, mixedBatchState(), j, Options{OnCommit: func(evs []coord.Event) { published = append(published, evs...) }})

	// A first claim holds the loop in Append while the mixed batch queues
	// behind it, so the whole mix is decided as one batch.
	plug := plugged(t, s, j, claim("z", "T0", "src/z"))
	var results []<-chan result
	for i, cmd := range mixedBatch() {
		results = append(results, async(s, context.Background(), Request{Cmd: cmd}))
		waitQueued(t, s, i+1) // keep the queue in submission order
	}
	j.release <- nil
	if r := recv(t, plug); r.err != nil {
		t.Fatal(r.err)
	}
	recv(t, j.entered)
	j.release <- nil // failNth turns it into a failure
	for i, ch := range results {
		if r := recv(t, ch); !errors.Is(r.err, ErrJournal) {
			t.Errorf("%T: err = %v, want ErrJournal", mixedBatch()[i], r.err)
		}
	}
	if got := kinds(j.batch(1)); !reflect.DeepEqual(got, []string{"claim", "checkpoint", "ledger_progress", "handoff", "task_update", "ledger_task"}) {
		t.Fatalf("the failed batch carried %v, want the whole mix in one append", got)
	}

	want := mixedBatchState()
	want.Step(claim("z", "T0", "src/z"), t0)
	if got := image(t, s); !reflect.DeepEqual(got, want.Image()) {
		t.Fatalf("state after the failed batch:\n got %+v\nwant %+v", got, want.Image())
	}
	waiters, _ := s.Query(context.Background(), func(st *coord.State) any { return st.Waiters("T1") })
	if len(waiters.([]string)) != 0 {
		t.Errorf("a wait leaked: %v", waiters)
	}
	for _, ev := range published {
		if ev.Kind() != "claim" || ev.(coord.ClaimGranted).Claim.TaskID != "T0" {
			t.Errorf("published %s of the failed batch", ev.Kind())
		}
	}
}

func TestDegraded_RefusesMutationsKeepsQueries_INV_JA_2(t *testing.T) {
	j := newFakeJournal()
	j.failNth = 2
	s := start(t, coord.New(coord.Limits{}), j, Options{})
	submit(t, s, Request{Cmd: claim("a", "T1")})
	if _, err := s.Submit(context.Background(), Request{Cmd: claim("b", "T2")}); !errors.Is(err, ErrJournal) {
		t.Fatalf("failing append: err = %v", err)
	}
	if !errors.Is(s.Err(), ErrJournal) {
		t.Fatalf("Err() = %v, want degraded", s.Err())
	}
	for _, cmd := range []coord.Command{claim("c", "T3"), coord.ReleaseRequest{Agent: "a", TaskID: "T1"}, coord.WaitRequest{Agent: "c", TaskID: "T1"}} {
		if _, err := s.Submit(context.Background(), Request{Cmd: cmd}); !errors.Is(err, ErrJournal) {
			t.Errorf("%T in degraded mode: err = %v, want ErrJournal", cmd, err)
		}
	}
	if n := j.appendCount(); n != 2 {
		t.Errorf("%d appends, want none after the failure", n)
	}
	if c := claimOf(t, s, "T1"); c == nil || c.Owner != "a" {
		t.Errorf("query in degraded mode: %v", c)
	}
	if c := claimOf(t, s, "T2"); c != nil {
		t.Errorf("the failed claim is visible: %v", c)
	}
}

func TestDegraded_RequestsQueuedBehindTheFailureAreRefused_INV_JA_2(t *testing.T) {
	j := newFakeJournal().holding()
	s := start(t, coord.New(coord.Limits{}), j, Options{MaxBatch: 1})
	first := async(s, context.Background(), Request{Cmd: claim("a", "T1")})
	recv(t, j.entered)
	second := async(s, context.Background(), Request{Cmd: claim("b", "T2")})
	waitQueued(t, s, 1)
	j.release <- errDisk
	if r := recv(t, first); !errors.Is(r.err, ErrJournal) {
		t.Fatalf("first: %v", r.err)
	}
	if r := recv(t, second); !errors.Is(r.err, ErrJournal) {
		t.Fatalf("second, queued before the failure: %v", r.err)
	}
	if n := j.appendCount(); n != 1 {
		t.Errorf("%d appends, want 1", n)
	}
}

func TestCancelDuringAppend_OutcomeIsStillAuthoritative_INV_JA_3(t *testing.T) {
	for _, verdict := range []error{nil, errDisk} {
		t.Run(fmt.Sprint(verdict), func(t *testing.T) {
			j := newFakeJournal().holding()
			s := start(t, coord.New(coord.Limits{}), j, Options{})
			ctx, cancel := context.WithCancel(context.Background())
			done := async(s, ctx, Request{Cmd: claim("a", "T1")})
			recv(t, j.entered)
			cancel()
			if r := recv(t, done); !errors.Is(r.err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", r.err)
			}
			j.release <- verdict
			c := claimOf(t, s, "T1")
			switch {
			case verdict == nil && (c == nil || c.Owner != "a"):
				t.Fatalf("the committed claim was lost: %v", c)
			case verdict != nil && c != nil:
				t.Fatalf("a claim whose append failed is live: %v", c)
			}
			if got := kinds(j.batch(0)); !reflect.DeepEqual(got, []string{"claim"}) {
				t.Fatalf("the append carried %v", got)
			}
		})
	}
}

func TestClose_FinishesInFlightAndQueued_INV_JA_3(t *testing.T) {
	j := newFakeJournal().holding()
	s := New(coord.New(coord.Limits{}), j, Options{Clock: (&fixedClock{t: t0}).now, MaxBatch: 1, Logger: quiet})
	inflight := async(s, context.Background(), Request{Cmd: claim("a", "T1")})
	recv(t, j.entered)
	queued := async(s, context.Background(), Request{Cmd: claim("b", "T2")})
	waitQueued(t, s, 1)

	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	// Close cannot return while the append it must wait for is held.
	j.release <- nil
	recv(t, j.entered) // the queued request's batch
	select {
	case <-closed:
		t.Fatal("Close returned with an append in flight")
	default:
	}
	j.release <- nil
	<-closed
	j.mu.Lock()
	j.closed = true // the hub closes the journal now
	j.mu.Unlock()

	for _, ch := range []<-chan result{inflight, queued} {
		if r := recv(t, ch); r.err != nil || r.reply.Seq == 0 {
			t.Errorf("reply %+v, want committed", r)
		}
	}
	if _, err := s.Submit(context.Background(), Request{Cmd: claim("c", "T3")}); !errors.Is(err, ErrClosed) {
		t.Errorf("submit after Close: %v", err)
	}
	if _, err := s.Query(context.Background(), func(*coord.State) any { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("query after Close: %v", err)
	}
	if j.afterEnd {
		t.Error("Append called after Close returned")
	}
	s.Close() // idempotent
}

func TestSubmit_FullQueueWaitsOnContext(t *testing.T) {
	j := newFakeJournal().holding()
	s := start(t, coord.New(coord.Limits{}), j, Options{QueueSize: 1, MaxBatch: 1})
	first := async(s, context.Background(), Request{Cmd: claim("a", "T1")})
	recv(t, j.entered)
	second := async(s, context.Background(), Request{Cmd: claim("b", "T2")})
	waitQueued(t, s, 1)

	ctx, cancel := context.WithCancel(context.Background())
	third := async(s, ctx, Request{Cmd: claim("c", "T3")})
	cancel()
	if r := recv(t, third); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("third: %v, want context.Canceled from the full queue", r.err)
	}
	j.release <- nil
	recv(t, j.entered)
	j.release <- nil
	recv(t, first)
	recv(t, second)
	if c := claimOf(t, s, "T3"); c != nil {
		t.Fatalf("a request that never got into the queue was applied: %v", c)
	}
}

func TestGroupCommit_QueuedRequestsShareOneAppend(t *testing.T) {
	j := newFakeJournal().holding()
	s := start(t, coord.New(coord.Limits{}), j, Options{})
	plug := plugged(t, s, j, claim("agent-0", "task-0"))
	var results []<-chan result
	for i := 1; i < 64; i++ {
		results = append(results, async(s, context.Background(), Request{Cmd: claim(agentName(i), taskName(i))}))
	}
	waitQueued(t, s, 63)
	j.release <- nil
	recv(t, j.entered)
	j.release <- nil
	recv(t, plug)
	seqs := map[int64]bool{}
	for _, ch := range results {
		r := recv(t, ch)
		if r.err != nil || r.reply.Outcome.Refusal != nil {
			t.Fatalf("reply %+v", r)
		}
		seqs[r.reply.Seq] = true
	}
	if n := j.appendCount(); n != 2 {
		t.Fatalf("64 commands took %d appends, want 2", n)
	}
	if len(seqs) != 63 || !seqs[2] || !seqs[64] {
		t.Errorf("seqs of the batch: %v, want 2..64", seqs)
	}
	if st := s.Stats(); st.MaxBatch != 63 || st.Commands != 64 || st.Appends != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestGroupCommit_ConcurrentSubmittersBatch(t *testing.T) {
	j := newFakeJournal()
	s := start(t, coord.New(coord.Limits{}), j, Options{})
	const submitters, rounds = 64, 20
	var wg sync.WaitGroup
	for i := range submitters {
		wg.Go(func() {
			for k := range rounds {
				task := taskName(i*rounds + k)
				if r, err := s.Submit(context.Background(), Request{Cmd: claim(agentName(i), task)}); err != nil || r.Outcome.Refusal != nil {
					t.Errorf("claim: %v %v", err, r.Outcome.Refusal)
				}
				if _, err := s.Submit(context.Background(), Request{Cmd: coord.ReleaseRequest{Agent: agentName(i), TaskID: task}}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	if st.Commands != 2*submitters*rounds {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("%d commands in %d appends (largest batch %d)", st.Commands, st.Appends, st.MaxBatch)
	if st.Appends >= st.Commands {
		t.Errorf("no batching: %d appends for %d commands", st.Appends, st.Commands)
	}
}

// onRealClock is a sequencer driven by the real clock (its expiry timer
// fires for real) over a state that takes leases as short as 1 ms, with
// the events it publishes.
func onRealClock(t *testing.T) (*Sequencer, <-chan coord.Event) {
	events := make(chan coord.Event, 16)
	st := coord.New(coord.Limits{MinTTL: 0.001})
	s := New(st, newFakeJournal(), Options{OnCommit: func(evs []coord.Event) {
		for _, ev := range evs {
			events <- ev
		}
	}, Logger: quiet})
	t.Cleanup(func() { s.Close() })
	return s, events
}

func TestTimer_ExpiresLeaseWithoutCommand_INV_LL_2(t *testing.T) {
	s, events := onRealClock(t)

	c := claim("a", "T1")
	c.TTL = 0.05
	submit(t, s, Request{Cmd: c})
	var got []string
	for len(got) < 2 {
		got = append(got, recv(t, events).Kind())
	}
	if want := []string{"claim", "claim_expired"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	if c := claimOf(t, s, "T1"); c != nil {
		t.Fatalf("expired claim still held: %v", c)
	}
}

func TestTimer_WakesWaitersOnExpiry_INV_LL_2(t *testing.T) {
	clock := &fixedClock{t: t0}
	events := make(chan coord.Event, 16)
	s := start(t, coord.New(coord.Limits{}), newFakeJournal(), Options{Clock: clock.now, OnCommit: func(evs []coord.Event) {
		for _, ev := range evs {
			events <- ev
		}
	}})
	c := claim("a", "T1")
	c.TTL = 30
	submit(t, s, Request{Cmd: c})
	submit(t, s, Request{Cmd: coord.WaitRequest{Agent: "b", TaskID: "T1"}})
	recv(t, events)
	recv(t, events)

	clock.set(t0 + 31)
	// A read wakes the loop, which re-arms the timer against the moved
	// clock; the expiry itself comes from the timer, not from a command.
	image(t, s)
	exp := recv(t, events).(coord.ClaimExpired)
	ready := recv(t, events).(coord.WaitReady)
	if exp.TaskID != "T1" || ready.TaskID != "T1" || !reflect.DeepEqual(ready.Waiters, []string{"b"}) || ready.Reason != "expiry" {
		t.Fatalf("published %+v %+v", exp, ready)
	}
	if st := s.Stats(); st.Commands != 2 {
		t.Errorf("%d commands, want only the claim and the wait", st.Commands)
	}
}

func TestClock_NeverGoesBackwards(t *testing.T) {
	clock := &fixedClock{t: t0}
	s := start(t, coord.New(coord.Limits{}), nil, Options{Clock: clock.now})
	submit(t, s, Request{Cmd: claim("a", "T1")})
	clock.set(t0 - 100)
	r := submit(t, s, Request{Cmd: claim("b", "T2")})
	if at := r.Outcome.Events[0].(coord.ClaimGranted).Claim.ClaimedAt; at != t0 {
		t.Fatalf("claimed at %v after the clock stepped back, want %v", at, t0)
	}
}

func TestMemoryOnly_NoJournalStillServes(t *testing.T) {
	var published int
	s := start(t, coord.New(coord.Limits{}), nil, Options{OnCommit: func(evs []coord.Event) { published += len(evs) }})
	r := submit(t, s, Request{Cmd: claim("a", "T1")})
	if r.Seq != 0 || r.Outcome.Refusal != nil {
		t.Fatalf("reply %+v", r)
	}
	r = submit(t, s, Request{Cmd: claim("b", "T1")})
	if r.Outcome.Refusal == nil || r.Outcome.Refusal.Code != coord.CodeLeaseLive {
		t.Fatalf("second claim: %+v", r.Outcome)
	}
	if published != 2 { // the grant and the denial's audit record
		t.Errorf("published %d events", published)
	}
}

func agentName(i int) string { return "agent-" + itoa(i) }
func taskName(i int) string  { return "task-" + itoa(i) }

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// retryJournal refuses every append with ErrRetry.
type retryJournal struct{}

func (retryJournal) Operation(string) (journal.Operation, bool, error) {
	return journal.Operation{}, false, nil
}

func (retryJournal) Append(context.Context, *journal.Batch) (int64, error) {
	return 0, fmt.Errorf("owner moved: %w", ErrRetry)
}

// A store that refuses a batch with ErrRetry (a namespace moved) rolls the
// batch back and answers ErrRetry, and the sequencer stays healthy: the
// next batch is tried (INV-JA-2 without degrading).
func TestSubmit_RetryRefusalRollsBackWithoutDegrading_INV_JA_2(t *testing.T) {
	st := coord.New(coord.DefaultLimits())
	s := New(st, retryJournal{}, Options{})
	defer s.Close()
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		_, err := s.Submit(ctx, Request{Cmd: coord.ClaimRequest{Agent: "p/a", TaskID: "T1"}})
		if !errors.Is(err, ErrRetry) {
			t.Fatalf("submit %d: %v; want ErrRetry", i, err)
		}
	}
	if s.Err() != nil {
		t.Fatalf("degraded after a retry refusal: %v", s.Err())
	}
	n, _ := s.Query(ctx, func(st *coord.State) any { return st.ClaimCount() })
	if n.(int) != 0 {
		t.Fatalf("a refused batch left %d claims", n)
	}
}

// An idle sequencer decides a lone call on the caller's goroutine (no
// hand-off), and the decision still obeys INV-JA-1: the reply comes after
// the append. A call queued while a decision holds the lock goes to the
// loop, which batches it with what queued behind it (group commit).
func TestInline_IdleCallsDecideOnTheCallerQueuedOnesBatch_INV_JA_1(t *testing.T) {
	j := newFakeJournal().holding()
	s := start(t, coord.New(coord.Limits{}), j, Options{})
	first := async(s, context.Background(), Request{Cmd: claim("a", "T1")})
	recv(t, j.entered) // decided inline, held in its append
	if r := s.Stats(); r.Inline != 1 {
		t.Fatalf("inline = %d, want 1 (the lone claim)", r.Inline)
	}
	select {
	case r := <-first:
		t.Fatalf("answered before its append committed: %+v", r)
	default:
	}
	second := async(s, context.Background(), Request{Cmd: claim("b", "T2")})
	third := async(s, context.Background(), Request{Cmd: claim("c", "T3")})
	waitQueued(t, s, 2)
	j.release <- nil
	recv(t, j.entered)
	j.release <- nil
	for _, ch := range []<-chan result{first, second, third} {
		if r := recv(t, ch); r.err != nil || r.reply.Outcome.Refusal != nil {
			t.Fatalf("claim: %v %v", r.err, r.reply.Outcome.Refusal)
		}
	}
	if got := kinds(j.batch(1)); !reflect.DeepEqual(got, []string{"claim", "claim"}) {
		t.Fatalf("the queued claims were appended as %v, want one batch of two", got)
	}
	if r := s.Stats(); r.Inline != 1 || r.Batches != 2 {
		t.Fatalf("stats %+v: want 1 inline call and 2 batches", r)
	}
}

// A grant decided inline with a lease shorter than the expiry timer is set
// for wakes the loop to re-arm it, so the lease still expires on time
// (INV-LL-2) with no other command.
func TestInline_ShortLeaseRearmsTheTimer_INV_LL_2(t *testing.T) {
	s, events := onRealClock(t)
	long := claim("a", "T1")
	long.TTL = 3600
	submit(t, s, Request{Cmd: long})
	short := claim("b", "T2")
	short.TTL = 0.05
	submit(t, s, Request{Cmd: short})
	if n := s.Stats().Inline; n != 2 {
		t.Fatalf("inline = %d, want both claims decided inline", n)
	}
	var got []string
	for len(got) < 3 {
		got = append(got, recv(t, events).Kind())
	}
	if want := []string{"claim", "claim", "claim_expired"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	if c := claimOf(t, s, "T2"); c != nil {
		t.Fatalf("the short lease was not expired: %v", c)
	}
}
