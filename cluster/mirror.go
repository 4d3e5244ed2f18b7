package cluster

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The fleet's reads are served from a mirror (issue 22's cost): every
// namespace's claim and board records, kept by one watch on the fleet's
// prefix. A read asks etcd only for its current revision (a linearizable
// count of the namespace index: one ReadIndex, no records) and waits until
// the mirror has applied every event through it, so it stays
// read-your-writes across the fleet at the cost of a watch round, not of
// a range read of every claim and its decoding.
//
// The mirror takes its events from the hub's one watch of the fleet's
// prefix, the one that follows the owners (Owners.follow): etcd sends each
// event to each hub once, dashboards open or not. Its goroutine
// (followRecords) lists the records when the mirror starts, and again when
// the watch's events after the mirror's revision were compacted; while a
// list is under way the watch's responses are kept, and once it is in,
// those newer than the list are applied under the same lock the watch
// applies the next with, so no event is missed or applied out of order.
// mirror.mu guards the records, and is a leaf (taken under nothing,
// holding nothing). A record is decoded by the first read after it
// changed, off the watch, so a hub nobody reads from decodes nothing. The
// mirror starts at a hub's first fleet read (or /api/events stream,
// changes.go) and stops once no read has come for mirrorIdle and no
// stream is open: its records are dropped, and the next read or stream
// starts it again from a list, so a hub nobody reads from does not hold
// the records either (a dashboard closed stops costing the fleet's
// writes). A stop happens only with no read under way and resets the
// mirror's revision, so a read never takes the records of a stopped run
// for current: it waits for the new run's list (at a linearizable
// revision) and its events.

// mirrorWait bounds how long a read waits for the mirror to reach etcd's
// revision (a relist after a compaction, a watch being re-made) before it
// range-reads etcd itself.
var mirrorWait = time.Second

// progressAfter is how long a read waits for events before it asks etcd
// for a progress notification: the revision may have been moved by a
// write outside the fleet's prefix, which the watch never reports.
var progressAfter = 5 * time.Millisecond

// mirrorIdle is how long a mirror goes on watching with no fleet read
// before it stops (configurable for tests). Long enough that a page
// reloaded now and then, or `synapse state` in a loop, is served warm; a
// read after a stop waits for a list, as a hub's first read does.
var mirrorIdle = 30 * time.Second

// mirror is one hub's copy of the fleet's claim and board records.
type mirror struct {
	mu       sync.Mutex
	running  bool          // a followRecords owns the watch (until it stops idle)
	done     chan struct{} // closed when the running followRecords returns (nil until the first read)
	readers  int           // fleet reads under way: the mirror stops only with none
	lastRead time.Time     // when the last fleet read ended
	stops    int           // stops for want of a reader
	rev      int64         // every event through rev is applied (0: not listed yet)
	// evRev is the last event applied, or the list's revision: an event at
	// or before it is not applied again. rev may be ahead of it: a progress
	// notification moves rev, and etcd before 3.4.24 may send one ahead of
	// events still queued (etcd issue 15220); those are applied when they come.
	evRev    int64
	recs     map[string]*record // key → record
	gen      uint64             // bumped on every change of recs
	advanced chan struct{}      // closed, and replaced, when rev moves
	wctx     context.Context    // the fleet watch's context: its stream is the one a progress request names
	listing  bool               // a list is due or under way: the watch's responses are kept in pending
	listed   bool               // this run listed once (a later list lost changes)
	listGen  uint64             // bumped when events are lost: a list begun before is not installed
	pending  []clientv3.WatchResponse
	relist   chan struct{}      // lost: the running followRecords lists again
	built    built              // the last read's output, while gen is unchanged
	relists  int                // lists of every record (the first, and after a compaction)
	direct   int                // reads that gave up waiting and range-read etcd
	hold     chan chan struct{} // tests: break the fleet watch until the sent channel is closed

	// sink, set by FollowChanges, is handed the changes the watch
	// applies (changes.go); while it listens the mirror does not stop.
	sink changeSink
}

// record is one claim or board record; raw until a read decodes it.
type record struct {
	key   string
	claim bool // a claim; else a board task
	raw   []byte
	c     *coord.Claim
	t     *coord.BoardTask
	done  bool // decoded (c or t may stay nil: a record this version cannot read is not shown)
}

