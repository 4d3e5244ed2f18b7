package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/wire"
)

// Retention of chat, receipts and audit rows (docs/journal.md, Retention).
// Options.Retain says how long each class is kept after it was written; the
// expiry goroutine of retention.go drops older rows in batches of
// expireBatch, each its own short transaction on the writer, like the
// idempotency records. What is never dropped, whatever the windows:
//
//   - the newest Options.KeepChatRows chat rows (the hub rebuilds its history and
//     its msg_id high-water mark from them);
//   - a directed chat that still waits (INV-DG-3): one dead-lettered (no
//     live recipient when it was sent, not cleared since), or one that a
//     comma part of its target names while that identity's mailbox
//     watermark is below it (mailbox_watermarks: an identity that
//     acknowledges has not acknowledged it yet);
//   - a chat a receipt row still refers to, and a receipt that is pending
//     or has a notification not yet delivered to its sender (at least once,
//     PROTOCOL.md §4.4);
//   - claims, board and resource rows (the snapshot and compaction's
//     business), idempotency records (their own window) and federation
//     records.
//
// Who owns what: the expiry goroutine; every write takes the writer mutex.

// Retain is how long the journal keeps each class of row after it was
// written; 0 keeps it forever (the library default). A hub sets
// DefaultRetain unless told otherwise (`synapse hub --retain`).
type Retain struct {
	Chat     time.Duration // chat rows and mailbox_watermark events
	Receipts time.Duration // settled receipts: the row, its notifications, its events
	Audit    time.Duration // denials, lapsed leases, dead-letter records
}

// DefaultRetain is the hub's: a week of chat and receipts, thirty days of
// audit rows.
var DefaultRetain = Retain{Chat: 7 * 24 * time.Hour, Receipts: 7 * 24 * time.Hour, Audit: 30 * 24 * time.Hour}

// DefaultKeepChatRows is how many of the newest chat rows retention always
// keeps (Options.KeepChatRows): the hub's history cap (the reference's
// max_history), from which a restart rebuilds its history and msg_id.
const DefaultKeepChatRows = 10_000

// RetainKinds names the classes `--retain` takes, in order.
var RetainKinds = []string{"chat", "receipts", "audit"}

// auditKinds are the rows that only record what happened.
var auditKinds = []string{KindClaimDenial, "guard_denial", KindClaimExpired, KindDeadLetterCleared,
	"dead_letter_escalation", "dead_letter_forwarding", "recall"}

// receiptKinds are the receipt events.
var receiptKinds = []string{KindReceiptRequested, KindReceiptImmediate, KindReceiptDeferred, KindReceiptExpired}

// ParseRetain reads `kind=duration[,kind=duration…]` over base: kinds from
// RetainKinds, or "all"; a duration of 0 keeps that kind forever.
func ParseRetain(spec string, base Retain) (Retain, error) {
	r := base
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		kind, val, ok := strings.Cut(part, "=")
		if !ok {
			return base, fmt.Errorf("retain %q: want kind=duration (kinds: %s, all), for example chat=72h", part, strings.Join(RetainKinds, ", "))
		}
		d, err := time.ParseDuration(strings.TrimSpace(val))
		if err != nil || d < 0 {
			return base, fmt.Errorf("retain %q: %q is not a duration of 0 or more (for example 30s, 72h; 0 = forever)", part, val)
		}
		switch strings.TrimSpace(kind) {
		case "chat":
			r.Chat = d
		case "receipts":
			r.Receipts = d
		case "audit":
			r.Audit = d
		case "all":
			r = Retain{Chat: d, Receipts: d, Audit: d}
		default:
			return base, fmt.Errorf("retain %q: unknown kind %q (kinds: %s, all)", part, kind, strings.Join(RetainKinds, ", "))
		}
	}
	return r, nil
}

// String is the spec ParseRetain reads back.
func (r Retain) String() string {
	return fmt.Sprintf("chat=%s,receipts=%s,audit=%s", r.Chat, r.Receipts, r.Audit)
}

// windows lists the positive windows with their meta keys.
func (r Retain) windows() map[string]time.Duration {
	return map[string]time.Duration{"chat": r.Chat, "receipts": r.Receipts, "audit": r.Audit}
}

// shortest is the smallest positive window (0: none).
func (r Retain) shortest() time.Duration {
	var m time.Duration
	for _, d := range r.windows() {
		if d > 0 && (m == 0 || d < m) {
			m = d
		}
	}
	return m
}

// RetainStats counts what one retention pass dropped.
type RetainStats struct {
	Chats, Watermarks, Receipts, ReceiptEvents, Audit int64
}

func (a *RetainStats) add(b RetainStats) {
	a.Chats += b.Chats
	a.Watermarks += b.Watermarks
	a.Receipts += b.Receipts
	a.ReceiptEvents += b.ReceiptEvents
	a.Audit += b.Audit
}

