package hub

import (
	"encoding/json"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

// chatEntry is one relayed chat kept for history_request/resume_request.
type chatEntry struct {
	msgID  int64
	seq    int64 // journal seq, 0 without a journal
	sender string
	target string
	public bool   // a broadcast: everyone may read it
	frame  []byte // as relayed (seq stamped)
}

// deadLetter counts directed chats that reached no live recipient
// (PROTOCOL.md §4.6). The chats themselves are in the journal (when there
// is one), and the ledger is rebuilt from it on restart (mailbox.go).
type deadLetter struct {
	count      int64
	lastTS     float64
	lastSender string
}

// chatEnvelope are the fields the hub writes itself; every other field of
// a chat is carried verbatim (PROTOCOL.md §2.2).
var chatEnvelope = map[string]bool{
	"sender": true, "target": true, "type": true, "payload": true, "timestamp": true,
	"client_timestamp": true, "hub_id": true, "msg_id": true, "seq": true,
	"client_msg_id": true, "token": true, "replayed": true,
}

// chatMsg is one chat between its stamping and its fan-out.
type chatMsg struct {
	s         *session // the sender's socket (its echo)
	msgID     int64
	sender    string
	target    string // as sent
	t         string // trimmed
	broadcast bool
	directed  bool                     // journal.IsDirected: dead-letters and is replayed
	frame     []byte                   // as relayed, once stamp has run
	build     func(msgID int64) []byte // encodes the frame with its msg_id
	cmid      string
	hasCMID   bool
	now       float64
	receipt   bool // receipt_requested
	part      partition
}

// partition is the liveness partition of a chat's matched recipients
// (PROTOCOL.md §2.2 step 8), identities sorted.
type partition struct {
	matched, live, stale []string
	caps                 map[string]string
}

func (p *partition) delivered() bool { return len(p.live) > 0 }

// chat relays a chat (PROTOCOL.md §2.2) with the hub clock (INV-CK-1),
// at least once (INV-DG-1: idem_key is never consumed, client_msg_id is
// echoed on every copy). With a journal it is committed first, through the
// sequencer, and every copy carries its durable seq; a receipt-requested
// directed chat commits with its receipt aggregate in one FULL transaction
// (receipts.go). A directed chat goes to its recipients, their sidecars
// and the sender only, and is readable in history by them only (the
// reference relays it to every socket and every history reader).
func (s *session) chat(sender string, in *wire.Inbound) {
	h := s.h
	if c := in.Str("channel"); c != "" {
		s.fail(sender, "not_channel_member", "not a member of channel '"+c+"'")
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
	c := &chatMsg{s: s, sender: sender, target: target, t: t, receipt: in.Truthy("receipt_requested")}
	c.broadcast = t == "" || t == "all"
	c.directed = journal.IsDirected(t)

	ct, hasCT := clientTimestamp(in.Value("timestamp"))
	c.cmid, c.hasCMID = clientMsgID(in.Value("client_msg_id"))
	m := in.Map()
	extra := make([]string, 0, len(m))
	for k := range m {
		if !chatEnvelope[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	c.build = func(msgID int64) []byte {
		f := wire.Object().Str("sender", sender).Str("target", target).Str("type", "chat")
		f.Append("payload", func(b []byte) []byte { return appendAny(b, in.Value("payload"), "") })
		f.Float("timestamp", c.now)
		if hasCT {
			f.Float("client_timestamp", ct)
		}
		f.Str("hub_id", h.cfg.HubID).Int("msg_id", msgID)
		if c.hasCMID {
			f.Str("client_msg_id", c.cmid)
		}
		for _, k := range extra {
			v := m[k]
			f.Append(k, func(b []byte) []byte { return appendAny(b, v, nil) })
		}
		return f.Bytes()
	}
	h.mu.Lock()
	c.now = h.now()
	fleet := h.cfg.Mail != nil && fleetAddressee(c.t) != ""
	if h.cfg.Journal == nil || fleet {
		// Stamped and fanned out under h.mu: msg_ids reach every socket in
		// order. A journalled chat takes its msg_id in the journal's append
		// instead (chatRecords), in the order it is delivered.
		c.stamp(h.reg.msgID.Add(1))
	}
	if fleet {
		h.mu.Unlock()
		s.fleetChat(sender, c, in)
		return
	}
	if c.broadcast {
		if c.receipt {
			seen := map[string]bool{}
			for _, n := range h.onlineLocked() {
				if id := identity(n); n != sender && !seen[id] {
					seen[id] = true
					c.part.matched = append(c.part.matched, id)
				}
			}
			c.part.live = c.part.matched
		}
	} else {
		c.part = h.partitionLocked(t, sender, c.now)
	}
	st := h.cfg.Journal
	if st == nil {
		h.deliverLocked(c, 0)
		h.mu.Unlock()
		if c.receipt {
			s.sendReceipt(h.immediateReceipt(c, 0, ""))
		}
		return
	}
	h.mu.Unlock()

	recs, rcpt := h.chatRecords(c)
	if _, ok := s.submitRecords(sender, recs, func(seq int64) {
		h.mu.Lock()
		h.deliverLocked(c, seq)
		h.mu.Unlock()
	}); !ok {
		h.chatFailed(rcpt)
		return
	}
	switch {
	case rcpt.frame != nil: // the journal-backed directed receipt, through the outbox
		ok := s.sendReceipt(rcpt.frame)
		h.markOutbox(rcpt.id, ok)
	case c.receipt:
		s.sendReceipt(h.immediateReceipt(c, rcpt.chatSeq, ""))
	}
	if rcpt.expired != nil { // the receipt this one evicted from the pending window
		h.m.receiptsExpired.Inc()
		h.deliverReceipt(rcpt.expired, rcpt.evicted.Sender)
	}
}

// stamp gives the chat its msg_id and encodes its frame.
func (c *chatMsg) stamp(msgID int64) {
	c.msgID, c.frame = msgID, c.build(msgID)
}

// deliverLocked stamps seq (when journalled), keeps the chat in history
// and fans it out: a broadcast to every socket, anything else to the
// sockets it addresses and the sender's own. A directed chat that reached
// no live recipient is a dead letter; the mailbox projection counts it.
func (h *Hub) deliverLocked(c *chatMsg, seq int64) {
	frame := c.frame
	if seq > 0 {
		frame = withSeq(frame, seq)
	}
	h.reg.history = append(h.reg.history, chatEntry{msgID: c.msgID, seq: seq, sender: c.sender, target: c.target, public: c.broadcast, frame: frame})
	if n := len(h.reg.history); n > h.cfg.MaxHistory+h.cfg.MaxHistory/4 {
		h.reg.history = slices.Clone(h.reg.history[n-h.cfg.MaxHistory:])
	}
	if c.broadcast {
		h.m.chatBroadcast.Inc()
		h.broadcastLocked(frame, audience{everyone: true}, "chat")
		return
	}
	h.m.chatDirected.Inc()
	sent := 0
	h.recipientsLocked(c.t, c.sender, func(rs *session) {
		if rs != c.s && rs.send(frame) {
			sent++
		}
	})
	if c.s.send(frame) {
		sent++
	}
	h.m.framesOut.WithLabelValues("chat").Add(float64(sent))
	if c.directed && !c.part.delivered() {
		h.deadLetterLocked(c.t, c.sender, c.now)
	}
	if c.directed && seq > 0 {
		h.mb.onChatLocked(h, seq, c.sender, c.t)
	}
}

// withSeq appends "seq" to an encoded JSON object.
func withSeq(frame []byte, seq int64) []byte {
	b := make([]byte, 0, len(frame)+24)
	b = append(b, frame[:len(frame)-1]...)
	b = append(b, `,"seq":`...)
	b = pyjson.AppendInt(b, seq)
	return append(b, '}')
}

// partitionLocked splits the identities a chat target reaches (the
// sender's sockets apart) into live and stale (PROTOCOL.md §2.2 step 8):
// live when a sidecar of the identity was seen within 20 s or the seat
// reacted (a non-heartbeat frame, or its bind) within 90 s. Presence alone
// never makes a chat "delivered" (INV-DG-3).
func (h *Hub) partitionLocked(t, sender string, now float64) partition {
	matched := map[string]bool{}
	h.recipientsLocked(t, sender, func(rs *session) {
		id := identity(rs.name)
		live := now-rs.lastReaction <= livenessWindow
		if rs.name != id {
			live = live || now-h.reg.lastSeen[rs.name] <= sidecarWindow
		}
		matched[id] = matched[id] || live
	})
	p := partition{caps: map[string]string{}}
	for id, live := range matched {
		p.matched = append(p.matched, id)
		if live {
			p.live = append(p.live, id)
		} else {
			p.stale = append(p.stale, id)
		}
		c := "unknown"
		if rs := h.reg.byName[id]; rs != nil && rs.wake != "" {
			c = rs.wake
		}
		p.caps[id] = c
	}
	sort.Strings(p.matched)
	sort.Strings(p.live)
	sort.Strings(p.stale)
	return p
}

// sidecarWindow: a sidecar seen this recently proves its identity live.
const sidecarWindow = 20.0

// addressedLocked reports whether a chat target reaches socket rs: a
// target part matches its name, its identity (for a sidecar), the
// identity's project, or a role held by the name or its identity.
func (h *Hub) addressedLocked(target string, rs *session) bool {
	roles := rs.roles
	id := identity(rs.name)
	if id != rs.name {
		if owner := h.reg.byName[id]; owner != nil {
			roles = append(slices.Clip(roles), owner.roles...)
		}
	}
	return isRecipient(target, []string{rs.name, id}, roles)
}

// isRecipient matches a target (a name, comma list, fnmatch glob, project
// or role) against a reader's names and roles (PROTOCOL.md §2.2 step 7).
func isRecipient(target string, names, roles []string) bool {
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

// deadLetterLocked counts a dead letter for target (bounded: the stalest
// target is evicted beyond maxDeadLetters).
func (h *Hub) deadLetterLocked(target, sender string, now float64) {
	d := h.reg.deadLetters[target]
	if d == nil {
		if len(h.reg.deadLetters) >= maxDeadLetters {
			stalest, at := "", math.Inf(1)
			for k, v := range h.reg.deadLetters {
				if v.lastTS < at {
					stalest, at = k, v.lastTS
				}
			}
			delete(h.reg.deadLetters, stalest)
		}
		d = &deadLetter{}
		h.reg.deadLetters[target] = d
	}
	d.count++
	d.lastTS, d.lastSender = now, sender
	if h.feed.listening() {
		h.feed.publish("dead_letter", APIDeadLetter{Target: target, Count: d.count, LastTS: now, LastSender: sender})
	}
}

// journalDeadLetterClear makes a dead letter cleared by sender's frame
// stay cleared after a restart (loadDelivery rebuilds the ledger from the
// directed chats still marked dead): a dead_letter_cleared row, whose
// transaction unmarks the name's dead chats up to the newest directed chat
// the ledger had counted when it was cleared. It commits at NORMAL, which
// a SIGKILL does not lose, before the frame is served. Read goroutine.
func (s *session) journalDeadLetterClear(sender string) {
	through := s.deadCleared
	s.deadCleared = 0
	if s.h.cfg.Journal == nil {
		return
	}
	p, _ := pyjson.AppendValue(nil, map[string]any{"target": sender, "through_seq": through})
	rec := journal.Record{Kind: journal.KindDeadLetterCleared, Payload: p,
		Stamp: func(int64) ([]byte, []journal.Statement) {
			return nil, []journal.Statement{journal.ClearDeadLetters(sender, through)}
		}}
	if _, err := s.h.commitRecords([]journal.Record{rec}, nil); err != nil && err != errClosing {
		s.h.log.Warn("hub: dead-letter clear not journalled", "target", sender, "err", err)
	}
}

// clientTimestamp keeps a finite, non-zero numeric client stamp as advisory
// client_timestamp; anything else is dropped (INV-CK-1, PROTOCOL.md §10).
func clientTimestamp(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f == 0 {
		return 0, false
	}
	return f, true
}

// clientMsgID keeps a client_msg_id that is a non-blank string of at most
// 256 UTF-8 bytes with no control characters (PROTOCOL.md §2.2 step 3).
func clientMsgID(v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		return "", false
	}
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 256 || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return "", false
	}
	return s, true
}

// appendAny writes a decoded JSON value in Python's form; absent values
// (and values with no JSON form) are written as def.
func appendAny(b []byte, v any, def any) []byte {
	if v == nil {
		v = def
	}
	out, err := pyjson.AppendValue(b, v)
	if err != nil {
		return append(b, "null"...)
	}
	return out
}

// visibleLocked reports whether s may read chat e: broadcasts, its own
// chats and chats addressed to it (by name, sidecar identity, project or
// role, judged now).
func (h *Hub) visibleLocked(e *chatEntry, s *session) bool {
	if e.public || e.sender == s.name || identity(e.sender) == identity(s.name) {
		return true
	}
	return h.addressedLocked(strings.TrimSpace(e.target), s)
}

func (s *session) historyRequest(sender string, in *wire.Inbound) {
	h := s.h
	limit, ok := in.LenientInt("limit")
	if ok && limit < 1 {
		limit = 1
	}
	h.mu.Lock()
	start := max(0, len(h.reg.history)-h.cfg.MaxHistory)
	var picked [][]byte
	for i := len(h.reg.history) - 1; i >= start && (!ok || int64(len(picked)) < limit); i-- {
		if e := &h.reg.history[i]; h.visibleLocked(e, s) {
			picked = append(picked, e.frame)
		}
	}
	h.mu.Unlock()
	slices.Reverse(picked)
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
	start := max(0, len(h.reg.history)-h.cfg.MaxHistory)
	// Concurrent senders may commit msg_ids slightly out of order: filter.
	var picked [][]byte
	for i := start; i < len(h.reg.history); i++ {
		if e := &h.reg.history[i]; e.msgID > since && h.visibleLocked(e, s) {
			picked = append(picked, e.frame)
		}
	}
	h.mu.Unlock()
	f := s.frame("resume_snapshot", sender, "Resume snapshot").Int("since", since).Append("messages", func(b []byte) []byte {
		return wire.List(b, picked, func(b, fr []byte) []byte { return append(b, fr...) })
	})
	h.m.framesOut.WithLabelValues("resume_snapshot").Inc()
	s.reply(f.Bytes())
}
