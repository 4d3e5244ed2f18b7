package mcpserver

// Channel events: Claude Code's claude/channel extension, which turns a
// notification from an MCP server into a new turn for an idle agent.
//
// The contract, as Claude Code 2.1.332 checks it (its bundled
// notification schema, and anthropics/claude-plugins-official,
// external_plugins/fakechat/server.ts): the server declares
// capabilities.experimental["claude/channel"] = {} in its initialize
// reply, then sends notifications/claude/channel with params
// {content: string, meta?: {string: string}}. Claude sees
// <channel source="SERVER" key="value" ...>content</channel>; a meta key
// must match ^[a-zA-Z_][a-zA-Z0-9_]*$ or Claude drops it.
//
// What costs the hub: nothing per message. Every event is derived from a
// frame the agent already receives (its chats, handoffs, its project's
// claims and board) or from a wait the agent itself asked for; the only
// requests are one state and one board read when the server starts, and a
// hub wait for a task the agent waited on or was refused for.
//
// Who owns what: mu guards the pending queue, the ids already delivered
// and the tasks being watched; sendMu serialises deliveries so events go
// out in order. The lease goroutine (leaseLoop) owns no state: it reads
// own under mu and sleeps until the next warning is due.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/synapse-hub/synapse/client"
)

// ChannelCapability is the experimental capability that makes Claude Code
// listen for channel events; ChannelMethod is their notification.
const (
	ChannelCapability = "claude/channel"
	ChannelMethod     = "notifications/claude/channel"
)

// Event kinds, the meta "kind" of each channel event.
const (
	EventMessage          = "message"           // a directed message to the agent
	EventTaskFree         = "task_free"         // a task it waited on came free
	EventHandoff          = "handoff"           // a claim was handed to it
	EventLeaseExpiring    = "lease_expiring"    // its lease, not renewed by this server, nears expiry
	EventTaskReady        = "task_ready"        // a board task suggested to it has its dependencies done
	EventConflictResolved = "conflict_resolved" // the claim that refused it is gone
)

// Channel defaults.
const (
	// DefaultLeaseLead is how long before a lease ends its warning comes.
	DefaultLeaseLead = 5 * time.Minute
	// DefaultChannelWatches bounds the hub waits the channel keeps for
	// tasks the agent waited on or was refused for.
	DefaultChannelWatches = 32
	// channelPendingCap bounds the events kept while no MCP session is
	// initialized to take them; the oldest go first (messages stay in the
	// inbox either way).
	channelPendingCap = 256
	// channelSeenCap bounds the delivered event ids kept to deduplicate.
	channelSeenCap = 4096
)

// ChannelOptions configures the channel events.
type ChannelOptions struct {
	// Off stops the server from declaring claude/channel and sending events.
	Off bool
	// LeaseLead is how long before the lease of a claim this server does not
	// renew its warning comes; default DefaultLeaseLead.
	LeaseLead time.Duration
	// Watches bounds the tasks watched at once for task_free and
	// conflict_resolved; default DefaultChannelWatches. Past it a refusal or
	// a timed-out wait is not watched (the text still says to call wait).
	Watches int
}

// ChannelEvent is one event, as sent.
type ChannelEvent struct {
	ID      string            // unique per event: the dedup key, also meta event_id
	Kind    string            // one of the Event* kinds
	Urgent  bool              // act before continuing; else at the next pause
	Content string            // the sentence Claude reads
	Meta    map[string]string // attributes of the <channel> tag
}

func (e ChannelEvent) params() map[string]any {
	meta := map[string]string{"kind": e.Kind, "event_id": e.ID, "urgency": "normal"}
	if e.Urgent {
		meta["urgency"] = "urgent"
	}
	for k, v := range e.Meta {
		if metaKey.MatchString(k) && v != "" {
			meta[k] = v
		}
	}
	prefix := "[synapse] "
	if e.Urgent {
		prefix = "[synapse: urgent] "
	}
	return map[string]any{"content": prefix + e.Content, "meta": meta}
}

