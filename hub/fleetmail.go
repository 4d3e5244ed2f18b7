package hub

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/wire"
)

// MailStore keeps directed mail on a fleet (package cluster): letters are
// written by the owner of the addressee's namespace, read by any hub, and
// acknowledged through the owner. Config.Mail turns it on.
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

// mailTimeout bounds one mail operation against the store.
var mailTimeout = 5 * time.Second

// fleetAddressee is the one agent a chat is addressed to when the fleet's
// mail carries it: a plain name in a namespace (no list, glob, role or
// sidecar); "" otherwise (such chats stay with this hub).
func fleetAddressee(t string) string {
	if t == "" || t == "all" || strings.ContainsAny(t, ",*?[ ") || coord.NamespaceOf(t) == "" || identity(t) != t {
		return ""
	}
	return t
}

// fleetChat carries a directed chat on a fleet: the owner of the
// addressee's namespace stores it (forwarded there when that is another
// hub), every hub's watch hands it to the addressee's sockets, and the
// sender gets its echo with the letter's seq. It reports whether it took
// the chat.
func (s *session) fleetChat(sender string, c *chatMsg, in *wire.Inbound) bool {
	h := s.h
	to := fleetAddressee(c.t)
	if h.cfg.Mail == nil || to == "" {
		return false
	}
	s.releaseBeforeWait() // the letter goes through etcd
	r := h.fed.Resolve(coord.NamespaceOf(to))
	switch r.Outcome {
	case federation.Local:
		ctx, cancel := context.WithTimeout(context.Background(), mailTimeout)
		defer cancel()
		seq, err := h.cfg.Mail.PostMail(ctx, to, c.frame)
		if err != nil {
			s.refuseCode(sender, "chat", in, "NAMESPACE_MOVING", "The message was not stored: "+err.Error()+". Retry shortly.", func(f *wire.Frame) {
				f.Int("retry_after_ms", 250)
			})
			return true
		}
		frame := withSeq(c.frame, seq)
		h.mu.Lock()
		h.reg.history = append(h.reg.history, chatEntry{msgID: c.msgID, seq: seq, sender: c.sender, target: c.target, frame: frame})
		h.mu.Unlock()
		h.m.chatDirected.Inc()
		s.send(frame) // the sender's echo; the addressee gets it from the watch
		return true
	case federation.Remote:
		s.forward(sender, "chat", in, r, false, false) // chat is at-least-once: never re-sent on its own (INV-DG-1)
		return true
	}
	s.refuseFederated(sender, "chat", in, r, nil)
	return true
}

// deliverLetter hands a letter from the fleet's mail to the sockets of its
// addressee on this hub (and its sidecars).
func (h *Hub) deliverLetter(to string, seq int64, frame []byte) {
	b := withSeq(frame, seq)
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	h.recipientsLocked(to, "", func(rs *session) {
		if rs.send(b) {
			n++
		}
	})
	h.m.framesOut.WithLabelValues("chat").Add(float64(n))
}

// fleetReplay is mailbox:true on a fleet: the letters after the agent's
// cursor and watermark, read from the store, each marked replayed.
func (s *session) fleetReplay(sender string, in *wire.Inbound) {
	h := s.h
	s.releaseBeforeWait() // pages are read from etcd
	id := mailboxIdentity(sender, in.Str("mailbox_for"))
	since, _ := in.LenientInt("since_seq")
	cursor := max(since, 0)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), mailTimeout)
		n, err := h.cfg.Mail.MailAfter(ctx, id, cursor, mailboxPage, func(seq int64, frame []byte) {
			cursor = seq
			if b, ok := replayFrame(frame, seq); ok {
				h.m.replayed.Inc()
				s.reply(b)
			}
		})
		cancel()
		if err != nil {
			h.log.Warn("hub: fleet mailbox replay stopped", "identity", id, "err", err)
			return
		}
		if n < mailboxPage {
			return
		}
	}
}

// fleetAck is ack on a fleet: the watermark moves at the owner of the
// identity's namespace (forwarded there when that is another hub).
func (s *session) fleetAck(sender string, in *wire.Inbound) {
	h := s.h
	s.releaseBeforeWait() // the watermark moves in etcd
	seq, ok := jsonInt(in.Value("seq"))
	if !ok || seq <= 0 {
		return
	}
	id := mailboxIdentity(sender, in.Str("mailbox_for"))
	r := h.fed.Resolve(coord.NamespaceOf(id))
	switch r.Outcome {
	case federation.Local:
		ctx, cancel := context.WithTimeout(context.Background(), mailTimeout)
		defer cancel()
		if err := h.cfg.Mail.AckMail(ctx, id, seq); err != nil {
			h.log.Warn("hub: fleet ack not recorded", "identity", id, "seq", seq, "err", err)
		}
	case federation.Remote:
		if frame, err := json.Marshal(in.Map()); err == nil {
			if _, err := h.fed.Forward(context.Background(), r.Owner, sender, "ack", frame, false, true); err != nil {
				h.log.Warn("hub: fleet ack not forwarded", "identity", id, "owner", r.Owner, "err", err)
			}
		}
	}
}
