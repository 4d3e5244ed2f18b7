package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
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
//     literal comma part of its target names while that identity has not
//     acknowledged past it (mailbox_watermarks below its seq, or no
//     watermark at all: a client that never acks, or a role or project,
//     which the journal cannot tell from a name) — unless Retain.Mail is
//     set, the one window that drops waiting mail, off by default;
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
	// Mail drops directed mail that still waits (dead letters, mail not
	// acknowledged) once it is this old and past Chat too; 0 (the
	// default, and what "all" leaves alone) keeps it until it is read.
	Mail time.Duration
}

// DefaultRetain is the hub's: a week of chat and receipts, thirty days of
// audit rows.
var DefaultRetain = Retain{Chat: 7 * 24 * time.Hour, Receipts: 7 * 24 * time.Hour, Audit: 30 * 24 * time.Hour}

// DefaultKeepChatRows is how many of the newest chat rows retention always
// keeps (Options.KeepChatRows): the hub's history cap (the reference's
// max_history), from which a restart rebuilds its history and msg_id.
const DefaultKeepChatRows = 10_000

// RetainKinds names the classes `--retain` takes, in order.
var RetainKinds = []string{"chat", "receipts", "audit", "mail"}

// auditKinds are the rows that only record what happened.
var auditKinds = []string{KindClaimDenial, "guard_denial", KindClaimExpired, KindDeadLetterCleared,
	"dead_letter_escalation", "dead_letter_forwarding", "recall"}

// receiptKinds are the receipt events.
var receiptKinds = []string{KindReceiptRequested, KindReceiptImmediate, KindReceiptDeferred, KindReceiptExpired}

// ParseRetain reads `kind=duration[,kind=duration…]` over base: kinds from
// RetainKinds, or "all" (chat, receipts and audit: mail that waits goes
// only when named); a duration of 0 keeps that kind forever.
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
		case "mail":
			r.Mail = d
		case "all":
			r.Chat, r.Receipts, r.Audit = d, d, d
		default:
			return base, fmt.Errorf("retain %q: unknown kind %q (kinds: %s, all)", part, kind, strings.Join(RetainKinds, ", "))
		}
	}
	return r, nil
}

// String is the spec ParseRetain reads back.
func (r Retain) String() string {
	return fmt.Sprintf("chat=%s,receipts=%s,audit=%s,mail=%s", r.Chat, r.Receipts, r.Audit, r.Mail)
}

// shortest is the smallest positive window (0: none).
func (r Retain) shortest() time.Duration {
	var m time.Duration
	for _, d := range [...]time.Duration{r.Chat, r.Receipts, r.Audit, r.Mail} {
		if d > 0 && (m == 0 || d < m) {
			m = d
		}
	}
	return m
}

// RetainStats counts what one retention pass dropped.
type RetainStats struct {
	Chats, Watermarks, Receipts, ReceiptEvents, Audit int64
	Mail                                              int64 // waiting mail dropped by Retain.Mail (among Chats)
}

func (a *RetainStats) add(b RetainStats) {
	a.Chats += b.Chats
	a.Watermarks += b.Watermarks
	a.Receipts += b.Receipts
	a.ReceiptEvents += b.ReceiptEvents
	a.Audit += b.Audit
	a.Mail += b.Mail
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
		if st.Chats, st.Mail, err = s.dropChats(ctx, tail, cutoff, limit); err != nil {
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
// that wait for nobody (or, with Retain.Mail, that waited past it: mail);
// candidates are read a page at a time from the oldest, skipping those
// that wait.
func (s *Store) dropChats(ctx context.Context, tail int64, cutoff float64, limit int) (dropped, mail int64, err error) {
	mailCutoff := math.Inf(-1)
	if w := s.opts.Retain.Mail; w > 0 {
		mailCutoff = cutoff + s.opts.Retain.Chat.Seconds() - w.Seconds()
	}
	marks := map[string]int64{}
	wm := func(id string) (int64, error) {
		v, ok := marks[id]
		if ok {
			return v, nil
		}
		err := s.wc.QueryRowContext(ctx, `SELECT through_seq FROM mailbox_watermarks WHERE identity = ?`, id).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			v, err = 0, nil // never acknowledged anything
		}
		marks[id] = v
		return v, err
	}
	var after int64
	for dropped < int64(limit) {
		rows, err := s.wc.QueryContext(ctx, `SELECT e.seq, e.ts, d.sender, d.target, d.dead FROM events e
			LEFT JOIN directed_chats d ON d.seq = e.seq
			WHERE e.kind = 'chat' AND e.seq > ? AND e.seq < ? AND e.ts < ?
			AND NOT EXISTS (SELECT 1 FROM delivery_receipts r WHERE r.message_seq = e.seq)
			ORDER BY e.seq LIMIT ?`, after, tail, cutoff, 4*limit)
		if err != nil {
			return dropped, mail, err
		}
		type cand struct {
			seq            int64
			ts             float64
			sender, target sql.NullString
			dead           sql.NullInt64
		}
		var page []cand
		for rows.Next() {
			var c cand
			if err := rows.Scan(&c.seq, &c.ts, &c.sender, &c.target, &c.dead); err != nil {
				rows.Close()
				return dropped, mail, err
			}
			page = append(page, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return dropped, mail, err
		}
		for _, c := range page {
			after = c.seq
			if c.target.Valid {
				w, err := Waiting(c.seq, c.sender.String, c.target.String, c.dead.Int64 != 0, wm)
				if err != nil {
					return dropped, mail, err
				}
				if w && c.ts >= mailCutoff {
					continue
				}
				if w {
					mail++
				}
				if _, err := s.wc.ExecContext(ctx, `DELETE FROM directed_chats WHERE seq = ?`, c.seq); err != nil {
					return dropped, mail, err
				}
			}
			if _, err := s.wc.ExecContext(ctx, `DELETE FROM events WHERE seq = ?`, c.seq); err != nil {
				return dropped, mail, err
			}
			if dropped++; dropped == int64(limit) {
				return dropped, mail, nil
			}
		}
		if len(page) < 4*limit {
			return dropped, mail, nil
		}
	}
	return dropped, mail, nil
}

// Waiting reports whether the directed chat at seq still waits for someone
// (INV-DG-3): dead-lettered, or naming, in a literal comma part other than
// its sender, an identity whose watermark (wm: 0 for one that never
// acknowledged) is below it.
func Waiting(seq int64, sender, target string, dead bool, wm func(identity string) (int64, error)) (bool, error) {
	if dead {
		return true, nil
	}
	for part := range strings.SplitSeq(target, ",") {
		p := strings.TrimSpace(part)
		if p == "" || p == wire.Identity(sender) || !wire.Literal(p) {
			continue
		}
		w, err := wm(p)
		if err != nil {
			return false, err
		}
		if w < seq {
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
