package dashboard

// The live feed (/api/events, docs/api.md): the hub publishes what changed
// — grants, releases, expiries, board writes, presence, refusals, dead
// letters — to every event stream, as it broadcasts frames to sockets,
// from the same places: its commit hook for the claim family and the board
// (the sequencer's leader, holding Hub.mu), its registry for presence and
// dead letters (holding Hub.mu), and its sessions for refusals. On a fleet
// the claim family and the board come from the fleet's watch instead
// (every namespace's, in etcd's order), published after the hub's fleet
// reads can see them, so a state read after the Mark holds them too.
//
// Who owns what: Feed.mu guards the subscribers, the event counter and the
// ring of recent refusals. It is taken after the hub's locks, never
// before, and held only to encode one event and hand it to each
// subscriber's channel without blocking: a subscriber whose buffer is full
// is dropped (its channel is closed and its stream ends), so a slow
// browser never stalls the hub. Its EventSource reconnects and reads the
// state afresh.
//
// Every published event has an id, one more than the last. /api/state
// reads the state, the registry and the counter at one instant
// (Backend.State, through Mark), so a client that subscribes first and
// then reads the state applies only the events whose id is above the
// state's event_id. Events published while no stream is open are not
// numbered: a stream opened later reads a state that holds them (the
// publisher held the leader lock or Hub.mu, and State takes both).

import (
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/synapse-hub/synapse/coord"
)

// Feed limits (the hub's Config.EventBuffer, EventStreams, RecentRefusals;
// flags --dashboard-*).
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

// FeedConfig sizes a Feed.
type FeedConfig struct {
	Buffer   int    // events queued per stream before it is dropped; <= 0 = DefaultEventBuffer
	Streams  int    // streams open at once; <= 0 = DefaultEventStreams
	Refusals int    // refusals remembered for /api/state; <= 0 = none
	Dropped  func() // if not nil, called (under the Feed's lock: it must not block) per stream dropped as too slow
	Opened   func() // if not nil, called (without the Feed's lock; it must not block) after each stream opened
}

// Feed fans dashboard events out to the open event streams and remembers
// the recent refusals. Its methods are safe for concurrent use and never
// block on a stream.
type Feed struct {
	mu       sync.Mutex
	seq      uint64 // id of the last event published
	subs     map[*Subscriber]struct{}
	maxSubs  int
	buffer   int
	refusals []APIRefusal // a ring of at most refMax; once full, the oldest is at refAt
	refAt    int
	refMax   int
	dropped  func()
	opened   func()
	closed   bool
	open     atomic.Int32 // len(subs), read without mu so publishers skip work when nobody listens
}

// Subscriber is one event stream: pre-encoded SSE messages, closed when
// the stream is dropped or the feed closes.
type Subscriber struct {
	ch chan []byte
}

// Events is the stream's messages; it is closed when the stream is
// dropped as too slow or the feed closes.
func (s *Subscriber) Events() <-chan []byte { return s.ch }

// NewFeed returns an open feed with no streams.
func NewFeed(cfg FeedConfig) *Feed {
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultEventBuffer
	}
	if cfg.Streams <= 0 {
		cfg.Streams = DefaultEventStreams
	}
	return &Feed{subs: make(map[*Subscriber]struct{}), buffer: cfg.Buffer, maxSubs: cfg.Streams,
		refMax: max(cfg.Refusals, 0), dropped: cfg.Dropped, opened: cfg.Opened}
}

// Subscribe opens an event stream and returns it with the id of the last
// event published before it; nil when FeedConfig.Streams are open or the
// feed is closed. The caller ends it with Unsubscribe.
func (f *Feed) Subscribe() (*Subscriber, uint64) {
	s, last := f.subscribe()
	if s != nil && f.opened != nil {
		f.opened()
	}
	return s, last
}

func (f *Feed) subscribe() (*Subscriber, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || len(f.subs) >= f.maxSubs {
		return nil, 0
	}
	s := &Subscriber{ch: make(chan []byte, f.buffer)}
	f.subs[s] = struct{}{}
	f.open.Store(int32(len(f.subs)))
	return s, f.seq
}

// Unsubscribe ends a stream (if the feed has not dropped it already).
func (f *Feed) Unsubscribe(s *Subscriber) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.subs[s]; ok {
		delete(f.subs, s)
		close(s.ch)
		f.open.Store(int32(len(f.subs)))
	}
}

