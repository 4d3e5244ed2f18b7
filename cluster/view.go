package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/synapse-hub/synapse/federation"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The fleet's reads (federation.FleetView, issue 22): any hub answers
// state, board and who for the whole fleet.
//
//   - Claims and board tasks are already in etcd (ns/<ns>/claims/,
//     ns/<ns>/board/), written before any reply: Snapshot serves them from
//     the hub's watch-fed mirror (mirror.go) once it has reached etcd's
//     revision at the read's start, so an answer sees every write
//     acknowledged before it began, on any hub, and never waits on a
//     sequencer, ours or an owner's.
//   - Agents are published by each hub: presence/<hub_id> holds the hub's
//     roster, under the hub's lease, so it dies with the hub. Every hub
//     learns the others' rosters from the watch it already keeps on the
//     fleet's prefix. We chose this over asking the peers at each query:
//     a query then costs no round trip to every hub (and no hub's answer
//     can stall it), and the dashboard's stream of changes is a watch.
//
// Owners.mu guards view's maps; Snapshot runs on the caller's goroutine.

// viewTxnOps bounds the range reads of one snapshot transaction (etcd's
// --max-txn-ops defaults to 128).
var viewTxnOps = 64

// viewState is the read side of Owners, under Owners.mu.
type viewState struct {
	known   map[string]bool                    // namespaces with any key in etcd
	rosters map[string][]federation.FleetAgent // hub id → its published roster
	pubMu   sync.Mutex                         // one publish at a time
	last    []byte                             // the roster last written
	lastL   clientv3.LeaseID                   // under this lease
}

func (o *Owners) presenceKey(hub string) string { return o.pfx + "presence/" + hub }

// indexKey marks that namespace ns was ever served: written, without a
// lease, with the owner key of its first use, so a snapshot reads the
// list of namespaces at the same revision as their claims.
func (o *Owners) indexKey(ns string) string { return o.pfx + "nsindex/" + ns }

// noteKey records the namespace of a key under ns/ (Owners.mu).
func (o *Owners) noteKeyLocked(key string) {
	rest, ok := strings.CutPrefix(key, o.pfx+"ns/")
	if !ok {
		return
	}
	if ns, _, ok := strings.Cut(rest, "/"); ok {
		o.view.known[ns] = true
	}
}

// rosterEvent follows presence/<hub> (Owners.mu taken here).
func (o *Owners) rosterEvent(hub string, deleted bool, value []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if deleted {
		delete(o.view.rosters, hub)
		return
	}
	var agents []federation.FleetAgent
	if json.Unmarshal(value, &agents) == nil {
		o.view.rosters[hub] = agents
	}
}

// Snapshot implements federation.FleetView: every namespace's claims and
// board tasks at one revision, at least etcd's revision when the read
// began (a linearizable read of the namespace index's count), so it holds
// every write acknowledged before, on any hub. It is served from the
// mirror (mirror.go), started if it was not running; a mirror that does
// not reach that revision within mirrorWait is bypassed for a range read
// of etcd.
func (o *Owners) Snapshot(ctx context.Context) (federation.FleetSnapshot, error) {
	o.beginRead()
	defer o.endRead()
	var snap federation.FleetSnapshot
	now, err := o.cli.Get(ctx, o.pfx+"nsindex/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return snap, fmt.Errorf("%w: read the fleet's revision: %v", ErrNoEtcd, err)
	}
	if o.waitFor(ctx, now.Header.Revision) {
		snap.Revision, snap.Claims, snap.Tasks = o.mirrored()
		return snap, nil
	}
	if err := ctx.Err(); err != nil {
		return snap, fmt.Errorf("%w: read the fleet's records: %v", ErrNoEtcd, err)
	}
	o.rec.mu.Lock()
	o.rec.direct++
	o.rec.mu.Unlock()
	recs, rev, err := o.readRecords(ctx)
	if err != nil {
		return snap, err
	}
	snap.Revision = rev
	keys := make([]string, 0, len(recs))
	for k := range recs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c, t := decodeRecord(recs[k].claim, recs[k].raw)
		if c != nil {
			snap.Claims = append(snap.Claims, c)
		} else if t != nil {
			snap.Tasks = append(snap.Tasks, t)
		}
	}
	return snap, nil
}