// metaKey is the meta key Claude Code keeps.
var metaKey = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// ownLease is a claim of this agent's, as the frames say.
type ownLease struct {
	epoch   int64
	expires float64 // Unix seconds
}

type channel struct {
	s       *Server
	opts    ChannelOptions
	wake    chan struct{} // pokes leaseLoop when own changes
	started chan struct{} // closed once start has read the claims and the board

	sendMu sync.Mutex

	mu       sync.Mutex
	pending  []ChannelEvent
	seen     map[string]bool
	seenFIFO []string
	watching map[string]bool     // tasks with a hub wait running
	claiming map[string]int      // tasks a claim tool call is taking: not yet kept, not to be warned of
	own      map[string]ownLease // this agent's claims
	warned   map[string]bool     // task:epoch already warned of
	board    map[string]client.BoardTask
	ready    map[string]bool // tasks whose task_ready was sent (cleared when not ready)
}

func newChannel(s *Server, opts ChannelOptions) *channel {
	if opts.LeaseLead <= 0 {
		opts.LeaseLead = DefaultLeaseLead
	}
	if opts.Watches <= 0 {
		opts.Watches = DefaultChannelWatches
	}
	return &channel{s: s, opts: opts, wake: make(chan struct{}, 1), started: make(chan struct{}), seen: map[string]bool{}, watching: map[string]bool{}, claiming: map[string]int{},
		own: map[string]ownLease{}, warned: map[string]bool{}, board: map[string]client.BoardTask{}, ready: map[string]bool{}}
}

// capabilities is what the server declares: logging (the SDK's default)
// and, unless off, claude/channel.
func (ch *channel) capabilities() *mcp.ServerCapabilities {
	c := &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}}
	if !ch.opts.Off {
		c.Experimental = map[string]any{ChannelCapability: map[string]any{}}
	}
	return c
}

// emit queues e and delivers what is pending. An id already delivered is
// dropped: frames can arrive twice (a reconnect, the mailbox replaying a
// chat the socket also brought).
func (ch *channel) emit(e ChannelEvent) {
	if ch.opts.Off {
		return
	}
	ch.mu.Lock()
	if ch.seen[e.ID] {
		ch.mu.Unlock()
		return
	}
	for _, p := range ch.pending {
		if p.ID == e.ID {
			ch.mu.Unlock()
			return
		}
	}
	ch.pending = append(ch.pending, e)
	if len(ch.pending) > channelPendingCap {
		ch.pending = ch.pending[len(ch.pending)-channelPendingCap:]
	}
	ch.mu.Unlock()
	ch.flush()
}

// flush sends the pending events to every initialized session: one that
// made the initialize handshake. A session on the 2026-07-28 protocol has
// none, and Claude Code takes no channel events on it either. An event
// no session took stays pending, so one that arrives before the client's
// handshake is not lost (at-least-once); an event is marked delivered
// once a session took it.
func (ch *channel) flush() {
	ch.sendMu.Lock()
	defer ch.sendMu.Unlock()
	var sessions []*mcp.ServerSession
	for ss := range ch.s.srv.Sessions() {
		if ss.InitializeParams() != nil {
			sessions = append(sessions, ss)
		}
	}
	if len(sessions) == 0 {
		return
	}
	ch.mu.Lock()
	batch := ch.pending
	ch.pending = nil
	ch.mu.Unlock()
	var undelivered []ChannelEvent
	for _, e := range batch {
		took := false
		for _, ss := range sessions {
			if err := notifySession(ch.s.ctx, ss, ChannelMethod, e.params()); err != nil {
				ch.s.log.Debug("channel event", "id", e.ID, "session", ss.ID(), "err", err)
				continue
			}
			took = true
		}
		if !took {
			undelivered = append(undelivered, e)
			continue
		}
		ch.mu.Lock()
		ch.markSeenLocked(e.ID)
		ch.mu.Unlock()
	}
	if len(undelivered) > 0 {
		ch.mu.Lock()
		ch.pending = append(undelivered, ch.pending...)
		ch.mu.Unlock()
	}
}