type built struct {
	gen    uint64
	claims []*coord.Claim
	tasks  []*coord.BoardTask
}

// recordKind says whether key is a claim or board record of some namespace.
func (o *Owners) recordKind(key string) (claim, ok bool) {
	rest, ok := strings.CutPrefix(key, o.pfx+"ns/")
	if !ok {
		return false, false
	}
	_, tail, ok := strings.Cut(rest, "/")
	switch {
	case !ok:
		return false, false
	case strings.HasPrefix(tail, "claims/"):
		return true, true
	case strings.HasPrefix(tail, "board/"):
		return false, true
	}
	return false, false
}

// beginRead notes a fleet read under way, which keeps the mirror from
// stopping, and starts the mirror unless it runs; endRead must follow.
func (o *Owners) beginRead() {
	m := &o.rec
	m.mu.Lock()
	defer m.mu.Unlock()
	m.readers++
	o.startMirrorLocked()
}

// endRead notes that a fleet read ended.
func (o *Owners) endRead() {
	m := &o.rec
	m.mu.Lock()
	defer m.mu.Unlock()
	m.readers--
	m.lastRead = time.Now()
}

// startMirrorLocked starts following the records unless a run does
// already, or the Owners are closing (mirror.mu).
func (o *Owners) startMirrorLocked() {
	m := &o.rec
	if m.running {
		return
	}
	select {
	case <-o.stop:
		return
	default:
	}
	m.running, m.lastRead = true, time.Now()
	m.listing, m.listed, m.pending, m.listGen = true, false, nil, m.listGen+1
	m.done = make(chan struct{})
	go o.followRecords(m.done)
}

// stopIfIdleLocked stops the mirror if no read is under way, none came
// for mirrorIdle and no sink listens (an open /api/events stream reads
// the watch; it counts as a read until it closes): its records and
// revision are dropped, so the next read starts a run that lists again.
// The caller's run then returns and touches the mirror no more
// (mirror.mu).
func (o *Owners) stopIfIdleLocked() bool {
	m := &o.rec
	if m.listeningLocked() {
		m.lastRead = time.Now()
		return false
	}
	if m.readers > 0 || time.Since(m.lastRead) < mirrorIdle {
		return false
	}
	m.running, m.stops = false, m.stops+1
	m.recs, m.rev, m.evRev, m.built, m.listing, m.pending = nil, 0, 0, built{}, false, nil
	m.gen++
	return true
}

// untilIdle is how long, at least, until the mirror may stop.
func (o *Owners) untilIdle() time.Duration {
	m := &o.rec
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.readers > 0 || m.listeningLocked() {
		return mirrorIdle
	}
	return max(mirrorIdle-time.Since(m.lastRead), time.Millisecond)
}

// listeningLocked says whether a sink takes the watch's changes now.
func (m *mirror) listeningLocked() bool { return m.sink != nil && m.sink.Listening() }

// followRecords lists every record, and lists again when the watch's
// events after the mirror's revision were compacted (lost); the events
// come from the hub's one watch of the fleet (Owners.follow, apply). It
// returns when the Owners close, or when it stopped the mirror for want of
// a reader; then it closes done.
func (o *Owners) followRecords(done chan struct{}) {
	m := &o.rec
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-o.stop:
		case <-done:
		}
		cancel()
	}()
	idle := time.NewTimer(o.untilIdle())
	defer idle.Stop()
	for ctx.Err() == nil {
		m.mu.Lock()
		listing, gen := m.listing, m.listGen
		m.mu.Unlock()
		if listing {
			lctx, lcancel := context.WithTimeout(ctx, fleetListTimeout)
			recs, rev, err := o.readRecords(lctx)
			lcancel()
			if err != nil {
				o.log.Debug("cluster: list the fleet's records; retried", "err", err)
				sleepCtx(ctx, retryEvery)
				continue
			}
			o.installList(recs, rev, gen)
			continue
		}
		select {
		case <-ctx.Done():
		case <-m.relist:
		case <-idle.C:
			m.mu.Lock()
			stopped := o.stopIfIdleLocked()
			m.mu.Unlock()
			if stopped {
				return
			}
			idle.Reset(o.untilIdle())
		}
	}
}

