package hub

// The hub's side of package delivery: the slices of the hub the delivery
// room declares (delivery.Directory, Conn, Sockets, Committer, Events),
// implemented over the registry and the sequencer, and the mailbox counts
// who_snapshot and the dashboard report. The verbs that parse chats and
// history requests are in chat.go; what happens to a chat after them is
// in delivery/.
//
// Two pairs of files reference each other both ways, because this file
// is where the hub's parts meet delivery's needs: hub.go builds these
// adapters in New and committer uses its submit gate; registry.go
// tells the projection of every bind and leave, and directory reads the
// registry (the Directory is the registry). dashboard.go asks for the
// mailbox counts one way: events publishes to package dashboard's Feed.

import (
	"context"
	"sort"
	"time"

	"github.com/synapse-hub/synapse/dashboard"
	"github.com/synapse-hub/synapse/delivery"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/sequencer"
	"github.com/synapse-hub/synapse/wire"
)

// DefaultPendingReceiptWindow is how many receipts may wait for an ack at
// once (the reference's 1024-entry pending window, PROTOCOL.md §4.4).
const DefaultPendingReceiptWindow = 1024

// directory is the registry as delivery.Directory; delivery calls it with
// h.mu held.
type directory struct{ h *Hub }

func (d directory) Bound(name string) bool                 { return d.h.reg.byName[name] != nil }
func (d directory) IdentityRoles(id string) []string       { return d.h.reg.rolesLocked(id) }
func (d directory) InProject(p string) map[string]struct{} { return d.h.reg.byProject[p] }
func (d directory) WithRole(r string) map[string]struct{}  { return d.h.reg.byRole[r] }
func (d directory) Names() []string                        { return d.h.reg.online }

// rolesLocked are the roles an identity holds: its seat's and its
// sidecars'.
func (r *registry) rolesLocked(id string) []string {
	var roles []string
	if rs := r.byName[id]; rs != nil {
		roles = append(roles, rs.roles...)
	}
	for _, n := range wire.Sidecars(id) {
		if rs := r.byName[n]; rs != nil {
			roles = append(roles, rs.roles...)
		}
	}
	return roles
}

// sessionConn is a session as delivery.Conn: called on its read goroutine.
type sessionConn struct{ s *session }

func (c sessionConn) Send(b []byte) bool { return c.s.send(b) }
func (c sessionConn) ReleaseBeforeWait() { c.s.releaseBeforeWait() }

