package hub

import (
	"sort"
	"strings"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/delivery"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/wire"
)

// chatEnvelope are the fields the hub writes itself; every other field of
// a chat is carried verbatim (PROTOCOL.md §2.2).
var chatEnvelope = map[string]bool{
	"sender": true, "target": true, "type": true, "payload": true, "timestamp": true,
	"client_timestamp": true, "hub_id": true, "msg_id": true, "seq": true,
	"client_msg_id": true, "token": true, "replayed": true,
}

// chatMsg is one chat between its stamping and its fan-out, with the
// socket it came in on (its echo).
type chatMsg struct {
	s *session
	delivery.Chat
}

// chat relays a chat (PROTOCOL.md §2.2) with the hub clock (INV-CK-1),
// at least once (INV-DG-1: idem_key is never consumed, client_msg_id is
// echoed on every copy). With a journal it is committed first, through the
// sequencer, and every copy carries its durable seq; a receipt-requested
// directed chat commits with its receipt aggregate in one FULL transaction
// (delivery/receipts.go). A directed chat goes to its recipients, their
// sidecars and the sender only, and is readable in history by them only
// (the reference relays it to every socket and every history reader).
func (s *session) chat(sender string, in *wire.Inbound) {
	h := s.h
	if name, ok := chatChannel(in); ok { // a private channel's (channels.go)
		s.channelChat(sender, name, in)
		return
	}
	if in.Has("response_to_seq") || in.Has("response_status") || in.Has("response_evidence_scope") {
		s.fail(sender, "semantic_response_unavailable", "Semantic responses are not served by this hub.")
		return
	}
	target := in.Str("target")
	if !in.Has("target") || in.Value("target") == nil {
		target = "all"
	}
	t := strings.TrimSpace(target)
	c := &chatMsg{s: s, Chat: delivery.Chat{Sender: sender, Target: target, To: t, Receipt: in.Truthy("receipt_requested")}}
	c.Broadcast = t == "" || t == "all"
	c.Directed = journal.IsDirected(t)

	c.ClientMsgID, c.HasClientMsgID = wire.ClientMsgID(in.Value("client_msg_id"))
	build := chatBuilder(h.cfg.HubID, sender, target, in, nil)
	c.Build = func(msgID int64) []byte { return build(c.Now, msgID) }
	h.mu.Lock()
	c.Now = h.now()
	to := h.mail.Carries(c.To) // the fleet's mail carries it, not the fan-out
	if to != "" && h.cfg.Chats != nil && !s.is(forwardedVerb) && h.fleetRoleLocked(to) {
		to = "" // a role, not an agent's mailbox (a forwarded letter stays one: its hub judged it)
	}
	if to == "" && h.cfg.Chats != nil { // the fleet's chats carry it (fleetchat.go)
		c.Part = h.fleetReachLocked(c)
		h.mu.Unlock()
		s.postFleetChat(sender, c)
		return
	}
	if h.cfg.Journal == nil || to != "" {
		// Stamped and fanned out under h.mu: msg_ids reach every socket in
		// order. A journalled chat takes its msg_id in the journal's append
		// instead (Receipts.ChatRecords), in the order it is delivered.
		c.Stamp(h.history.NextMsgID())
	}
	if to != "" {
		h.mu.Unlock()
		s.fleetChat(sender, to, c, in)
		return
	}
	if c.Broadcast {
		if c.Receipt {
			seen := map[string]bool{}
			for _, n := range h.reg.onlineLocked() {
				if id := identity(n); n != sender && !seen[id] {
					seen[id] = true
					c.Part.Matched = append(c.Part.Matched, id)
				}
			}
			c.Part.Live = c.Part.Matched
		}
	} else {
		c.Part = h.partitionLocked(t, sender, c.Now)
	}
	st := h.cfg.Journal
	if st == nil {
		h.deliverLocked(c, 0)
		h.mu.Unlock()
		if c.Receipt {
			h.receipts.SendImmediate(sessionConn{s}, &c.Chat)
		}
		return
	}
	h.mu.Unlock()

	recs, rcpt := h.receipts.ChatRecords(&c.Chat)
	if _, ok := s.submitRecords(sender, recs, func(seq int64) {
		h.deliverLocked(c, seq)
	}); !ok {
		h.receipts.Failed(rcpt)
		return
	}
	h.receipts.Committed(sessionConn{s}, &c.Chat, rcpt)
}

