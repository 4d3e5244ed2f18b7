package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/sequencer"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// Host is what Owners needs of its hub: installing and dropping a
// namespace's claims through the sequencer, and draining in-flight work.
type Host interface {
	// Adopt installs the claims and board tasks of a namespace this hub
	// now owns.
	// retained are the checkpoints of the namespace's lapsed claims, by
	// task (INV-CR-3).
	Adopt(ns string, claims []*coord.Claim, tasks []*coord.BoardTask, epochFloor int64, retained map[string]string) error
	// Adoptable says whether Adopt of ns with claims would be refused now
	// (a task id of theirs live here in another namespace), changing
	// nothing.
	Adoptable(ns string, claims []*coord.Claim) error
	// Disown drops the claims of a namespace this hub no longer owns.
	Disown(ns string)
	// Drain waits, at most budget, for the mutations in flight.
	Drain(budget time.Duration)
	// DrainNamespace waits, at most budget, for ns's mutations in flight.
	DrainNamespace(ns string, budget time.Duration)
}

// Owners is a hub's view of namespace ownership in etcd, and the store of
// the namespaces it owns (federation.Authority and sequencer.Journal):
//
//   - ns/<ns>/owner names the serving hub; it lives under that hub's lease,
//     so it dies with the hub (rule 1), and its ModRevision is the
//     namespace's fencing token.
//   - ns/<ns>/claims/<task> is each live claim, ns/<ns>/epoch the highest
//     epoch issued there, ns/<ns>/idem/<sha256(key)> each idempotency
//     record: every write is one transaction guarded by the owner key's
//     ModRevision, so a hub that lost the namespace cannot write (rule 2).
//
// A namespace is taken by the first hub that serves a request for it, or
// after its owner's lease is gone by the first hub asked again; the new
// owner reads the namespace's state at its own owner revision (a stable
// high-water mark: nobody else can write after it) and installs it before
// it admits anything (rules 6, 8).
type Owners struct {
	m    *Member
	cli  *clientv3.Client
	self string
	pfx  string
	log  *slog.Logger
	host Host

	mu     sync.Mutex
	hubs   map[string]Registration
	owners map[string]ownerRec
	mine   map[string]int64  // namespaces installed here → their epoch (owner ModRevision)
	taskNS map[string]string // task → namespace of the claims this hub wrote
	// retained are the retained checkpoints in etcd of the namespaces
	// installed here (ns\x00task), so a new claim deletes one only when
	// there is one.
	retained map[string]bool
	flights  map[string]*flight
	// unadoptable are namespaces this hub took and had to let go because
	// it could not adopt them (a task id live here in another namespace:
	// coord.AdoptConflict), until when first use here waits before trying
	// again: each try writes the owner key twice.
	unadoptable map[string]time.Time
	frozen      map[string]bool   // namespaces this hub is handing off: no admissions
	moves       map[string]string // namespaces with a handoff record (a move under way) → its phase

	mail mailState // directed mail on the fleet (mail.go)
	view viewState // the fleet's reads: known namespaces, the hubs' rosters (view.go)
	rec  mirror    // the fleet's claim and board records, watch-fed (mirror.go)

	idemKeep retention // the lease idempotency records are written under

	kick  chan string   // namespaces to reconcile (level-triggered): watch events, moves, resolutions
	queue kickQueue     // which are queued, and the relist's sweep, behind them
	swept chan struct{} // a relist queued a sweep
	stop  chan struct{}
	done  chan struct{}
}

type ownerRec struct {
	Hub    string `json:"hub_id"`
	Addr   string `json:"addr"`
	modRev int64
}

type flight struct {
	done chan struct{}
}

// claimTimeout bounds taking a namespace (CAS, warm read, install).
var claimTimeout = 3 * time.Second

// plannedRetry is the retry hint during a planned move: a move completes
// in tens of milliseconds, so clients come back soon.
var plannedRetry = 5 * time.Millisecond

// IdemRetention is how long a fleet honours an idempotency key (between
// it and an hour more: see retention).
var IdemRetention = 24 * time.Hour

// NewOwners builds the authority of member m; host must be set with
// SetHost before Start.
func NewOwners(m *Member) *Owners {
	o := &Owners{m: m, cli: m.cli, self: m.cfg.HubID, pfx: m.cfg.Prefix, log: m.log,
		hubs: map[string]Registration{}, owners: map[string]ownerRec{}, mine: map[string]int64{},
		taskNS: map[string]string{}, retained: map[string]bool{}, flights: map[string]*flight{}, unadoptable: map[string]time.Time{}, frozen: map[string]bool{}, moves: map[string]string{},
		kick: make(chan string, 1024), swept: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		idemKeep: retention{keep: func() time.Duration {
			if w := m.cfg.IdemRetention; w != 0 {
				return w
			}
			return IdemRetention
		}}}
	o.view.known, o.view.rosters = map[string]bool{}, map[string][]federation.FleetAgent{}
	o.rec.advanced, o.rec.hold, o.rec.relist = make(chan struct{}), make(chan chan struct{}), make(chan struct{}, 1)
	o.mail.keep = retention{keep: func() time.Duration { return MailRetention }}
	return o
}

// SetHost connects the hub.
func (o *Owners) SetHost(h Host) { o.host = h }

func (o *Owners) ownerKey(ns string) string { return o.pfx + "ns/" + ns + "/owner" }
func (o *Owners) nsPrefix(ns string) string { return o.pfx + "ns/" + ns + "/" }
func (o *Owners) claimKey(ns, task string) string {
	return o.pfx + "ns/" + ns + "/claims/" + task
}
func (o *Owners) epochKey(ns string) string { return o.pfx + "ns/" + ns + "/epoch" }

