package hub

// The dashboard's live feed (/api/events, docs/api.md): the hub publishes
// what changed — grants, releases, expiries, board writes, presence,
// refusals, dead letters — to every event stream, as it broadcasts frames
// to sockets, from the same places: onCommit for the claim family and the
// board (the sequencer's leader, holding Hub.mu), the registry for presence
// and dead letters (holding Hub.mu), and the sessions for refusals.
//
// Who owns what: feed.mu guards the subscribers, the event counter and the
// ring of recent refusals. It is taken after Hub.mu, never before, and held
// only to encode one event and hand it to each subscriber's channel without
// blocking: a subscriber whose buffer is full is dropped (its channel is
// closed and its stream ends), so a slow browser never stalls the hub. Its
// EventSource reconnects and reads the state afresh.
//
// Every published event has an id, one more than the last. /api/state
// reads the state, the registry and the counter at one instant (Hub.State),
// so a client that subscribes first and then reads the state applies only
// the events whose id is above the state's event_id. Events published
// while no stream is open are not numbered: a stream opened later reads a
// state that holds them (the publisher held the leader lock or Hub.mu, and
// State takes both).

import (
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/synapse-hub/synapse/coord"
)

// Dashboard limits (Config.Dashboard*; flags --dashboard-*).
const (
	// DefaultEventBuffer is how many events wait for one /api/events
	// stream before it is dropped as too slow.
	DefaultEventBuffer = 1024
	// DefaultEventStreams is how many /api/events streams may be open at
	// once; more get 503.
	DefaultEventStreams = 64
	// DefaultRecentRefusals is how many refusals /api/state remembers.
	DefaultRecentRefusals = 200
)

// activityStep is the shortest time between two activity events of one
// agent: liveness (a reaction within livenessWindow) is shown to this.
const activityStep = 10.0

// feed fans dashboard events out to the open event streams.
type feed struct {
	mu       sync.Mutex
	seq      uint64 // id of the last event published
	subs     map[*subscriber]struct{}
	maxSubs  int
	buffer   int
	refusals []APIRefusal // a ring of at most refMax; once full, the oldest is at refAt
	refAt    int
	refMax   int
	dropped  func() // counts a dropped subscriber (metrics)
	closed   bool
	open     atomic.Int32 // len(subs), read without mu so publishers skip work when nobody listens
}

// subscriber is one event stream: pre-encoded SSE messages, closed when the
// stream is dropped or the hub closes.
type subscriber struct {
	ch chan []byte
}

func (f *feed) init(buffer, maxSubs, refusals int, dropped func()) {
	f.subs = make(map[*subscriber]struct{})
	f.buffer, f.maxSubs, f.refMax, f.dropped = buffer, maxSubs, refusals, dropped
}

// subscribe opens an event stream; nil when maxSubs are open or the hub is
// closing. The caller ends it with unsubscribe.
func (f *feed) subscribe() (*subscriber, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || len(f.subs) >= f.maxSubs {
		return nil, 0
	}
	s := &subscriber{ch: make(chan []byte, f.buffer)}
	f.subs[s] = struct{}{}
	f.open.Store(int32(len(f.subs)))
	return s, f.seq
}

// unsubscribe ends a stream (if the feed has not dropped it already).
func (f *feed) unsubscribe(s *subscriber) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.subs[s]; ok {
		delete(f.subs, s)
		close(s.ch)
		f.open.Store(int32(len(f.subs)))
	}
}

// streams returns how many event streams are open.
func (f *feed) streams() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// close ends every stream and refuses new ones (Hub.Close).
func (f *feed) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for s := range f.subs {
		delete(f.subs, s)
		close(s.ch)
	}
	f.open.Store(0)
}

// listening reports whether any stream is open. A stream opened after it
// said false reads a state that already holds the change (see stateNow).
func (f *feed) listening() bool { return f.open.Load() > 0 }

// publish sends one event to every stream. It never blocks: a stream whose
// buffer is full is dropped. With no stream open nothing is encoded.
func (f *feed) publish(typ string, body any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.publishLocked(typ, body)
}

func (f *feed) publishLocked(typ string, body any) {
	if len(f.subs) == 0 {
		return
	}
	data, err := json.Marshal(body)
	if err != nil {
		return // the bodies are the API's own types: this does not happen
	}
	f.seq++
	msg := sseMessage(f.seq, typ, data)
	for s := range f.subs {
		select {
		case s.ch <- msg:
		default:
			delete(f.subs, s)
			close(s.ch)
			f.open.Store(int32(len(f.subs)))
			if f.dropped != nil {
				f.dropped()
			}
		}
	}
}

