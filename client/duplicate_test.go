package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/journal"
)

// gatedStore is an in-memory sequencer journal whose Append waits while
// the gate is shut: a commit the test holds in flight, as a slow disk or
// a paused owner would.
type gatedStore struct {
	mu       sync.Mutex
	ops      map[string]journal.Operation
	seq      int64
	open     chan struct{} // closed = appends pass
	appended chan struct{} // one signal per Append that had to wait
}

func newGatedStore() *gatedStore {
	g := &gatedStore{ops: map[string]journal.Operation{}, open: make(chan struct{}), appended: make(chan struct{}, 16)}
	close(g.open)
	return g
}

func (g *gatedStore) shut() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedStore) release() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

func (g *gatedStore) Append(ctx context.Context, b *journal.Batch) (int64, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	default:
		g.appended <- struct{}{}
		<-open
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	first := g.seq + 1
	g.seq += int64(len(b.Records) + len(b.Operations))
	for _, op := range b.Operations {
		g.ops[op.Key] = op
	}
	return first, nil
}

func (g *gatedStore) Operation(key string) (journal.Operation, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	op, ok := g.ops[key]
	return op, ok, nil
}

// A call resent with its idem key after its first attempt's connection
// was given up reaches the agent twice: the first attempt's grant is
// broadcast to the name, now bound to the new socket, and the resend is
// answered with the stored replay of that same grant. The second copy
// must not answer the agent's next call of that task (found by the fleet
// harness: a fresh claim answered with the previous claim's exact grant,
// which looked like a reused epoch, INV-EF-1, and a second application
// of nothing). INV-CR-1.
func TestClient_ADuplicateOfAnEarlierAnswerDoesNotAnswerTheNextCall_INV_CR_1(t *testing.T) {
	store := newGatedStore()
	th := startHub(t, hub.Config{HubID: "syn-dup", Store: store}, false)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	first := th.dial(t, "p/ann")
	store.shut()
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := first.Claim(short, ClaimRequest{TaskID: "T1", IdemKey: "k1"})
	stop()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the first attempt should time out with its commit held; got %v", err)
	}
	<-store.appended // the first attempt's batch is in flight
	th.ln.dropAll()  // the socket is lost; the client takes its name over on a new one
	second := first
	waitFor(t, func() bool { return second.Stats().Reconnects == 1 })
	type answer struct {
		cl  *Claim
		err error
	}
	resent, next := make(chan answer, 1), make(chan answer, 1)
	go func() {
		cl, err := second.Claim(ctx, ClaimRequest{TaskID: "T1", IdemKey: "k1"})
		resent <- answer{cl, err}
	}()
	waitFor(t, func() bool { return second.pendingCalls() == 1 })
	go func() {
		cl, err := second.Claim(ctx, ClaimRequest{TaskID: "T1", IdemKey: "k2"}) // a renewal
		next <- answer{cl, err}
	}()
	waitFor(t, func() bool { return second.pendingCalls() == 2 })
	time.Sleep(50 * time.Millisecond) // both frames reach the hub, queued behind the held commit
	store.release()

	r := <-resent
	if r.err != nil {
		t.Fatalf("the resend: %v", r.err)
	}
	n := <-next
	if n.err != nil {
		t.Fatalf("the renewal: %v", n.err)
	}
	if n.cl.Epoch == r.cl.Epoch || n.cl.GrantedAt == r.cl.GrantedAt {
		t.Fatalf("the renewal under a fresh key was answered with the resent claim's grant (epoch %d, granted at %v): a duplicate taken as a new answer", n.cl.Epoch, n.cl.GrantedAt)
	}
	if n.cl.Epoch < r.cl.Epoch {
		t.Fatalf("renewal epoch %d below the grant's %d", n.cl.Epoch, r.cl.Epoch)
	}
}

func (c *Client) pendingCalls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
