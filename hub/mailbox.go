package hub

// The mailbox (INV-DG-3, PROTOCOL.md §2.3, §4.6): directed chats are
// journalled and indexed in directed_chats; a registration heartbeat with
// mailbox:true replays the backlog after max(watermark, since_seq) page by
// page (not cut at 1000); ack advances a monotonic per-identity watermark
// once the acked seq is checked to be a chat really addressed to that
// identity; who_snapshot.mailbox_pending counts what waits.
//
// The pending projection is per identity: {watermark, count}. It lives in
// Hub.mb, guarded by Hub.mu, bounded to maxMailboxIdentities (least
// recently used offline identities are forgotten and recounted from the
// journal when they come back). A count is exact or marked for a recount:
// a recount reads directed_chats after the watermark outside the lock, up
// to the newest directed chat the projection had seen, and adds the chats
// counted live since. What counts for identity X: directed chats after X's
// watermark, not sent by X, whose target names X exactly (a comma part:
// "named") or, while X is online, reaches X by name pattern, project or role
// ("group").
//
// The two parts are kept apart so that presence does not cost a recount:
// an identity that goes offline keeps its group count (it is only not
// reported), and one that comes back with the same roles reads only the
// directed chats sent while it was away (a catch-up). A recount from the
// watermark reads every directed chat after it, which for an identity that
// never acks is the whole history: the soak (synapse bench soak) found each
// `who` after a reconnect costing that, more with every chat ever sent.