// retainedKey holds the checkpoint of a task's lapsed claim for its next
// claimant (INV-CR-3), under a lease of MailRetention.
func (o *Owners) retainedKey(ns, task string) string { return o.pfx + "ns/" + ns + "/retained/" + task }
func (o *Owners) boardKey(ns, task string) string {
	return o.pfx + "ns/" + ns + "/board/" + task
}
func (o *Owners) idemKey(ns, key string) string {
	sum := sha256.Sum256([]byte(key))
	return o.pfx + "ns/" + ns + "/idem/" + hex.EncodeToString(sum[:])
}

// Start lists the fleet and follows it: hubs and owner keys.
func (o *Owners) Start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rev, err := o.relist(ctx)
	if err != nil {
		return err
	}
	go o.follow(rev)
	return nil
}

// Close stops following.
func (o *Owners) Close() {
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
	<-o.done
	o.rec.mu.Lock()
	done := o.rec.done
	o.rec.mu.Unlock()
	if done != nil {
		<-done
	}
}

// relist reads every registration and owner key and returns the revision.
func (o *Owners) relist(ctx context.Context) (int64, error) {
	r, err := o.cli.Get(ctx, o.pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("%w: list %s: %v", ErrNoEtcd, o.pfx, err)
	}
	hubs, err := o.cli.Get(ctx, o.pfx+"hubs/", clientv3.WithPrefix(), clientv3.WithRev(r.Header.Revision))
	if err != nil {
		return 0, err
	}
	roster, err := o.cli.Get(ctx, o.pfx+"presence/", clientv3.WithPrefix(), clientv3.WithRev(r.Header.Revision))
	if err != nil {
		return 0, err
	}
	o.mu.Lock()
	o.hubs = map[string]Registration{}
	for _, kv := range hubs.Kvs {
		var reg Registration
		if json.Unmarshal(kv.Value, &reg) == nil && reg.HubID != "" {
			o.hubs[reg.HubID] = reg
		}
	}
	o.view.rosters = map[string][]federation.FleetAgent{}
	for _, kv := range roster.Kvs {
		var agents []federation.FleetAgent
		if json.Unmarshal(kv.Value, &agents) == nil {
			o.view.rosters[strings.TrimPrefix(string(kv.Key), o.pfx+"presence/")] = agents
		}
	}
	o.view.known = map[string]bool{}
	for _, kv := range r.Kvs {
		o.noteKeyLocked(string(kv.Key))
	}
	o.mu.Unlock()
	seen := map[string]bool{}
	for _, kv := range r.Kvs {
		if ns, ok := o.ownerNS(string(kv.Key)); ok && !seen[ns] {
			seen[ns] = true
			o.queue.swept(ns)
		}
	}
	o.mu.Lock()
	for ns := range o.owners {
		if !seen[ns] {
			o.queue.swept(ns)
		}
	}
	for ns := range o.mine {
		o.queue.swept(ns)
	}
	o.mu.Unlock()
	return r.Header.Revision, nil
}

// ownerNS reads the namespace of an owner or handoff key: the keys whose
// changes a reconcile follows.
func (o *Owners) ownerNS(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, o.pfx+"ns/")
	if !ok {
		return "", false
	}
	ns, tail, ok := strings.Cut(rest, "/")
	return ns, ok && (tail == "owner" || tail == "handoff")
}

func (o *Owners) enqueue(ns string) {
	if !o.queue.mark(ns, queuedKick) {
		return // queued already: one reconcile reads it as it is then
	}
	select {
	case o.kick <- ns:
	default: // full: the periodic relist will catch up
		o.queue.unmark(ns)
	}
}

// kickQueue keeps the reconcile queue to one entry per namespace (a
// namespace being moved is resolved by every retrying client, and each
// resolution asks for a re-read), and holds the relist's sweep of every
// namespace behind the namespaces an event named: a move's next step
// never waits for the reads of namespaces nothing happened to.
type kickQueue struct {
	mu     sync.Mutex
	queued map[string]uint8 // queuedKick or queuedSweep
	sweep  []string
}

const (
	queuedKick  = 1 // in Owners.kick
	queuedSweep = 2 // in the sweep only
)

// mark notes ns as queued in how, and reports whether it must be put
// there: not when it is in the kick queue already, nor in the sweep when
// it is queued at all (an event moves a swept namespace to the kicks).
func (q *kickQueue) mark(ns string, how uint8) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queued == nil {
		q.queued = map[string]uint8{}
	}
	was := q.queued[ns]
	if was == queuedKick || was != 0 && how == queuedSweep {
		return false
	}
	q.queued[ns] = how
	return true
}

func (q *kickQueue) unmark(ns string) {
	q.mu.Lock()
	delete(q.queued, ns)
	q.mu.Unlock()
}

// swept queues ns for the sweep, unless it is queued already.
func (q *kickQueue) swept(ns string) {
	if q.mark(ns, queuedSweep) {
		q.mu.Lock()
		q.sweep = append(q.sweep, ns)
		q.mu.Unlock()
	}
}

// nextSwept takes the sweep's next namespace still waiting there (not
// moved to the kicks since) and unmarks it.
func (q *kickQueue) nextSwept() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.sweep) > 0 {
		ns := q.sweep[0]
		q.sweep = q.sweep[1:]
		if q.queued[ns] == queuedSweep {
			delete(q.queued, ns)
			return ns, true
		}
	}
	return "", false
}

