package hub

// Delivery receipts (PROTOCOL.md §2.2, §4.4). Without a journal a receipt
// is immediate and in memory. With one, a receipt-requested directed chat
// commits, in one FULL transaction, the chat row, a
// delivery_receipt_requested row and a delivery_receipt_immediate row,
// with the delivery_receipts aggregate (state immediate_delivered or
// pending) and an outbox row holding the frame sent to the sender. A
// pending receipt is settled by the recipient's ack (mailbox.go): one FULL
// transaction writes delivery_receipt_deferred, moves the aggregate to
// deferred and queues the deferred frame in the outbox. At most
// Config.PendingReceiptWindow receipts are pending (pendingWindow): a new
// one beyond evicts the oldest, whose delivery_receipt_expired row,
// aggregate and outbox row commit in the new one's transaction. Outbox
// rows are delivered at once when the sender is online and again, until a
// send succeeds, every time the sender binds its name (at least once;
// clients dedup on receipt_notification_id
// "delivery-receipt:<seq>:<state>").

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/sequencer"
	"github.com/synapse-hub/synapse/wire"
)

// stampedReceipt is what the append of a chat told its sender's side: the
// chat's seq and, on the outbox path, the receipt frame and its id. Filled
// on the sequencer goroutine during the append, read after Submit returns.
type stampedReceipt struct {
	chatSeq int64
	frame   []byte
	id      string

	// A pending receipt's place in the pending window: reserved before
	// the append, the row added in its Stamp, and the receipt it evicted,
	// expired in the same transaction (expired receives that frame).
	pending  bool
	added    bool
	row      journal.ReceiptRow
	evicted  journal.ReceiptRow
	didEvict bool
	expired  *stampedReceipt
}

// receiptNotificationID is the outbox id of a receipt transition.
func receiptNotificationID(seq int64, state string) string {
	return "delivery-receipt:" + itoa(seq) + ":" + state
}

// chatRecords are the journal records of a chat: the chat row (its frame
// in canonical form; FULL when a receipt commits with it), indexed in
// directed_chats when directed, and for a receipt-requested directed chat
// the requested and immediate receipt rows with their tables.
func (h *Hub) chatRecords(c *chatMsg) ([]journal.Record, *stampedReceipt) {
	r := &stampedReceipt{}
	withReceipt := c.receipt && c.directed
	recs := []journal.Record{{
		Kind: journal.KindChat, Durable: withReceipt,
		// The msg_id is taken here, in the append, so msg_ids follow seqs,
		// and so the order chats are delivered in (Committed runs in seq
		// order) between concurrent senders.
		Stamp: func(seq int64) ([]byte, []journal.Statement) {
			r.chatSeq = seq
			c.stamp(h.reg.msgID.Add(1))
			payload, ok := pyjson.CanonicalRaw(c.frame)
			if !ok {
				payload = c.frame
			}
			if !c.directed {
				return payload, nil
			}
			return payload, []journal.Statement{journal.InsertDirectedChat(seq, c.now, c.sender, c.t, !c.part.delivered())}
		},
	}}
	if !withReceipt {
		return recs, r
	}
	state := "pending"
	if c.part.delivered() {
		state = "immediate_delivered"
	} else {
		r.pending = true
		r.evicted, r.didEvict = h.pending.reserve()
	}
	row := func(seq int64, state string) journal.ReceiptRow {
		return journal.ReceiptRow{MessageSeq: r.chatSeq, Sender: c.sender, Target: c.target, MessageID: c.msgID,
			ClientMsgID: c.cmid, State: state, Delivered: c.part.delivered(), UpdatedEventSeq: seq}
	}
	recs = append(recs, journal.Record{
		Kind: journal.KindReceiptRequested, Durable: true,
		Stamp: func(seq int64) ([]byte, []journal.Statement) {
			rr := row(seq, "requested")
			return h.receiptEventPayload(c, r.chatSeq, false, ""), []journal.Statement{journal.UpsertReceipt(rr)}
		},
	}, journal.Record{
		Kind: journal.KindReceiptImmediate, Durable: true,
		Stamp: func(seq int64) ([]byte, []journal.Statement) {
			r.id = receiptNotificationID(r.chatSeq, state)
			r.frame = h.immediateReceipt(c, r.chatSeq, r.id)
			rr := row(seq, state)
			if r.pending {
				r.row, r.added = rr, true
				h.pending.add(rr)
			}
			return h.receiptEventPayload(c, r.chatSeq, true, ""), []journal.Statement{
				journal.UpsertReceipt(rr),
				journal.InsertOutbox(journal.OutboxRow{NotificationID: r.id, MessageSeq: r.chatSeq,
					Phase: journal.ReceiptPhase(journal.KindReceiptImmediate), Sender: c.sender, Frame: r.frame}),
			}
		},
	})
	if r.didEvict {
		r.expired = &stampedReceipt{}
		recs = append(recs, h.expiredRecord(r.evicted, r.expired))
	}
	return recs, r
}