func (ch *channel) markSeenLocked(id string) {
	ch.seen[id] = true
	ch.seenFIFO = append(ch.seenFIFO, id)
	if len(ch.seenFIFO) > channelSeenCap {
		delete(ch.seen, ch.seenFIFO[0])
		ch.seenFIFO = ch.seenFIFO[1:]
	}
}

// Pending is how many events wait for a session to take them.
func (ch *channel) pendingCount() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return len(ch.pending)
}

// errNoNotify says the SDK's session could not send a custom notification.
var errNoNotify = errors.New("mcpserver: this go-sdk version's session has no connection to notify on")

// notifySession sends a notification whose method the Go SDK does not
// know. The SDK (v1.8.0) sends only the MCP methods it defines; until it
// exports a way (modelcontextprotocol/go-sdk issue 745, pull request 1146)
// we reach the session's JSON-RPC connection, whose Notify is the path the
// SDK's own notifications take. TestChannel_SDKConnection_Reachable pins
// this against the SDK in go.mod.
func notifySession(ctx context.Context, ss *mcp.ServerSession, method string, params any) error {
	v := reflect.ValueOf(ss).Elem().FieldByName("conn")
	if !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() {
		return errNoNotify
	}
	n, ok := reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem().Interface().(interface {
		Notify(ctx context.Context, method string, params any) error
	})
	if !ok {
		return errNoNotify
	}
	return n.Notify(ctx, method, params)
}

// message is the event for a chat the inbox filed as new.
func (ch *channel) message(m Message) {
	if !m.Directed {
		return // broadcasts stay in the inbox: they must not derail anyone
	}
	id := "msg:" + strconv.FormatInt(m.ID, 10)
	switch {
	case m.Seq > 0:
		id = "msg:seq:" + strconv.FormatInt(m.Seq, 10)
	case m.MsgID > 0:
		id = "msg:" + m.From + ":" + strconv.FormatInt(m.MsgID, 10)
	}
	e := ChannelEvent{ID: id, Kind: EventMessage, Urgent: m.Priority,
		Content: fmt.Sprintf("Message from %s: %s\n(Answer with the send tool to %s; when handled, call inbox with ack_through %d.)", m.From, m.Text, m.From, m.ID),
		Meta:    map[string]string{"from": m.From, "to": m.To, "inbox_id": strconv.FormatInt(m.ID, 10), "priority": strconv.FormatBool(m.Priority)}}
	if m.MsgID > 0 {
		e.Meta["msg_id"] = strconv.FormatInt(m.MsgID, 10)
	}
	if m.Seq > 0 {
		e.Meta["seq"] = strconv.FormatInt(m.Seq, 10)
	}
	ch.emit(e)
}

// watch waits on the hub, in the background, for task to come free, then
// emits kind (EventTaskFree or EventConflictResolved). One watch per task;
// false when it is already watched or the bound is reached.
func (ch *channel) watch(task, kind, holder string) bool {
	if ch.opts.Off || task == "" {
		return false
	}
	ch.mu.Lock()
	if ch.watching[task] || len(ch.watching) >= ch.opts.Watches || ch.s.ctx.Err() != nil {
		ch.mu.Unlock()
		return false
	}
	ch.watching[task] = true
	ch.s.wg.Add(1) // under mu, before Close can wait: it cancels ctx first
	ch.mu.Unlock()
	go func() {
		defer ch.s.wg.Done()
		w, err := ch.s.c.Wait(ch.s.ctx, task)
		ch.mu.Lock()
		delete(ch.watching, task)
		ch.mu.Unlock()
		if err != nil {
			return
		}
		text := fmt.Sprintf("Task '%s', which you waited for, is free (%s). Claim it now with the claim tool if you still need it.", task, w.Reason)
		if kind == EventConflictResolved {
			text = fmt.Sprintf("The claim that refused yours ('%s'%s) is gone (%s): your files are free. Claim again with the claim tool.", task, heldBy(holder), w.Reason)
		}
		ch.emit(ChannelEvent{ID: fmt.Sprintf("%s:%s:%d", kind, task, time.Now().UnixNano()), Kind: kind,
			Content: text, Meta: map[string]string{"task_id": task, "reason": w.Reason, "holder": holder}})
	}()
	return true
}

