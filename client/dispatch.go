package client

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
)

// Matching replies to calls.
//
// The protocol has no request ids, so a reply is matched to the call it
// answers by its type family and the task and agent it names: a claim
// waits for claim_granted with its task_id and owner == this agent, or
// claim_denied with its task_id; a release for release_granted (task_id,
// owner) or release_denied; a handoff for handoff_granted whose
// previous_owner is this agent; a query for its *_snapshot; a chat for the
// echo of its own client_msg_id (and then its delivery_receipt).
//
// Plain `error` frames name no task. One goes to the oldest call still
// waiting for its first frame. That is exact because the hub handles one
// socket's frames one at a time and queues every reply to a frame before it
// reads the next (broadcasts leave from the commit, before the submitter is
// answered), so replies come back in request order. The pending list is
// kept in write order for the same reason: registering a call and writing
// its frame happen under one lock.
//
// A call whose context ends stays in the list, marked abandoned, until its
// reply arrives or the socket drops, so a late reply is never taken for a
// later call's.
//
// One answer can arrive twice on a new socket: a request resent with its
// idem_key after its socket was lost is answered with the stored replay of
// the first attempt's grant, and that grant, broadcast when the first
// attempt committed, reaches the name's new socket too. Such a copy is
// byte for byte the answer a call already took (every new grant, renewal,
// update or handoff differs: a fresh epoch, version or clock), so a frame
// identical to the answer of a keyed call answers no call with another
// key; it goes to the subscribers. Found by the fleet harness: a renewal
// answered with the previous claim's grant (INV-CR-1, INV-EF-1).

// call is one request in flight.
type call struct {
	task   string // the request's task_id, to match a plain error that names it
	key    string // the request's idem_key, "" without one
	match  func(f Frame) (take, finish bool)
	frames []Frame
	done   chan error // buffered; nil = finished with frames
	cn     *conn
}

// do sends m and waits for the frames match takes, up to the one that
// finishes the call.
func (c *Client) do(ctx context.Context, m map[string]any, match func(Frame) (take, finish bool)) ([]Frame, error) {
	return c.doMany(ctx, []map[string]any{m}, match)
}