func (o *Owners) enqueueLocked(ns string) { o.enqueue(ns) }

// follow watches the prefix: a watch event only says "re-read this
// namespace" (rule 7), and the reconciles run on their own goroutine
// (reconcileLoop), one at a time, so at most one convergence runs per
// namespace at a time and a slow re-read never holds the watch back. The
// same watch feeds the mirror of the fleet's records (mirror.go): one
// stream of the fleet's events per hub, not one for authority and another
// for the dashboards and reads. So it is gapless: a watch that breaks
// resumes after the last event it delivered, and only a compaction of
// those events makes the mirror list again. A relist every lease TTL (and
// after a break) heals the hubs, rosters and known namespaces, and sweeps
// every namespace.
func (o *Owners) follow(rev int64) {
	defer close(o.done)
	ctx, cancel := context.WithCancel(context.Background())
	reconciled := make(chan struct{})
	go o.reconcileLoop(ctx, reconciled)
	defer func() { cancel(); <-reconciled }()
	go func() {
		<-o.stop
		cancel()
	}()
	tick := time.NewTicker(o.m.cfg.LeaseTTL)
	defer tick.Stop()
	last := rev   // every event through last was delivered: a new watch starts after it
	listed := rev // the hubs, rosters and known namespaces are as of listed
	for ctx.Err() == nil {
		// Its own gRPC stream (chosen by the context's metadata), so that a
		// read's progress request answers for this watch alone.
		wctx, wcancel := context.WithCancel(ctx)
		sctx := metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(wctx), "synapse-watch", "fleet")
		o.rec.setWatch(sctx)
		wch := o.cli.Watch(sctx, o.pfx, clientv3.WithPrefix(), clientv3.WithRev(last+1))
		broken := false
		for !broken && ctx.Err() == nil {
			select {
			case resp, ok := <-wch:
				switch {
				case !ok:
					broken = true
				case resp.CompactRevision != 0:
					// The events after last are gone: relist, and watch on
					// from the oldest revision etcd kept; the mirror lists
					// again (whatever it lists from now on is at or after
					// that revision, so the new watch leaves it no gap).
					o.rec.lost(o)
					last, broken = resp.CompactRevision-1, true
				case resp.Err() != nil:
					broken = true
					sleepCtx(ctx, retryEvery)
				default:
					for _, ev := range resp.Events {
						o.followEvent(ev, ev.Kv.ModRevision > listed)
						last = ev.Kv.ModRevision
					}
					// Only events move last: an event's header may be ahead of
					// the events that came with it (a catch-up in batches),
					// and etcd before 3.4.24 may send a progress notification
					// ahead of events still queued (etcd issue 15220). A
					// watch made again resends what came after the last
					// event; the mirror skips what it has.
					o.rec.apply(o, resp)
				}
			case resume := <-o.rec.hold: // tests: the watch is broken until resume closes
				wcancel()
				select {
				case <-resume:
				case <-ctx.Done():
				}
				broken = true
			case <-tick.C:
				if r, ok := o.relistOnce(ctx); ok {
					listed = r
				}
			}
		}
		wcancel()
		for ctx.Err() == nil {
			r, ok := o.relistOnce(ctx)
			if ok {
				listed = r
				break
			}
			sleepCtx(ctx, retryEvery)
		}
	}
}

// relistOnce relists (bounded by a third of the lease TTL) and wakes the
// reconciles for its sweep.
func (o *Owners) relistOnce(ctx context.Context) (int64, bool) {
	lctx, lcancel := context.WithTimeout(ctx, o.m.cfg.LeaseTTL/3)
	defer lcancel()
	r, err := o.relist(lctx)
	if err != nil {
		if ctx.Err() == nil {
			o.log.Warn("cluster: relist failed", "err", err)
		}
		return 0, false
	}
	select {
	case o.swept <- struct{}{}:
	default:
	}
	return r, true
}

// followEvent follows one event: unless the relist has seen it already
// (fresh false), a hub's registration, a roster, a key of a namespace;
// an owner or handoff key queues its namespace's reconcile either way.
func (o *Owners) followEvent(ev *clientv3.Event, fresh bool) {
	key := string(ev.Kv.Key)
	if fresh {
		if id, ok := strings.CutPrefix(key, o.pfx+"hubs/"); ok {
			o.hubEvent(id, ev.Type == clientv3.EventTypeDelete, ev.Kv.Value)
			return
		}
		if id, ok := strings.CutPrefix(key, o.pfx+"presence/"); ok {
			o.rosterEvent(id, ev.Type == clientv3.EventTypeDelete, ev.Kv.Value)
			return
		}
		if ev.Type == clientv3.EventTypePut {
			o.mu.Lock()
			o.noteKeyLocked(key)
			o.mu.Unlock()
		}
	}
	if ns, ok := o.ownerNS(key); ok {
		o.enqueue(ns)
	}
}

// reconcileLoop runs the reconciles: the namespaces events named first,
// then the relist's sweep when nothing else waits. It closes done when
// ctx ends.
func (o *Owners) reconcileLoop(ctx context.Context, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		if len(o.kick) == 0 {
			if ns, ok := o.queue.nextSwept(); ok {
				o.reconcile(ctx, ns)
				continue
			}
		}
		select {
		case ns := <-o.kick:
			o.queue.unmark(ns) // an event from here on queues it again
			o.reconcile(ctx, ns)
		case <-o.swept:
		case <-ctx.Done():
		}
	}
}