func heldBy(holder string) string {
	if holder == "" {
		return ""
	}
	return ", held by " + holder
}

// observe follows the frames the watcher already receives: handoffs to
// this agent, its own leases, the board.
func (ch *channel) observe(f client.Frame) {
	if ch.opts.Off {
		return
	}
	me := ch.s.c.Name()
	switch f.Type {
	case "claim_granted":
		if f.String("owner") == me {
			ch.setOwn(f.String("task_id"), f.Int("epoch"), f.Float("lease_expires_at"))
		}
	case "release_granted":
		if f.String("owner") == me {
			ch.setOwn(f.String("task_id"), 0, 0)
		}
	case "handoff_granted":
		task := f.String("task_id")
		switch me {
		case f.String("owner"):
			ch.setOwn(task, f.Int("epoch"), f.Float("lease_expires_at"))
			from := f.String("previous_owner")
			text := fmt.Sprintf("%s handed you task '%s'; you hold it now (this server renews its lease).", orSomeone(from), task)
			if note := f.String("note"); note != "" {
				text += " Note: " + note
			}
			if cp := f.String("checkpoint"); cp != "" {
				text += " Checkpoint: " + cp
			}
			ch.emit(ChannelEvent{ID: fmt.Sprintf("handoff:%s:%d", task, f.Int("epoch")), Kind: EventHandoff, Content: text + " Call status to see its files.",
				Meta: map[string]string{"task_id": task, "from": from, "epoch": strconv.FormatInt(f.Int("epoch"), 10)}})
		case f.String("previous_owner"):
			ch.setOwn(task, 0, 0)
		}
	case "ledger_task_posted", "ledger_task_updated":
		var t client.BoardTask
		if err := f.DecodeField("task", &t); err == nil && t.TaskID != "" {
			ch.boardTask(t)
		}
	}
}

// start reads the agent's claims and the board once, so the lease
// warnings and the ready events know what was there before the server.
// (A dependency done while this read is under way counts as before.)
func (ch *channel) start(ctx context.Context) {
	defer close(ch.started)
	if ch.opts.Off {
		return
	}
	if st, err := ch.s.c.State(ctx); err == nil {
		for i := range st.ActiveClaims {
			if cl := &st.ActiveClaims[i]; cl.Owner == ch.s.c.Name() {
				ch.setOwn(cl.TaskID, cl.Epoch, cl.LeaseExpiresAt)
			}
		}
	}
	if b, err := ch.s.c.Board(ctx); err == nil {
		ch.mu.Lock()
		for _, t := range b.Tasks {
			ch.board[t.TaskID] = t
			if ch.readyLocked(t) {
				ch.ready[t.TaskID] = true // ready before we came: not news
			}
		}
		ch.mu.Unlock()
	}
}

// boardTask files a task's new version and emits task_ready for each task
// suggested to this agent that has just become ready.
func (ch *channel) boardTask(t client.BoardTask) {
	ch.mu.Lock()
	ch.board[t.TaskID] = t
	var fresh []client.BoardTask
	ids := make([]string, 0, len(ch.board))
	for id := range ch.board {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		bt := ch.board[id]
		switch {
		case !ch.readyLocked(bt):
			delete(ch.ready, id)
		case !ch.ready[id]:
			ch.ready[id] = true
			fresh = append(fresh, bt)
		}
	}
	ch.mu.Unlock()
	for _, bt := range fresh {
		ch.emit(ChannelEvent{ID: fmt.Sprintf("ready:%s:%d", bt.TaskID, t.Version), Kind: EventTaskReady,
			Content: fmt.Sprintf("Board task '%s' (%s) is ready: %s done. Take it with the claim tool (board_task %q) and the files it needs.",
				bt.TaskID, bt.Title, strings.Join(bt.DependsOn, ", "), bt.TaskID),
			Meta: map[string]string{"task_id": bt.TaskID, "depends_on": strings.Join(bt.DependsOn, ",")}})
	}
}