// doMany is do for a request of several frames written back to back (the
// call is matched against the replies to all of them).
func (c *Client) doMany(ctx context.Context, ms []map[string]any, match func(Frame) (take, finish bool)) ([]Frame, error) {
	cl := &call{match: match, done: make(chan error, 1)}
	cl.task, _ = ms[0]["task_id"].(string)
	cl.key, _ = ms[0]["idem_key"].(string)
	c.wmu.Lock()
	c.mu.Lock()
	if c.closed {
		err := c.failErr
		c.mu.Unlock()
		c.wmu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return nil, ErrClosed
	}
	cn := c.conn
	if cn == nil {
		c.mu.Unlock()
		c.wmu.Unlock()
		return nil, ErrDisconnected
	}
	cl.cn = cn
	c.pending = append(c.pending, cl)
	c.mu.Unlock()
	var err error
	for _, m := range ms {
		if err = writeJSON(cn.ws, m); err != nil {
			break
		}
	}
	c.wmu.Unlock()
	if err != nil {
		c.mu.Lock()
		c.removePendingLocked(cl)
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", ErrDisconnected, err)
	}
	select {
	case err := <-cl.done:
		if err != nil {
			return nil, err
		}
		return cl.frames, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dispatch hands one inbound frame to the call it answers, and to the
// subscribers if no call took it or if it is a broadcast (everyone sees a
// grant, including the agent that asked for it).
func (c *Client) dispatch(f Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	taken := false
	var sum [32]byte // of f.Raw, once needed
	hashed := false
	hash := func() [32]byte {
		if !hashed {
			sum, hashed = sha256.Sum256(f.Raw), true
		}
		return sum
	}
	var copyOf *string
	if len(c.pending) > 0 && len(c.taken.keys) > 0 && answers(f) { // no call waiting: nothing to protect, no hash
		copyOf = c.taken.lookup(hash())
	}
	for _, cl := range c.pending {
		if copyOf != nil && *copyOf != cl.key {
			continue // a copy of another request's answer (see above)
		}
		take, finish := cl.match(f)
		// A plain error answers the oldest waiting call; a hub that names
		// the task in it (ours does) lets it skip calls for other tasks.
		if !take && f.Type == "error" && (!f.Has("task_id") || f.String("task_id") == cl.task) && len(cl.frames) == 0 {
			take, finish = true, true
		}
		if !take {
			continue
		}
		taken = true
		cl.frames = append(cl.frames, f)
		if cl.key != "" && copyOf == nil && answers(f) {
			c.taken.add(hash(), cl.key)
		}
		if finish {
			c.removePendingLocked(cl)
			cl.done <- nil
		}
		break
	}
	if !taken || f.broadcast() {
		c.publishLocked(f)
	}
}

// answers reports a frame that can be a keyed call's stored answer: a
// grant or an update, not a refusal (refusals are never stored, and two
// alike can be told apart by nothing).
func answers(f Frame) bool {
	return f.Type != "error" && !strings.HasSuffix(f.Type, "_denied") && !f.Has("reason_code") && !f.Has("error_code")
}

// answered remembers the latest keyed calls' answers by their bytes' hash
// and the key each answered, up to answeredKept of them.
type answered struct {
	keys  map[[32]byte]string
	order [][32]byte
}

const answeredKept = 256

// lookup reports the key of the call the frame hashed to sum answered,
// or nil when it answered none.
func (a *answered) lookup(sum [32]byte) *string {
	if k, ok := a.keys[sum]; ok {
		return &k
	}
	return nil
}

func (a *answered) add(sum [32]byte, key string) {
	if a.keys == nil {
		a.keys = make(map[[32]byte]string, answeredKept)
	}
	if _, ok := a.keys[sum]; ok {
		return
	}
	if len(a.order) == answeredKept {
		delete(a.keys, a.order[0])
		a.order = a.order[1:]
	}
	a.keys[sum] = key
	a.order = append(a.order, sum)
}

func (c *Client) removePendingLocked(cl *call) {
	for i, p := range c.pending {
		if p == cl {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			return
		}
	}
}

// failPendingLocked ends every call in flight with err.
func (c *Client) failPendingLocked(err error) {
	for _, cl := range c.pending {
		cl.done <- err
	}
	c.pending = nil
}

// subscriber is one Subscribe channel.
type subscriber struct {
	ch     chan Frame
	filter func(Frame) bool
}

// Subscribe returns a channel of the frames the hub sends that filter
// accepts (nil accepts all): broadcasts (claim_granted, release_granted,
// presence_update, chat, ...) and private frames no call was waiting for
// (directed chats, wait_ready, delivery receipts of other calls). The
// channel is buffered (Options.SubscriberBuffer); when it is full a frame
// is dropped and counted in Stats.Dropped, so a slow subscriber never
// stalls the client. It is closed when ctx ends or the client closes.
// filter runs on the reader goroutine: keep it quick and do not call the
// client from it.
func (c *Client) Subscribe(ctx context.Context, filter func(Frame) bool) <-chan Frame {
	s := &subscriber{ch: make(chan Frame, c.opts.SubscriberBuffer), filter: filter}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		close(s.ch)
		return s.ch
	}
	c.subs[s] = struct{}{}
	c.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-c.done:
		}
		c.mu.Lock()
		c.removeSubLocked(s)
		c.mu.Unlock()
	}()
	return s.ch
}

func (c *Client) removeSubLocked(s *subscriber) {
	if _, ok := c.subs[s]; ok {
		delete(c.subs, s)
		close(s.ch)
	}
}

func (c *Client) publishLocked(f Frame) {
	for s := range c.subs {
		if s.filter != nil && !s.filter(f) {
			continue
		}
		select {
		case s.ch <- f:
		default:
			c.dropped.Add(1)
		}
	}
}