import (
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

const (
	// maxMailboxIdentities bounds the pending projection (the reference
	// keeps 512). Beyond it the least recently used offline identities are
	// forgotten; their watermarks stay in the journal.
	maxMailboxIdentities = 65536
	// mailboxPage is how many directed chats one replay read fetches.
	mailboxPage = 512
	// deadLetterMaxAge: dead-letter entries older than this are forgotten
	// when the ledger is rebuilt (PROTOCOL.md §4.6: 7 days).
	deadLetterMaxAge = 7 * 24 * 3600.0
)

type mailboxes struct {
	ids          map[string]*mbox
	clock        uint64       // LRU clock
	lastDirected int64        // newest directed chat seq the projection counted
	read         atomic.Int64 // directed chats recounts read from the journal (a metric)
}

type mbox struct {
	wm      int64 // watermark (valid when wmKnown)
	wmKnown bool
	valid   bool  // named (and group, when groupKnown) exact; else recount (wm, base] and add the deltas
	named   int64 // chats naming the identity: exact, or the delta counted live after base
	group   int64 // chats reaching it otherwise, with roles (see groupKnown, away)
	base    int64
	gen     uint64 // bumped on every invalidation
	used    uint64
	// groupKnown: group counts the chats after wm that reach the identity
	// with roles, through the moment it went away if away, else live.
	groupKnown bool
	roles      []string // the roles group is counted with
	away       bool     // offline: group stopped counting at awayFrom
	awayFrom   int64
	// catchUp: back with the same roles; group still lacks the chats in
	// (catchFrom, catchTo], sent while it was away, and has counted
	// sinceCatch live since it came back.
	catchUp            bool
	catchFrom, catchTo int64
	sinceCatch         int64
}

// pending is what the identity has waiting, as mailbox_pending reports it.
func (e *mbox) pending(online bool) int64 {
	if online {
		return e.named + e.group
	}
	return e.named
}

func (m *mailboxes) init() { m.ids = make(map[string]*mbox) }

// entryLocked returns id's entry, creating it (to be recounted) if needed.
func (m *mailboxes) entryLocked(h *Hub, id string) *mbox {
	m.clock++
	e := m.ids[id]
	if e == nil {
		e = &mbox{}
		m.ids[id] = e
		e.invalidate(m.lastDirected)
		m.evictLocked(h)
	}
	e.used = m.clock
	return e
}

func (e *mbox) invalidate(base int64) {
	e.valid, e.named, e.group, e.base = false, 0, 0, base
	e.groupKnown, e.catchUp, e.sinceCatch = false, false, 0
	e.gen++
}

// evictLocked forgets the least recently used tenth of the offline
// identities once the projection is over its bound.
func (m *mailboxes) evictLocked(h *Hub) {
	if len(m.ids) <= maxMailboxIdentities {
		return
	}
	type lru struct {
		id   string
		used uint64
	}
	var offline []lru
	for id, e := range m.ids {
		if h.reg.byName[id] == nil {
			offline = append(offline, lru{id, e.used})
		}
	}
	sort.Slice(offline, func(i, j int) bool { return offline[i].used < offline[j].used })
	for i := 0; i < len(offline) && len(m.ids) > maxMailboxIdentities*9/10; i++ {
		delete(m.ids, offline[i].id)
	}
}

// countsLocked reports whether a directed chat counts as pending for id.
func (h *Hub) countsLocked(target, sender, id string) bool {
	named, group := reach(target, sender, id, h.rolesLocked(id))
	return named || group && h.reg.byName[id] != nil
}

// reach says how a directed chat counts for identity id holding roles:
// named (a comma part of its target is id), or else group (its target
// reaches id by name pattern, project or role: it counts while id is
// online). Neither for a chat id sent.
func reach(target, sender, id string, roles []string) (named, group bool) {
	if identity(sender) == id {
		return false, false
	}
	for _, part := range strings.Split(target, ",") {
		if strings.TrimSpace(part) == id {
			return true, false
		}
	}
	return false, isRecipient(target, []string{id}, roles)
}

// rolesLocked are the roles an identity holds: its seat's and its
// sidecars'.
func (h *Hub) rolesLocked(id string) []string {
	var roles []string
	for _, n := range []string{id, id + "-rx", id + "-pane-rx"} {
		if rs := h.reg.byName[n]; rs != nil {
			roles = append(roles, rs.roles...)
		}
	}
	return roles
}

// onChatLocked counts a committed directed chat. A literal target counts
// only for the identities it could count for (countsLocked): those it
// names, and the online ones in a project it names or holding (seat or
// sidecar) a role it names; a glob target is checked against every known
// identity.
func (m *mailboxes) onChatLocked(h *Hub, seq int64, sender, target string) {
	for _, part := range strings.Split(target, ",") {
		if p := strings.TrimSpace(part); p != "" && !strings.ContainsAny(p, "?[") && m.ids[p] == nil {
			m.entryLocked(h, p).base = seq - 1 // earlier chats are recounted
		}
	}
	m.lastDirected = max(m.lastDirected, seq)
	if h.feed.listening() {
		h.feed.publish("mailbox", APIMailboxEvent{Identity: target})
	}
	count := func(id string, e *mbox) {
		if e.wmKnown && seq <= e.wm {
			return
		}
		if h.reg.byName[id] == nil { // offline: only named chats count (group is frozen while away)
			if named, _ := reach(target, sender, id, nil); named {
				e.named++
			}
			return
		}
		switch named, group := reach(target, sender, id, h.rolesLocked(id)); {
		case named:
			e.named++
		case group:
			e.group++
			if e.catchUp {
				e.sinceCatch++
			}
		}
	}
	if !literalTarget(target) {
		for id, e := range m.ids {
			count(id, e)
		}
		return
	}
	seen := map[string]bool{}
	try := func(id string) {
		if e := m.ids[id]; e != nil && !seen[id] {
			seen[id] = true
			count(id, e)
		}
	}
	for _, part := range strings.Split(target, ",") {
		p := strings.TrimSpace(part)
		if p == "" {
			continue
		}
		try(p)
		for n := range h.reg.byProject[p] {
			try(n)
		}
		for n := range h.reg.byRole[p] { // the holder, or the identity it is a sidecar of
			try(n)
			if id, ok := strings.CutSuffix(n, "-rx"); ok {
				try(id)
			}
			if id, ok := strings.CutSuffix(n, "-pane-rx"); ok {
				try(id)
			}
		}
	}
}

// onWatermarkLocked records a committed watermark advance.
func (m *mailboxes) onWatermarkLocked(h *Hub, id string, through int64) {
	e := m.entryLocked(h, id)
	if e.wmKnown && through <= e.wm {
		return
	}
	e.wm, e.wmKnown = max(e.wm, through), true
	e.invalidate(m.lastDirected)
	if h.feed.listening() {
		h.feed.publish("mailbox", APIMailboxEvent{Identity: id})
	}
}

// mailboxPresenceLocked is called when an identity's seat or sidecar binds
// or leaves: what counts for it changes with its roles and presence. A
// seat that leaves keeps its group count, unreported; one that comes back
// with the same roles catches up on what it missed (one that leaves again
// before the catch-up keeps the gap, its live count since dropped); a change
// of roles recounts from the watermark.
func (h *Hub) mailboxPresenceLocked(name string) {
	if h.cfg.Journal == nil {
		return
	}
	id := identity(name)
	e := h.mb.entryLocked(h, id)
	roles := h.rolesLocked(id)
	online := h.reg.byName[id] != nil
	switch {
	case !e.valid:
		e.invalidate(h.mb.lastDirected) // a recount in flight must not land
		if online {
			e.roles = roles // offline, it keeps the roles it had: a seat's go with it
		}
		e.away = !online
	case !online && e.catchUp:
		e.group -= e.sinceCatch
		e.catchUp, e.sinceCatch, e.away, e.awayFrom = false, 0, true, e.catchFrom
	case !online:
		if !e.away {
			e.away, e.awayFrom = true, h.mb.lastDirected
		}
	case !e.groupKnown || !sameRoles(roles, e.roles):
		e.invalidate(h.mb.lastDirected)
		e.roles, e.away = roles, false
	case e.away:
		e.away, e.catchUp, e.catchFrom, e.catchTo, e.sinceCatch = false, true, e.awayFrom, h.mb.lastDirected, 0
	}
}

func sameRoles(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// mailboxPending is who_snapshot.mailbox_pending: every online identity,
// and every other known identity with something waiting.
func (h *Hub) mailboxPending() []byte {
	counts := h.mailboxCounts()
	ids := make([]string, 0, len(counts))
	for id := range counts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	f := wire.Object()
	for _, id := range ids {
		f.Int(id, counts[id])
	}
	return f.Bytes()
}

// mailboxCounts is mailboxPending as a map (also the dashboard's
// mailbox_pending).
func (h *Hub) mailboxCounts() map[string]int64 {
	st := h.cfg.Journal
	h.mu.Lock()
	var ids []string
	for n := range h.reg.byName {
		if identity(n) == n {
			h.mb.entryLocked(h, n)
		}
	}
	for id, e := range h.mb.ids {
		if h.reg.byName[id] != nil || !e.valid || e.catchUp || e.named > 0 {
			ids = append(ids, id)
		}
	}
	h.mu.Unlock()
	counts := make(map[string]int64, len(ids))
	for _, id := range ids {
		n, ok := h.recount(st, id)
		if ok && (n > 0 || h.online(id)) {
			counts[id] = n
		}
	}
	return counts
}

func (h *Hub) online(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reg.byName[id] != nil
}

var errStopScan = errors.New("stop")

// recount makes id's count exact if it is not, reading the journal outside
// the lock, and returns it: from the watermark when it was invalidated,
// only the chats sent while it was away when it is catching up.
func (h *Hub) recount(st *journal.Store, id string) (int64, bool) {
	for attempt := 0; attempt < 3; attempt++ {
		h.mu.Lock()
		e := h.mb.ids[id]
		if e == nil {
			h.mu.Unlock()
			return 0, false
		}
		online := h.reg.byName[id] != nil
		if e.valid && !e.catchUp {
			n := e.pending(online)
			h.mu.Unlock()
			return n, true
		}
		gen, catchUp, wm, wmKnown := e.gen, e.catchUp, e.wm, e.wmKnown
		from, to := wm, e.base
		// The roles it holds now, or offline the ones it held when last
		// online (a change of roles invalidates: gen).
		roles := slices.Clone(e.roles)
		if online {
			roles = h.rolesLocked(id)
		}
		if catchUp {
			from, to, roles = max(e.catchFrom, wm), e.catchTo, slices.Clone(e.roles)
		}
		h.mu.Unlock()
		if !wmKnown && !catchUp {
			var err error
			if wm, err = st.Watermark(id); err != nil {
				return 0, false
			}
			from = wm
		}
		var named, group int64
		err := st.ScanDirected(from, func(d journal.DirectedChat) error {
			if d.Seq > to {
				return errStopScan
			}
			h.mb.read.Add(1)
			switch n, g := reach(d.Target, d.Sender, id, roles); {
			case n:
				named++
			case g:
				group++
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return 0, false
		}
		h.mu.Lock()
		if e2 := h.mb.ids[id]; e2 == e && e.gen == gen && e.catchUp == catchUp {
			if catchUp { // named was counted live while away
				e.group += group
				e.catchUp, e.sinceCatch = false, 0
			} else {
				if !e.wmKnown {
					e.wm, e.wmKnown = wm, true
				}
				// Offline, group is exact through to (it counts no more
				// while away); online, it has counted live since.
				e.named += named
				e.group += group
				e.valid, e.groupKnown, e.roles = true, true, roles
				e.away, e.awayFrom = !online, to
			}
			n := e.pending(online)
			h.mu.Unlock()
			return n, true
		}
		h.mu.Unlock()
	}
	return 0, false
}

// mailboxIdentity resolves mailbox_for (PROTOCOL.md §1.5): honoured when it
// is the connection's name or the identity its -rx/-pane-rx sidecar serves,
// otherwise silently the connection's name.
func mailboxIdentity(conn, mailboxFor string) string {
	m := strings.TrimSpace(mailboxFor)
	if m != "" && (m == conn || conn == m+"-rx" || conn == m+"-pane-rx") {
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

// mailboxReplay serves a registration heartbeat with mailbox:true: the
// since_seq cursor advances the watermark (to at most the newest seq),
// then every directed chat addressed to the identity after max(watermark,
// since_seq) is re-sent in seq order, marked replayed with its seq and
// without receipt_requested. It pages through the whole backlog, a page
// in memory at a time, and paces itself on the socket's send queue.
func (s *session) mailboxReplay(sender string, in *wire.Inbound) {
	h := s.h
	st := h.cfg.Journal
	if st == nil {
		return // a journal-less hub replays nothing
	}
	h.ackMu.Lock()
	id := mailboxIdentity(sender, in.Str("mailbox_for"))
	since, _ := in.LenientInt("since_seq")
	since = max(since, 0)
	wm, err := st.Watermark(id)
	if err != nil {
		h.ackMu.Unlock()
		return
	}
	if last, err := st.LastSeq(); err == nil && min(since, last) > wm {
		c := min(since, last)
		if _, err := h.commitRecords([]journal.Record{watermarkRecord(id, c, "cursor")}, func(int64) {
			h.mu.Lock()
			h.mb.onWatermarkLocked(h, id, c)
			h.mu.Unlock()
		}); err == nil {
			wm = c
		}
	}
	h.ackMu.Unlock()
	h.mu.Lock()
	roles := append(h.rolesLocked(id), s.roles...)
	h.mu.Unlock()
	cursor := max(wm, since)
	for {
		page, err := st.DirectedPage(cursor, mailboxPage, true)
		if err != nil {
			h.log.Warn("hub: mailbox replay stopped", "identity", id, "err", err)
			return
		}
		for _, d := range page {
			cursor = d.Seq
			if identity(d.Sender) == id || !isRecipient(d.Target, []string{id}, roles) {
				continue
			}
			b, ok := replayFrame(d.Payload, d.Seq)
			if !ok {
				continue
			}
			if !s.sendPaced(b) {
				return
			}
			h.m.framesOut.WithLabelValues("chat").Inc()
			h.m.replayed.Inc()
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

// sendPaced queues a frame without letting a long replay fill the queue:
// it waits while the queue is more than half full (the socket's own read
// goroutine waits, nobody else), so live frames still find room.
func (s *session) sendPaced(b []byte) bool {
	for s.conn != nil && s.queued() > s.conn.QueueLen()/2 {
		if s.isClosing() {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return s.send(b)
}

// ack advances the acker's watermark and settles a pending receipt
// (PROTOCOL.md §2.3). Anything that does not check out — a non-int seq, a
// seq that is not a directed chat, a chat not addressed to the identity or
// sent by it, an older seq — changes nothing and gets no reply.
func (s *session) ack(sender string, in *wire.Inbound) {
	h := s.h
	st := h.cfg.Journal
	if st == nil {
		return
	}
	seq, ok := jsonInt(in.Value("seq"))
	if !ok || seq <= 0 {
		return
	}
	id := mailboxIdentity(sender, in.Str("mailbox_for"))
	d, found, err := st.Directed(seq)
	if err != nil || !found {
		return
	}
	h.mu.Lock()
	roles := append(h.rolesLocked(id), s.roles...)
	h.mu.Unlock()
	if identity(d.Sender) == id || !isRecipient(d.Target, []string{id}, roles) {
		return // spoofed or foreign: silent no-op
	}
	h.ackMu.Lock() // one ack decision at a time: no double settlement
	defer h.ackMu.Unlock()
	var recs []journal.Record
	wm, err := st.Watermark(id)
	if err != nil {
		return
	}
	if seq > wm {
		recs = append(recs, watermarkRecord(id, seq, "ack"))
	}
	var settled *stampedReceipt
	rc, pending := h.pending.take(seq) // not pending: settled, expired, or never asked for
	if pending {
		settled = &stampedReceipt{}
		recs = append(recs, h.deferredRecord(rc, id, settled))
	}
	if len(recs) == 0 {
		return
	}
	if _, err := h.commitRecords(recs, func(int64) {
		h.mu.Lock()
		h.mb.onWatermarkLocked(h, id, seq)
		h.mu.Unlock()
	}); err != nil {
		if pending {
			h.pending.restore(rc)
		}
		return
	}
	if settled != nil {
		h.deliverReceipt(settled, rc.Sender)
	}
}

// loadDelivery rebuilds, from the journal, what a restart must not lose:
// the chat history tail (capped again, INV-RR-2) and the msg_id high-water
// mark, the pending receipts (the newest that fit the window; it returns
// the older ones, for New to expire), the mailbox projection (watermarks
// and counts) and the dead-letter ledger (dead-lettered directed chats
// after their target's watermark).
func (h *Hub) loadDelivery() (overflow []journal.ReceiptRow, err error) {
	st := h.cfg.Journal
	pending, err := st.PendingReceiptRows()
	if err != nil {
		return nil, err
	}
	overflow = h.pending.load(pending)
	tail, err := st.ChatTail(max(h.cfg.MaxHistory, 1024))
	if err != nil {
		return nil, err
	}
	for _, r := range tail {
		var p struct {
			MsgID   int64  `json:"msg_id"`
			Sender  string `json:"sender"`
			Target  string `json:"target"`
			Channel string `json:"channel"`
		}
		if json.Unmarshal(r.Payload, &p) != nil || p.Channel != "" {
			continue
		}
		h.reg.msgID.Store(max(h.reg.msgID.Load(), p.MsgID))
		t := strings.TrimSpace(p.Target)
		h.reg.history = append(h.reg.history, chatEntry{msgID: p.MsgID, seq: r.Seq, sender: p.Sender, target: p.Target,
			public: t == "" || t == "all", frame: withSeq(r.Payload, r.Seq)})
	}
	if n := len(h.reg.history); n > h.cfg.MaxHistory {
		h.reg.history = h.reg.history[n-h.cfg.MaxHistory:]
	}
	marks, err := st.Watermarks()
	if err != nil {
		return nil, err
	}
	now := h.now()
	for id, wm := range marks {
		h.mb.ids[id] = &mbox{wm: wm, wmKnown: true, valid: true, away: true}
	}
	err = st.ScanDirected(0, func(d journal.DirectedChat) error {
		h.mb.lastDirected = d.Seq
		for _, part := range strings.Split(d.Target, ",") {
			p := strings.TrimSpace(part)
			if p == "" || strings.ContainsAny(p, "?[") || identity(d.Sender) == p {
				continue
			}
			e := h.mb.ids[p]
			if e == nil {
				e = &mbox{wmKnown: true, valid: true, away: true}
				h.mb.ids[p] = e
			}
			if d.Seq > e.wm {
				e.named++
			}
		}
		if d.Dead && now-d.TS <= deadLetterMaxAge {
			if e := h.mb.ids[strings.TrimSpace(d.Target)]; e == nil || d.Seq > e.wm {
				h.deadLetterLocked(strings.TrimSpace(d.Target), d.Sender, d.TS)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	h.mb.evictLocked(h)
	return overflow, nil
}
