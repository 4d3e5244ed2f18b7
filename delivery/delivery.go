// Package delivery is where a hub's chats go after the chat verb parsed
// them: the chat history, the dead-letter ledger, the mailbox (replay, ack
// and the pending projection that who_snapshot.mailbox_pending reports),
// delivery receipts with their pending window and outbox, and the fleet's
// mail (PROTOCOL.md §2.2–2.3, §4.4–4.6; INV-DG-1, INV-DG-3, INV-RR-2).
//
// The room declares the slice of the hub it needs, and the hub (package
// hub) satisfies it: a Journal (the delivery tables of *journal.Store), a
// Directory of who is bound and by which roles, the Conn a verb came in on
// and the Sockets of bound names, a Committer into the sequencer's group
// commit, and an Events sink for the dashboard. Mailbox is the one
// interface the verbs call for mailbox:true and ack: a journal-backed, a
// fleet-backed (MailStore on etcd) or no mailbox, chosen when the hub is
// built.
//
// # Locks
//
// Delivery never takes the hub's lock (Hub.mu) itself; each method says
// what its caller holds:
//
//   - Methods whose names end in Locked (History, DeadLetters, Projection)
//     must be called with Hub.mu held: that state belongs with the
//     registry, which Hub.mu guards, so a chat's fan-out, its history
//     entry, its dead letter and its mailbox count happen in the same
//     total order as presence and broadcasts. Directory and Events are
//     called only from those methods, so with Hub.mu held; an Events
//     implementation may take the feed's lock (Hub.mu → feed), never
//     Hub.mu.
//   - Everything else — Mailbox, Receipts, Window, Load, Projection.Read,
//     History.NextMsgID — must be called without Hub.mu. Conn.ReachRoles
//     and Sockets.Socket take Hub.mu inside the hub's implementation, and
//     a Committer's committed callback runs on the sequencer goroutine
//     with Hub.mu held (taken by the hub), so the projection is updated
//     under it. The hub's mailbox counts drive a recount in phases
//     (Projection.BeginRecountLocked outside-the-lock Recount.Scan,
//     Projection.FinishRecountLocked), taking Hub.mu around the first and
//     the last.
//   - The journal mailbox's ackMu serialises ack and registration-cursor
//     decisions, so a pending receipt is settled once: it is held across
//     a Commit (ackMu → sequencer → Hub.mu) and never taken under Hub.mu.
//   - Window has its own mutex, guarding its members and reservations; it
//     is taken alone (under ackMu on an ack, on the sequencer goroutine in
//     a Stamp), never with Hub.mu held. Window.Reserve may wait.
package delivery

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

// Journal is the slice of the journal delivery reads: the chat tail, the
// directed_chats index, the mailbox watermarks, the pending receipts and
// the receipt outbox. *journal.Store satisfies it.
type Journal interface {
	// ChatTail returns the newest n chat rows, oldest first.
	ChatTail(n int) ([]journal.ChatRow, error)
	// Directed returns the directed chat at seq, if seq is one.
	Directed(seq int64) (journal.DirectedChat, bool, error)
	// DirectedPage returns at most limit directed chats after seq after.
	DirectedPage(after int64, limit int, withPayload bool) ([]journal.DirectedChat, error)
	// ScanDirected calls fn with every directed chat after seq after, in
	// seq order, until fn returns an error.
	ScanDirected(after int64, fn func(journal.DirectedChat) error) error
	// Watermark is identity's mailbox watermark (0 when it has none).
	Watermark(identity string) (int64, error)
	// Watermarks are every identity's watermark.
	Watermarks() (map[string]int64, error)
	// LastSeq is the newest seq in the journal.
	LastSeq() (int64, error)
	// PendingReceiptRows are the receipts awaiting an ack, in seq order.
	PendingReceiptRows() ([]journal.ReceiptRow, error)
	// OutboxPending are sender's receipt notifications not yet delivered.
	OutboxPending(sender string) ([]journal.OutboxRow, error)
	// MarkOutbox records a delivery attempt of an outbox row at time at.
	MarkOutbox(id string, delivered bool, at float64) error
}

