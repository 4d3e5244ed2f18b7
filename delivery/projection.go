package delivery

// The mailbox pending projection (INV-DG-3, PROTOCOL.md §4.6):
// who_snapshot.mailbox_pending counts, per identity, the directed chats
// waiting after its watermark.
//
// It is per identity: {watermark, count}, bounded to maxMailboxIdentities
// (least recently used offline identities are forgotten and recounted
// from the journal when they come back). A count is exact or marked for a
// recount: a recount reads directed_chats after the watermark outside the
// lock, up to the newest directed chat the projection had seen, and adds
// the chats counted live since. What counts for identity X: directed chats
// after X's watermark, not sent by X, whose target names X exactly (a comma
// part: "named") or, while X is online, reaches X by name pattern, project
// or role ("group").
//
// The two parts are kept apart so that presence does not cost a recount:
// an identity that goes offline keeps its group count (it is only not
// reported), and one that comes back with the same roles reads only the
// directed chats sent while it was away (a catch-up). A recount from the
// watermark reads every directed chat after it, which for an identity that
// never acks is the whole history: the soak (synapse bench soak) found each
// `who` after a reconnect costing that, more with every chat ever sent.

import (
	"errors"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/wire"
)

// maxMailboxIdentities bounds the pending projection (the reference keeps
// 512). Beyond it the least recently used offline identities are
// forgotten; their watermarks stay in the journal.
const maxMailboxIdentities = 65536