func (o *Owners) hubEvent(id string, deleted bool, value []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if deleted {
		delete(o.hubs, id)
		return
	}
	var reg Registration
	if json.Unmarshal(value, &reg) == nil {
		o.hubs[id] = reg
	}
}

// reconcile re-reads one namespace's owner key and converges: the cache
// follows it, and a namespace this hub had installed but no longer owns
// (deleted, or another hub's, or a newer epoch) is dropped here.
func (o *Owners) reconcile(ctx context.Context, ns string) {
	rctx, cancel := context.WithTimeout(ctx, o.m.cfg.LeaseTTL/3)
	defer cancel()
	t, err := o.cli.Txn(rctx).Then(clientv3.OpGet(o.ownerKey(ns)), clientv3.OpGet(o.handoffKey(ns))).Commit()
	if err != nil {
		return // the next event or relist retries
	}
	r := t.Responses[0].GetResponseRange()
	if len(r.Kvs) == 1 && r.Kvs[0].Lease == 0 {
		// An owner key without a lease (written by an older synapse while
		// fenced) would name its hub the owner for ever, alive or not:
		// rule 1 says it serves nobody. Whoever sees it deletes it, and
		// the namespace is taken again by first use.
		o.log.Warn("cluster: deleting an owner key that has no lease", "namespace", ns, "value", string(r.Kvs[0].Value))
		_, _ = o.cli.Txn(rctx).If(clientv3.Compare(clientv3.ModRevision(o.ownerKey(ns)), "=", r.Kvs[0].ModRevision)).
			Then(clientv3.OpDelete(o.ownerKey(ns))).Commit()
		return // the deletion's event reconciles it again
	}
	var h *Handoff
	if hr := t.Responses[1].GetResponseRange(); len(hr.Kvs) == 1 {
		h = &Handoff{}
		if json.Unmarshal(hr.Kvs[0].Value, h) != nil {
			h = nil
		} else {
			h.modRev = hr.Kvs[0].ModRevision
		}
	}
	o.mu.Lock()
	var rec ownerRec
	exists := len(r.Kvs) == 1 && json.Unmarshal(r.Kvs[0].Value, &rec) == nil
	if exists {
		rec.modRev = r.Kvs[0].ModRevision
		o.owners[ns] = rec
	} else {
		delete(o.owners, ns)
	}
	if h != nil {
		o.moves[ns] = h.Phase
	} else {
		delete(o.moves, ns)
		delete(o.frozen, ns)
	}
	epoch, installed := o.mine[ns]
	lost := installed && (!exists || rec.Hub != o.self || rec.modRev != epoch) && !keepServingPastLease
	if lost {
		delete(o.mine, ns)
		delete(o.frozen, ns)
	}
	o.mu.Unlock()
	if lost {
		o.log.Warn("cluster: namespace no longer owned here; dropping its claims", "namespace", ns, "epoch", epoch)
		o.host.Disown(ns)
	}
	if h != nil {
		o.advance(ctx, ns, h, exists, rec)
	}
}

// Resolve implements federation.Authority. A namespace nobody owns is
// taken here (first use, or after its owner's lease expired). The empty
// namespace is the fleet's default one, of bare names (solo, not
// proj/solo): it is placed like any other, so a bare name works on a
// fleet as on one hub (issue 22; its keys are ns//…, and no named
// namespace can collide with it, since a name's namespace ends at its
// first '/').
func (o *Owners) Resolve(ns string) federation.Resolution {
	if !o.m.Serving() {
		return federation.Resolution{Namespace: ns, Outcome: federation.Moving, RetryAfter: 250 * time.Millisecond}
	}
	r, unowned := o.cached(ns)
	if !unowned {
		if r.Outcome == federation.Moving {
			o.enqueue(ns) // ours but not installed yet, an owner whose lease is going, or a move: re-read
		}
		return r
	}
	o.mu.Lock()
	wait := time.Until(o.unadoptable[ns])
	o.mu.Unlock()
	if wait > 0 {
		r.RetryAfter = wait
		return r
	}
	if err := o.acquire(ns); err != nil {
		o.log.Info("cluster: could not take namespace", "namespace", ns, "err", err)
	}
	r, _ = o.cached(ns)
	return r
}

// unadoptableWait is how long first use here leaves a namespace alone
// after it could not be adopted here.
const unadoptableWait = time.Second

// cached resolves ns from what this hub knows of etcd, without asking it:
// local only while our installed epoch is the owner key's revision and no
// move froze it; remote while the owner holds a live registration;
// moving otherwise. unowned says nobody owns ns and no move is under way:
// first use may take it.
func (o *Owners) cached(ns string) (r federation.Resolution, unowned bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rec, owned := o.owners[ns]
	epoch, installed := o.mine[ns]
	_, ownerLive := o.hubs[rec.Hub]
	phase, moving := o.moves[ns]
	r = federation.Resolution{Namespace: ns, Owner: rec.Hub, Epoch: rec.modRev, Phase: phase}
	switch {
	case o.frozen[ns]:
		r.Outcome, r.RetryAfter = federation.Moving, plannedRetry // a planned move: the new owner answers shortly
	case owned && installed && rec.Hub == o.self && rec.modRev == epoch, installed && keepServingPastLease:
		r.Outcome = federation.Local
	case owned && rec.Hub != o.self && ownerLive:
		r.Outcome = federation.Remote
	case owned || moving:
		r.Outcome, r.RetryAfter = federation.Moving, 250*time.Millisecond
		if moving {
			r.RetryAfter = plannedRetry
		}
	default:
		r.Outcome, r.RetryAfter = federation.Moving, 250*time.Millisecond
		return r, true
	}
	return r, false
}