// refusal remembers a refusal for /api/state and publishes it.
func (f *feed) refusal(r APIRefusal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refMax > 0 {
		if len(f.refusals) < f.refMax {
			f.refusals = append(f.refusals, r)
		} else {
			f.refusals[f.refAt] = r
			f.refAt = (f.refAt + 1) % f.refMax
		}
	}
	f.publishLocked("refusal", r)
}

// recentLocked returns the remembered refusals, newest first.
func (f *feed) recentLocked() []APIRefusal {
	out := make([]APIRefusal, 0, len(f.refusals))
	for i := len(f.refusals) - 1; i >= 0; i-- {
		out = append(out, f.refusals[(f.refAt+i)%len(f.refusals)])
	}
	return out
}

// sseMessage encodes one server-sent event. data is one line of JSON
// (encoding/json escapes no newline into it).
func sseMessage(id uint64, typ string, data []byte) []byte {
	b := make([]byte, 0, len(data)+len(typ)+32)
	b = append(b, "id: "...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, "\nevent: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// Event bodies of /api/events (docs/api.md).
type (
	// APIClaimEvent is a claim granted, renewed, handed off, updated or
	// checkpointed: the claim as it now is.
	APIClaimEvent struct {
		Kind  string   `json:"kind"` // granted, renewed, handoff, updated, checkpoint
		Claim APIClaim `json:"claim"`
		From  string   `json:"from,omitempty"` // handoff: the previous owner
	}
	// APIReleaseEvent is a claim that ended: released by its owner, or its
	// lease expired (Owner is then "").
	APIReleaseEvent struct {
		Reason string `json:"reason"` // release, expiry
		TaskID string `json:"task_id"`
		Owner  string `json:"owner,omitempty"`
		Epoch  int64  `json:"epoch"`
	}
	// APITaskEvent is a board task declared, re-declared or updated.
	APITaskEvent struct {
		Kind string  `json:"kind"` // posted, redeclared, updated
		By   string  `json:"by"`
		Task APITask `json:"task"`
	}
	// APIPresenceEvent is an agent that came online or went offline.
	APIPresenceEvent struct {
		Agent  string  `json:"agent"`
		Online bool    `json:"online"`
		At     float64 `json:"at"`
	}
	// APIActivityEvent says an agent reacted (sent something other than a
	// heartbeat): at most one per agent per activityStep, so a page's
	// live/idle verdict is never more than that late.
	APIActivityEvent struct {
		Agent string  `json:"agent"`
		At    float64 `json:"at"`
	}
	// APIMailboxEvent says an identity's mailbox backlog changed; read
	// /api/state (or /api/mailbox) for the counts.
	APIMailboxEvent struct {
		Identity string `json:"identity"`
	}
)

// publishCommitted publishes the dashboard events of committed core events
// (onCommit: the leader, holding Hub.mu).
func (h *Hub) publishCommitted(evs []coord.Event) {
	if !h.feed.listening() {
		return
	}
	for _, ev := range evs {
		switch e := ev.(type) {
		case coord.ClaimGranted:
			kind := "granted"
			if e.Renewal {
				kind = "renewed"
			}
			h.feed.publish("claim", APIClaimEvent{Kind: kind, Claim: apiClaim(e.Claim)})
		case coord.HandedOff:
			h.feed.publish("claim", APIClaimEvent{Kind: "handoff", Claim: apiClaim(e.Claim), From: e.From})
		case coord.TaskUpdated:
			h.feed.publish("claim", APIClaimEvent{Kind: "updated", Claim: apiClaim(e.Claim)})
		case coord.CheckpointSaved:
			h.feed.publish("claim", APIClaimEvent{Kind: "checkpoint", Claim: apiClaim(e.Claim)})
		case coord.Released:
			h.feed.publish("release", APIReleaseEvent{Reason: "release", TaskID: e.TaskID, Owner: e.Owner, Epoch: e.Epoch})
		case coord.ClaimExpired:
			h.feed.publish("release", APIReleaseEvent{Reason: "expiry", TaskID: e.TaskID, Epoch: e.Epoch})
		case coord.TaskPosted:
			kind := "posted"
			switch {
			case e.Update:
				kind = "updated"
			case e.Redeclared:
				kind = "redeclared"
			}
			h.feed.publish("task", APITaskEvent{Kind: kind, By: e.By, Task: apiTask(e.Task)})
		}
	}
}
