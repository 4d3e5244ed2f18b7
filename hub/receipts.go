package hub

// Delivery receipts (PROTOCOL.md §2.2, §4.4). Without a journal a receipt
// is immediate and in memory. With one, a receipt-requested directed chat
// commits, in one FULL transaction, the chat row, a
// delivery_receipt_requested row and a delivery_receipt_immediate row,
// with the delivery_receipts aggregate (state immediate_delivered or
// pending) and an outbox row holding the frame sent to the sender. A
// pending receipt is settled by the recipient's ack (mailbox.go): one FULL
// transaction writes delivery_receipt_deferred, moves the aggregate to
// deferred and queues the deferred frame in the outbox. Outbox rows are
// delivered at once when the sender is online and again, until a send
// succeeds, every time the sender binds its name (at least once; clients
// dedup on receipt_notification_id "delivery-receipt:<seq>:<state>").

import (
	"context"
	"strings"

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
			return h.receiptEventPayload(c, r.chatSeq, true, ""), []journal.Statement{
				journal.UpsertReceipt(row(seq, state)),
				journal.InsertOutbox(journal.OutboxRow{NotificationID: r.id, MessageSeq: r.chatSeq,
					Phase: journal.ReceiptPhase(journal.KindReceiptImmediate), Sender: c.sender, Frame: r.frame}),
			}
		},
	})
	return recs, r
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
		s.fail(sender, "journal_unavailable", "Chat was not journalled (journal unavailable); it was not delivered.")
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

// deliverDeferred sends a settled receipt to its sender if it is online;
// otherwise the outbox keeps it for the sender's next bind.
func (h *Hub) deliverDeferred(r *stampedReceipt, sender string) {
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