// acquire takes an unowned namespace: one flight per namespace at a time.
func (o *Owners) acquire(ns string) error {
	o.mu.Lock()
	if f := o.flights[ns]; f != nil {
		o.mu.Unlock()
		select {
		case <-f.done:
		case <-time.After(claimTimeout):
		}
		return nil
	}
	f := &flight{done: make(chan struct{})}
	o.flights[ns] = f
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		delete(o.flights, ns)
		o.mu.Unlock()
		close(f.done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	lease := o.m.Lease()
	if lease == 0 {
		return ErrFenced
	}
	val, _ := json.Marshal(ownerRec{Hub: o.self, Addr: o.m.cfg.Advertise})
	key := o.ownerKey(ns)
	// First use never races a planned move: no handoff record may exist.
	t, err := o.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(o.handoffKey(ns)), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease)), clientv3.OpPut(o.indexKey(ns), "")).
		Else(clientv3.OpGet(key), clientv3.OpGet(o.handoffKey(ns))).Commit()
	if err != nil {
		return fmt.Errorf("%w: take %s: %v", ErrNoEtcd, ns, err)
	}
	if !t.Succeeded {
		if hr := t.Responses[1].GetResponseRange(); hr != nil && len(hr.Kvs) == 1 {
			o.mu.Lock()
			if _, known := o.moves[ns]; !known {
				o.moves[ns] = PhaseFreezing
			}
			o.mu.Unlock()
			o.enqueue(ns)
		}
		if rs := t.Responses[0].GetResponseRange(); rs != nil && len(rs.Kvs) == 1 {
			var rec ownerRec
			if json.Unmarshal(rs.Kvs[0].Value, &rec) == nil {
				rec.modRev = rs.Kvs[0].ModRevision
				o.mu.Lock()
				o.owners[ns] = rec
				o.mu.Unlock()
			}
		}
		return nil
	}
	epoch := o.ownedAt(ns, t.Header.Revision)
	if err := o.warm(ctx, ns, epoch); err != nil {
		o.log.Warn("cluster: warming a namespace failed; letting it go", "namespace", ns, "err", err)
		o.release(ns, epoch)
		if ref := (*coord.Refusal)(nil); errors.As(err, &ref) && ref.Code == coord.CodeTaskIDInUse {
			o.mu.Lock()
			o.unadoptable[ns] = time.Now().Add(unadoptableWait)
			o.mu.Unlock()
		}
		return err
	}
	o.m.Applied()
	o.log.Info("cluster: namespace taken", "namespace", ns, "epoch", epoch)
	return nil
}

// warm reads the namespace's state at the owner key's revision — a stable
// high-water mark, since only the owner writes and the owner is us from
// that revision on (rule 6) — decodes it off the sequencer, and installs
// it in one step; a failure installs nothing (rule 8).
func (o *Owners) warm(ctx context.Context, ns string, epoch int64) error {
	st, err := o.readState(ctx, ns, epoch)
	if err != nil {
		return err
	}
	return o.install(ns, epoch, st)
}

// staged is a namespace read from etcd, not yet installed.
type staged struct {
	claims   []*coord.Claim
	tasks    []*coord.BoardTask
	floor    int64
	retained map[string]string
}

// readState reads a namespace's claims, board tasks and epoch floor at
// revision rev, into staging: nothing is installed.
func (o *Owners) readState(ctx context.Context, ns string, rev int64) (staged, error) {
	var st staged
	r, err := o.cli.Get(ctx, o.nsPrefix(ns), clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return st, err
	}
	for _, kv := range r.Kvs {
		k := string(kv.Key)
		switch {
		case strings.HasPrefix(k, o.nsPrefix(ns)+"claims/"):
			ev, ok, err := journal.Decode(journal.KindClaim, kv.Value)
			if err != nil || !ok {
				return st, fmt.Errorf("claim %s: %v", k, err)
			}
			st.claims = append(st.claims, ev.(coord.ClaimGranted).Claim)
		case strings.HasPrefix(k, o.nsPrefix(ns)+"board/"):
			ev, ok, err := journal.Decode(journal.KindLedgerTask, kv.Value)
			if err != nil || !ok {
				return st, fmt.Errorf("board task %s: %v", k, err)
			}
			st.tasks = append(st.tasks, ev.(coord.TaskPosted).Task)
		case k == o.epochKey(ns):
			st.floor, _ = strconv.ParseInt(string(kv.Value), 10, 64)
		case strings.HasPrefix(k, o.nsPrefix(ns)+"retained/"):
			if st.retained == nil {
				st.retained = map[string]string{}
			}
			st.retained[strings.TrimPrefix(k, o.nsPrefix(ns)+"retained/")] = string(kv.Value)
		}
	}
	return st, nil
}

// install swaps a staged namespace in: the hub adopts its claims, and the
// namespace resolves local at epoch from then on.
func (o *Owners) install(ns string, epoch int64, st staged) error {
	claims := st.claims
	if err := o.host.Adopt(ns, claims, st.tasks, st.floor, st.retained); err != nil {
		return err
	}
	o.mu.Lock()
	delete(o.unadoptable, ns)
	for _, c := range claims {
		o.taskNS[c.TaskID] = ns
	}
	for task := range st.retained {
		o.retained[ns+"\x00"+task] = true
	}
	if rec := o.owners[ns]; rec.Hub == o.self && rec.modRev == epoch {
		o.mine[ns] = epoch
	}
	o.mu.Unlock()
	return nil
}