// fleetListTimeout bounds one list of every record.
var fleetListTimeout = 10 * time.Second

// installList makes a list at rev the mirror's records, and applies the
// events the watch delivered meanwhile that are newer than it. The list
// was read after the mirror began to keep those (listing), so every event
// after rev is among them or still to come.
func (o *Owners) installList(recs map[string]*record, rev int64, gen uint64) {
	m := &o.rec
	m.mu.Lock()
	if !m.running || !m.listing || m.listGen != gen { // events were lost since the list began: list again
		m.mu.Unlock()
		return
	}
	var lost changeSink // a relist: the changes since the last event were not seen
	if m.listed {
		lost = m.sink // (a run's first list follows a stop, when no sink listened)
	}
	m.recs, m.gen, m.relists = recs, m.gen+1, m.relists+1
	m.evRev = rev
	m.advanceLocked(rev)
	// The events kept while listing are applied here, under the lock the
	// watch's goroutine takes to apply the next: none can pass them. Their
	// changes are not handed on: a browser loads its state through the
	// mirror, which has them from now on.
	for _, resp := range m.pending {
		m.applyLocked(o, resp, false)
	}
	m.listing, m.listed, m.pending = false, true, nil
	m.mu.Unlock()
	if lost != nil {
		lost.Lost()
	}
}

// setWatch names the watch whose stream a read's progress request goes to.
func (m *mirror) setWatch(ctx context.Context) {
	m.mu.Lock()
	m.wctx = ctx
	m.mu.Unlock()
}

// lost says the watch's events after the mirror's revision were
// compacted: a running mirror lists again (and its sink is told).
func (m *mirror) lost(o *Owners) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running {
		return
	}
	m.listing, m.pending, m.listGen = true, nil, m.listGen+1
	select {
	case m.relist <- struct{}{}:
	default:
	}
}

// apply applies one response of the fleet's watch to the mirror: kept
// for later while the mirror lists, skipped while it does not run, each
// event newer than its revision applied (a watch made again after a break
// resends what came before it), and the changes handed to the sink. The
// watch's goroutine (Owners.follow).
func (m *mirror) apply(o *Owners, resp clientv3.WatchResponse) {
	m.mu.Lock()
	if !m.running {
		m.mu.Unlock()
		return
	}
	if m.listing {
		m.pending = append(m.pending, resp)
		m.mu.Unlock()
		return
	}
	changes := m.applyLocked(o, resp, true)
	m.mu.Unlock()
	o.handChanges(changes)
}

// applyLocked applies resp's events newer than the last applied (evRev)
// and moves the revision; with note, and a sink listening, it returns the
// changes to hand on (mirror.mu).
func (m *mirror) applyLocked(o *Owners, resp clientv3.WatchResponse, note bool) []change {
	rev := m.rev
	var changes []change
	if note {
		changes = m.changesLocked() // nil unless a sink listens (changes.go)
	}
	for _, ev := range resp.Events {
		if ev.Kv.ModRevision <= m.evRev {
			continue // applied already (a watch made again resends), or in the list
		}
		m.evRev = ev.Kv.ModRevision
		rev = max(rev, ev.Kv.ModRevision)
		key := string(ev.Kv.Key)
		claim, ok := o.recordKind(key)
		if !ok {
			continue
		}
		if changes != nil {
			changes = m.noteLocked(changes, key, claim, ev)
		}
		if ev.Type == clientv3.EventTypeDelete {
			delete(m.recs, key)
		} else {
			m.recs[key] = &record{key: key, claim: claim, raw: ev.Kv.Value}
		}
		m.gen++
	}
	// A progress notification carries the revision the watch has sent
	// everything through; an event's header may be ahead of the events
	// that came with it (a catch-up in batches), so only the events
	// themselves move rev otherwise.
	if resp.IsProgressNotify() {
		rev = max(rev, resp.Header.Revision)
	}
	m.advanceLocked(rev)
	return changes
}