// chatBuilder returns what encodes a chat frame as relayed, stamped at
// now with msgID: the hub's envelope, then every other field of in
// verbatim, sorted, then the fields add writes (nil: none).
func chatBuilder(hubID, sender, target string, in *wire.Inbound, add func(*wire.Frame)) func(now float64, msgID int64) []byte {
	ct, hasCT := wire.ClientTimestamp(in.Value("timestamp"))
	cmid, hasCMID := wire.ClientMsgID(in.Value("client_msg_id"))
	m := in.Map()
	extra := make([]string, 0, len(m))
	for k := range m {
		if !chatEnvelope[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	return func(now float64, msgID int64) []byte {
		f := wire.Object().Str("sender", sender).Str("target", target).Str("type", "chat")
		f.Append("payload", func(b []byte) []byte { return wire.AppendAny(b, in.Value("payload"), "") })
		f.Float("timestamp", now)
		if hasCT {
			f.Float("client_timestamp", ct)
		}
		f.Str("hub_id", hubID).Int("msg_id", msgID)
		if hasCMID {
			f.Str("client_msg_id", cmid)
		}
		for _, k := range extra {
			v := m[k]
			f.Append(k, func(b []byte) []byte { return wire.AppendAny(b, v, nil) })
		}
		if add != nil {
			add(f)
		}
		return f.Bytes()
	}
}

// submitRecords is committer.Commit for a verb: a failure is the sender's
// error frame.
func (s *session) submitRecords(sender string, recs []journal.Record, committed func(seq int64)) (int64, bool) {
	seq, err := committer{s.h}.Commit(recs, committed)
	switch {
	case err == nil:
		return seq, true
	case err == errClosing:
		s.fail(sender, "shutting_down", "Hub is shutting down.")
	default:
		s.fail(sender, "journal_unavailable", journalRefusal(s.h.journalName(), "The chat", err)+" It was not delivered.")
	}
	return 0, false
}

// deliverLocked stamps seq (when journalled), keeps the chat in history
// and fans it out: a broadcast to every socket, anything else to the
// sockets it addresses and the sender's own. A directed chat that reached
// no live recipient is a dead letter; the mailbox projection counts it.
func (h *Hub) deliverLocked(c *chatMsg, seq int64) {
	frame := c.Frame
	if seq > 0 {
		frame = delivery.WithSeq(frame, seq)
	}
	h.history.AppendLocked(delivery.Entry{MsgID: c.MsgID, Seq: seq, Sender: c.Sender, Target: c.Target, Public: c.Broadcast, Frame: frame})
	if c.Broadcast {
		h.m.chatBroadcast.Inc()
		h.broadcastLocked(frame, audience{everyone: true}, "chat")
		return
	}
	h.m.chatDirected.Inc()
	sent := 0
	h.recipientsLocked(c.To, c.Sender, func(rs *session) {
		if rs != c.s && rs.send(frame) {
			sent++
		}
	})
	if c.s.send(frame) {
		sent++
	}
	h.m.framesOut.WithLabelValues("chat").Add(float64(sent))
	if c.Directed && !c.Part.Delivered() {
		h.dead.CountLocked(c.To, c.Sender, c.Now)
	}
	if c.Directed && seq > 0 {
		h.mb.OnChatLocked(seq, c.Sender, c.To)
	}
}

// partitionLocked splits the identities a chat target reaches (the
// sender's sockets apart) into live and stale (PROTOCOL.md §2.2 step 8):
// live when a sidecar of the identity was seen within 20 s or the seat
// reacted (a non-heartbeat frame, or its bind) within 90 s. Presence alone
// never makes a chat "delivered" (INV-DG-3).
func (h *Hub) partitionLocked(t, sender string, now float64) delivery.Partition {
	matched := map[string]bool{}
	h.recipientsLocked(t, sender, func(rs *session) {
		id := identity(rs.name)
		live := now-rs.lastReaction <= livenessWindow
		if rs.name != id {
			live = live || now-h.reg.lastSeen[rs.name] <= sidecarWindow
		}
		matched[id] = matched[id] || live
	})
	p := delivery.Partition{Caps: map[string]string{}}
	for id, live := range matched {
		p.Matched = append(p.Matched, id)
		if live {
			p.Live = append(p.Live, id)
		} else {
			p.Stale = append(p.Stale, id)
		}
		c := "unknown"
		if rs := h.reg.byName[id]; rs != nil && rs.wake != "" {
			c = rs.wake
		}
		p.Caps[id] = c
	}
	sort.Strings(p.Matched)
	sort.Strings(p.Live)
	sort.Strings(p.Stale)
	return p
}

// sidecarWindow: a sidecar seen this recently proves its identity live.
const sidecarWindow = 20.0

// journalDeadLetterClear makes a dead letter cleared by sender's frame
// stay cleared after a restart (delivery.ClearedRecord). It commits at
// NORMAL, which a SIGKILL does not lose, before the frame is served. Read
// goroutine.
func (s *session) journalDeadLetterClear(sender string) {
	through := s.deadCleared
	s.deadCleared = 0
	if s.h.cfg.Journal == nil {
		return
	}
	if _, err := (committer{s.h}).Commit([]journal.Record{delivery.ClearedRecord(sender, through)}, nil); err != nil && err != errClosing {
		s.h.log.Warn("hub: dead-letter clear not journalled", "target", sender, "err", err)
	}
}

// fleetChat carries a directed chat to to on a fleet: the owner of the
// addressee's namespace stores it (forwarded there when that is another
// hub), every hub's watch hands it to the addressee's sockets
// (deliverLetter), and the sender gets its echo with the letter's seq.
func (s *session) fleetChat(sender, to string, c *chatMsg, in *wire.Inbound) {
	h := s.h
	s.releaseBeforeWait() // the letter goes through etcd
	r := h.fed.Resolve(coord.NamespaceOf(to))
	switch r.Outcome {
	case federation.Local:
		seq, err := h.mail.Post(to, c.Frame)
		if err != nil {
			s.refuseCode(sender, "", in, "NAMESPACE_MOVING", "The message was not stored: "+err.Error()+". Retry shortly.", func(f *wire.Frame) {
				f.Int("retry_after_ms", 250)
			})
			return
		}
		frame := delivery.WithSeq(c.Frame, seq)
		h.mu.Lock()
		h.history.AppendLocked(delivery.Entry{MsgID: c.MsgID, Seq: seq, Sender: c.Sender, Target: c.Target, Frame: frame})
		// Judged here, at the owner, whichever hub the sender is on: the
		// receipt goes back with the echo (over the forward when the
		// sender is elsewhere), and an undelivered letter dead-letters
		// once, here (issue 22 item 2).
		c.Part = h.fleetPartitionLocked(to, sender, c.Now)
		if !c.Part.Delivered() {
			h.dead.CountLocked(to, sender, c.Now)
		}
		h.mu.Unlock()
		h.m.chatDirected.Inc()
		s.send(frame) // the sender's echo; the addressee gets it from the watch
		if c.Receipt {
			h.receipts.SendImmediateSeq(sessionConn{s}, &c.Chat, seq)
		}
	case federation.Remote:
		s.forward(sender, "chat", in, r, false, false) // chat is at-least-once: never re-sent on its own (INV-DG-1)
	default:
		s.refuseFederated(sender, "chat", in, r, nil)
	}
}

// deliverLetter hands a letter from the fleet's mail to the sockets of its
// addressee on this hub (and its sidecars).
func (h *Hub) deliverLetter(to string, seq int64, frame []byte) {
	b := delivery.WithSeq(frame, seq)
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

// visibleLocked reports whether s may read chat e: broadcasts, its own
// chats and chats addressed to it (by name, sidecar identity, project or
// role, judged now).
func (h *Hub) visibleLocked(e *delivery.Entry, s *session) bool {
	if e.Public || e.Sender == s.name || identity(e.Sender) == identity(s.name) {
		return true
	}
	return h.addressedLocked(strings.TrimSpace(e.Target), s)
}

func (s *session) historyRequest(sender string, in *wire.Inbound) {
	h := s.h
	limit, ok := in.LenientInt("limit")
	if ok && limit < 1 {
		limit = 1
	}
	all := int64(-1)
	if ok {
		all = limit
	}
	h.mu.Lock()
	picked := h.history.NewestLocked(all, func(e *delivery.Entry) bool { return h.visibleLocked(e, s) })
	h.mu.Unlock()
	f := s.frame("history_snapshot", sender, "History snapshot").Append("history", func(b []byte) []byte {
		return wire.List(b, picked, func(b, fr []byte) []byte { return append(b, fr...) })
	})
	if ok {
		f.Int("requested_limit", limit)
	} else {
		f.Str("requested_limit", "all")
	}
	h.m.framesOut.WithLabelValues("history_snapshot").Inc()
	s.reply(f.Bytes())
}

func (s *session) resumeRequest(sender string, in *wire.Inbound) {
	h := s.h
	since, _ := in.LenientInt("since")
	h.mu.Lock()
	picked := h.history.SinceLocked(since, func(e *delivery.Entry) bool { return h.visibleLocked(e, s) })
	h.mu.Unlock()
	f := s.frame("resume_snapshot", sender, "Resume snapshot").Int("since", since).Append("messages", func(b []byte) []byte {
		return wire.List(b, picked, func(b, fr []byte) []byte { return append(b, fr...) })
	})
	h.m.framesOut.WithLabelValues("resume_snapshot").Inc()
	s.reply(f.Bytes())
}