// release lets a namespace go: its owner key is deleted if it is still
// ours at that epoch.
func (o *Owners) release(ns string, epoch int64) {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	key := o.ownerKey(ns)
	_, _ = o.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", epoch)).Then(clientv3.OpDelete(key)).Commit()
	o.mu.Lock()
	delete(o.mine, ns)
	o.mu.Unlock()
}

// Fence is the Member's fence: every namespace stops resolving local at
// once, in-flight work drains, and the claims are dropped; the lease (and
// with it every owner key) is revoked after this returns.
func (o *Owners) Fence(budget time.Duration) {
	if keepServingPastLease {
		return // the harness's broken build keeps every namespace (unsafe_on.go)
	}
	o.mu.Lock()
	nss := make([]string, 0, len(o.mine))
	for ns := range o.mine {
		nss = append(nss, ns)
	}
	o.mine = map[string]int64{}
	o.frozen = map[string]bool{}
	o.mu.Unlock()
	if o.host == nil {
		return
	}
	o.host.Drain(budget)
	for _, ns := range nss {
		o.host.Disown(ns)
	}
}

// Known implements federation.Authority: every namespace with an owner.
func (o *Owners) Known() []federation.Resolution {
	o.mu.Lock()
	nss := make([]string, 0, len(o.owners))
	for ns := range o.owners {
		nss = append(nss, ns)
	}
	o.mu.Unlock()
	sort.Strings(nss)
	out := make([]federation.Resolution, 0, len(nss))
	for _, ns := range nss {
		r, _ := o.cached(ns)
		out = append(out, r)
	}
	return out
}

// Declared implements federation.Authority: the namespaces this hub owns.
func (o *Owners) Declared() map[string]string { return nil }

// PeerURI is where a registered hub listens (federation.Config.PeerURI).
func (o *Owners) PeerURI(hub string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	reg, ok := o.hubs[hub]
	return reg.Addr, ok && reg.Addr != ""
}

// Hubs lists the registered hubs, sorted by id.
func (o *Owners) Hubs() []Registration {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Registration, 0, len(o.hubs))
	for _, r := range o.hubs {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].HubID < out[j].HubID })
	return out
}

// Append implements sequencer.Journal: the batch's claim records and
// idempotency records become one etcd transaction guarded by the owner
// key of every namespace they touch. A namespace not (or no longer) owned
// here refuses the batch with sequencer.ErrRetry, and the hub stays
// healthy. Records that are not namespace authority (chats, receipts) are
// not kept in etcd.
func (o *Owners) Append(ctx context.Context, b *journal.Batch) (int64, error) {
	var idemLease clientv3.LeaseID
	if len(b.Operations) > 0 {
		var err error
		lctx, cancel := context.WithTimeout(ctx, o.m.cfg.LeaseTTL/3)
		idemLease, err = o.idemKeep.lease(lctx, o.cli)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("%w: idempotency lease: %v", sequencer.ErrRetry, err)
		}
	}
	var keepLease clientv3.LeaseID
	for _, rec := range b.Records {
		if rec.Kind == journal.KindClaimExpired && bytes.Contains(rec.Payload, []byte(`"checkpoint":`)) {
			lctx, cancel := context.WithTimeout(ctx, o.m.cfg.LeaseTTL/3)
			var err error
			keepLease, err = o.mail.keep.lease(lctx, o.cli)
			cancel()
			if err != nil {
				return 0, fmt.Errorf("%w: retention lease: %v", sequencer.ErrRetry, err)
			}
			break
		}
	}
	p, err := o.plan(b, idemLease, keepLease)
	if err != nil {
		return 0, err
	}
	if len(p.ops) == 0 {
		return 0, nil
	}
	tctx, cancel := context.WithTimeout(ctx, o.m.cfg.LeaseTTL/3)
	defer cancel()
	t, err := o.cli.Txn(tctx).If(p.cmps...).Then(p.ops...).Commit()
	if err != nil {
		// Ambiguous: the transaction may have committed. The namespaces
		// are re-warmed from etcd, the truth, before they serve again.
		o.unsettle(p.guarded)
		return 0, fmt.Errorf("%w: %w: etcd: %v (namespaces re-read before they serve again)", sequencer.ErrRetry, sequencer.ErrUncertain, err)
	}
	if !t.Succeeded {
		o.unsettle(p.guarded)
		return 0, fmt.Errorf("%w: a namespace moved away from %s", sequencer.ErrRetry, o.self)
	}
	o.mu.Lock()
	for task, ns := range p.taskNS {
		if ns == taskGone {
			delete(o.taskNS, task)
		} else {
			o.taskNS[task] = ns
		}
	}
	for k, kept := range p.retained {
		if kept {
			o.retained[k] = true
		} else {
			delete(o.retained, k)
		}
	}
	o.mu.Unlock()
	o.m.Applied()
	return t.Header.Revision, nil
}

// txnPlan is one batch as an etcd transaction: the owner-key guards of the
// namespaces it touches and the writes.
type txnPlan struct {
	cmps     []clientv3.Cmp
	ops      []clientv3.Op
	at       map[string]int    // key → its op's index in ops: a later write of a key replaces the earlier (etcd refuses a key twice in one txn)
	retained map[string]bool   // ns\x00task → a retained checkpoint written (true) or dropped (false)
	guarded  map[string]bool   // namespaces guarded
	floors   map[string]int64  // namespace → highest epoch written
	taskNS   map[string]string // task → its namespace after the batch (taskGone: none)
}