// Projection is the mailbox pending projection. Its methods ending in
// Locked are called with Hub.mu held; it reads the Directory under it.
type Projection struct {
	dir          Directory
	events       Events
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

// NewProjection is an empty projection over dir that tells events of
// every backlog change.
func NewProjection(dir Directory, events Events) *Projection {
	return &Projection{dir: dir, events: events, ids: make(map[string]*mbox)}
}

// pending is what the identity has waiting, as mailbox_pending reports it.
func (e *mbox) pending(online bool) int64 {
	if online {
		return e.named + e.group
	}
	return e.named
}

// Read is how many directed chats recounts have read from the journal.
func (p *Projection) Read() int64 { return p.read.Load() }

// LastDirectedLocked is the newest directed chat the projection counted.
func (p *Projection) LastDirectedLocked() int64 { return p.lastDirected }

// entryLocked returns id's entry, creating it (to be recounted) if needed.
func (p *Projection) entryLocked(id string) *mbox {
	p.clock++
	e := p.ids[id]
	if e == nil {
		e = &mbox{}
		p.ids[id] = e
		e.invalidate(p.lastDirected)
		p.evictLocked()
	}
	e.used = p.clock
	return e
}

func (e *mbox) invalidate(base int64) {
	e.valid, e.named, e.group, e.base = false, 0, 0, base
	e.groupKnown, e.catchUp, e.sinceCatch = false, false, 0
	e.gen++
}

// evictLocked forgets the least recently used tenth of the offline
// identities once the projection is over its bound.
func (p *Projection) evictLocked() {
	if len(p.ids) <= maxMailboxIdentities {
		return
	}
	type lru struct {
		id   string
		used uint64
	}
	var offline []lru
	for id, e := range p.ids {
		if !p.dir.Bound(id) {
			offline = append(offline, lru{id, e.used})
		}
	}
	sort.Slice(offline, func(i, j int) bool { return offline[i].used < offline[j].used })
	for i := 0; i < len(offline) && len(p.ids) > maxMailboxIdentities*9/10; i++ {
		delete(p.ids, offline[i].id)
	}
}

// CountsLocked reports whether a directed chat counts as pending for id:
// the definition the projection's counts keep to.
func (p *Projection) CountsLocked(target, sender, id string) bool {
	named, group := reach(target, sender, id, p.dir.IdentityRoles(id))
	return named || group && p.dir.Bound(id)
}

// reach says how a directed chat counts for identity id holding roles:
// named (a comma part of its target is id), or else group (its target
// reaches id by name pattern, project or role: it counts while id is
// online). Neither for a chat id sent.
func reach(target, sender, id string, roles []string) (named, group bool) {
	if wire.Identity(sender) == id {
		return false, false
	}
	for _, part := range strings.Split(target, ",") {
		if strings.TrimSpace(part) == id {
			return true, false
		}
	}
	return false, IsRecipient(target, []string{id}, roles)
}

// OnChatLocked counts a committed directed chat. A literal target counts
// only for the identities it could count for (CountsLocked): those it
// names, and the online ones in a project it names or holding (seat or
// sidecar) a role it names; a glob target is checked against every known
// identity.
func (p *Projection) OnChatLocked(seq int64, sender, target string) {
	for _, part := range strings.Split(target, ",") {
		if t := strings.TrimSpace(part); t != "" && !strings.ContainsAny(t, "?[") && p.ids[t] == nil {
			p.entryLocked(t).base = seq - 1 // earlier chats are recounted
		}
	}
	p.lastDirected = max(p.lastDirected, seq)
	if p.events.Listening() {
		p.events.MailboxChanged(target)
	}
	count := func(id string, e *mbox) {
		if e.wmKnown && seq <= e.wm {
			return
		}
		if !p.dir.Bound(id) { // offline: only named chats count (group is frozen while away)
			if named, _ := reach(target, sender, id, nil); named {
				e.named++
			}
			return
		}
		switch named, group := reach(target, sender, id, p.dir.IdentityRoles(id)); {
		case named:
			e.named++
		case group:
			e.group++
			if e.catchUp {
				e.sinceCatch++
			}
		}
	}
	if !LiteralTarget(target) {
		for id, e := range p.ids {
			count(id, e)
		}
		return
	}
	seen := map[string]bool{}
	try := func(id string) {
		if e := p.ids[id]; e != nil && !seen[id] {
			seen[id] = true
			count(id, e)
		}
	}
	for _, part := range strings.Split(target, ",") {
		t := strings.TrimSpace(part)
		if t == "" {
			continue
		}
		try(t)
		for n := range p.dir.InProject(t) {
			try(n)
		}
		for n := range p.dir.WithRole(t) { // the holder, or the identity it is a sidecar of
			// Both readings of a name like X-pane-rx: the -pane-rx sidecar
			// of X and the -rx sidecar of X-pane (wire.Identity takes the
			// first alone; a count must not miss the second).
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

// OnWatermarkLocked records a committed watermark advance.
func (p *Projection) OnWatermarkLocked(id string, through int64) {
	e := p.entryLocked(id)
	if e.wmKnown && through <= e.wm {
		return
	}
	e.wm, e.wmKnown = max(e.wm, through), true
	e.invalidate(p.lastDirected)
	if p.events.Listening() {
		p.events.MailboxChanged(id)
	}
}

// PresenceLocked is called when an identity's seat or sidecar binds or
// leaves: what counts for it changes with its roles and presence. A seat
// that leaves keeps its group count, unreported; one that comes back with
// the same roles catches up on what it missed (one that leaves again
// before the catch-up keeps the gap, its live count since dropped); a
// change of roles recounts from the watermark.
func (p *Projection) PresenceLocked(name string) {
	id := wire.Identity(name)
	e := p.entryLocked(id)
	roles := p.dir.IdentityRoles(id)
	online := p.dir.Bound(id)
	switch {
	case !e.valid:
		e.invalidate(p.lastDirected) // a recount in flight must not land
		if online {
			e.roles = roles // offline, it keeps the roles it had: a seat's go with it
		}
		e.away = !online
	case !online && e.catchUp:
		e.group -= e.sinceCatch
		e.catchUp, e.sinceCatch, e.away, e.awayFrom = false, 0, true, e.catchFrom
	case !online:
		if !e.away {
			e.away, e.awayFrom = true, p.lastDirected
		}
	case !e.groupKnown || !sameRoles(roles, e.roles):
		e.invalidate(p.lastDirected)
		e.roles, e.away = roles, false
	case e.away:
		e.away, e.catchUp, e.catchFrom, e.catchTo, e.sinceCatch = false, true, e.awayFrom, p.lastDirected, 0
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

// WaitingLocked are the identities mailbox_pending may report: every
// online identity (entered in the projection if new), and every other
// known identity with something waiting or not yet counted.
func (p *Projection) WaitingLocked() []string {
	for _, n := range p.dir.Names() {
		if wire.Identity(n) == n {
			p.entryLocked(n)
		}
	}
	var ids []string
	for id, e := range p.ids {
		if p.dir.Bound(id) || !e.valid || e.catchUp || e.named > 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

// Recount is one recount of an identity's count in flight: what
// BeginRecountLocked saw, for Scan to read outside the lock.
type Recount struct {
	id           string
	e            *mbox
	gen          uint64
	catchUp      bool
	online       bool
	wm           int64
	wmKnown      bool
	from, to     int64
	roles        []string
	named, group int64
}

// BeginRecountLocked starts making id's count exact. done says the count
// needs no journal read: n is it, and ok says id is known. Otherwise Scan
// the returned recount outside Hub.mu and hand it to FinishRecountLocked.
func (p *Projection) BeginRecountLocked(id string) (n int64, ok, done bool, r *Recount) {
	e := p.ids[id]
	if e == nil {
		return 0, false, true, nil
	}
	online := p.dir.Bound(id)
	if e.valid && !e.catchUp {
		return e.pending(online), true, true, nil
	}
	r = &Recount{id: id, e: e, gen: e.gen, catchUp: e.catchUp, online: online, wm: e.wm, wmKnown: e.wmKnown}
	r.from, r.to = e.wm, e.base
	// The roles it holds now, or offline the ones it held when last
	// online (a change of roles invalidates: gen).
	r.roles = slices.Clone(e.roles)
	if online {
		r.roles = p.dir.IdentityRoles(id)
	}
	if r.catchUp {
		r.from, r.to, r.roles = max(e.catchFrom, e.wm), e.catchTo, slices.Clone(e.roles)
	}
	return 0, false, false, r
}

var errStopScan = errors.New("stop")

// Scan reads the directed chats the recount needs from st: from the
// watermark when the count was invalidated, only the chats sent while the
// identity was away when it is catching up. Call it without Hub.mu.
func (p *Projection) Scan(st Journal, r *Recount) error {
	if !r.wmKnown && !r.catchUp {
		wm, err := st.Watermark(r.id)
		if err != nil {
			return err
		}
		r.wm, r.from = wm, wm
	}
	err := st.ScanDirected(r.from, func(d journal.DirectedChat) error {
		if d.Seq > r.to {
			return errStopScan
		}
		p.read.Add(1)
		switch n, g := reach(d.Target, d.Sender, r.id, r.roles); {
		case n:
			r.named++
		case g:
			r.group++
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return err
	}
	return nil
}

// FinishRecountLocked lands a scanned recount and returns the count;
// ok is false when the identity's entry changed meanwhile (forgotten,
// invalidated, or its catch-up ended), and the recount must be begun anew.
func (p *Projection) FinishRecountLocked(r *Recount) (int64, bool) {
	e := r.e
	if e2 := p.ids[r.id]; e2 != e || e.gen != r.gen || e.catchUp != r.catchUp {
		return 0, false
	}
	if r.catchUp { // named was counted live while away
		e.group += r.group
		e.catchUp, e.sinceCatch = false, 0
	} else {
		if !e.wmKnown {
			e.wm, e.wmKnown = r.wm, true
		}
		// Offline, group is exact through to (it counts no more while
		// away); online, it has counted live since.
		e.named += r.named
		e.group += r.group
		e.valid, e.groupKnown, e.roles = true, true, r.roles
		e.away, e.awayFrom = !r.online, r.to
	}
	return e.pending(r.online), true
}