// readRecords range-reads every namespace's claim and board records (not
// decoded) at one revision, that of a linearizable read of the namespace
// index, so many namespaces (in several transactions of viewTxnOps reads)
// are still of one instant.
func (o *Owners) readRecords(ctx context.Context) (map[string]*record, int64, error) {
	o.mu.Lock()
	nss := make([]string, 0, len(o.view.known))
	for ns := range o.view.known {
		nss = append(nss, ns)
	}
	o.mu.Unlock()
	// The index is read linearizably, and its revision pins every read
	// after it: a namespace first used on another hub an instant ago is
	// in it. The watch-fed set adds namespaces served before the index
	// existed.
	idx, err := o.cli.Get(ctx, o.pfx+"nsindex/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, 0, fmt.Errorf("%w: read the fleet's namespaces: %v", ErrNoEtcd, err)
	}
	rev := idx.Header.Revision
	for _, kv := range idx.Kvs {
		if ns := strings.TrimPrefix(string(kv.Key), o.pfx+"nsindex/"); !slices.Contains(nss, ns) {
			nss = append(nss, ns)
		}
	}
	sort.Strings(nss)
	recs := map[string]*record{}
	per := max(viewTxnOps/2, 1)
	for i := 0; i < len(nss); i += per {
		chunk := nss[i:min(i+per, len(nss))]
		ops := make([]clientv3.Op, 0, 2*len(chunk))
		for _, ns := range chunk {
			opts := []clientv3.OpOption{clientv3.WithRev(rev)}
			ops = append(ops, clientv3.OpGet(o.nsPrefix(ns)+"claims/", append(opts, clientv3.WithPrefix())...),
				clientv3.OpGet(o.nsPrefix(ns)+"board/", append(opts, clientv3.WithPrefix())...))
		}
		t, err := o.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, 0, fmt.Errorf("%w: read the fleet's claims and board: %v", ErrNoEtcd, err)
		}
		for j, resp := range t.Responses {
			for _, kv := range resp.GetResponseRange().Kvs {
				k := string(kv.Key)
				recs[k] = &record{key: k, claim: j%2 == 0, raw: kv.Value}
			}
		}
	}
	return recs, rev, nil
}

// Agents implements federation.FleetView: the rosters of the other live
// hubs, sorted by name then hub.
func (o *Owners) Agents() []federation.FleetAgent {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []federation.FleetAgent
	for hub, agents := range o.view.rosters {
		if _, live := o.hubs[hub]; !live || hub == o.self {
			continue
		}
		out = append(out, agents...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Hub < out[j].Hub
	})
	return out
}

// PublishAgents implements federation.FleetView: presence/<self> under the
// hub's lease, written only when it changed (or the lease did, after a
// fence and a new registration).
func (o *Owners) PublishAgents(ctx context.Context, agents []federation.FleetAgent) error {
	for i := range agents {
		agents[i].Hub = o.self
	}
	if agents == nil {
		agents = []federation.FleetAgent{}
	}
	b, err := json.Marshal(agents)
	if err != nil {
		return err
	}
	lease := o.m.Lease()
	if lease == 0 {
		return ErrFenced
	}
	o.view.pubMu.Lock()
	defer o.view.pubMu.Unlock()
	if lease == o.view.lastL && bytes.Equal(b, o.view.last) {
		return nil
	}
	if _, err := o.cli.Put(ctx, o.presenceKey(o.self), string(b), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("%w: publish roster: %v", ErrNoEtcd, err)
	}
	o.view.last, o.view.lastL = b, lease
	return nil
}
