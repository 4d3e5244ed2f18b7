package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// minRenewInterval keeps a tiny lease from turning the keeper into a busy
// loop.
const minRenewInterval = 50 * time.Millisecond

// Keeper renews a held claim in the background so it does not lapse during
// long work. Make one with KeepLease.
//
// Who owns what: the keeper's goroutine owns the renewals; mu guards the
// latest grant, which Claim and Release read.
type Keeper struct {
	c    *Client
	stop chan struct{}
	done chan struct{}
	lost chan error
	once sync.Once

	onRenew func(*Claim)
	fence   bool

	mu    sync.Mutex
	claim *Claim
	n     int
}

// KeepOptions configures KeepLeaseWith.
type KeepOptions struct {
	// OnRenew, when set, is called on the keeper's goroutine with each
	// renewal the hub grants (a fresh epoch), e.g. to record it in a
	// Ledger so the write-path checks fence on the current epoch.
	OnRenew func(*Claim)
	// Fence, when set, reads the hub's state before each renewal and ends
	// the keeper (a *Refused on Lost: NOT_OWNER, EPOCH_STALE, NOT_CLAIMED)
	// unless the claim is still live under this keeper's owner and epoch.
	// Without it a keeper that was paused past its lease renews whatever
	// the hub now holds under its name, or takes the task afresh, and a
	// writer fencing on its recorded epoch would adopt a lease that moved
	// on. A claim decided by another hub (federation) is not in this hub's
	// state: it is fenced only on what the state shows.
	Fence bool
}

// KeepLease renews cl at about a third of its lease length until Stop,
// Release or ctx ends. A renewal the hub refuses (the lease lapsed and
// another agent took the task, say) ends the keeper and is sent on Lost. A
// renewal that fails for want of a connection is retried sooner, while the
// lease still runs.
func (c *Client) KeepLease(ctx context.Context, cl *Claim) *Keeper {
	return c.KeepLeaseWith(ctx, cl, KeepOptions{})
}

// KeepLeaseWith is KeepLease with options.
func (c *Client) KeepLeaseWith(ctx context.Context, cl *Claim, o KeepOptions) *Keeper {
	k := &Keeper{c: c, stop: make(chan struct{}), done: make(chan struct{}), lost: make(chan error, 1), claim: cl, onRenew: o.OnRenew, fence: o.Fence}
	go k.run(ctx)
	return k
}

// Claim returns the latest grant: its Epoch is the one to fence with.
func (k *Keeper) Claim() *Claim {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.claim
}

// Renewals counts the renewals the hub granted.
func (k *Keeper) Renewals() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n
}

// Lost receives the error that ended the lease (a *Refused), at most once,
// and is closed when the keeper stops.
func (k *Keeper) Lost() <-chan error { return k.lost }

// Done is closed when the keeper has stopped.
func (k *Keeper) Done() <-chan struct{} { return k.done }

// Stop ends the renewals and waits for one in flight. The claim stays
// until its lease runs out.
func (k *Keeper) Stop() {
	k.once.Do(func() { close(k.stop) })
	<-k.done
}

// Release stops the renewals and releases the claim, fenced on the latest
// epoch unless o.Epoch says otherwise.
func (k *Keeper) Release(ctx context.Context, o ReleaseOptions) (*Receipt, error) {
	k.Stop()
	cl := k.Claim()
	if o.Epoch == 0 {
		o.Epoch = cl.Epoch
	}
	return k.c.Release(ctx, cl.TaskID, o)
}

func (k *Keeper) run(ctx context.Context) {
	defer close(k.done)
	defer close(k.lost)
	interval := k.Claim().TTL() / 3
	if interval <= 0 {
		interval = time.Duration(3600/3) * time.Second
	}
	interval = max(interval, minRenewInterval)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.stop:
			return
		case <-t.C:
		}
		// A renewal must not outlast the next one's due time.
		rctx, cancel := context.WithTimeout(ctx, interval)
		var next *Claim
		err := k.stillHeld(rctx)
		if err == nil {
			next, err = k.c.Renew(rctx, k.Claim())
		}
		cancel()
		var ref *Refused
		switch {
		case err == nil:
			k.mu.Lock()
			k.claim, k.n = next, k.n+1
			k.mu.Unlock()
			if k.onRenew != nil {
				k.onRenew(next)
			}
			t.Reset(interval)
		case errors.As(err, &ref):
			k.lost <- err
			return
		case errors.Is(err, ErrClosed):
			k.lost <- err
			return
		default: // disconnected or slow: try again soon
			t.Reset(max(interval/4, minRenewInterval))
		}
	}
}

// stillHeld is nil unless Fence is set and the hub's state shows the claim
// gone, held by another agent, or live under another epoch.
func (k *Keeper) stillHeld(ctx context.Context) error {
	if !k.fence {
		return nil
	}
	st, err := k.c.State(ctx)
	if err != nil {
		return err // not decisive: retried like a failed renewal
	}
	mine := k.Claim()
	live := st.Claim(mine.TaskID)
	switch {
	case live == nil && (mine.HubID == "" || mine.HubID == k.c.Welcome().HubID):
		return &Refused{Code: "NOT_CLAIMED", TaskID: mine.TaskID, Message: fmt.Sprintf("Task '%s' is no longer claimed: its lease (epoch %d) lapsed.", mine.TaskID, mine.Epoch)}
	case live == nil:
		return nil
	case live.Owner != mine.Owner:
		return &Refused{Code: "NOT_OWNER", TaskID: mine.TaskID, Holder: live.Owner, Message: fmt.Sprintf("Task '%s' is held by %s now: the lease of epoch %d lapsed.", mine.TaskID, live.Owner, mine.Epoch)}
	case live.Epoch != mine.Epoch:
		return &Refused{Code: "EPOCH_STALE", TaskID: mine.TaskID, Holder: live.Owner, Message: fmt.Sprintf("Task '%s' was re-granted under epoch %d since this keeper's epoch %d.", mine.TaskID, live.Epoch, mine.Epoch)}
	}
	return nil
}