func (a RetainStats) total() int64 {
	return a.Chats + a.Watermarks + a.Receipts + a.ReceiptEvents + a.Audit
}

// RetainRows drops, as of now, what Options.Retain no longer keeps: at
// most limit rows of each step, each step its own transaction. It returns
// what went; a caller loops while the total is positive. The background
// goroutine calls it; so may a test, with its own now.
func (s *Store) RetainRows(ctx context.Context, now float64, limit int) (RetainStats, error) {
	var st RetainStats
	if s.opts.ReadOnly {
		return st, nil
	}
	r := s.opts.Retain
	steps := []struct {
		w    time.Duration
		step func(ctx context.Context, cutoff float64, limit int) (RetainStats, error)
	}{
		{r.Receipts, s.retainReceipts}, // first: a chat goes only once its receipt has
		{r.Chat, s.retainChats},
		{r.Audit, s.retainAudit},
	}
	for _, step := range steps {
		if step.w <= 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("journal: retain: %w", err)
		}
		got, err := s.inWriteTx(ctx, func(ctx context.Context) (RetainStats, error) {
			return step.step(ctx, now-step.w.Seconds(), limit)
		})
		if err != nil {
			return st, fmt.Errorf("journal: retain: %w", classify(err))
		}
		st.add(got)
	}
	return st, nil
}

// inWriteTx runs fn in one BEGIN IMMEDIATE transaction on the writer,
// under the writer mutex.
func (s *Store) inWriteTx(ctx context.Context, fn func(context.Context) (RetainStats, error)) (RetainStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return RetainStats{}, ErrClosed
	}
	bg := context.WithoutCancel(ctx)
	if _, err := s.wc.ExecContext(bg, "BEGIN IMMEDIATE"); err != nil {
		return RetainStats{}, err
	}
	st, err := fn(bg)
	if err == nil {
		_, err = s.wc.ExecContext(bg, "COMMIT")
	}
	if err != nil {
		s.wc.ExecContext(bg, "ROLLBACK")
		return RetainStats{}, err
	}
	return st, nil
}

// kindList is kinds as an SQL list of literals (they are constants).
func kindList(kinds []string) string {
	return "('" + strings.Join(kinds, "', '") + "')"
}

// retainReceipts drops settled receipts written before cutoff whose
// notifications all reached their sender (the row and its outbox rows),
// then receipt events before cutoff that no receipt row refers to.
func (s *Store) retainReceipts(ctx context.Context, cutoff float64, limit int) (RetainStats, error) {
	var st RetainStats
	rows, err := s.wc.QueryContext(ctx, `SELECT r.message_seq FROM delivery_receipts r JOIN events e ON e.seq = r.updated_event_seq
		WHERE r.state NOT IN ('pending', 'requested') AND e.ts < ?
		AND NOT EXISTS (SELECT 1 FROM delivery_receipt_outbox o WHERE o.message_seq = r.message_seq AND o.delivered_at IS NULL)
		ORDER BY r.message_seq LIMIT ?`, cutoff, limit)
	if err != nil {
		return st, err
	}
	seqs, err := scanInts(rows)
	if err != nil {
		return st, err
	}
	for _, seq := range seqs {
		if _, err := s.wc.ExecContext(ctx, `DELETE FROM delivery_receipt_outbox WHERE message_seq = ?`, seq); err != nil {
			return st, err
		}
		if _, err := s.wc.ExecContext(ctx, `DELETE FROM delivery_receipts WHERE message_seq = ?`, seq); err != nil {
			return st, err
		}
	}
	st.Receipts = int64(len(seqs))
	res, err := s.wc.ExecContext(ctx, `DELETE FROM events WHERE seq IN (SELECT e.seq FROM events e
		WHERE e.kind IN `+kindList(receiptKinds)+` AND e.ts < ?
		AND NOT EXISTS (SELECT 1 FROM delivery_receipts r WHERE r.message_seq = json_extract(e.payload, '$.message_seq'))
		ORDER BY e.seq LIMIT ?)`, cutoff, limit)
	if err != nil {
		return st, err
	}
	st.ReceiptEvents, err = res.RowsAffected()
	return st, err
}

