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
