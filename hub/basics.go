package hub

// What every room of the hub uses and nothing else: the hub's clock and
// the gate that stops new submits once Close has begun. It names no other
// file's declarations.

import (
	"context"
	"errors"
	"sync"
)

// beginSubmit registers an in-flight mutation; it fails once Close has
// begun, so nothing is submitted that Close would not wait for.
func (h *Hub) beginSubmit() bool {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	if h.closing.Load() {
		return false
	}
	h.submits.Add(1)
	return true
}

func waitCtx(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Hub) now() float64 { return h.cfg.Clock() }

// errClosing is the reason a request is not served during shutdown.
var errClosing = errors.New("hub: shutting down")

// nsInflight counts a hub's mutations in flight by namespace, so a planned
// move waits for its own namespace's (DrainNamespace) and not for the
// other namespaces', which under load are never all answered at once.
type nsInflight struct {
	mu   sync.Mutex
	n    map[string]int
	idle map[string]chan struct{} // closed when the namespace's count falls to 0
}

func (c *nsInflight) enter(ns string) {
	c.mu.Lock()
	if c.n == nil {
		c.n, c.idle = map[string]int{}, map[string]chan struct{}{}
	}
	c.n[ns]++
	c.mu.Unlock()
}

func (c *nsInflight) leave(ns string) {
	c.mu.Lock()
	if c.n[ns]--; c.n[ns] <= 0 {
		delete(c.n, ns)
		if ch := c.idle[ns]; ch != nil {
			close(ch)
			delete(c.idle, ns)
		}
	}
	c.mu.Unlock()
}

// wait returns once ns has nothing in flight, or ctx ends.
func (c *nsInflight) wait(ctx context.Context, ns string) {
	c.mu.Lock()
	if c.n[ns] == 0 {
		c.mu.Unlock()
		return
	}
	ch := c.idle[ns]
	if ch == nil {
		ch = make(chan struct{})
		c.idle[ns] = ch
	}
	c.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}
