package hub

// The hub's side of a fleet's reads (issue 22): with Config.Fleet, state,
// board and who answer for every hub of the fleet — claims and board
// tasks range-read from etcd at one revision (federation.FleetView), the
// other hubs' agents from the rosters they publish — and this hub
// publishes its own roster. Without Config.Fleet nothing here runs and a
// hub answers for itself, as before.

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/delivery"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/wire"
)

// RosterEvery is how often a fleet hub publishes its roster when it
// changed: the lag of another hub's `who` behind a connect or a
// disconnect here (plus one etcd watch round, about a millisecond).
var RosterEvery = 100 * time.Millisecond

// fleetReadTimeout bounds one fleet-wide read against etcd.
var fleetReadTimeout = 5 * time.Second

// fleetRead reads the fleet's claims and board at one revision. The
// caller released its socket first (a network wait).
func (h *Hub) fleetRead(ctx context.Context) (federation.FleetSnapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, fleetReadTimeout)
	defer cancel()
	t0 := h.now()
	snap, err := h.cfg.Fleet.Snapshot(ctx)
	h.m.fleetReadSeconds.Observe(h.now() - t0)
	return snap, err
}

// fleetUnavailable refuses a fleet-wide read that etcd did not answer.
func (s *session) fleetUnavailable(sender string, err error) {
	s.fail(sender, "fleet_unavailable", "The fleet's state could not be read from etcd ("+err.Error()+"): nothing is shown rather than one hub's part of it. Retry shortly; 'synapse doctor' checks the hub's etcd.")
}

// remoteAgents are the agents bound on the other hubs and not here,
// sorted (Hub.mu held).
func (h *Hub) remoteAgentsLocked() []federation.FleetAgent {
	if h.cfg.Fleet == nil {
		return nil
	}
	all := h.cfg.Fleet.Agents()
	out := all[:0:0]
	for i, a := range all {
		if h.reg.byName[a.Name] != nil || i > 0 && all[i-1].Name == a.Name {
			continue // here, or on two hubs while it moves: shown once
		}
		out = append(out, a)
	}
	return out
}

// publishRoster publishes this hub's bound names every RosterEvery while
// they change (and once a second regardless, which writes nothing unless
// the hub's lease changed), until ctx ends.
func (h *Hub) publishRoster(ctx context.Context) {
	tick := time.NewTicker(RosterEvery)
	defer tick.Stop()
	var gen uint64
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		g := h.reg.gen.Load()
		if g == gen && time.Since(last) < time.Second {
			continue
		}
		h.mu.Lock()
		now := h.now()
		agents := make([]federation.FleetAgent, 0, len(h.reg.online))
		for _, n := range h.reg.online {
			a := federation.FleetAgent{Name: n, LastSeen: h.reg.lastSeen[n]}
			if s := h.reg.byName[n]; s != nil {
				a.Roles = slices.Clone(s.roles)
				a.Live = now-s.lastReaction <= livenessWindow || identity(n) != n && now-a.LastSeen <= sidecarWindow
			}
			agents = append(agents, a)
		}
		h.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, fleetReadTimeout)
		err := h.cfg.Fleet.PublishAgents(pctx, agents)
		cancel()
		if err != nil {
			h.log.Debug("hub: roster not published; retried", "err", err)
			continue
		}
		gen, last = g, time.Now()
	}
}

// mergeAgents appends the other hubs' agents to state_snapshot's agents
// list (a JSON array of this hub's), each with its hub_id, and keeps the
// list sorted by name.
func mergeAgents(local []byte, remote []federation.FleetAgent) []byte {
	var items []json.RawMessage
	_ = json.Unmarshal(local, &items)
	type entry struct {
		name string
		raw  []byte
	}
	elsewhere := map[string]bool{}
	for _, a := range remote {
		elsewhere[a.Name] = true
	}
	all := make([]entry, 0, len(items)+len(remote))
	for _, it := range items {
		var a struct {
			Agent string `json:"agent"`
		}
		_ = json.Unmarshal(it, &a)
		if !elsewhere[a.Agent] { // offline here, bound on another hub now
			all = append(all, entry{a.Agent, it})
		}
	}
	for _, a := range remote {
		all = append(all, entry{a.Name, wire.Object().Str("agent", a.Name).Float("last_seen", a.LastSeen).Str("hub_id", a.Hub).Bytes()})
	}
	slices.SortStableFunc(all, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	return wire.List(nil, all, func(b []byte, e entry) []byte { return append(b, e.raw...) })
}

// fleetPartitionLocked is partitionLocked for a letter the fleet carries
// to identity to: its sockets here, and its names on the other hubs as
// their rosters say (live as judged there, at most a second ago). So a
// receipt says delivered wherever the addressee is connected (Hub.mu).
func (h *Hub) fleetPartitionLocked(to, sender string, now float64) delivery.Partition {
	p := h.partitionLocked(to, sender, now)
	if h.cfg.Fleet == nil {
		return p
	}
	for _, a := range h.remoteAgentsLocked() {
		if identity(a.Name) != to || a.Name == sender {
			continue
		}
		if !slices.Contains(p.Matched, to) {
			p.Matched = append(p.Matched, to)
			p.Caps[to] = "unknown"
		}
		if a.Live && !slices.Contains(p.Live, to) {
			p.Live = append(p.Live, to)
			p.Stale = slices.DeleteFunc(p.Stale, func(n string) bool { return n == to })
		} else if !a.Live && !slices.Contains(p.Live, to) && !slices.Contains(p.Stale, to) {
			p.Stale = append(p.Stale, to)
		}
	}
	return p
}
