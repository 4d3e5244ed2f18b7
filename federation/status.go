package federation

import "sort"

// Peers lists the links to peer hubs, sorted by hub id.
func (f *Federation) Peers() []LinkStatus {
	if f == nil {
		return nil
	}
	links := f.allLinks()
	out := make([]LinkStatus, 0, len(links))
	for _, l := range links {
		out = append(out, l.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out
}

// PeerReachable reports whether the link to peer is up.
func (f *Federation) PeerReachable(peer string) bool {
	l := f.link(peer)
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mode != linkDown
}

// NamespaceStatus is one row of synapse ns list.
type NamespaceStatus struct {
	Resolution
	// Reachable says the owner can be reached: true for a local namespace,
	// the link's state for a remote one, false otherwise.
	Reachable bool `json:"reachable"`
}

// Status is the federation as synapse ns list and synapse status show it.
type Status struct {
	HubID      string            `json:"hub_id"`
	Governed   bool              `json:"governed"`
	Namespaces []NamespaceStatus `json:"namespaces"`
	Peers      []LinkStatus      `json:"peers"`
	Contested  []Resolution      `json:"contested"`
	Forwarded  int64             `json:"forwarded"`
	Served     int64             `json:"served"`
	Failed     int64             `json:"forward_failures"`
	// Warning is set when the hub has peers but no ownership map: it then
	// grants locally and its peers give no cross-host exclusion (INV-MH-4).
	Warning string `json:"warning,omitempty"`
	// Fleet: on etcd, the live hubs and this hub's lease deadline.
	Members       []string `json:"members,omitempty"`
	LeaseDeadline float64  `json:"lease_deadline,omitempty"`
}

// Status reports the federation now, resolving also the namespaces of
// extra (the namespaces the hub's agents use).
func (f *Federation) Status(extra []string) Status {
	st := Status{HubID: f.cfg.HubID, Governed: f.Governed(), Peers: f.Peers(), Contested: f.Contested(),
		Forwarded: f.Stats.Forwarded.Load(), Served: f.Stats.Served.Load(), Failed: f.Stats.ForwardFailed.Load()}
	if st.Peers == nil {
		st.Peers = []LinkStatus{}
	}
	st.Namespaces = []NamespaceStatus{}
	if !st.Governed {
		if len(f.allLinks()) > 0 || len(f.cfg.PeerTokens) > 0 {
			st.Warning = "this hub has peers but no --namespace-owner map: it grants every claim locally, and hubs without a shared map give no cross-host mutual exclusion (INV-MH-4)"
		}
		return st
	}
	seen := map[string]bool{}
	var rs []Resolution
	for _, r := range f.auth.Known() {
		seen[r.Namespace] = true
		rs = append(rs, r)
	}
	for _, ns := range extra {
		if !seen[ns] {
			seen[ns] = true
			rs = append(rs, f.auth.Resolve(ns))
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Namespace < rs[j].Namespace })
	fleet, _ := f.auth.(Fleet)
	if fleet != nil {
		st.Members, st.LeaseDeadline = fleet.Members(), fleet.LeaseDeadline()
	}
	for _, r := range rs {
		ns := NamespaceStatus{Resolution: r}
		switch r.Outcome {
		case Local:
			ns.Reachable = true
		case Remote:
			ns.Reachable = f.PeerReachable(r.Owner) && f.isClaimPeer(r.Owner) || fleet != nil && fleet.Live(r.Owner)
		}
		st.Namespaces = append(st.Namespaces, ns)
	}
	return st
}
