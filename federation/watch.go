package federation

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/synapse-hub/synapse/pyjson"
)

// watchState is what the watches observed of the peers' logs, under
// Federation.mu: advisory only, it never grants or revokes (INV-MH-1,
// INV-MH-2).
type watchState struct {
	observed    *Observed
	logs        map[string]*PeerLog
	quarantined map[string]string // peer → why (equivocation)
	lastPoll    map[string]float64
	pollErr     map[string]string
	asserting   map[string][]string // namespace → hubs with live observed claims in it
	verified    map[string]int64    // peer → events verified since the cursor last jumped

	// polling makes polls of one peer single-flight: a PeerLog is driven
	// by one poll at a time (the timer's, or an explicit Poll's).
	polling map[string]*sync.Mutex
}

func newWatchState() *watchState {
	return &watchState{
		observed:    NewObserved(ObservedLimits{}),
		logs:        make(map[string]*PeerLog),
		quarantined: make(map[string]string),
		lastPoll:    make(map[string]float64),
		pollErr:     make(map[string]string),
		asserting:   make(map[string][]string),
		verified:    make(map[string]int64),
		polling:     make(map[string]*sync.Mutex),
	}
}

// fingerprintWindow is how many recent seqs of a peer keep their
// fingerprints for the equivocation check; each poll re-reads the last
// pollOverlap verified events, so a peer that rewrites its recent log is
// caught even when it only appends afterwards.
const (
	fingerprintWindow = 8192
	pollOverlap       = 16
)

// Quarantine marks peers quarantined at startup (from the journal's
// multihub_equivocation records): their logs are not pulled.
func (f *Federation) Quarantine(peer, why string) {
	if f.watch == nil {
		return
	}
	f.mu.Lock()
	f.watch.quarantined[peer] = why
	f.mu.Unlock()
}

// watchLoop pulls one peer's log every WatchInterval (at once at start).
func (f *Federation) watchLoop(ctx context.Context, peer string) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.poll(ctx, peer)
		t.Reset(f.cfg.WatchInterval)
	}
}

// Poll pulls a peer's log now (tests and `synapse ns` refresh).
func (f *Federation) Poll(ctx context.Context, peer string) error {
	if f.watch == nil || f.link(peer) == nil {
		return fmt.Errorf("federation: %s is not watched", peer)
	}
	return f.poll(ctx, peer)
}

// poll reads the peer's log from the verified cursor to its end, page by
// page, verifies each page and folds it. A failed poll keeps the last
// observation (PROTOCOL.md §6.4).
func (f *Federation) poll(ctx context.Context, peer string) error {
	l := f.link(peer)
	f.mu.Lock()
	pm := f.watch.polling[peer]
	if pm == nil {
		pm = new(sync.Mutex)
		f.watch.polling[peer] = pm
	}
	f.mu.Unlock()
	pm.Lock()
	defer pm.Unlock()
	f.mu.Lock()
	if why, q := f.watch.quarantined[peer]; q {
		f.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrEquivocation, why)
	}
	pl := f.watch.logs[peer]
	if pl == nil {
		pl = NewPeerLog(peer, 0, fingerprintWindow)
		f.watch.logs[peer] = pl
	}
	f.mu.Unlock()
	var err error
	for pages := 0; pages < 1000 && ctx.Err() == nil; pages++ {
		pctx, cancel := context.WithTimeout(ctx, f.cfg.ForwardTimeout)
		var snap *logSnapshotFrame
		f.mu.Lock()
		from := pl.Cursor() - min(pollOverlap, f.watch.verified[peer])
		f.mu.Unlock()
		snap, err = l.pull(pctx, from, MaxLogPage)
		cancel()
		if err != nil {
			break
		}
		events := make([]Event, len(snap.Events))
		for i, e := range snap.Events {
			events[i] = Event(e)
		}
		var fresh []Event
		before := pl.Cursor()
		if snap.LogStartSeq > pl.Cursor()+1 {
			f.log.Warn("federation: peer log compacted below our cursor; observing from its start", "peer", peer, "cursor", pl.Cursor(), "start", snap.LogStartSeq)
			fresh, err = pl.AcceptFrom(snap.LogStartSeq, events)
		} else {
			fresh, err = pl.Accept(events)
		}
		if err != nil {
			if errors.Is(err, ErrEquivocation) {
				f.quarantine(peer, err)
			}
			break
		}
		f.mu.Lock()
		if pl.Cursor() != before+int64(len(fresh)) { // the cursor jumped over a compacted span
			f.watch.verified[peer] = 0
		}
		f.watch.verified[peer] += int64(len(fresh))
		for _, e := range fresh {
			f.watch.observed.Apply(peer, e)
		}
		f.mu.Unlock()
		if len(snap.Events) == 0 || pl.Cursor() >= snap.LogEndSeq {
			break
		}
	}
	now := f.host.Now()
	f.mu.Lock()
	f.watch.lastPoll[peer] = now
	if err != nil {
		f.watch.pollErr[peer] = err.Error()
	} else {
		delete(f.watch.pollErr, peer)
	}
	f.watch.asserting = f.watch.observed.Asserting(now)
	f.mu.Unlock()
	f.reassess()
	if err != nil {
		f.log.Warn("federation: watch poll failed; keeping the last observation", "peer", peer, "err", err)
	}
	return err
}

// quarantine stops trusting a peer whose log changed under us: what was
// observed of it is dropped, it is no longer pulled, and the fact is
// journalled so a restart keeps it (PROTOCOL.md §6.4).
func (f *Federation) quarantine(peer string, cause error) {
	f.mu.Lock()
	f.watch.quarantined[peer] = cause.Error()
	f.watch.observed.Forget(peer)
	f.mu.Unlock()
	f.log.Error("federation: peer equivocated (a logged event changed); quarantined", "peer", peer, "err", cause)
	b := []byte(`{"peer_id":`)
	b = pyjson.AppendString(b, peer)
	b = append(b, `,"observer":`...)
	b = pyjson.AppendString(b, f.cfg.HubID)
	b = append(b, `,"reason":`...)
	b = pyjson.AppendString(b, cause.Error())
	b = append(b, `,"observed_at":`...)
	b = pyjson.AppendFloat(b, f.host.Now())
	b = append(b, '}')
	f.host.Record("multihub_equivocation", b)
}

// Observation is the advisory state shown in state_snapshot, synapse state
// and who as observed@HUB.
type Observation struct {
	Claims      []ObservedClaim   `json:"observed_claims"`
	Board       []ObservedTask    `json:"observed_board"`
	Quarantined map[string]string `json:"quarantined_peers,omitempty"`
}

// Observed returns the advisory view now (empty without watches).
func (f *Federation) Observed() Observation {
	if f == nil || f.watch == nil {
		return Observation{}
	}
	now := f.host.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	o := Observation{Claims: f.watch.observed.Claims(now), Board: f.watch.observed.Board()}
	if len(f.watch.quarantined) > 0 {
		o.Quarantined = make(map[string]string, len(f.watch.quarantined))
		for p, w := range f.watch.quarantined {
			o.Quarantined[p] = w
		}
	}
	return o
}

// Watching reports whether this hub pulls any peer's log.
func (f *Federation) Watching() bool { return f != nil && f.watch != nil }