// SendPaced queues a frame without letting a long replay fill the queue:
// it waits while the queue is more than half full (the socket's own read
// goroutine waits, nobody else), so live frames still find room.
func (c sessionConn) SendPaced(b []byte) bool {
	s := c.s
	for !s.is(forwardedVerb) && s.queued() > s.conn.QueueLen()/2 {
		if s.isClosing() {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return s.send(b)
}

// ReachRoles are the roles by which a chat reaches identity id on this
// socket: the identity's seat's and sidecars', and the socket's own.
func (c sessionConn) ReachRoles(id string) []string {
	h := c.s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	return append(h.reg.rolesLocked(id), c.s.roles...)
}

// sockets finds bound sessions for delivery (settled receipts).
type sockets struct{ h *Hub }

func (k sockets) Socket(name string) (delivery.Conn, bool) {
	k.h.mu.Lock()
	rs := k.h.reg.byName[name]
	k.h.mu.Unlock()
	if rs == nil {
		return nil, false
	}
	return sessionConn{rs}, true
}

// committer commits journal-only records through the sequencer, in its
// group commit (delivery.Committer).
type committer struct{ h *Hub }

// Commit commits recs; committed, when not nil, runs on the sequencer
// goroutine after the commit, with h.mu held, with the seq of the first
// record.
func (c committer) Commit(recs []journal.Record, committed func(seq int64)) (int64, error) {
	h := c.h
	if !h.beginSubmit() {
		return 0, errClosing
	}
	defer h.submits.Done()
	req := sequencer.Request{Records: recs}
	if committed != nil {
		req.Committed = func(r sequencer.Reply) {
			h.mu.Lock()
			committed(r.Seq)
			h.mu.Unlock()
		}
	}
	r, err := h.seq.Submit(context.Background(), req)
	return r.Seq, err
}

// events publishes delivery's changes on the dashboard's feed; called
// with h.mu held (the feed's lock is taken under it).
type events struct{ h *Hub }

func (e events) Listening() bool          { return e.h.feed.Listening() }
func (e events) MailboxChanged(id string) { e.h.feed.Mailbox(id) }
func (e events) DeadLettered(d delivery.DeadLetter) {
	e.h.feed.DeadLetter(dashboard.APIDeadLetter{Target: d.Target, Count: d.Count, LastTS: d.LastTS, LastSender: d.LastSender})
}

// deliveryCounters are the metrics delivery counts into.
func (m *metrics) deliveryCounters() delivery.Counters {
	return delivery.Counters{
		ChatFrames:      m.framesOut.WithLabelValues("chat"),
		ReceiptFrames:   m.framesOut.WithLabelValues("delivery_receipt"),
		ChatDirected:    m.chatDirected,
		Replayed:        m.replayed,
		ReceiptsExpired: m.receiptsExpired,
	}
}

// newReceipts makes the hub's receipts around its pending window.
func newReceipts(h *Hub, w *delivery.Window) *delivery.Receipts {
	var st delivery.Journal // nil, not a nil *journal.Store: no outbox
	if h.cfg.Journal != nil {
		st = h.cfg.Journal
	}
	return delivery.NewReceipts(delivery.ReceiptsConfig{HubID: h.cfg.HubID, Clock: h.cfg.Clock, Window: w, History: h.history,
		Journal: st, Sockets: sockets{h}, Commit: committer{h}, Counters: h.m.deliveryCounters(), Logger: h.log})
}

// newMailbox is the hub's kind of mailbox: the fleet's with Config.Mail,
// else the journal's, else none.
func newMailbox(h *Hub) delivery.Mailbox {
	switch {
	case h.cfg.Mail != nil:
		return delivery.NewFleetMailbox(h.cfg.Mail, h.fed, h.m.deliveryCounters(), h.log)
	case h.cfg.Journal != nil:
		return delivery.NewJournalMailbox(h.cfg.Journal, committer{h}, h.mb, h.receipts, h.m.deliveryCounters(), h.log)
	}
	return delivery.NoMailbox
}

// mailboxPresenceLocked tells the mailbox projection that name bound or
// left; a hub without a journal keeps no projection.
func (h *Hub) mailboxPresenceLocked(name string) {
	if h.cfg.Journal != nil {
		h.mb.PresenceLocked(name)
	}
}

// mailboxView reads the mailbox projection's counts for who_snapshot and
// the dashboard; it takes h.mu itself, so its callers hold no lock.
type mailboxView struct{ h *Hub }

// pendingJSON is who_snapshot.mailbox_pending: every online identity, and
// every other known identity with something waiting.
func (v mailboxView) pendingJSON() []byte {
	counts := v.counts()
	ids := make([]string, 0, len(counts))
	for id := range counts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	f := wire.Object()
	for _, id := range ids {
		f.Int(id, counts[id])
	}
	return f.Bytes()
}

// counts is pendingJSON as a map (also the dashboard's mailbox_pending).
func (v mailboxView) counts() map[string]int64 {
	h := v.h
	h.mu.Lock()
	ids := h.mb.WaitingLocked()
	h.mu.Unlock()
	counts := make(map[string]int64, len(ids))
	for _, id := range ids {
		n, ok := v.recount(id)
		if ok && (n > 0 || v.online(id)) {
			counts[id] = n
		}
	}
	return counts
}

func (v mailboxView) online(id string) bool {
	h := v.h
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reg.byName[id] != nil
}

// recount makes id's count exact if it is not and returns it: the
// projection decides under h.mu what to read, the journal is read
// outside it, and the result lands under it unless the identity's entry
// changed meanwhile (then it tries again, at most three times).
func (v mailboxView) recount(id string) (int64, bool) {
	h := v.h
	for attempt := 0; attempt < 3; attempt++ {
		h.mu.Lock()
		n, ok, done, r := h.mb.BeginRecountLocked(id)
		h.mu.Unlock()
		if done {
			return n, ok
		}
		if err := h.mb.Scan(h.cfg.Journal, r); err != nil {
			return 0, false
		}
		h.mu.Lock()
		n, ok = h.mb.FinishRecountLocked(r)
		h.mu.Unlock()
		if ok {
			return n, true
		}
	}
	return 0, false
}

// heartbeat refreshes the sender (register did) and, asked with
// "mailbox": true, replays its mailbox (PROTOCOL.md §4.1).
func (s *session) heartbeat(sender, _ string, in *wire.Inbound) {
	if m, _ := in.Value("mailbox").(bool); m { // literal true only
		s.h.mail.Replay(sessionConn{s}, sender, in)
	}
}

// ack settles delivery receipts (PROTOCOL.md §4.4).
func (s *session) ack(sender, _ string, in *wire.Inbound) {
	s.h.mail.Ack(sessionConn{s}, sender, in)
}