// chatFailed gives back a failed chat's place in the pending window.
func (h *Hub) chatFailed(r *stampedReceipt) {
	if r.pending {
		h.pending.abort(r.added, r.row, r.evicted, r.didEvict)
	}
}

// receiptEventPayload is the payload of a receipt event row (PROTOCOL.md
// §4.2), keys sorted.
func (h *Hub) receiptEventPayload(c *chatMsg, chatSeq int64, settled bool, ackedBy string) []byte {
	p := c.part
	caps := map[string]any{}
	for k, v := range p.caps {
		caps[k] = v
	}
	m := map[string]any{
		"sender": c.sender, "target": c.target, "message_id": c.msgID, "message_seq": chatSeq,
		"delivered": settled && p.delivered(), "deferred": false, "recipients": strsAny(p.live),
		"matched_recipients": strsAny(p.matched), "stale_recipients": strsAny(p.stale),
		"reason": receiptReason(c), "dead_lettered": c.directed && !p.delivered(),
		"recipient_wake_capabilities": caps, "acked_by": ackedBy, "expired": false, "client_msg_id": c.cmid,
	}
	b, _ := pyjson.AppendValue(nil, m)
	return b
}

func strsAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func receiptReason(c *chatMsg) string {
	switch {
	case c.part.delivered():
		return ""
	case len(c.part.matched) > 0:
		return "no_live_recipient"
	}
	return "no_online_recipient"
}

// immediateReceipt is the delivery_receipt a sender gets right after its
// chat (traces/chat.jsonl, traces/mailbox.jsonl): message_seq with a
// journal, receipt_notification_id on the outbox path.
func (h *Hub) immediateReceipt(c *chatMsg, chatSeq int64, notificationID string) []byte {
	p := c.part
	payload := "delivered to " + strings.Join(p.live, ", ")
	switch receiptReason(c) {
	case "no_live_recipient":
		payload = "delivery failed: no live recipient matched " + c.t + "; stale sockets: " + strings.Join(p.stale, ", ")
	case "no_online_recipient":
		payload = "delivery failed: no online recipient matched " + c.t
	}
	caps := wire.Object()
	for _, r := range p.matched {
		v := p.caps[r]
		if v == "" {
			v = "unknown"
		}
		caps.Str(r, v)
	}
	f := wire.NewFrame("delivery_receipt", c.sender, payload, h.now(), h.cfg.HubID).
		Str("message_target", c.target).Int("message_id", c.msgID)
	if chatSeq > 0 {
		f.Int("message_seq", chatSeq)
	}
	f.Bool("delivered", p.delivered()).Bool("deferred", false).Strs("recipients", p.live).
		Strs("matched_recipients", p.matched).Strs("stale_recipients", p.stale).Str("reason", receiptReason(c)).
		Bool("dead_lettered", c.directed && !p.delivered()).Raw("recipient_wake_capabilities", caps.Bytes())
	if c.hasCMID {
		f.Str("client_msg_id", c.cmid)
	}
	if notificationID != "" {
		f.Str("receipt_notification_id", notificationID)
	}
	return f.Bytes()
}

