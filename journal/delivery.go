package journal

// Directed delivery: the mailbox projection's own tables and the
// reference's receipt tables (PROTOCOL.md §4.1, §4.4, §4.6). The events
// table stays the truth: every table here is written in the transaction of
// the event it projects (Record.Stamp), and the two projection tables are
// back-filled from the events by the schema-2 migration.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Event kinds of directed delivery (PROTOCOL.md §4.2).
const (
	KindChat             = "chat"
	KindMailboxWatermark = "mailbox_watermark"
	KindReceiptRequested = "delivery_receipt_requested"
	KindReceiptImmediate = "delivery_receipt_immediate"
	KindReceiptDeferred  = "delivery_receipt_deferred"
	KindReceiptExpired   = "delivery_receipt_expired"
	// KindDeadLetterCleared is ours: the target bound, so its dead
	// letters up to through_seq are no longer dead (the reference keeps
	// dead letters in memory only and skips the kind).
	KindDeadLetterCleared  = "dead_letter_cleared"
	receiptKindPhasePrefix = "delivery_receipt_"
)

// deliverySchema is our addition of schema version 2.
//
// directed_chats has one row per journalled directed chat (target not
// blank, not "all", no '*'), keyed by the chat's events.seq: mailbox
// replay pages through it in seq order and reads the payload from events
// by primary key, so a page costs its own rows whatever the log holds
// besides; dead is 1 when no live recipient matched at send time.
// mailbox_watermarks holds each identity's highest through_seq. The
// partial index finds a target's dead chats when it binds
// (ClearDeadLetters) without reading the live ones;
// delivery_receipts_pending_idx finds the pending receipts at start without
// reading the settled ones (the reference's table keeps every receipt).
const deliverySchema = `
CREATE TABLE IF NOT EXISTS directed_chats (seq INTEGER PRIMARY KEY, ts REAL NOT NULL,
                     sender TEXT NOT NULL, target TEXT NOT NULL, dead INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS directed_chats_dead_idx ON directed_chats(target) WHERE dead = 1;
CREATE INDEX IF NOT EXISTS delivery_receipts_pending_idx ON delivery_receipts(message_seq) WHERE state = 'pending';
CREATE TABLE IF NOT EXISTS mailbox_watermarks (identity TEXT PRIMARY KEY, through_seq INTEGER NOT NULL);
`

// IsDirected reports whether a chat target is directed: not blank, not
// "all" and without '*' (PROTOCOL.md §2.2 step 7). Only directed chats
// dead-letter and are replayed.
func IsDirected(target string) bool {
	t := strings.TrimSpace(target)
	return t != "" && t != "all" && !strings.Contains(t, "*")
}