// Streams returns how many event streams are open.
func (f *Feed) Streams() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// Close ends every stream and refuses new ones (the hub's Close).
func (f *Feed) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.endAllLocked()
}

// Restart ends every open stream, as one that fell a buffer behind is
// ended, and keeps the feed open: each browser reconnects and reads the
// state afresh. The hub calls it when it missed changes it would have
// published (a fleet's watch that had to read every record again).
func (f *Feed) Restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endAllLocked()
}

func (f *Feed) endAllLocked() {
	for s := range f.subs {
		delete(f.subs, s)
		close(s.ch)
	}
	f.open.Store(0)
}

// Listening reports whether any stream is open, without the Feed's lock,
// so a publisher can skip building an event nobody reads. A stream opened
// after it said false reads a state that already holds the change (see
// Mark).
func (f *Feed) Listening() bool { return f.open.Load() > 0 }

// Mark returns the id of the last event published and the remembered
// refusals, newest first, at one instant. Backend.State calls it holding
// the locks the publishers hold, so the state it reads and the id are of
// the same instant.
func (f *Feed) Mark() (eventID uint64, refusals []APIRefusal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]APIRefusal, 0, len(f.refusals))
	for i := len(f.refusals) - 1; i >= 0; i-- {
		out = append(out, f.refusals[(f.refAt+i)%len(f.refusals)])
	}
	return f.seq, out
}

// Refusal remembers a refusal for /api/state and publishes it.
func (f *Feed) Refusal(r APIRefusal) {
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

// Presence publishes an agent that came online or went offline.
func (f *Feed) Presence(agent string, online bool, at float64) {
	f.publish("presence", APIPresenceEvent{Agent: agent, Online: online, At: at})
}

// Activity publishes that an agent reacted.
func (f *Feed) Activity(agent string, at float64) {
	f.publish("activity", APIActivityEvent{Agent: agent, At: at})
}

// DeadLetter publishes a target's dead letters as they now are (Count 0:
// forgotten, the target is back).
func (f *Feed) DeadLetter(d APIDeadLetter) { f.publish("dead_letter", d) }

// Mailbox publishes that an identity's mailbox backlog changed.
func (f *Feed) Mailbox(identity string) {
	f.publish("mailbox", APIMailboxEvent{Identity: identity})
}

// Committed publishes the dashboard events of committed core events: the
// claim family and the board (the hub's commit hook, on the sequencer's
// leader).
func (f *Feed) Committed(evs []coord.Event) {
	if !f.Listening() {
		return
	}
	for _, ev := range evs {
		switch e := ev.(type) {
		case coord.ClaimGranted:
			kind := "granted"
			if e.Renewal {
				kind = "renewed"
			}
			f.publish("claim", APIClaimEvent{Kind: kind, Claim: ClaimOf(e.Claim)})
		case coord.HandedOff:
			f.publish("claim", APIClaimEvent{Kind: "handoff", Claim: ClaimOf(e.Claim), From: e.From})
		case coord.TaskUpdated:
			f.publish("claim", APIClaimEvent{Kind: "updated", Claim: ClaimOf(e.Claim)})
		case coord.CheckpointSaved:
			f.publish("claim", APIClaimEvent{Kind: "checkpoint", Claim: ClaimOf(e.Claim)})
		case coord.Released:
			f.publish("release", APIReleaseEvent{Reason: "release", TaskID: e.TaskID, Owner: e.Owner, Epoch: e.Epoch})
		case coord.ClaimExpired:
			f.publish("release", APIReleaseEvent{Reason: "expiry", TaskID: e.TaskID, Epoch: e.Epoch})
		case coord.TaskPosted:
			kind := "posted"
			switch {
			case e.Update:
				kind = "updated"
			case e.Redeclared:
				kind = "redeclared"
			}
			f.publish("task", APITaskEvent{Kind: kind, By: e.By, Task: TaskOf(e.Task)})
		}
	}
}

// publish sends one event to every stream. It never blocks: a stream whose
// buffer is full is dropped. With no stream open nothing is encoded.
func (f *Feed) publish(typ string, body any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.publishLocked(typ, body)
}

func (f *Feed) publishLocked(typ string, body any) {
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
	// heartbeat): the hub sends at most one per agent per 10 s, so a
	// page's live/idle verdict is never more than that late.
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
