package federation

import (
	"context"
	"slices"
	"sort"

	"github.com/synapse-hub/synapse/pyjson"
)

// Authority decides which hub serves a namespace's claims. The hub asks it
// on every claim-family verb. Static (a configured map) implements it; the
// etcd coordinator implements it with lease-backed ownership.
type Authority interface {
	// Resolve routes ns now. Only Local grants; Remote names the Owner a
	// request is forwarded to; every other outcome refuses (INV-CR-4,
	// INV-MH-3: deny-by-default).
	Resolve(ns string) Resolution
	// Known resolves every namespace the authority has an opinion on,
	// sorted by namespace (synapse ns list).
	Known() []Resolution
	// Declared is the ownership this hub tells its peers: namespace →
	// owner hub id, as this hub believes it.
	Declared() map[string]string
}

// Mover is an Authority that moves namespaces between hubs on request (the
// fleet on etcd): ns move and ns drain.
type Mover interface {
	// Move hands ns to hub to and returns once to serves it.
	Move(ctx context.Context, ns, to string) error
	// Drain moves every namespace of hub elsewhere and says where each went.
	Drain(ctx context.Context, hub string) (map[string]string, error)
}

// Fleet is an Authority backed by a fleet's membership (etcd): it knows
// which hubs are alive and this hub's lease deadline.
type Fleet interface {
	// Members lists the live hubs' ids, sorted.
	Members() []string
	// Live reports whether hub holds a live registration.
	Live(hub string) bool
	// LeaseDeadline is this hub's local lease deadline (unix seconds).
	LeaseDeadline() float64
	// Serving reports whether this hub may serve now (not fenced).
	Serving() bool
}

// Static is the authority of a configured --namespace-owner map, contested
// by what peers assert: a peer that declares itself owner of a namespace
// the map gives to another hub, or whose log shows live claims there.
type Static struct {
	own       *Ownership
	asserting func(ns string) []string
}

// NewStatic is the authority of own, with no peers asserting anything.
func NewStatic(own *Ownership) *Static {
	return &Static{own: own, asserting: func(string) []string { return nil }}
}

// Resolve implements Authority.
func (s *Static) Resolve(ns string) Resolution { return s.own.Resolve(ns, s.asserting(ns)) }

// Known implements Authority.
func (s *Static) Known() []Resolution {
	nss := s.own.Namespaces()
	out := make([]Resolution, 0, len(nss))
	for _, ns := range nss {
		out = append(out, s.Resolve(ns))
	}
	return out
}

// Declared implements Authority.
func (s *Static) Declared() map[string]string {
	m := make(map[string]string, len(s.own.owners))
	for ns, owner := range s.own.owners {
		m[ns] = owner
	}
	return m
}

// asserting is the set of hubs asserting ns: peers whose declared map
// makes themselves its owner, and peers whose observed log shows a live
// claim in it.
func (f *Federation) asserting(ns string) []string {
	f.mu.Lock()
	var out []string
	for peer, owners := range f.declared {
		if ownerIn(owners, ns) == peer {
			out = append(out, peer)
		}
	}
	if f.watch != nil {
		out = append(out, f.watch.asserting[ns]...)
	}
	f.mu.Unlock()
	if len(out) < 2 {
		return out
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func ownerIn(owners map[string]string, ns string) string {
	if o, ok := owners[ns]; ok {
		return o
	}
	return owners[Wildcard]
}

// reassess resolves every namespace anyone has an opinion on and journals
// what changed: a namespace entering or changing a contest
// (multihub_partition), or leaving one (multihub_heal).
func (f *Federation) reassess() {
	if f.auth == nil {
		return
	}
	f.mu.Lock()
	nss := map[string]bool{}
	for ns := range f.contested {
		nss[ns] = true
	}
	for _, owners := range f.declared {
		for ns := range owners {
			nss[ns] = true
		}
	}
	if f.watch != nil {
		for ns := range f.watch.asserting {
			nss[ns] = true
		}
	}
	f.mu.Unlock()
	for _, r := range f.auth.Known() {
		nss[r.Namespace] = true
	}
	now := f.host.Now()
	for _, ns := range sortedKeys(nss) {
		r := f.auth.Resolve(ns)
		f.mu.Lock()
		prev, was := f.contested[ns]
		var kind string
		switch {
		case r.Outcome == Partitioned && (!was || !slices.Equal(prev, r.Contesting)):
			f.contested[ns] = r.Contesting
			kind = "multihub_partition"
		case r.Outcome != Partitioned && was:
			delete(f.contested, ns)
			kind = "multihub_heal"
		}
		f.mu.Unlock()
		if kind == "" {
			continue
		}
		b := []byte(`{"namespace":`)
		b = pyjson.AppendString(b, ns)
		b = append(b, `,"owner_hub_id":`...)
		b = pyjson.AppendString(b, r.Owner)
		b = append(b, `,"contesting_hubs":`...)
		b = pyjson.AppendStrings(b, r.Contesting)
		b = append(b, `,"observation_refreshed":`...)
		b = pyjson.AppendBool(b, kind == "multihub_heal")
		b = append(b, `,"observed_at":`...)
		b = pyjson.AppendFloat(b, now)
		b = append(b, '}')
		if kind == "multihub_partition" {
			f.log.Warn("federation: namespace contested; every grant in it is refused", "namespace", ns, "owner", r.Owner, "contesting", r.Contesting)
		} else {
			f.log.Info("federation: namespace contest healed", "namespace", ns, "owner", r.Owner)
		}
		f.host.Record(kind, b)
	}
}

// Contested lists the namespaces in contest now, sorted.
func (f *Federation) Contested() []Resolution {
	if f == nil || f.auth == nil {
		return nil
	}
	f.mu.Lock()
	nss := sortedKeys(f.contested)
	f.mu.Unlock()
	out := make([]Resolution, 0, len(nss))
	for _, ns := range nss {
		out = append(out, f.auth.Resolve(ns))
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
