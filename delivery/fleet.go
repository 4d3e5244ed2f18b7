package delivery

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/wire"
)

// MailStore keeps directed mail on a fleet (package cluster): letters are
// written by the owner of the addressee's namespace, read by any hub, and
// acknowledged through the owner. hub.Config.Mail turns it on.
type MailStore interface {
	// PostMail stores a letter to identity and returns its seq; this hub
	// must own identity's namespace.
	PostMail(ctx context.Context, identity string, frame []byte) (int64, error)
	// MailAfter calls fn with the letters to identity after max(after, its
	// watermark), oldest first, at most limit, and says how many there were.
	MailAfter(ctx context.Context, identity string, after int64, limit int, fn func(seq int64, frame []byte)) (int, error)
	// AckMail advances identity's watermark; this hub must own its namespace.
	AckMail(ctx context.Context, identity string, seq int64) error
	// WatchMail calls fn with every new letter until ctx ends.
	WatchMail(ctx context.Context, fn func(identity string, seq int64, frame []byte))
}

// Router is the slice of federation the fleet's mail needs: who owns a
// namespace, and forwarding a verb to its owner. *federation.Federation
// satisfies it.
type Router interface {
	// Resolve says who owns namespace ns.
	Resolve(ns string) federation.Resolution
	// Forward sends agent's frame of verb typ to the owner hub.
	Forward(ctx context.Context, owner, agent, typ string, frame []byte, recipientHere, retryable bool) ([][]byte, error)
}

// mailTimeout bounds one mail operation against the store.
var mailTimeout = 5 * time.Second

// fleetMailbox keeps the mailbox in the fleet's MailStore (etcd).
type fleetMailbox struct {
	mail     MailStore
	router   Router
	counters Counters
	log      *slog.Logger
}

// NewFleetMailbox keeps the mailbox in mail, the fleet's: a letter is
// posted and acknowledged at the owner of its addressee's namespace
// (router says which hub that is).
func NewFleetMailbox(mail MailStore, router Router, counters Counters, log *slog.Logger) Mailbox {
	return &fleetMailbox{mail: mail, router: router, counters: counters, log: log}
}

// Carries is the one agent a chat is addressed to when the fleet's mail
// carries it: a plain name in a namespace (no list, glob, role or
// sidecar); "" otherwise (such chats stay with this hub).
func (m *fleetMailbox) Carries(t string) string {
	if t == "" || t == "all" || strings.ContainsAny(t, ",*?[ ") || coord.NamespaceOf(t) == "" || wire.Identity(t) != t {
		return ""
	}
	return t
}

// Post stores a letter to to; every hub's watch hands it to the
// addressee's sockets.
func (m *fleetMailbox) Post(to string, frame []byte) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), mailTimeout)
	defer cancel()
	return m.mail.PostMail(ctx, to, frame)
}

// Replay is mailbox:true on a fleet: the letters after the agent's cursor
// and watermark, read from the store, each marked replayed.
func (m *fleetMailbox) Replay(conn Conn, sender string, in *wire.Inbound) {
	conn.ReleaseBeforeWait() // pages are read from etcd
	id := MailboxIdentity(sender, in.Str("mailbox_for"))
	since, _ := in.LenientInt("since_seq")
	cursor := max(since, 0)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), mailTimeout)
		n, err := m.mail.MailAfter(ctx, id, cursor, mailboxPage, func(seq int64, frame []byte) {
			cursor = seq
			if b, ok := replayFrame(frame, seq); ok {
				m.counters.Replayed.Inc()
				conn.Send(b)
			}
		})
		cancel()
		if err != nil {
			m.log.Warn("hub: fleet mailbox replay stopped", "identity", id, "err", err)
			return
		}
		if n < mailboxPage {
			return
		}
	}
}

// Ack is ack on a fleet: the watermark moves at the owner of the
// identity's namespace (forwarded there when that is another hub).
func (m *fleetMailbox) Ack(conn Conn, sender string, in *wire.Inbound) {
	conn.ReleaseBeforeWait() // the watermark moves in etcd
	seq, ok := ackedSeq(in)
	if !ok {
		return
	}
	id := MailboxIdentity(sender, in.Str("mailbox_for"))
	r := m.router.Resolve(coord.NamespaceOf(id))
	switch r.Outcome {
	case federation.Local:
		ctx, cancel := context.WithTimeout(context.Background(), mailTimeout)
		defer cancel()
		if err := m.mail.AckMail(ctx, id, seq); err != nil {
			m.log.Warn("hub: fleet ack not recorded", "identity", id, "seq", seq, "err", err)
		}
	case federation.Remote:
		if frame, err := json.Marshal(in.Map()); err == nil {
			if _, err := m.router.Forward(context.Background(), r.Owner, sender, "ack", frame, false, true); err != nil {
				m.log.Warn("hub: fleet ack not forwarded", "identity", id, "owner", r.Owner, "err", err)
			}
		}
	}
}
