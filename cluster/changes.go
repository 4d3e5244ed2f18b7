package cluster

import (
	"slices"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/federation"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The fleet's changes (federation.FleetChanges, issue 22): the dashboard's
// /api/events on any hub streams every namespace's claim and board
// changes, not only its own commits. They come from the hub's one watch
// of the fleet, as the mirror applies it (mirror.go): while a sink
// listens, each record is noted as it was before an event, and once the
// mirror applied the event (its revision moved past it) the change is
// turned into the core event its owner committed and handed to the sink,
// on the watch's goroutine. So every hub streams the fleet's changes in one
// order, etcd's revisions, and a fleet read that starts after a change was
// handed over sees it.
//
// etcd keeps records, not verbs, so an event is derived from the record
// before and after it: a claim put with no live record before is a grant,
// one with a new owner a handoff, a new epoch a renewal, a new checkpoint a
// checkpoint, anything else an update; a claim deleted while its lease was
// live is a release, after it an expiry (judged by this hub's clock). A
// board task put is posted when new, re-declared when its title,
// description or dependencies changed, else updated; its author (By) is
// known only when posted (the creator).

// changeSink is where the mirror hands its changes (mirror.sink).
type changeSink = federation.ChangeSink

// change is one claim or board record event, noted by the watch.
type change struct {
	key   string
	claim bool
	rev   int64
	prev  *record // a copy of the record before the event; nil when there was none
	raw   []byte  // the record after it; nil when deleted

	decoded  bool // the four below are set
	c, cPrev *coord.Claim
	t, tPrev *coord.BoardTask
}

// decode reads the record before and after the change, once.
func (ch *change) decode() {
	if ch.decoded {
		return
	}
	ch.decoded = true
	if ch.prev != nil {
		ch.cPrev, ch.tPrev = ch.prev.decoded()
	}
	if ch.raw != nil {
		ch.c, ch.t = decodeRecord(ch.claim, ch.raw)
	}
}

// FollowChanges implements federation.FleetChanges: the mirror (started
// here unless it runs: no read started it, or it stopped idle) hands sink
// its changes from now on, and does not stop while sink listens.
func (o *Owners) FollowChanges(sink federation.ChangeSink) {
	m := &o.rec
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sink == nil { // written once (the same sink at every call), before the mirror notes a change
		m.sink = sink
	}
	o.startMirrorLocked()
}

// changesLocked is where the watch notes one response's changes: nil
// unless a sink listens (mirror.mu).
func (m *mirror) changesLocked() []change {
	if m.sink == nil || !m.sink.Listening() {
		return nil
	}
	return []change{}
}

// noteLocked notes ev on key before the mirror applies it (mirror.mu).
func (m *mirror) noteLocked(chs []change, key string, claim bool, ev *clientv3.Event) []change {
	c := change{key: key, claim: claim, rev: ev.Kv.ModRevision}
	if p := m.recs[key]; p != nil {
		cp := *p // a read may decode the record in place later
		c.prev = &cp
	}
	if ev.Type != clientv3.EventTypeDelete {
		c.raw = ev.Kv.Value
	}
	return append(chs, c)
}

// handChanges hands the events of chs to the sink. The watch's goroutine,
// after the mirror applied them and without its lock.
func (o *Owners) handChanges(chs []change) {
	if len(chs) == 0 {
		return
	}
	for i := range chs {
		chs[i].decode()
	}
	o.rec.keepDecoded(chs)
	if evs := changeEvents(chs, float64(time.Now().UnixNano())/1e9); len(evs) > 0 {
		o.rec.sink.Changed(evs)
	}
}

// keepDecoded stores the records chs decoded in the mirror's records that
// still hold those very payloads, so that neither the record's next
// change nor a read decodes it again (a decode is ~10 µs a claim).
func (m *mirror) keepDecoded(chs []change) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ch := range chs {
		if len(ch.raw) == 0 {
			continue
		}
		if r := m.recs[ch.key]; r != nil && !r.done && len(r.raw) > 0 && &r.raw[0] == &ch.raw[0] {
			r.c, r.t, r.done, r.raw = ch.c, ch.t, true, nil
		}
	}
}

// changeEvents derives the core events of chs, in order; now judges
// whether a deleted claim was released or expired.
func changeEvents(chs []change, now float64) []coord.Event {
	var evs []coord.Event
	for len(chs) > 0 {
		n := 1
		for n < len(chs) && chs[n].rev == chs[0].rev {
			n++
		}
		evs = appendRevision(evs, chs[:n], now)
		chs = chs[n:]
	}
	return evs
}

// appendRevision appends the events of one revision's changes: one
// transaction, one batch of one owner. A claim's key moves with its
// owner's namespace (a handoff to an agent of another namespace deletes
// one key and puts another in the same transaction): that is one change.
func appendRevision(evs []coord.Event, chs []change, now float64) []coord.Event {
	put := map[string]bool{}          // task ids whose claim is put in this revision
	gone := map[string]*coord.Claim{} // claims deleted in this revision, by task id
	for i := range chs {
		ch := &chs[i]
		ch.decode()
		switch {
		case ch.c != nil:
			put[ch.c.TaskID] = true
		case ch.raw == nil && ch.cPrev != nil:
			gone[ch.cPrev.TaskID] = ch.cPrev
		}
	}
	for _, ch := range chs {
		switch {
		case ch.claim && ch.raw == nil:
			if ch.cPrev != nil && !put[ch.cPrev.TaskID] { // else it moved: its put says so
				evs = append(evs, claimGone(ch.cPrev, now))
			}
		case ch.c != nil:
			prev := ch.cPrev
			if prev == nil {
				prev = gone[ch.c.TaskID]
			}
			evs = append(evs, claimChanged(prev, ch.c))
		case ch.t != nil:
			evs = append(evs, taskChanged(ch.tPrev, ch.t))
		}
	}
	return evs
}

// decoded is the record's claim or board task.
func (r *record) decoded() (*coord.Claim, *coord.BoardTask) {
	if r.done {
		return r.c, r.t
	}
	return decodeRecord(r.claim, r.raw)
}

// claimChanged is the event that turned claim p (nil: none) into n.
func claimChanged(p, n *coord.Claim) coord.Event {
	if p != nil && !p.Live(n.ClaimedAt) {
		p = nil // it had lapsed: n is a new grant, whoever held it
	}
	switch {
	case p == nil:
		return coord.ClaimGranted{Claim: n}
	case p.Owner != n.Owner:
		return coord.HandedOff{Claim: n, From: p.Owner}
	case p.Epoch != n.Epoch:
		return coord.ClaimGranted{Claim: n, Renewal: true}
	case p.Checkpoint != n.Checkpoint:
		return coord.CheckpointSaved{Claim: n}
	}
	return coord.TaskUpdated{Claim: n}
}

// claimGone is the event that deleted claim p at now.
func claimGone(p *coord.Claim, now float64) coord.Event {
	if p.Live(now) {
		return coord.Released{TaskID: p.TaskID, Owner: p.Owner, Epoch: p.Epoch}
	}
	return coord.ClaimExpired{TaskID: p.TaskID, Epoch: p.Epoch}
}

// taskChanged is the event that turned board task p (nil: none) into n.
func taskChanged(p, n *coord.BoardTask) coord.Event {
	switch {
	case p == nil:
		return coord.TaskPosted{Task: n, By: n.CreatedBy}
	case p.Title != n.Title || p.Description != n.Description || !slices.Equal(p.DependsOn, n.DependsOn):
		return coord.TaskPosted{Task: n, Redeclared: true}
	}
	return coord.TaskPosted{Task: n, Update: true}
}
