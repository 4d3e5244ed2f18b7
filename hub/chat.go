package hub

import (
	"encoding/json"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

// chatEntry is one relayed chat kept for history_request/resume_request.
type chatEntry struct {
	msgID  int64
	sender string
	target string
	public bool   // a broadcast: everyone may read it
	frame  []byte // as relayed
}

// deadLetter counts directed chats that reached no online recipient
// (PROTOCOL.md §4.6; memory only).
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
	"client_msg_id": true, "token": true,
}

// chat relays a chat (PROTOCOL.md §2.2) with the hub clock (INV-CK-1). A
// directed chat goes to its recipients, their sidecars and the sender only,
// and is readable in history by them only (the reference relays it to
// every socket and every history reader).
func (s *session) chat(sender string, in *wire.Inbound) {
	h := s.h
	if c := in.Str("channel"); c != "" {
		s.fail(sender, "not_channel_member", "not a member of channel '"+c+"'")
		return
	}
	if in.Has("response_to_seq") || in.Has("response_status") || in.Has("response_evidence_scope") {
		s.fail(sender, "semantic_response_unavailable", "Semantic responses require the durable mailbox, which this hub does not serve yet.")
		return
	}
	target := in.Str("target")
	if !in.Has("target") || in.Value("target") == nil {
		target = "all"
	}
	t := strings.TrimSpace(target)
	broadcast := t == "" || t == "all"
	directed := !broadcast && !wire.HasGlob(t)

	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	h.reg.msgID++
	id := h.reg.msgID

	f := wire.Object().Str("sender", sender).Str("target", target).Str("type", "chat")
	f.Append("payload", func(b []byte) []byte { return appendAny(b, in.Value("payload"), "") })
	f.Float("timestamp", now)
	if ct, ok := clientTimestamp(in.Value("timestamp")); ok {
		f.Float("client_timestamp", ct)
	}
	f.Str("hub_id", h.cfg.HubID).Int("msg_id", id)
	cmid, hasCMID := clientMsgID(in.Value("client_msg_id"))
	if hasCMID {
		f.Str("client_msg_id", cmid)
	}
	m := in.Map()
	extra := make([]string, 0, len(m))
	for k := range m {
		if !chatEnvelope[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		v := m[k]
		f.Append(k, func(b []byte) []byte { return appendAny(b, v, nil) })
	}
	frame := f.Bytes()

	h.reg.history = append(h.reg.history, chatEntry{msgID: id, sender: sender, target: target, public: broadcast, frame: frame})
	if n := len(h.reg.history); n > h.cfg.MaxHistory+h.cfg.MaxHistory/4 {
		h.reg.history = slices.Clone(h.reg.history[n-h.cfg.MaxHistory:])
	}

	if broadcast {
		h.m.chatBroadcast.Inc()
		h.broadcastLocked(frame, audience{everyone: true}, "chat")
		if in.Truthy("receipt_requested") {
			seen := map[string]bool{}
			names := []string{}
			for _, n := range h.onlineLocked() {
				if id := identity(n); n != sender && !seen[id] {
					seen[id] = true
					names = append(names, id)
				}
			}
			s.receiptLocked(sender, target, id, cmid, hasCMID, names)
		}
		return
	}
	h.m.chatDirected.Inc()
	recipients := make(map[string]bool)
	delivered := 0
	for rs := range h.reg.sessions {
		if rs.name == "" || rs.superseded || !rs.authed || rs.name == sender {
			continue
		}
		if !h.addressedLocked(t, rs) {
			continue
		}
		recipients[identity(rs.name)] = true
		if rs.send(frame) {
			delivered++
		}
	}
	if s.send(frame) {
		delivered++
	}
	h.m.framesOut.WithLabelValues("chat").Add(float64(delivered))
	names := make([]string, 0, len(recipients))
	for n := range recipients {
		names = append(names, n)
	}
	sort.Strings(names)
	if directed && len(names) == 0 {
		h.deadLetterLocked(t, sender, now)
	}
	if in.Truthy("receipt_requested") {
		s.receiptLocked(sender, target, id, cmid, hasCMID, names)
	}
}

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
			if ns := namespace(n); ns != "" && wire.Fnmatch(ns, p) {
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
}

// receiptLocked sends the immediate delivery_receipt (traces/chat.jsonl).
func (s *session) receiptLocked(sender, target string, msgID int64, cmid string, hasCMID bool, recipients []string) {
	h := s.h
	if recipients == nil {
		recipients = []string{}
	}
	delivered := len(recipients) > 0
	t := strings.TrimSpace(target)
	payload, reason := "delivered to "+strings.Join(recipients, ", "), ""
	deadLettered := false
	if !delivered {
		payload, reason = "delivery failed: no online recipient matched "+t, "no_online_recipient"
		deadLettered = !wire.HasGlob(t) && t != "" && t != "all"
	}
	caps := wire.Object()
	for _, r := range recipients {
		c := "unknown"
		if rs := h.reg.byName[r]; rs != nil && rs.wake != "" {
			c = rs.wake
		}
		caps.Str(r, c)
	}
	f := s.frame("delivery_receipt", sender, payload).Str("message_target", target).Int("message_id", msgID).
		Bool("delivered", delivered).Bool("deferred", false).Strs("recipients", recipients).
		Strs("matched_recipients", recipients).Strs("stale_recipients", nil).Str("reason", reason).
		Bool("dead_lettered", deadLettered).Raw("recipient_wake_capabilities", caps.Bytes())
	if hasCMID {
		f.Str("client_msg_id", cmid)
	}
	h.m.framesOut.WithLabelValues("delivery_receipt").Inc()
	s.send(f.Bytes())
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
	// msg_ids are increasing along the history: find the first newer one.
	i := start + sort.Search(len(h.reg.history)-start, func(i int) bool { return h.reg.history[start+i].msgID > since })
	var picked [][]byte
	for ; i < len(h.reg.history); i++ {
		if e := &h.reg.history[i]; h.visibleLocked(e, s) {
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
