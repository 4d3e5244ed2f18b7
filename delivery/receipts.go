package delivery

// Delivery receipts (PROTOCOL.md §2.2, §4.4). Without a journal a receipt
// is immediate and in memory. With one, a receipt-requested directed chat
// commits, in one FULL transaction, the chat row, a
// delivery_receipt_requested row and a delivery_receipt_immediate row,
// with the delivery_receipts aggregate (state immediate_delivered or
// pending) and an outbox row holding the frame sent to the sender. A
// pending receipt is settled by the recipient's ack (mailbox.go): one FULL
// transaction writes delivery_receipt_deferred, moves the aggregate to
// deferred and queues the deferred frame in the outbox. At most
// Config.PendingWindow receipts are pending (Window): a new one beyond
// evicts the oldest, whose delivery_receipt_expired row, aggregate and
// outbox row commit in the new one's transaction. Outbox rows are
// delivered at once when the sender is online and again, until a send
// succeeds, every time the sender binds its name (at least once; clients
// dedup on receipt_notification_id "delivery-receipt:<seq>:<state>").

import (
	"log/slog"
	"strings"

	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

// Chat is one chat between its stamping and its fan-out, as the chat verb
// parsed it.
type Chat struct {
	MsgID          int64
	Sender         string
	Target         string // as sent
	To             string // Target trimmed: what recipients are resolved against
	Broadcast      bool
	Directed       bool                     // journal.IsDirected: dead-letters and is replayed
	Frame          []byte                   // as relayed, once Stamp has run
	Build          func(msgID int64) []byte // encodes the frame with its msg_id
	ClientMsgID    string                   // valid when HasClientMsgID
	HasClientMsgID bool
	Now            float64
	Receipt        bool // receipt_requested
	Part           Partition
}

// Stamp gives the chat its msg_id and encodes its frame.
func (c *Chat) Stamp(msgID int64) {
	c.MsgID, c.Frame = msgID, c.Build(msgID)
}

// Partition is the liveness partition of a chat's matched recipients
// (PROTOCOL.md §2.2 step 8), identities sorted.
type Partition struct {
	Matched, Live, Stale []string
	Caps                 map[string]string // wake capability by identity
}

// Delivered reports whether a live recipient was matched.
func (p *Partition) Delivered() bool { return len(p.Live) > 0 }

// Receipt is what the append of a chat told its sender's side: the chat's
// seq and, on the outbox path, the receipt frame and its id. Filled on the
// sequencer goroutine during the append, read after the commit returns.
type Receipt struct {
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
	expired  *Receipt
}

// Receipts makes and delivers delivery receipts. Its methods are called
// without Hub.mu; its record Stamps run on the sequencer goroutine.
type Receipts struct {
	hubID    string
	clock    func() float64
	window   *Window
	history  *History // msg_ids, taken in the chat's append
	journal  Journal  // nil: no outbox
	sockets  Sockets
	commit   Committer
	counters Counters
	log      *slog.Logger
}

// ReceiptsConfig is what Receipts needs from the hub.
type ReceiptsConfig struct {
	HubID    string
	Clock    func() float64 // unix seconds
	Window   *Window
	History  *History
	Journal  Journal // nil for a hub without one
	Sockets  Sockets
	Commit   Committer
	Counters Counters
	Logger   *slog.Logger
}

// NewReceipts builds the receipts of one hub.
func NewReceipts(c ReceiptsConfig) *Receipts {
	return &Receipts{hubID: c.HubID, clock: c.Clock, window: c.Window, history: c.History, journal: c.Journal,
		sockets: c.Sockets, commit: c.Commit, counters: c.Counters, log: c.Logger}
}

// Pending is how many receipts await an ack.
func (rs *Receipts) Pending() int { return rs.window.Len() }

// receiptNotificationID is the outbox id of a receipt transition.
func receiptNotificationID(seq int64, state string) string {
	return "delivery-receipt:" + itoa(seq) + ":" + state
}

// ChatRecords are the journal records of a chat: the chat row (its frame
// in canonical form; FULL when a receipt commits with it), indexed in
// directed_chats when directed, and for a receipt-requested directed chat
// the requested and immediate receipt rows with their tables. It may wait
// for a place in the pending window (Window.Reserve); give the place back
// with Failed if the records do not commit.
func (rs *Receipts) ChatRecords(c *Chat) ([]journal.Record, *Receipt) {
	r := &Receipt{}
	withReceipt := c.Receipt && c.Directed
	recs := []journal.Record{{
		Kind: journal.KindChat, Durable: withReceipt,
		// The msg_id is taken here, in the append, so msg_ids follow seqs,
		// and so the order chats are delivered in (Committed runs in seq
		// order) between concurrent senders.
		Stamp: func(seq int64) ([]byte, []journal.Statement) {
			r.chatSeq = seq
			c.Stamp(rs.history.NextMsgID())
			payload, ok := pyjson.CanonicalRaw(c.Frame)
			if !ok {
				payload = c.Frame
			}
			if !c.Directed {
				return payload, nil
			}
			return payload, []journal.Statement{journal.InsertDirectedChat(seq, c.Now, c.Sender, c.To, !c.Part.Delivered())}
		},
	}}
	if !withReceipt {
		return recs, r
	}
	state := "pending"
	if c.Part.Delivered() {
		state = "immediate_delivered"
	} else {
		r.pending = true
		r.evicted, r.didEvict = rs.window.Reserve()
	}
	row := func(seq int64, state string) journal.ReceiptRow {
		return journal.ReceiptRow{MessageSeq: r.chatSeq, Sender: c.Sender, Target: c.Target, MessageID: c.MsgID,
			ClientMsgID: c.ClientMsgID, State: state, Delivered: c.Part.Delivered(), UpdatedEventSeq: seq}
	}
	recs = append(recs, journal.Record{
		Kind: journal.KindReceiptRequested, Durable: true,
		Stamp: func(seq int64) ([]byte, []journal.Statement) {
			rr := row(seq, "requested")
			return receiptEventPayload(c, r.chatSeq, false, ""), []journal.Statement{journal.UpsertReceipt(rr)}
		},
	}, journal.Record{
		Kind: journal.KindReceiptImmediate, Durable: true,
		Stamp: func(seq int64) ([]byte, []journal.Statement) {
			r.id = receiptNotificationID(r.chatSeq, state)
			r.frame = rs.immediate(c, r.chatSeq, r.id)
			rr := row(seq, state)
			if r.pending {
				r.row, r.added = rr, true
				rs.window.Add(rr)
			}
			return receiptEventPayload(c, r.chatSeq, true, ""), []journal.Statement{
				journal.UpsertReceipt(rr),
				journal.InsertOutbox(journal.OutboxRow{NotificationID: r.id, MessageSeq: r.chatSeq,
					Phase: journal.ReceiptPhase(journal.KindReceiptImmediate), Sender: c.Sender, Frame: r.frame}),
			}
		},
	})
	if r.didEvict {
		r.expired = &Receipt{}
		recs = append(recs, rs.expiredRecord(r.evicted, r.expired))
	}
	return recs, r
}

// Failed gives back a failed chat's place in the pending window.
func (rs *Receipts) Failed(r *Receipt) {
	if r.pending {
		rs.window.Abort(r.added, r.row, r.evicted, r.didEvict)
	}
}

// Committed sends a committed chat's sender, on conn, its receipt (the
// journal-backed directed receipt through the outbox), and the receipt
// this one evicted from the pending window to that receipt's sender.
func (rs *Receipts) Committed(conn Conn, c *Chat, r *Receipt) {
	switch {
	case r.frame != nil:
		rs.markOutbox(r.id, rs.Send(conn, r.frame))
	case c.Receipt:
		rs.Send(conn, rs.immediate(c, r.chatSeq, ""))
	}
	if r.expired != nil {
		rs.counters.ReceiptsExpired.Inc()
		rs.Deliver(r.expired, r.evicted.Sender)
	}
}

// SendImmediate sends the sender of a chat the hub keeps in memory only
// its receipt, on conn.
func (rs *Receipts) SendImmediate(conn Conn, c *Chat) {
	rs.Send(conn, rs.immediate(c, 0, ""))
}

// SendImmediateSeq is SendImmediate for a chat stored with seq (a
// fleet's letter): the receipt carries message_seq.
func (rs *Receipts) SendImmediateSeq(conn Conn, c *Chat, seq int64) {
	rs.Send(conn, rs.immediate(c, seq, ""))
}

// receiptEventPayload is the payload of a receipt event row (PROTOCOL.md
// §4.2), keys sorted.
func receiptEventPayload(c *Chat, chatSeq int64, settled bool, ackedBy string) []byte {
	p := c.Part
	caps := map[string]any{}
	for k, v := range p.Caps {
		caps[k] = v
	}
	m := map[string]any{
		"sender": c.Sender, "target": c.Target, "message_id": c.MsgID, "message_seq": chatSeq,
		"delivered": settled && p.Delivered(), "deferred": false, "recipients": strsAny(p.Live),
		"matched_recipients": strsAny(p.Matched), "stale_recipients": strsAny(p.Stale),
		"reason": receiptReason(c), "dead_lettered": c.Directed && !p.Delivered(),
		"recipient_wake_capabilities": caps, "acked_by": ackedBy, "expired": false, "client_msg_id": c.ClientMsgID,
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

func receiptReason(c *Chat) string {
	switch {
	case c.Part.Delivered():
		return ""
	case len(c.Part.Matched) > 0:
		return "no_live_recipient"
	}
	return "no_online_recipient"
}

// immediate is the delivery_receipt a sender gets right after its chat
// (traces/chat.jsonl, traces/mailbox.jsonl): message_seq with a journal,
// receipt_notification_id on the outbox path.
func (rs *Receipts) immediate(c *Chat, chatSeq int64, notificationID string) []byte {
	p := c.Part
	payload := "delivered to " + strings.Join(p.Live, ", ")
	switch receiptReason(c) {
	case "no_live_recipient":
		payload = "delivery failed: no live recipient matched " + c.To + "; stale sockets: " + strings.Join(p.Stale, ", ")
	case "no_online_recipient":
		payload = "delivery failed: no online recipient matched " + c.To
	}
	caps := wire.Object()
	for _, r := range p.Matched {
		v := p.Caps[r]
		if v == "" {
			v = "unknown"
		}
		caps.Str(r, v)
	}
	f := wire.NewFrame("delivery_receipt", c.Sender, payload, rs.clock(), rs.hubID).
		Str("message_target", c.Target).Int("message_id", c.MsgID)
	if chatSeq > 0 {
		f.Int("message_seq", chatSeq)
	}
	f.Bool("delivered", p.Delivered()).Bool("deferred", false).Strs("recipients", p.Live).
		Strs("matched_recipients", p.Matched).Strs("stale_recipients", p.Stale).Str("reason", receiptReason(c)).
		Bool("dead_lettered", c.Directed && !p.Delivered()).Raw("recipient_wake_capabilities", caps.Bytes())
	if c.HasClientMsgID {
		f.Str("client_msg_id", c.ClientMsgID)
	}
	if notificationID != "" {
		f.Str("receipt_notification_id", notificationID)
	}
	return f.Bytes()
}

// deferredRecord settles a pending receipt acked by acker: the
// delivery_receipt_deferred row, the aggregate and the outbox row, in the
// ack's FULL transaction. out receives the frame for the sender.
func (rs *Receipts) deferredRecord(rc journal.ReceiptRow, acker string, out *Receipt) journal.Record {
	return journal.Record{
		Kind: journal.KindReceiptDeferred, Durable: true,
		Stamp: func(seq int64) ([]byte, []journal.Statement) {
			out.chatSeq = rc.MessageSeq
			out.id = receiptNotificationID(rc.MessageSeq, "deferred")
			f := wire.NewFrame("delivery_receipt", rc.Sender, "delivered to "+acker+" on reconnect", rs.clock(), rs.hubID).
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

// pendingWindowEvicted is an expired receipt's reason.
const pendingWindowEvicted = "pending_window_evicted"

// expiredRecord expires a pending receipt the window evicted: the
// delivery_receipt_expired row, the aggregate and the outbox row, in the
// transaction of the pending receipt that evicted it (PROTOCOL.md §4.4).
// out receives the frame for the receipt's sender.
func (rs *Receipts) expiredRecord(rc journal.ReceiptRow, out *Receipt) journal.Record {
	return journal.Record{
		Kind: journal.KindReceiptExpired, Durable: true,
		Stamp: func(seq int64) ([]byte, []journal.Statement) {
			out.chatSeq = rc.MessageSeq
			out.id = receiptNotificationID(rc.MessageSeq, "expired")
			f := wire.NewFrame("delivery_receipt", rc.Sender, "delivery receipt expired before acknowledgement", rs.clock(), rs.hubID).
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

// ExpireOverflow expires, at start, the pending receipts the window could
// not hold (a journal written with a larger window, or before there was
// one; Load returns them). Their senders get the expired receipts through
// the outbox when they next bind.
func (rs *Receipts) ExpireOverflow(rows []journal.ReceiptRow) {
	const chunk = 256
	for len(rows) > 0 {
		n := min(chunk, len(rows))
		recs := make([]journal.Record, 0, n)
		for _, rc := range rows[:n] {
			recs = append(recs, rs.expiredRecord(rc, &Receipt{}))
		}
		if _, err := rs.commit.Commit(recs, nil); err != nil {
			rs.log.Warn("hub: pending receipts beyond the window not expired", "count", len(rows), "err", err)
			return
		}
		rs.counters.ReceiptsExpired.Add(float64(n))
		rows = rows[n:]
	}
}

// Send queues a receipt on its sender's socket.
func (rs *Receipts) Send(conn Conn, b []byte) bool {
	if !conn.Send(b) {
		return false
	}
	rs.counters.ReceiptFrames.Inc()
	return true
}

// markOutbox records a delivery attempt of an outbox row.
func (rs *Receipts) markOutbox(id string, delivered bool) {
	if rs.journal != nil && id != "" {
		if err := rs.journal.MarkOutbox(id, delivered, rs.clock()); err != nil {
			rs.log.Warn("hub: receipt outbox not updated", "id", id, "err", err)
		}
	}
}

// Flush sends a sender, on conn, the receipt notifications still
// undelivered (on its first bind, PROTOCOL.md §1.4 step 11).
func (rs *Receipts) Flush(conn Conn, sender string) {
	if rs.journal == nil {
		return
	}
	rows, err := rs.journal.OutboxPending(sender)
	if err != nil {
		rs.log.Warn("hub: receipt outbox unreadable", "sender", sender, "err", err)
		return
	}
	for _, o := range rows {
		rs.markOutbox(o.NotificationID, rs.Send(conn, o.Frame))
	}
}

// Deliver sends a settled (deferred or expired) receipt to its sender if
// it is online; otherwise the outbox keeps it for the sender's next bind.
func (rs *Receipts) Deliver(r *Receipt, sender string) {
	if r.frame == nil {
		return
	}
	conn, ok := rs.sockets.Socket(sender)
	if !ok {
		return
	}
	rs.markOutbox(r.id, rs.Send(conn, r.frame))
}