// Directory is who is bound and by which roles: the slice of the hub's
// registry the mailbox projection reads. Every method is called with
// Hub.mu held, and what it returns is read-only and valid only while it is.
type Directory interface {
	// Bound reports whether a live session owns name.
	Bound(name string) bool
	// IdentityRoles are the roles identity id holds through its seat and
	// its sidecars (-rx, -pane-rx), in a slice the caller may keep.
	IdentityRoles(id string) []string
	// InProject is the set of bound names in project p (nil when none).
	InProject(p string) map[string]struct{}
	// WithRole is the set of bound names holding role r (nil when none).
	WithRole(r string) map[string]struct{}
	// Names are the bound names, sorted.
	Names() []string
}

// Conn is the socket a verb came in on. Its methods are called on that
// socket's read goroutine, without Hub.mu.
type Conn interface {
	// Send queues frame without blocking; false when the socket is gone
	// (a full queue drops it as a slow consumer).
	Send(frame []byte) bool
	// SendPaced queues frame once the socket's queue is at most half
	// full, waiting for that; false when the socket is gone.
	SendPaced(frame []byte) bool
	// ReleaseBeforeWait ends the read goroutine's hold on the socket
	// before it waits on something slow (etcd, another hub).
	ReleaseBeforeWait()
	// ReachRoles are the roles by which a chat reaches identity id on
	// this socket: those of id's seat and sidecars and the socket's own.
	// The hub takes Hub.mu to read them.
	ReachRoles(id string) []string
}

// Sockets finds the socket bound to a name, outside Hub.mu.
type Sockets interface {
	// Socket returns the socket bound to name, if any; the hub takes
	// Hub.mu to look it up.
	Socket(name string) (Conn, bool)
}

// Committer is the hub's way into the sequencer's group commit, for
// records that change no coordination state.
type Committer interface {
	// Commit commits recs and returns the seq of the first. committed,
	// when not nil, runs on the sequencer goroutine after the commit, in
	// seq order, with Hub.mu held. Call it without Hub.mu.
	Commit(recs []journal.Record, committed func(seq int64)) (int64, error)
}

// Events is where delivery tells the dashboard what changed. Its methods
// are called with Hub.mu held.
type Events interface {
	// Listening reports whether anyone would hear an event (so one is
	// built only then).
	Listening() bool
	// MailboxChanged says identity's mailbox backlog changed.
	MailboxChanged(identity string)
	// DeadLettered says target's dead-letter entry is now d (Count 0:
	// cleared).
	DeadLettered(d DeadLetter)
}

// Counters are the hub's metrics delivery counts into.
type Counters struct {
	ChatFrames      prometheus.Counter // frames_out{type="chat"}
	ReceiptFrames   prometheus.Counter // frames_out{type="delivery_receipt"}
	ChatDirected    prometheus.Counter // directed chats relayed
	Replayed        prometheus.Counter // directed chats re-sent by mailbox replay
	ReceiptsExpired prometheus.Counter // pending receipts evicted from the window
}

// IsRecipient matches a target (a name, comma list, fnmatch glob, project
// or role) against a reader's names and roles (PROTOCOL.md §2.2 step 7).
func IsRecipient(target string, names, roles []string) bool {
	for _, part := range strings.Split(target, ",") {
		p := strings.TrimSpace(part)
		if p == "" {
			continue
		}
		for _, n := range names {
			if wire.Fnmatch(n, p) {
				return true
			}
			if ns := coord.NamespaceOf(n); ns != "" && wire.Fnmatch(ns, p) {
				return true
			}
		}
		for _, r := range roles {
			if wire.Fnmatch(r, p) {
				return true
			}
		}
	}
	return false
}

// LiteralTarget reports whether every part of a chat target is literal
// (wire.Literal): who it reaches is found by lookup, not by a scan.
func LiteralTarget(t string) bool {
	for part := range strings.SplitSeq(t, ",") {
		if p := strings.TrimSpace(part); p != "" && !wire.Literal(p) {
			return false
		}
	}
	return true
}

// WithSeq appends "seq" to an encoded JSON object.
func WithSeq(frame []byte, seq int64) []byte {
	b := make([]byte, 0, len(frame)+24)
	b = append(b, frame[:len(frame)-1]...)
	b = append(b, `,"seq":`...)
	b = pyjson.AppendInt(b, seq)
	return append(b, '}')
}

func itoa(n int64) string { return string(pyjson.AppendInt(nil, n)) }
