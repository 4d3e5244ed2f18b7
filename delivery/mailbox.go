package delivery

// The mailbox (INV-DG-3, PROTOCOL.md §2.3, §4.6): directed chats are
// journalled and indexed in directed_chats; a registration heartbeat with
// mailbox:true replays the backlog after max(watermark, since_seq) page by
// page (not cut at 1000); ack advances a monotonic per-identity watermark
// once the acked seq is checked to be a chat really addressed to that
// identity, and settles the chat's pending receipt.

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"

	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

// Mailbox is where directed chats wait for their addressee: replayed on a
// registration with mailbox:true, acknowledged with ack. Its methods are
// called on the read goroutine of the socket the verb came in on, without
// Hub.mu. NewJournalMailbox, NewFleetMailbox and NoMailbox are the kinds.
type Mailbox interface {
	// Replay serves a registration heartbeat with mailbox:true from
	// sender on conn: every directed chat to the identity after
	// max(watermark, since_seq) is re-sent in seq order, marked replayed
	// with its seq.
	Replay(conn Conn, sender string, in *wire.Inbound)
	// Ack advances the acking identity's watermark to the acked seq, when
	// it checks out; anything that does not changes nothing and is not
	// answered (PROTOCOL.md §2.3).
	Ack(conn Conn, sender string, in *wire.Inbound)
	// Carries returns the addressee when this mailbox itself carries a
	// chat to target (on a fleet: a plain name in a namespace), and ""
	// when the chat goes through the hub's fan-out.
	Carries(target string) string
	// Post stores a chat this mailbox carries to addressee to and returns
	// its seq; this hub must own to's namespace.
	Post(to string, frame []byte) (int64, error)
}

// ErrNotCarried is Post's error on a mailbox that carries no chats itself.
var ErrNotCarried = errors.New("delivery: this mailbox does not carry chats")

// mailboxPage is how many directed chats one replay read fetches.
const mailboxPage = 512

// NoMailbox is a hub's without a journal or a fleet: it replays nothing
// and ignores acks.
var NoMailbox Mailbox = noMailbox{}

type noMailbox struct{}

func (noMailbox) Replay(Conn, string, *wire.Inbound) {}
func (noMailbox) Ack(Conn, string, *wire.Inbound)    {}
func (noMailbox) Carries(string) string              { return "" }
func (noMailbox) Post(string, []byte) (int64, error) { return 0, ErrNotCarried }

// journalMailbox keeps the mailbox in the hub's journal.
type journalMailbox struct {
	st       Journal
	commit   Committer
	mb       *Projection
	receipts *Receipts
	counters Counters
	log      *slog.Logger
	ackMu    sync.Mutex // serialises ack and cursor decisions: a receipt is settled once
}

// NewJournalMailbox keeps the mailbox in st: watermarks commit through
// commit, and mb counts what waits.
func NewJournalMailbox(st Journal, commit Committer, mb *Projection, receipts *Receipts, counters Counters, log *slog.Logger) Mailbox {
	return &journalMailbox{st: st, commit: commit, mb: mb, receipts: receipts, counters: counters, log: log}
}

func (m *journalMailbox) Carries(string) string              { return "" }
func (m *journalMailbox) Post(string, []byte) (int64, error) { return 0, ErrNotCarried }

// MailboxIdentity resolves mailbox_for (PROTOCOL.md §1.5): honoured when it
// is the connection's name or the identity its -rx/-pane-rx sidecar serves,
// otherwise silently the connection's name.
func MailboxIdentity(conn, mailboxFor string) string {
	m := strings.TrimSpace(mailboxFor)
	if m != "" && wire.SidecarOf(conn, m) {
		return m
	}
	return conn
}

// watermarkRecord is a mailbox_watermark row and its table upsert.
func watermarkRecord(id string, through int64, source string) journal.Record {
	p, _ := pyjson.AppendValue(nil, map[string]any{"identity": id, "through_seq": through, "source": source})
	return journal.Record{Kind: journal.KindMailboxWatermark, Payload: p,
		Stamp: func(int64) ([]byte, []journal.Statement) {
			return nil, []journal.Statement{journal.AdvanceWatermark(id, through)}
		}}
}