// deferredRecord settles a pending receipt acked by acker: the
// delivery_receipt_deferred row, the aggregate and the outbox row, in the
// ack's FULL transaction. frame receives the frame for the sender.
func (h *Hub) deferredRecord(rc journal.ReceiptRow, acker string, out *stampedReceipt) journal.Record {
	return journal.Record{
		Kind: journal.KindReceiptDeferred, Durable: true,
		Stamp: func(seq int64) ([]byte, []journal.Statement) {
			out.chatSeq = rc.MessageSeq
			out.id = receiptNotificationID(rc.MessageSeq, "deferred")
			f := wire.NewFrame("delivery_receipt", rc.Sender, "delivered to "+acker+" on reconnect", h.now(), h.cfg.HubID).
				Str("message_target", rc.Target).Int("message_id", rc.MessageID).Int("message_seq", rc.MessageSeq).
				Bool("delivered", true).Bool("deferred", true).Strs("recipients", []string{acker})
			if rc.ClientMsgID != "" {
				f.Str("client_msg_id", rc.ClientMsgID)
			}
			out.frame = f.Str("receipt_notification_id", out.id).Bytes()
			payload, _ := pyjson.AppendValue(nil, map[string]any{
				"sender": rc.Sender, "target": rc.Target, "message_id": rc.MessageID, "message_seq": rc.MessageSeq,
				"delivered": true, "deferred": true, "recipients": []any{acker}, "acked_by": acker,
				"expired": false, "client_msg_id": rc.ClientMsgID,
			})
			rc.State, rc.Delivered, rc.Deferred, rc.AckedBy, rc.UpdatedEventSeq = "deferred", true, true, acker, seq
			return payload, []journal.Statement{
				journal.UpsertReceipt(rc),
				journal.InsertOutbox(journal.OutboxRow{NotificationID: out.id, MessageSeq: rc.MessageSeq,
					Phase: journal.ReceiptPhase(journal.KindReceiptDeferred), Sender: rc.Sender, Frame: out.frame}),
			}
		},
	}
}

// commitRecords commits journal-only records through the sequencer, in
// its group commit; committed runs on the sequencer goroutine after the
// commit with the seq of the first record.
func (h *Hub) commitRecords(recs []journal.Record, committed func(seq int64)) (int64, error) {
	if !h.beginSubmit() {
		return 0, errClosing
	}
	defer h.submits.Done()
	req := sequencer.Request{Records: recs}
	if committed != nil {
		req.Committed = func(r sequencer.Reply) { committed(r.Seq) }
	}
	r, err := h.seq.Submit(context.Background(), req)
	return r.Seq, err
}

// submitRecords is commitRecords for a verb: a failure is the sender's
// error frame.
func (s *session) submitRecords(sender string, recs []journal.Record, committed func(seq int64)) (int64, bool) {
	seq, err := s.h.commitRecords(recs, committed)
	switch {
	case err == nil:
		return seq, true
	case err == errClosing:
		s.fail(sender, "shutting_down", "Hub is shutting down.")
	default:
		s.fail(sender, "journal_unavailable", s.h.journalRefusal("The chat", err)+" It was not delivered.")
	}
	return 0, false
}

// sendReceipt queues a receipt on the sender's socket.
func (s *session) sendReceipt(b []byte) bool {
	if !s.send(b) {
		return false
	}
	s.h.m.framesOut.WithLabelValues("delivery_receipt").Inc()
	return true
}

// markOutbox records a delivery attempt of an outbox row.
func (h *Hub) markOutbox(id string, delivered bool) {
	if st := h.cfg.Journal; st != nil && id != "" {
		if err := st.MarkOutbox(id, delivered, h.now()); err != nil {
			h.log.Warn("hub: receipt outbox not updated", "id", id, "err", err)
		}
	}
}

// flushReceipts sends a sender the receipt notifications still undelivered
// (on its first bind, PROTOCOL.md §1.4 step 11).
func (s *session) flushReceipts(sender string) {
	st := s.h.cfg.Journal
	if st == nil {
		return
	}
	rows, err := st.OutboxPending(sender)
	if err != nil {
		s.h.log.Warn("hub: receipt outbox unreadable", "sender", sender, "err", err)
		return
	}
	for _, o := range rows {
		s.h.markOutbox(o.NotificationID, s.sendReceipt(o.Frame))
	}
}

