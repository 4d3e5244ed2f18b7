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
	"google.golang.org/grpc/metadata"
)

// The fleet's reads are served from a mirror (issue 22's cost): every
// namespace's claim and board records, kept by one watch on the fleet's
// prefix. A read asks etcd only for its current revision (a linearizable
// count of the namespace index: one ReadIndex, no records) and waits until
// the mirror has applied every event through it, so it stays
// read-your-writes across the fleet at the cost of a watch round, not of
// a range read of every claim and its decoding.
//
// The mirror's goroutine (followRecords) owns the watch; mirror.mu guards
// the records, and is a leaf (taken under nothing, holding nothing). A
// record is decoded by the first read after it changed, off the watch, so
// a hub nobody reads from decodes nothing. The mirror starts at a hub's
// first fleet read (or /api/events stream, changes.go) and stops once no
// read has come for mirrorIdle and no stream is open: its records are
// dropped, and the next read or stream starts it again from a list, so a
// hub nobody reads from does not watch or hold the records either (a
// dashboard closed stops costing the fleet's writes). A stop happens only
// with no read under way and resets the mirror's revision, so a read
// never takes the records of a stopped run for current: it waits for the
// new run's list (at a linearizable revision) and its events.

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
	running  bool               // a followRecords owns the watch (until it stops idle)
	done     chan struct{}      // closed when the running followRecords returns (nil until the first read)
	readers  int                // fleet reads under way: the mirror stops only with none
	lastRead time.Time          // when the last fleet read ended
	stops    int                // stops for want of a reader
	rev      int64              // every event through rev is applied (0: not listed yet)
	recs     map[string]*record // key → record
	gen      uint64             // bumped on every change of recs
	advanced chan struct{}      // closed, and replaced, when rev moves
	wctx     context.Context    // the watch's context: its stream is the one a progress request names
	built    built              // the last read's output, while gen is unchanged
	relists  int                // lists of every record (the first, and after a compaction)
	direct   int                // reads that gave up waiting and range-read etcd
	hold     chan chan struct{} // tests: break the watch until the sent channel is closed

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
	if m.advanced == nil {
		m.advanced, m.hold = make(chan struct{}), make(chan chan struct{})
	}
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
	m.recs, m.rev, m.wctx, m.built = nil, 0, nil, built{}
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

// followRecords lists every record, then follows the fleet's prefix from
// the list's revision; a watch that breaks resumes after the last applied
// event, one whose revision was compacted lists again. It returns when
// the Owners close, or when it stopped the mirror for want of a reader;
// then it closes done.
func (o *Owners) followRecords(done chan struct{}) {
	m := &o.rec
	defer close(done)
	run, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-o.stop:
		case <-run.Done():
		}
		cancel()
	}()
	// Its own gRPC stream (the stream is chosen by the context's
	// metadata): a progress request then answers for this watch alone.
	ctx := metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(run), "synapse-watch", "records")
	list, listed := true, false
	for ctx.Err() == nil {
		if list {
			m.mu.Lock()
			idle := o.stopIfIdleLocked()
			m.mu.Unlock()
			if idle {
				return
			}
			lctx, lcancel := context.WithTimeout(ctx, fleetListTimeout)
			recs, rev, err := o.readRecords(lctx)
			lcancel()
			if err != nil {
				o.log.Debug("cluster: list the fleet's records; retried", "err", err)
				sleepCtx(ctx, retryEvery)
				continue
			}
			m.mu.Lock()
			var lost changeSink // a relist: the changes since the last event were not seen
			if listed {
				lost = m.sink // (a run's first list follows a stop, when no sink listened)
			}
			m.recs, m.gen, m.relists = recs, m.gen+1, m.relists+1
			m.advanceLocked(rev)
			m.mu.Unlock()
			if lost != nil {
				lost.Lost()
			}
			list, listed = false, true
		}
		switch o.watchRecords(ctx) {
		case watchIdle:
			return
		case watchRelist:
			list = true
		}
	}
}

// watchEnd is why watchRecords returned.
type watchEnd int

const (
	watchAgain  watchEnd = iota // broken, or the Owners closing: watch again from the last applied event
	watchRelist                 // the events after the mirror's revision were compacted: list again
	watchIdle                   // the mirror stopped for want of a reader
)

// fleetListTimeout bounds one list of every record.
var fleetListTimeout = 10 * time.Second

// watchRecords applies the prefix's events from the mirror's revision on,
// until the watch breaks or the mirror stops idle.
func (o *Owners) watchRecords(ctx context.Context) watchEnd {
	m := &o.rec
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.mu.Lock()
	from := m.rev + 1
	m.wctx = wctx
	m.mu.Unlock()
	wch := o.cli.Watch(wctx, o.pfx, clientv3.WithPrefix(), clientv3.WithRev(from))
	idle := time.NewTimer(o.untilIdle())
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return watchAgain
		case <-idle.C:
			m.mu.Lock()
			stopped := o.stopIfIdleLocked()
			m.mu.Unlock()
			if stopped {
				return watchIdle
			}
			idle.Reset(o.untilIdle())
		case resume := <-m.hold:
			cancel()
			select {
			case <-resume:
			case <-ctx.Done():
			}
			return watchAgain
		case resp, ok := <-wch:
			if !ok {
				return watchAgain
			}
			if resp.CompactRevision != 0 {
				return watchRelist // the events after our revision are gone
			}
			if resp.Err() != nil {
				sleepCtx(ctx, retryEvery)
				return watchAgain
			}
			m.mu.Lock()
			rev := m.rev
			changes := m.changesLocked() // nil unless a sink listens (changes.go)
			for _, ev := range resp.Events {
				key := string(ev.Kv.Key)
				rev = ev.Kv.ModRevision
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
			// A progress notification carries the revision the watch has
			// sent everything through; an event's header may be ahead of
			// the events that came with it (a catch-up in batches), so
			// only the events themselves move rev otherwise.
			if resp.IsProgressNotify() {
				rev = max(rev, resp.Header.Revision)
			}
			m.advanceLocked(rev)
			m.mu.Unlock()
			o.handChanges(changes)
		}
	}
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