// retainChats drops chat rows written before cutoff, older than the newest
// Options.KeepChatRows, that no receipt refers to and that wait for nobody, with
// their directed_chats rows; then mailbox_watermark events before cutoff
// (the mailbox_watermarks table keeps each identity's highest).
func (s *Store) retainChats(ctx context.Context, cutoff float64, limit int) (RetainStats, error) {
	var st RetainStats
	var tail int64 // the oldest seq of the kept history tail
	err := s.wc.QueryRowContext(ctx, `SELECT seq FROM events WHERE kind = 'chat' ORDER BY seq DESC LIMIT 1 OFFSET ?`, s.keepChats()-1).Scan(&tail)
	switch {
	case errors.Is(err, sql.ErrNoRows): // no more chat rows than the tail keeps
	case err != nil:
		return st, err
	default:
		if st.Chats, err = s.dropChats(ctx, tail, cutoff, limit); err != nil {
			return st, err
		}
	}
	res, err := s.wc.ExecContext(ctx, `DELETE FROM events WHERE seq IN (SELECT seq FROM events
		WHERE kind = 'mailbox_watermark' AND ts < ? ORDER BY seq LIMIT ?)`, cutoff, limit)
	if err != nil {
		return st, err
	}
	st.Watermarks, err = res.RowsAffected()
	return st, err
}

// dropChats drops up to limit chats below seq tail written before cutoff
// that wait for nobody; candidates are read a page at a time from the
// oldest, skipping those that wait.
func (s *Store) dropChats(ctx context.Context, tail int64, cutoff float64, limit int) (int64, error) {
	marks := map[string]int64{}
	var after, dropped int64
	for dropped < int64(limit) {
		rows, err := s.wc.QueryContext(ctx, `SELECT e.seq, d.sender, d.target, d.dead FROM events e
			LEFT JOIN directed_chats d ON d.seq = e.seq
			WHERE e.kind = 'chat' AND e.seq > ? AND e.seq < ? AND e.ts < ?
			AND NOT EXISTS (SELECT 1 FROM delivery_receipts r WHERE r.message_seq = e.seq)
			ORDER BY e.seq LIMIT ?`, after, tail, cutoff, 4*limit)
		if err != nil {
			return dropped, err
		}
		type cand struct {
			seq            int64
			sender, target sql.NullString
			dead           sql.NullInt64
		}
		var page []cand
		for rows.Next() {
			var c cand
			if err := rows.Scan(&c.seq, &c.sender, &c.target, &c.dead); err != nil {
				rows.Close()
				return dropped, err
			}
			page = append(page, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return dropped, err
		}
		for _, c := range page {
			after = c.seq
			if c.target.Valid {
				w, err := s.waits(ctx, c.seq, c.sender.String, c.target.String, c.dead.Int64 != 0, marks)
				if err != nil {
					return dropped, err
				}
				if w {
					continue
				}
				if _, err := s.wc.ExecContext(ctx, `DELETE FROM directed_chats WHERE seq = ?`, c.seq); err != nil {
					return dropped, err
				}
			}
			if _, err := s.wc.ExecContext(ctx, `DELETE FROM events WHERE seq = ?`, c.seq); err != nil {
				return dropped, err
			}
			if dropped++; dropped == int64(limit) {
				return dropped, nil
			}
		}
		if len(page) < 4*limit {
			return dropped, nil
		}
	}
	return dropped, nil
}

// waits reports whether the directed chat at seq still waits for someone
// (INV-DG-3): dead-lettered, or naming an identity whose watermark is
// below it. marks caches the watermarks read (-1: none).
func (s *Store) waits(ctx context.Context, seq int64, sender, target string, dead bool, marks map[string]int64) (bool, error) {
	if dead {
		return true, nil
	}
	for part := range strings.SplitSeq(target, ",") {
		p := strings.TrimSpace(part)
		if p == "" || p == wire.Identity(sender) {
			continue
		}
		wm, ok := marks[p]
		if !ok {
			err := s.wc.QueryRowContext(ctx, `SELECT through_seq FROM mailbox_watermarks WHERE identity = ?`, p).Scan(&wm)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				wm = -1
			case err != nil:
				return false, err
			}
			marks[p] = wm
		}
		if wm >= 0 && wm < seq {
			return true, nil
		}
	}
	return false, nil
}

// retainAudit drops audit rows written before cutoff.
func (s *Store) retainAudit(ctx context.Context, cutoff float64, limit int) (RetainStats, error) {
	var st RetainStats
	for _, kind := range auditKinds {
		res, err := s.wc.ExecContext(ctx, `DELETE FROM events WHERE seq IN (SELECT seq FROM events
			WHERE kind = ? AND ts < ? ORDER BY seq LIMIT ?)`, kind, cutoff, limit-int(st.Audit))
		if err != nil {
			return st, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return st, err
		}
		if st.Audit += n; st.Audit >= int64(limit) {
			break
		}
	}
	return st, nil
}

func scanInts(rows *sql.Rows) ([]int64, error) {
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func (s *Store) keepChats() int {
	if s.opts.KeepChatRows > 0 {
		return s.opts.KeepChatRows
	}
	return DefaultKeepChatRows
}

// RetainedRows is how many rows this store's retention dropped.
func (s *Store) RetainedRows() int64 { return s.retained.Load() }