// deliverReceipt sends a settled (deferred or expired) receipt to its
// sender if it is online; otherwise the outbox keeps it for the sender's
// next bind.
func (h *Hub) deliverReceipt(r *stampedReceipt, sender string) {
	if r.frame == nil {
		return
	}
	h.mu.Lock()
	rs := h.reg.byName[sender]
	h.mu.Unlock()
	if rs == nil {
		return
	}
	h.markOutbox(r.id, rs.sendReceipt(r.frame))
}

// DefaultPendingReceiptWindow is how many receipts may wait for an ack at
// once (the reference's 1024-entry pending window, PROTOCOL.md §4.4).
const DefaultPendingReceiptWindow = 1024

// pendingWindow is the bounded set of pending receipts: at most limit wait
// for an ack; the one that would exceed it evicts the oldest, which
// expires. Membership is the right to a transition: whoever takes a seq
// out (an ack settling it, a new pending receipt evicting it) commits its
// one transition, so a receipt is never both deferred and expired. A new
// pending receipt reserves its place before its append and enters in the
// append's Stamp (on the sequencer goroutine, before an ack could find its
// chat), so members plus reservations never exceed limit. Its own mutex;
// safe for concurrent use.
type pendingWindow struct {
	mu       sync.Mutex
	freed    sync.Cond // a reservation ended
	limit    int
	rows     map[int64]journal.ReceiptRow // by message seq
	order    []int64                      // the seqs ascending; taken ones are skipped lazily
	reserved int
}

func newPendingWindow(limit int) *pendingWindow {
	w := &pendingWindow{limit: max(limit, 1), rows: make(map[int64]journal.ReceiptRow)}
	w.freed.L = &w.mu
	return w
}

// load fills the window with the newest pending receipts of rows (in seq
// order) and returns the older ones, which no longer fit (INV-RR-2: the
// cap is re-applied on replay, PROTOCOL.md §4.5 step 6).
func (w *pendingWindow) load(rows []journal.ReceiptRow) (overflow []journal.ReceiptRow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(rows) - w.limit; n > 0 {
		overflow, rows = rows[:n], rows[n:]
	}
	for _, r := range rows {
		w.insertLocked(r)
	}
	return overflow
}

// reserve makes room for one new pending receipt, evicting the oldest
// member when the window is full; it waits only while every place is
// reserved by appends in flight.
func (w *pendingWindow) reserve() (evicted journal.ReceiptRow, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.rows) == 0 && w.reserved >= w.limit {
		w.freed.Wait()
	}
	if len(w.rows)+w.reserved >= w.limit {
		evicted, ok = w.popOldestLocked()
	}
	w.reserved++
	return evicted, ok
}

// add turns a reservation into a member (the receipt's append Stamp).
func (w *pendingWindow) add(r journal.ReceiptRow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reserved--
	w.insertLocked(r)
	w.freed.Broadcast()
}

// abort undoes a reservation whose append failed: the member it became is
// dropped (unless a later append reused its seq), and the receipt it
// evicted, which did not expire, is put back.
func (w *pendingWindow) abort(added bool, r journal.ReceiptRow, evicted journal.ReceiptRow, didEvict bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !added {
		w.reserved--
	} else if cur, ok := w.rows[r.MessageSeq]; ok && cur.MessageID == r.MessageID {
		delete(w.rows, r.MessageSeq)
	}
	if didEvict {
		w.insertLocked(evicted)
	}
	w.freed.Broadcast()
}

// take removes seq to settle it; false when it is not pending.
func (w *pendingWindow) take(seq int64) (journal.ReceiptRow, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.rows[seq]
	if ok {
		delete(w.rows, seq)
		w.compactLocked()
	}
	return r, ok
}

// restore puts back a receipt whose settlement failed to commit.
func (w *pendingWindow) restore(r journal.ReceiptRow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.insertLocked(r)
}

// len is the number of pending receipts.
func (w *pendingWindow) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.rows)
}