// advanceLocked moves rev forward and wakes the waiting reads (mirror.mu).
func (m *mirror) advanceLocked(rev int64) {
	if rev <= m.rev {
		return
	}
	m.rev = rev
	close(m.advanced)
	m.advanced = make(chan struct{})
}

// waitFor waits until the mirror applied every event through rev; false
// if it did not within mirrorWait.
func (o *Owners) waitFor(ctx context.Context, rev int64) bool {
	m := &o.rec
	deadline := time.NewTimer(mirrorWait)
	defer deadline.Stop()
	progress := time.NewTimer(progressAfter)
	defer progress.Stop()
	for {
		m.mu.Lock()
		at, advanced, wctx := m.rev, m.advanced, m.wctx
		m.mu.Unlock()
		if at >= rev {
			return true
		}
		select {
		case <-advanced:
		case <-progress.C:
			if wctx != nil {
				_ = o.cli.RequestProgress(wctx)
			}
			progress.Reset(10 * progressAfter)
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// mirrored is the mirror's records at its revision, decoded: the claims
// and the board tasks, each by task id (then key), in fresh slices the caller may
// sort and filter.
func (o *Owners) mirrored() (int64, []*coord.Claim, []*coord.BoardTask) {
	m := &o.rec
	m.mu.Lock()
	rev, gen := m.rev, m.gen
	if m.built.gen == gen && m.built.claims != nil {
		b := m.built
		m.mu.Unlock()
		return rev, slices.Clone(b.claims), slices.Clone(b.tasks)
	}
	recs := make([]*record, 0, len(m.recs))
	var raws [][]byte // the undecoded records' payloads, by index in recs
	for _, r := range m.recs {
		recs = append(recs, r)
		if !r.done {
			raws = append(raws, r.raw)
		} else {
			raws = append(raws, nil)
		}
	}
	m.mu.Unlock()
	// Decoding and sorting happen outside the lock: the watch goes on.
	type dec struct {
		c *coord.Claim
		t *coord.BoardTask
	}
	decs := make([]dec, len(recs))
	for i, r := range recs {
		if raws[i] != nil {
			decs[i].c, decs[i].t = decodeRecord(r.claim, raws[i])
		}
	}
	m.mu.Lock()
	for i, r := range recs {
		if raws[i] != nil && !r.done { // another read may have decoded it meanwhile
			r.c, r.t, r.done, r.raw = decs[i].c, decs[i].t, true, nil
		}
	}
	m.mu.Unlock()
	var cs, ts []*record
	for _, r := range recs {
		if r.c != nil {
			cs = append(cs, r)
		} else if r.t != nil {
			ts = append(ts, r)
		}
	}
	// In task order, as every answer sorts them (an answer's sort is then
	// a pass over a sorted list), then by key: one order on every hub.
	slices.SortFunc(cs, func(x, y *record) int { return cmp.Or(cmp.Compare(x.c.TaskID, y.c.TaskID), cmp.Compare(x.key, y.key)) })
	slices.SortFunc(ts, func(x, y *record) int { return cmp.Or(cmp.Compare(x.t.TaskID, y.t.TaskID), cmp.Compare(x.key, y.key)) })
	b := built{gen: gen, claims: make([]*coord.Claim, len(cs)), tasks: make([]*coord.BoardTask, len(ts))}
	for i, r := range cs {
		b.claims[i] = r.c
	}
	for i, r := range ts {
		b.tasks[i] = r.t
	}
	m.mu.Lock()
	if gen >= m.built.gen {
		m.built = b
	}
	m.mu.Unlock()
	return rev, slices.Clone(b.claims), slices.Clone(b.tasks)
}

// decodeRecord reads a claim or board record; nil for one this version
// cannot read (it is not shown).
func decodeRecord(claim bool, raw []byte) (*coord.Claim, *coord.BoardTask) {
	kind := journal.KindLedgerTask
	if claim {
		kind = journal.KindClaim
	}
	ev, ok, err := journal.Decode(kind, raw)
	if err != nil || !ok {
		return nil, nil
	}
	switch e := ev.(type) {
	case coord.ClaimGranted:
		return e.Claim, nil
	case coord.TaskPosted:
		return nil, e.Task
	}
	return nil, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