// readyLocked: t is suggested to this agent, open, and depends on tasks
// that are all done. A task with no dependencies was ready when declared:
// its declaration is the news, not a dependency's completion.
func (ch *channel) readyLocked(t client.BoardTask) bool {
	if t.SuggestedOwner != ch.s.c.Name() || t.Status != "open" || len(t.DependsOn) == 0 {
		return false
	}
	for _, d := range t.DependsOn {
		if dep, ok := ch.board[d]; !ok || dep.Status != "done" {
			return false
		}
	}
	return true
}

// claim marks task as being claimed through this server until done is
// called (after its keeper starts): its grant frame can come first, and a
// lease the server is about to renew must not be warned of.
func (ch *channel) claim(task string) (done func()) {
	ch.mu.Lock()
	ch.claiming[task]++
	ch.mu.Unlock()
	return func() {
		ch.mu.Lock()
		if ch.claiming[task]--; ch.claiming[task] <= 0 {
			delete(ch.claiming, task)
		}
		ch.mu.Unlock()
	}
}

// setOwn records (expires > 0) or forgets one of this agent's claims.
func (ch *channel) setOwn(task string, epoch int64, expires float64) {
	if task == "" {
		return
	}
	ch.mu.Lock()
	if expires > 0 {
		ch.own[task] = ownLease{epoch: epoch, expires: expires}
	} else {
		delete(ch.own, task)
	}
	ch.mu.Unlock()
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}

// leaseLoop warns of this agent's leases that end within LeaseLead and
// that this server does not renew (claims made elsewhere under this name,
// or before a restart). It sleeps until the next warning is due.
func (ch *channel) leaseLoop() {
	defer ch.s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := ch.warnDue(time.Now())
		timer.Reset(next)
		select {
		case <-ch.s.ctx.Done():
			return
		case <-ch.wake:
		case <-timer.C:
		}
	}
}

// warnDue emits the warnings due at now and returns how long until the
// next one (an hour when none is known: a new claim wakes the loop).
func (ch *channel) warnDue(now time.Time) time.Duration {
	kept := map[string]bool{}
	for _, t := range ch.s.Kept() {
		kept[t] = true
	}
	lead := ch.opts.LeaseLead.Seconds()
	nowS := float64(now.UnixNano()) / 1e9
	next := time.Hour
	var due []ChannelEvent
	ch.mu.Lock()
	// A scan, not a heap: one agent holds a handful of claims.
	for task, l := range ch.own {
		key := fmt.Sprintf("%s:%d", task, l.epoch)
		if kept[task] || ch.claiming[task] > 0 || ch.warned[key] || l.expires <= nowS {
			continue
		}
		if wait := time.Duration((l.expires - lead - nowS) * 1e9); wait > 0 {
			next = min(next, wait)
			continue
		}
		ch.warned[key] = true
		left := time.Duration((l.expires - nowS) * 1e9).Round(time.Second)
		due = append(due, ChannelEvent{ID: "lease:" + key, Kind: EventLeaseExpiring, Urgent: true,
			Content: fmt.Sprintf("Your lease on '%s' ends in %s (at %s) and nothing renews it. Renew it with the renew tool if you are still working on it, or release it with evidence.",
				task, left, rfc3339(l.expires)),
			Meta: map[string]string{"task_id": task, "epoch": strconv.FormatInt(l.epoch, 10), "lease_expires": rfc3339(l.expires)}})
	}
	ch.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].ID < due[j].ID })
	for _, e := range due {
		ch.emit(e)
	}
	return next
}