// migrateDelivery back-fills the schema-2 tables from the rows already in
// the file (a v1 file of ours, or one the reference wrote).
func (s *Store) migrateDelivery(ctx context.Context) error {
	rows, err := s.wc.QueryContext(ctx, `SELECT seq, ts, kind, payload FROM events WHERE kind IN ('chat', 'mailbox_watermark') ORDER BY seq`)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	type chat struct {
		seq            int64
		ts             float64
		sender, target string
	}
	var chats []chat
	marks := map[string]int64{}
	for rows.Next() {
		var c chat
		var kind, payload string
		if err := rows.Scan(&c.seq, &c.ts, &kind, &payload); err != nil {
			rows.Close()
			return fmt.Errorf("migrate: %w", err)
		}
		var p struct {
			Sender     string `json:"sender"`
			Target     string `json:"target"`
			Channel    string `json:"channel"`
			Identity   string `json:"identity"`
			ThroughSeq int64  `json:"through_seq"`
		}
		if json.Unmarshal([]byte(payload), &p) != nil {
			continue // unreadable rows are replay's business
		}
		switch {
		case kind == KindChat && p.Channel == "" && IsDirected(p.Target):
			c.sender, c.target = p.Sender, p.Target
			chats = append(chats, c)
		case kind == KindMailboxWatermark && p.Identity != "":
			marks[p.Identity] = max(marks[p.Identity], min(p.ThroughSeq, c.seq))
		}
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, c := range chats {
		st := InsertDirectedChat(c.seq, c.ts, c.sender, c.target, false)
		if _, err := s.wc.ExecContext(ctx, st.SQL, st.Args...); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	for id, through := range marks {
		st := AdvanceWatermark(id, through)
		if _, err := s.wc.ExecContext(ctx, st.SQL, st.Args...); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	return nil
}

// InsertDirectedChat indexes the directed chat journalled at seq.
func InsertDirectedChat(seq int64, ts float64, sender, target string, dead bool) Statement {
	return Statement{`INSERT INTO directed_chats(seq, ts, sender, target, dead) VALUES(?, ?, ?, ?, ?)`,
		[]any{seq, ts, sender, target, boolInt(dead)}}
}

// ClearDeadLetters unmarks target's dead directed chats with seq <=
// through (a dead_letter_cleared row's statement).
func ClearDeadLetters(target string, through int64) Statement {
	return Statement{`UPDATE directed_chats SET dead = 0 WHERE target = ? AND dead = 1 AND seq <= ?`,
		[]any{target, through}}
}

// AdvanceWatermark raises identity's watermark to through (never lowers it).
func AdvanceWatermark(identity string, through int64) Statement {
	return Statement{`INSERT INTO mailbox_watermarks(identity, through_seq) VALUES(?, ?)
		ON CONFLICT(identity) DO UPDATE SET through_seq = max(through_seq, excluded.through_seq)`,
		[]any{identity, through}}
}

// ReceiptRow is a delivery_receipts row (PROTOCOL.md §4.1, §4.4).
type ReceiptRow struct {
	MessageSeq      int64
	Sender, Target  string
	MessageID       int64
	ClientMsgID     string
	State           string // requested, immediate_delivered, pending, deferred, expired
	Delivered       bool
	Deferred        bool
	AckedBy         string
	UpdatedEventSeq int64
}

// UpsertReceipt writes the receipt aggregate of r.MessageSeq.
func UpsertReceipt(r ReceiptRow) Statement {
	return Statement{`INSERT INTO delivery_receipts(message_seq, sender, target, message_id, client_msg_id, state,
		delivered, deferred, acked_by, updated_event_seq) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(message_seq) DO UPDATE SET state = excluded.state, delivered = excluded.delivered,
		deferred = excluded.deferred, acked_by = excluded.acked_by, updated_event_seq = excluded.updated_event_seq`,
		[]any{r.MessageSeq, r.Sender, r.Target, r.MessageID, r.ClientMsgID, r.State, boolInt(r.Delivered),
			boolInt(r.Deferred), r.AckedBy, r.UpdatedEventSeq}}
}

// OutboxRow is a delivery_receipt_outbox row: one receipt notification to
// deliver to its sender at least once.
type OutboxRow struct {
	NotificationID string // delivery-receipt:<message_seq>:<state>
	MessageSeq     int64
	Phase          string // the event kind minus "delivery_receipt_"
	Sender         string
	Frame          []byte
	Attempts       int64
	Delivered      bool
}

// InsertOutbox queues a notification (a duplicate id is ignored).
func InsertOutbox(o OutboxRow) Statement {
	return Statement{`INSERT OR IGNORE INTO delivery_receipt_outbox(notification_id, message_seq, phase, sender, frame_json)
		VALUES(?, ?, ?, ?, ?)`, []any{o.NotificationID, o.MessageSeq, o.Phase, o.Sender, string(o.Frame)}}
}

// ReceiptPhase is the outbox phase of a receipt event kind.
func ReceiptPhase(kind string) string { return strings.TrimPrefix(kind, receiptKindPhasePrefix) }

// DirectedChat is one directed_chats row, with the chat's stored frame
// when asked for.
type DirectedChat struct {
	Seq            int64
	TS             float64
	Sender, Target string
	Dead           bool
	Payload        []byte
}

// DirectedPage returns up to limit directed chats with seq > after, in seq
// order; withPayload also reads each chat's stored frame.
func (s *Store) DirectedPage(after int64, limit int, withPayload bool) ([]DirectedChat, error) {
	q := `SELECT seq, ts, sender, target, dead, NULL FROM directed_chats WHERE seq > ? ORDER BY seq LIMIT ?`
	if withPayload {
		q = `SELECT d.seq, d.ts, d.sender, d.target, d.dead, e.payload FROM directed_chats d JOIN events e ON e.seq = d.seq
			WHERE d.seq > ? ORDER BY d.seq LIMIT ?`
	}
	rows, err := s.rdb.Query(q, after, limit)
	if err != nil {
		return nil, fmt.Errorf("journal: directed page: %w", classify(err))
	}
	defer rows.Close()
	var out []DirectedChat
	for rows.Next() {
		var d DirectedChat
		var dead int
		var payload sql.NullString
		if err := rows.Scan(&d.Seq, &d.TS, &d.Sender, &d.Target, &dead, &payload); err != nil {
			return nil, fmt.Errorf("journal: directed page: %w", classify(err))
		}
		d.Dead = dead != 0
		if payload.Valid {
			d.Payload = []byte(payload.String)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("journal: directed page: %w", classify(err))
	}
	return out, nil
}

// ScanDirected calls fn for every directed chat with seq > after, in seq
// order, without payloads, a page at a time.
func (s *Store) ScanDirected(after int64, fn func(DirectedChat) error) error {
	for {
		page, err := s.DirectedPage(after, scanBatch, false)
		if err != nil {
			return err
		}
		for _, d := range page {
			if err := fn(d); err != nil {
				return err
			}
		}
		if len(page) < scanBatch {
			return nil
		}
		after = page[len(page)-1].Seq
	}
}

// Directed returns the directed chat journalled at seq, if it is one.
func (s *Store) Directed(seq int64) (DirectedChat, bool, error) {
	var d DirectedChat
	var dead int
	err := s.rdb.QueryRow(`SELECT seq, ts, sender, target, dead FROM directed_chats WHERE seq = ?`, seq).
		Scan(&d.Seq, &d.TS, &d.Sender, &d.Target, &dead)
	if errors.Is(err, sql.ErrNoRows) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("journal: directed chat: %w", classify(err))
	}
	d.Dead = dead != 0
	return d, true, nil
}

// Watermarks returns every identity's watermark.
func (s *Store) Watermarks() (map[string]int64, error) {
	rows, err := s.rdb.Query(`SELECT identity, through_seq FROM mailbox_watermarks`)
	if err != nil {
		return nil, fmt.Errorf("journal: watermarks: %w", classify(err))
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var through int64
		if err := rows.Scan(&id, &through); err != nil {
			return nil, fmt.Errorf("journal: watermarks: %w", classify(err))
		}
		out[id] = through
	}
	return out, rows.Err()
}

// Watermark returns one identity's watermark (0 when it has none).
func (s *Store) Watermark(identity string) (int64, error) {
	var n int64
	err := s.rdb.QueryRow(`SELECT COALESCE((SELECT through_seq FROM mailbox_watermarks WHERE identity = ?), 0)`, identity).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("journal: watermark: %w", classify(err))
	}
	return n, nil
}

// ChatRow is a journalled chat: its seq and stored frame.
type ChatRow struct {
	Seq     int64
	Payload []byte
}

// ChatTail returns the newest n chat rows, oldest first (history rebuild;
// the events(kind) index makes it a range read).
func (s *Store) ChatTail(n int) ([]ChatRow, error) {
	rows, err := s.rdb.Query(`SELECT seq, payload FROM events WHERE kind = 'chat' ORDER BY seq DESC LIMIT ?`, n)
	if err != nil {
		return nil, fmt.Errorf("journal: chat tail: %w", classify(err))
	}
	defer rows.Close()
	var out []ChatRow
	for rows.Next() {
		var r ChatRow
		var p string
		if err := rows.Scan(&r.Seq, &p); err != nil {
			return nil, fmt.Errorf("journal: chat tail: %w", classify(err))
		}
		r.Payload = []byte(p)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("journal: chat tail: %w", classify(err))
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

const receiptColumns = `message_seq, sender, target, message_id, client_msg_id, state, delivered, deferred,
	acked_by, updated_event_seq`

func scanReceipt(row interface{ Scan(...any) error }) (ReceiptRow, error) {
	var r ReceiptRow
	var delivered sql.NullInt64
	var deferred int
	err := row.Scan(&r.MessageSeq, &r.Sender, &r.Target, &r.MessageID, &r.ClientMsgID, &r.State, &delivered, &deferred,
		&r.AckedBy, &r.UpdatedEventSeq)
	r.Delivered, r.Deferred = delivered.Int64 != 0, deferred != 0
	return r, err
}

// Receipt returns the receipt aggregate of a message seq.
func (s *Store) Receipt(messageSeq int64) (ReceiptRow, bool, error) {
	r, err := scanReceipt(s.rdb.QueryRow(`SELECT `+receiptColumns+` FROM delivery_receipts WHERE message_seq = ?`, messageSeq))
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("journal: receipt: %w", classify(err))
	}
	return r, true, nil
}

// PendingReceiptRows returns the receipts waiting for an ack, in message
// seq order (the hub restores its pending window from them).
func (s *Store) PendingReceiptRows() ([]ReceiptRow, error) {
	rows, err := s.rdb.Query(`SELECT ` + receiptColumns + ` FROM delivery_receipts WHERE state = 'pending' ORDER BY message_seq`)
	if err != nil {
		return nil, fmt.Errorf("journal: receipts: %w", classify(err))
	}
	defer rows.Close()
	var out []ReceiptRow
	for rows.Next() {
		r, err := scanReceipt(rows)
		if err != nil {
			return nil, fmt.Errorf("journal: receipts: %w", classify(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("journal: receipts: %w", classify(err))
	}
	return out, nil
}

// ReceiptCount counts the receipts in state (pending: waiting for an ack).
func (s *Store) ReceiptCount(state string) (int64, error) {
	var n int64
	err := s.rdb.QueryRow(`SELECT count(*) FROM delivery_receipts WHERE state = ?`, state).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("journal: receipts: %w", classify(err))
	}
	return n, nil
}

// OutboxPending returns sender's undelivered notifications, oldest first.
func (s *Store) OutboxPending(sender string) ([]OutboxRow, error) {
	rows, err := s.rdb.Query(`SELECT notification_id, message_seq, phase, sender, frame_json, attempts FROM delivery_receipt_outbox
		WHERE sender = ? AND delivered_at IS NULL ORDER BY message_seq, rowid`, sender)
	if err != nil {
		return nil, fmt.Errorf("journal: outbox: %w", classify(err))
	}
	defer rows.Close()
	var out []OutboxRow
	for rows.Next() {
		var o OutboxRow
		var frame string
		if err := rows.Scan(&o.NotificationID, &o.MessageSeq, &o.Phase, &o.Sender, &frame, &o.Attempts); err != nil {
			return nil, fmt.Errorf("journal: outbox: %w", classify(err))
		}
		o.Frame = []byte(frame)
		out = append(out, o)
	}
	return out, rows.Err()
}

// MarkOutbox records one delivery attempt of a notification: attempts+1,
// and delivered_at = at when the transport accepted it. It commits on its
// own at NORMAL durability: losing it re-sends the notification, which
// clients dedup on its id.
func (s *Store) MarkOutbox(id string, delivered bool, at float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	var deliveredAt any
	if delivered {
		deliveredAt = at
	}
	_, err := s.wc.ExecContext(context.Background(), `UPDATE delivery_receipt_outbox SET attempts = attempts + 1,
		delivered_at = COALESCE(?, delivered_at) WHERE notification_id = ?`, deliveredAt, id)
	if err != nil {
		return fmt.Errorf("journal: mark outbox: %w", err)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