// Replay serves a registration heartbeat with mailbox:true: the since_seq
// cursor advances the watermark (to at most the newest seq), then every
// directed chat addressed to the identity after max(watermark, since_seq)
// is re-sent in seq order, marked replayed with its seq and without
// receipt_requested. It pages through the whole backlog, a page in memory
// at a time, and paces itself on the socket's send queue.
func (m *journalMailbox) Replay(conn Conn, sender string, in *wire.Inbound) {
	st := m.st
	m.ackMu.Lock()
	id := MailboxIdentity(sender, in.Str("mailbox_for"))
	since, _ := in.LenientInt("since_seq")
	since = max(since, 0)
	wm, err := st.Watermark(id)
	if err != nil {
		m.ackMu.Unlock()
		return
	}
	if last, err := st.LastSeq(); err == nil && min(since, last) > wm {
		c := min(since, last)
		if _, err := m.commit.Commit([]journal.Record{watermarkRecord(id, c, "cursor")}, func(int64) {
			m.mb.OnWatermarkLocked(id, c)
		}); err == nil {
			wm = c
		}
	}
	m.ackMu.Unlock()
	roles := conn.ReachRoles(id)
	cursor := max(wm, since)
	for {
		page, err := st.DirectedPage(cursor, mailboxPage, true)
		if err != nil {
			m.log.Warn("hub: mailbox replay stopped", "identity", id, "err", err)
			return
		}
		for _, d := range page {
			cursor = d.Seq
			if wire.Identity(d.Sender) == id || !IsRecipient(d.Target, []string{id}, roles) {
				continue
			}
			b, ok := replayFrame(d.Payload, d.Seq)
			if !ok {
				continue
			}
			if !conn.SendPaced(b) {
				return
			}
			m.counters.ChatFrames.Inc()
			m.counters.Replayed.Inc()
		}
		if len(page) < mailboxPage {
			return
		}
	}
}

// replayFrame re-sends a stored chat: receipt_requested removed, replayed
// and seq added (keys sorted, as the reference's journal-backed frames).
func replayFrame(payload []byte, seq int64) ([]byte, bool) {
	d := json.NewDecoder(strings.NewReader(string(payload)))
	d.UseNumber()
	var m map[string]any
	if d.Decode(&m) != nil || m == nil {
		return nil, false
	}
	delete(m, "receipt_requested")
	m["replayed"] = true
	m["seq"] = json.Number(itoa(seq))
	b, err := pyjson.AppendValue(nil, m)
	return b, err == nil
}

// ackedSeq is an ack's seq: a positive JSON integer.
func ackedSeq(in *wire.Inbound) (int64, bool) {
	seq, present, err := in.StrictInt("seq")
	return seq, present && err == nil && seq > 0
}

// Ack advances the acker's watermark and settles a pending receipt
// (PROTOCOL.md §2.3). Anything that does not check out — a non-int seq, a
// seq that is not a directed chat, a chat not addressed to the identity or
// sent by it, an older seq — changes nothing and gets no reply.
func (m *journalMailbox) Ack(conn Conn, sender string, in *wire.Inbound) {
	st := m.st
	seq, ok := ackedSeq(in)
	if !ok {
		return
	}
	id := MailboxIdentity(sender, in.Str("mailbox_for"))
	d, found, err := st.Directed(seq)
	if err != nil || !found {
		return
	}
	roles := conn.ReachRoles(id)
	if wire.Identity(d.Sender) == id || !IsRecipient(d.Target, []string{id}, roles) {
		return // spoofed or foreign: silent no-op
	}
	m.ackMu.Lock() // one ack decision at a time: no double settlement
	defer m.ackMu.Unlock()
	var recs []journal.Record
	wm, err := st.Watermark(id)
	if err != nil {
		return
	}
	if seq > wm {
		recs = append(recs, watermarkRecord(id, seq, "ack"))
	}
	var settled *Receipt
	rc, pending := m.receipts.window.Take(seq) // not pending: settled, expired, or never asked for
	if pending {
		settled = &Receipt{}
		recs = append(recs, m.receipts.deferredRecord(rc, id, settled))
	}
	if len(recs) == 0 {
		return
	}
	if _, err := m.commit.Commit(recs, func(int64) {
		m.mb.OnWatermarkLocked(id, seq)
	}); err != nil {
		if pending {
			m.receipts.window.Restore(rc)
		}
		return
	}
	if settled != nil {
		m.receipts.Deliver(settled, rc.Sender)
	}
}