// guard adds the owner-key guard of ns, which must be installed here.
func (o *Owners) guard(p *txnPlan, ns string) error {
	if p.guarded[ns] {
		return nil
	}
	epoch, ok := o.mine[ns]
	if !ok {
		return fmt.Errorf("%w: namespace %q is not owned by %s", sequencer.ErrRetry, ns, o.self)
	}
	p.guarded[ns] = true
	if !keepServingPastLease {
		p.cmps = append(p.cmps, clientv3.Compare(clientv3.ModRevision(o.ownerKey(ns)), "=", epoch))
	}
	return nil
}

// taskGone marks a task whose claim a batch ended, in txnPlan.taskNS: no
// namespace is spelled so ("" is the default one's name).
const taskGone = "\x00gone"

// write adds op, the batch's last write of key so far.
func (p *txnPlan) write(key string, op clientv3.Op) {
	if i, ok := p.at[key]; ok {
		p.ops[i] = op
		return
	}
	p.at[key] = len(p.ops)
	p.ops = append(p.ops, op)
}

// plan turns a batch's records into guarded writes. keepLease is the
// lease retained checkpoints are written under (0 when the batch expires
// no claim with a checkpoint).
func (o *Owners) plan(b *journal.Batch, idemLease, keepLease clientv3.LeaseID) (*txnPlan, error) {
	p := &txnPlan{guarded: map[string]bool{}, floors: map[string]int64{}, taskNS: map[string]string{}, at: map[string]int{}, retained: map[string]bool{}}
	o.mu.Lock()
	defer o.mu.Unlock()
	// nsOfTask is the namespace of the claim of task this hub knows of;
	// ok is false when there is none. The default namespace is "", so
	// "" alone cannot say "none".
	nsOfTask := func(task string) (ns string, ok bool) {
		if ns, ok := p.taskNS[task]; ok {
			return ns, ns != taskGone
		}
		ns, ok = o.taskNS[task]
		return ns, ok
	}
	for _, rec := range b.Records {
		var r struct {
			TaskID     string `json:"task_id"`
			Owner      string `json:"owner"`
			Epoch      int64  `json:"epoch"`
			CreatedBy  string `json:"created_by"`
			Checkpoint string `json:"checkpoint"`
		}
		switch rec.Kind {
		case journal.KindClaim, journal.KindTaskUpdate, journal.KindCheckpoint, journal.KindHandoff,
			journal.KindLedgerTask, journal.KindRelease, journal.KindClaimExpired:
			if err := json.Unmarshal(rec.Payload, &r); err != nil {
				return nil, fmt.Errorf("cluster: record %s: %w", rec.Kind, err)
			}
		default:
			continue // not namespace authority (chats, notes, receipts, audit)
		}
		switch rec.Kind {
		case journal.KindLedgerTask:
			ns := coord.NamespaceOf(r.CreatedBy)
			if err := o.guard(p, ns); err != nil {
				return nil, err
			}
			p.write(o.boardKey(ns, r.TaskID), clientv3.OpPut(o.boardKey(ns, r.TaskID), string(rec.Payload)))
		case journal.KindRelease, journal.KindClaimExpired:
			ns, ok := nsOfTask(r.TaskID)
			if !ok {
				continue
			}
			if _, mine := o.mine[ns]; !mine && rec.Kind == journal.KindClaimExpired {
				// A lapse swept from a namespace this hub no longer serves
				// (its claims linger until Disown is applied): its owner
				// sweeps it. Refusing the batch for it would refuse every
				// batch, the Disown and every warm among them, while the
				// claim lingers (found by the fleet harness).
				continue
			}
			if err := o.guard(p, ns); err != nil {
				return nil, err
			}
			p.write(o.claimKey(ns, r.TaskID), clientv3.OpDelete(o.claimKey(ns, r.TaskID)))
			p.taskNS[r.TaskID] = taskGone
			// A lapsed claim's checkpoint waits in etcd for the next
			// claimant, whichever hub owns the namespace then (INV-CR-3); a
			// release drops it.
			rk := ns + "\x00" + r.TaskID
			switch {
			case rec.Kind == journal.KindClaimExpired && r.Checkpoint != "" && keepLease != 0:
				p.write(o.retainedKey(ns, r.TaskID), clientv3.OpPut(o.retainedKey(ns, r.TaskID), r.Checkpoint, clientv3.WithLease(keepLease)))
				p.retained[rk] = true
			case p.retained[rk] || o.retained[rk]:
				p.write(o.retainedKey(ns, r.TaskID), clientv3.OpDelete(o.retainedKey(ns, r.TaskID)))
				p.retained[rk] = false
			}
		default: // a claim's full dict
			ns := coord.NamespaceOf(r.Owner)
			if err := o.guard(p, ns); err != nil {
				return nil, err
			}
			if prev, ok := nsOfTask(r.TaskID); ok && prev != ns {
				if err := o.guard(p, prev); err != nil {
					return nil, err
				}
				p.write(o.claimKey(prev, r.TaskID), clientv3.OpDelete(o.claimKey(prev, r.TaskID)))
			}
			p.write(o.claimKey(ns, r.TaskID), clientv3.OpPut(o.claimKey(ns, r.TaskID), string(rec.Payload)))
			p.taskNS[r.TaskID] = ns
			if rk := ns + "\x00" + r.TaskID; p.retained[rk] || o.retained[rk] { // the new claim took the checkpoint over
				p.write(o.retainedKey(ns, r.TaskID), clientv3.OpDelete(o.retainedKey(ns, r.TaskID)))
				p.retained[rk] = false
			}
			if rec.Kind == journal.KindClaim || rec.Kind == journal.KindHandoff {
				// Only a grant stamps a fresh epoch (INV-EF-1). An update or
				// a checkpoint carries its claim's epoch, older than others
				// this hub granted since: raising the floor from it would
				// lower the stored one, and the namespace's next owner
				// would issue those epochs again (found by the fleet
				// harness, linz/fleet_test.go).
				p.floors[ns] = max(p.floors[ns], r.Epoch)
			}
		}
	}
	for _, op := range b.Operations {
		sender, _, _ := strings.Cut(op.Key, "\x00")
		ns := coord.NamespaceOf(sender)
		if err := o.guard(p, ns); err != nil {
			return nil, err
		}
		v, _ := json.Marshal(storedOp{Digest: op.RequestDigest, Response: string(op.Response), At: b.TS})
		p.ops = append(p.ops, clientv3.OpPut(o.idemKey(ns, op.Key), string(v), clientv3.WithLease(idemLease)))
	}
	for ns, e := range p.floors {
		p.ops = append(p.ops, clientv3.OpPut(o.epochKey(ns), strconv.FormatInt(e, 10)))
	}
	return p, nil
}