func (w *pendingWindow) insertLocked(r journal.ReceiptRow) {
	seq := r.MessageSeq
	if _, dup := w.rows[seq]; !dup {
		// Appends enter in seq order, so this is an append but for a
		// receipt put back.
		i, _ := slices.BinarySearch(w.order, seq)
		if i == len(w.order) || w.order[i] != seq {
			w.order = slices.Insert(w.order, i, seq)
		}
	}
	w.rows[seq] = r
}

func (w *pendingWindow) popOldestLocked() (journal.ReceiptRow, bool) {
	for len(w.order) > 0 {
		seq := w.order[0]
		w.order = w.order[1:]
		if r, ok := w.rows[seq]; ok {
			delete(w.rows, seq)
			return r, true
		}
	}
	return journal.ReceiptRow{}, false
}

// compactLocked drops the taken seqs from order once they outnumber the
// members, so order stays within a constant factor of the window.
func (w *pendingWindow) compactLocked() {
	if len(w.order) <= 2*len(w.rows)+64 {
		return
	}
	live := make([]int64, 0, 2*len(w.rows)+1)
	for _, seq := range w.order {
		if _, ok := w.rows[seq]; ok {
			live = append(live, seq)
		}
	}
	w.order = live
}

// expiredRecord expires a pending receipt the window evicted: the
// delivery_receipt_expired row, the aggregate and the outbox row, in the
// transaction of the pending receipt that evicted it (PROTOCOL.md §4.4).
// out receives the frame for the receipt's sender.
func (h *Hub) expiredRecord(rc journal.ReceiptRow, out *stampedReceipt) journal.Record {
	return journal.Record{
		Kind: journal.KindReceiptExpired, Durable: true,
		Stamp: func(seq int64) ([]byte, []journal.Statement) {
			out.chatSeq = rc.MessageSeq
			out.id = receiptNotificationID(rc.MessageSeq, "expired")
			f := wire.NewFrame("delivery_receipt", rc.Sender, "delivery receipt expired before acknowledgement", h.now(), h.cfg.HubID).
				Str("message_target", rc.Target).Int("message_id", rc.MessageID).Int("message_seq", rc.MessageSeq).
				Bool("delivered", false).Bool("deferred", true).Bool("expired", true).
				Str("reason", pendingWindowEvicted).Strs("recipients", []string{})
			if rc.ClientMsgID != "" {
				f.Str("client_msg_id", rc.ClientMsgID)
			}
			out.frame = f.Str("receipt_notification_id", out.id).Bytes()
			payload, _ := pyjson.AppendValue(nil, map[string]any{
				"sender": rc.Sender, "target": rc.Target, "message_id": rc.MessageID, "message_seq": rc.MessageSeq,
				"delivered": false, "deferred": true, "expired": true, "reason": pendingWindowEvicted,
				"recipients": []any{}, "client_msg_id": rc.ClientMsgID,
			})
			rc.State, rc.Delivered, rc.Deferred, rc.UpdatedEventSeq = "expired", false, true, seq
			return payload, []journal.Statement{
				journal.UpsertReceipt(rc),
				journal.InsertOutbox(journal.OutboxRow{NotificationID: out.id, MessageSeq: rc.MessageSeq,
					Phase: journal.ReceiptPhase(journal.KindReceiptExpired), Sender: rc.Sender, Frame: out.frame}),
			}
		},
	}
}

// pendingWindowEvicted is an expired receipt's reason.
const pendingWindowEvicted = "pending_window_evicted"

// expireOverflow expires, at start, the pending receipts the window could
// not hold (a journal written with a larger window, or before there was
// one). Their senders get the expired receipts through the outbox when
// they next bind.
func (h *Hub) expireOverflow(rows []journal.ReceiptRow) {
	const chunk = 256
	for len(rows) > 0 {
		n := min(chunk, len(rows))
		recs := make([]journal.Record, 0, n)
		for _, rc := range rows[:n] {
			recs = append(recs, h.expiredRecord(rc, &stampedReceipt{}))
		}
		if _, err := h.commitRecords(recs, nil); err != nil {
			h.log.Warn("hub: pending receipts beyond the window not expired", "count", len(rows), "err", err)
			return
		}
		h.m.receiptsExpired.Add(float64(n))
		rows = rows[n:]
	}
}