type storedOp struct {
	Digest   string  `json:"request_digest"`
	Response string  `json:"response"`
	At       float64 `json:"at"`
}

// unsettle stops serving namespaces whose last write failed or was fenced
// and has them re-read: their local claims are dropped, and the next
// request takes the namespace afresh (warming from etcd) if it is still
// ours to take.
func (o *Owners) unsettle(nss map[string]bool) {
	o.mu.Lock()
	var drop []string
	for ns := range nss {
		if _, ok := o.mine[ns]; ok {
			delete(o.mine, ns)
			drop = append(drop, ns)
		}
	}
	o.mu.Unlock()
	for _, ns := range drop {
		go func() {
			o.host.Disown(ns)
			o.rewarm(ns)
		}()
	}
}

// rewarm re-installs a namespace whose owner key still names this hub
// (after an ambiguous write): it is read again at a new revision.
func (o *Owners) rewarm(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	r, err := o.cli.Get(ctx, o.ownerKey(ns))
	if err != nil || len(r.Kvs) != 1 {
		o.enqueue(ns)
		return
	}
	var rec ownerRec
	if json.Unmarshal(r.Kvs[0].Value, &rec) != nil || rec.Hub != o.self {
		o.enqueue(ns)
		return
	}
	// Touch the owner key so its ModRevision, our epoch, moves past any
	// write of the ambiguous transaction, then warm at that revision.
	key := o.ownerKey(ns)
	lease := o.m.Lease()
	if lease == 0 {
		// Fenced, not registered again: a put without a lease would name
		// this hub the owner for ever (rule 1; found by the fleet
		// harness). The key lapses with the old lease, and the namespace
		// is taken again by first use.
		o.enqueue(ns)
		return
	}
	val, _ := json.Marshal(ownerRec{Hub: o.self, Addr: o.m.cfg.Advertise})
	t, err := o.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", r.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease))).Commit()
	if err != nil || !t.Succeeded {
		o.enqueue(ns)
		return
	}
	epoch := o.ownedAt(ns, t.Header.Revision)
	if err := o.warm(ctx, ns, epoch); err != nil {
		o.release(ns, epoch)
	}
}

// ownedAt records that this hub's owner key of ns was written at epoch.
func (o *Owners) ownedAt(ns string, epoch int64) int64 {
	o.mu.Lock()
	o.owners[ns] = ownerRec{Hub: o.self, Addr: o.m.cfg.Advertise, modRev: epoch}
	o.mu.Unlock()
	return epoch
}

// Operation implements sequencer.Journal: the stored idempotency record
// of key, read from its namespace.
func (o *Owners) Operation(key string) (journal.Operation, bool, error) {
	sender, _, _ := strings.Cut(key, "\x00")
	ns := coord.NamespaceOf(sender)
	ctx, cancel := context.WithTimeout(context.Background(), o.m.cfg.LeaseTTL/3)
	defer cancel()
	r, err := o.cli.Get(ctx, o.idemKey(ns, key))
	if err != nil {
		return journal.Operation{}, false, fmt.Errorf("%w: etcd: %v", sequencer.ErrRetry, err)
	}
	if len(r.Kvs) == 0 {
		return journal.Operation{}, false, nil
	}
	var s storedOp
	if err := json.Unmarshal(r.Kvs[0].Value, &s); err != nil {
		return journal.Operation{}, false, fmt.Errorf("cluster: idempotency record: %w", err)
	}
	return journal.Operation{Key: key, RequestDigest: s.Digest, Response: []byte(s.Response)}, true, nil
}

// Members implements federation.Fleet.
func (o *Owners) Members() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.hubs))
	for id := range o.hubs {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Live implements federation.Fleet.
func (o *Owners) Live(hub string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.hubs[hub]
	return ok
}

// LeaseDeadline implements federation.Fleet.
func (o *Owners) LeaseDeadline() float64 {
	return float64(o.m.Deadline().UnixNano()) / 1e9
}

// Serving implements federation.Fleet: the member is registered and before
// its deadline.
func (o *Owners) Serving() bool { return o.m.Serving() }
