package hub

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/delivery"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/wire"
)

// Capability card lifetimes (PROTOCOL.md §2.13, §3.2).
const (
	cardTTL           = 300.0
	persistentCardTTL = 86400.0
)

func (s *session) stateRequest(sender string) {
	h := s.h
	// Only the stored (immutable) pointers are gathered on the sequencer
	// goroutine; sorting and encoding happen here, so a large state does
	// not stall commits while it is written out.
	type refs struct {
		claims []*coord.Claim
		offers []*coord.Offer
		ttl    float64
		at     float64
	}
	fleet := h.cfg.Fleet != nil // the fleet's claims, from etcd (fleetview.go)
	v, err := h.seq.Query(context.Background(), func(st *coord.State) any {
		if fleet {
			return refs{nil, st.Offers(), st.Limits().ResourceTTL, h.now()}
		}
		return refs{st.ClaimPointers(), st.Offers(), st.Limits().ResourceTTL, h.now()}
	})
	r, ok := v.(refs)
	if err != nil || !ok {
		s.fail(sender, "shutting_down", "Hub is shutting down.")
		return
	}
	if fleet {
		s.releaseBeforeWait()
		snap, err := h.fleetRead(context.Background())
		if err != nil {
			s.fleetUnavailable(sender, err)
			return
		}
		r.claims, r.at = snap.Claims, h.now()
	}
	slices.SortFunc(r.claims, func(a, b *coord.Claim) int { return strings.Compare(a.TaskID, b.TaskID) })
	live := slices.DeleteFunc(r.claims, func(c *coord.Claim) bool { return !c.Live(r.at) }) // expiry runs first (§2.12)
	o := s.observer(sender)                                                                 // with access rules, only what the viewer may observe (access.go)
	if o.filtering() {
		live = slices.DeleteFunc(live, func(c *coord.Claim) bool { return !o.sees("claim", c.TaskID, identity(c.Owner)) })
		r.offers = slices.DeleteFunc(r.offers, func(of *coord.Offer) bool { return !o.sees("resource", of.Name, of.Agent) })
	}
	var claims []byte
	if fleet {
		claims = h.stateClaims.list(live)
	} else {
		claims = wire.List(nil, live, func(b []byte, c *coord.Claim) []byte { return wire.AppendClaim(b, c, false) })
	}
	offers := slices.DeleteFunc(r.offers, func(o *coord.Offer) bool { return r.ttl > 0 && o.OfferedAt+r.ttl <= r.at })
	resources := wire.List(nil, offers, func(b []byte, o *coord.Offer) []byte {
		return append(b, wire.Object().Str("agent", o.Agent).Str("kind", o.Kind).Str("name", o.Name).
			Int("capacity", int64(o.Capacity)).Append("meta", func(b []byte) []byte { return wire.AppendObject(b, o.Meta) }).Bytes()...)
	})
	h.mu.Lock()
	now := h.now()
	names := make([]string, 0, len(h.reg.lastSeen))
	for n := range h.reg.lastSeen {
		if o.sees("agent", n, n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	agents := wire.List(nil, names, func(b []byte, n string) []byte {
		f := wire.Object().Str("agent", n).Float("last_seen", h.reg.lastSeen[n])
		if fleet {
			f.Str("hub_id", h.cfg.HubID)
		}
		return append(b, f.Bytes()...)
	})
	if remote := h.remoteAgentsLocked(); len(remote) > 0 { // the other hubs' agents, each with its hub
		remote = slices.DeleteFunc(remote, func(a federation.FleetAgent) bool { return !o.sees("agent", a.Name, a.Name) })
		agents = mergeAgents(agents, remote)
	}
	dls := h.dead.ListLocked()
	h.mu.Unlock()
	dls = slices.DeleteFunc(dls, func(d delivery.DeadLetter) bool { return !o.sees("agent", d.Target, d.Target) })
	sort.Slice(dls, func(i, j int) bool { // worst first
		if dls[i].Count != dls[j].Count {
			return dls[i].Count > dls[j].Count
		}
		return dls[i].Target < dls[j].Target
	})
	dead := wire.List(nil, dls, func(b []byte, d delivery.DeadLetter) []byte {
		return append(b, wire.Object().Str("target", d.Target).Int("count", d.Count).
			Float("last_ts", d.LastTS).Str("last_sender", d.LastSender).Bytes()...)
	})
	sf := wire.Object().Raw("active_claims", claims).Raw("agents", agents).Raw("resources", resources).
		Float("generated_at", now).Raw("dead_letters", dead).Raw("pending_relay_approvals", []byte("[]"))
	if obs, ok := h.observed(); ok { // additive, with --multihub-watch only: advisory (INV-MH-2)
		sf.Append("observed_claims", func(b []byte) []byte { return appendObservedClaims(b, obs.Claims) })
	}
	snap := sf.Bytes()
	h.m.framesOut.WithLabelValues("state_snapshot").Inc()
	s.reply(s.frame("state_snapshot", sender, "State snapshot").Raw("snapshot", snap).Bytes())
}

// ping is the additive `ping` verb (feature "ping"): a private `pong`,
// echoing the frame's ping_id if it has one, that costs the hub nothing
// however many agents are online. A client that sends it right after its
// registration knows, on the pong, that the registration was handled —
// frames of one socket are handled in order — without asking for the
// whole roster (who_request) as its ack. A hub without the verb answers
// "Unknown message type 'ping'.", which proves the same.
func (s *session) ping(sender string, in *wire.Inbound) {
	f := s.frame("pong", sender, "pong")
	if id := in.Str("ping_id"); id != "" {
		f.Str("ping_id", id)
	}
	s.reply(f.Bytes())
}

func (s *session) whoRequest(sender string) {
	h := s.h
	o := s.observer(sender) // with access rules, only the agents the viewer may observe (access.go)
	h.mu.Lock()
	now := h.now()
	online := h.reg.onlineLocked()
	onlineJSON := h.reg.onlineJSONLocked() // kept: a new one is made after a change
	if o.filtering() {
		online = slices.DeleteFunc(slices.Clone(online), func(n string) bool { return !o.sees("agent", n, n) })
		onlineJSON, _ = json.Marshal(online)
	}
	roles := wire.Object()
	live := wire.Object()
	wakes := wire.Object()
	anyWake := false
	for _, n := range online {
		rs := h.reg.byName[n]
		if len(rs.roles) > 0 {
			roles.Strs(n, rs.roles)
		}
		if rs.wake != "" {
			wakes.Str(n, rs.wake)
			anyWake = true
		}
		if identity(n) != n {
			continue // sidecars are not seats
		}
		waiter := h.reg.hasLiveSidecar(n)
		age := now - rs.lastReaction
		live.Raw(n, wire.Object().Bool("proven_live", age <= livenessWindow || waiter).
			Bool("has_live_waiter", waiter).Float("last_reaction_age", age).Bytes())
	}
	clients := int(h.liveSockets.Load())
	var hubs *wire.Frame
	if h.cfg.Fleet != nil { // the other hubs' agents too, and the hub each is on (fleetview.go)
		hubs = wire.Object()
		all := slices.Clone(online)
		for _, n := range online {
			hubs.Str(n, h.cfg.HubID)
		}
		for _, a := range h.remoteAgentsLocked() {
			if !o.sees("agent", a.Name, a.Name) {
				continue
			}
			all = append(all, a.Name)
			hubs.Str(a.Name, a.Hub)
			if len(a.Roles) > 0 {
				roles.Strs(a.Name, a.Roles)
			}
		}
		slices.Sort(all)
		onlineJSON, _ = json.Marshal(all)
	}
	h.mu.Unlock()
	f := s.frame("who_snapshot", sender, "Who snapshot").Raw("online_agents", onlineJSON).Raw("agent_roles", roles.Bytes()).
		Int("connected_clients", int64(clients)).Str("hub_version", h.cfg.Version).Str("config_epoch", h.epoch)
	if hubs != nil {
		f.Raw("agent_hubs", hubs.Bytes())
	}
	if h.cfg.Journal != nil {
		f.Raw("mailbox_pending", o.filterCounts(mailboxView{h}.pendingJSON()))
	} else {
		f.Null("mailbox_pending")
	}
	f.Raw("agent_liveness", live.Bytes())
	if obs, ok := h.observed(); ok { // additive: owners of claims seen in peers' logs, as name@HUB
		f.Strs("observed_agents", observedAgents(obs.Claims))
	}
	if anyWake {
		f.Raw("wake_capabilities", wakes.Bytes())
	}
	h.m.framesOut.WithLabelValues("who_snapshot").Inc()
	s.reply(f.Bytes())
}

func (s *session) boardRequest(sender string) {
	// As for state_request: gather on the sequencer goroutine, sort and
	// encode here.
	type refs struct {
		tasks []*coord.BoardTask
		notes []*coord.Note
	}
	fleet := s.h.cfg.Fleet != nil // the fleet's board, from etcd (fleetview.go)
	v, err := s.h.seq.Query(context.Background(), func(st *coord.State) any {
		if fleet {
			return refs{nil, st.Notes()}
		}
		return refs{st.BoardTaskPointers(), st.Notes()}
	})
	r, ok := v.(refs)
	if fleet && err == nil && ok {
		s.releaseBeforeWait()
		snap, ferr := s.h.fleetRead(context.Background())
		if ferr != nil {
			s.fleetUnavailable(sender, ferr)
			return
		}
		r.tasks = snap.Tasks
	}
	var board []byte
	if err == nil && ok {
		slices.SortFunc(r.tasks, func(a, b *coord.BoardTask) int { return strings.Compare(a.TaskID, b.TaskID) })
		ready := coord.ReadyOf(r.tasks)
		if o := s.observer(sender); o.filtering() { // only what the viewer may observe (access.go)
			r.tasks = slices.DeleteFunc(r.tasks, func(t *coord.BoardTask) bool { return !o.sees("board", t.TaskID, identity(t.CreatedBy)) })
			ready = slices.DeleteFunc(ready, func(id string) bool {
				_, found := slices.BinarySearchFunc(r.tasks, id, func(t *coord.BoardTask, id string) int { return strings.Compare(t.TaskID, id) })
				return !found
			})
			r.notes = slices.DeleteFunc(slices.Clone(r.notes), func(n *coord.Note) bool { return !o.sees("board", n.TaskID, identity(n.Author)) })
		}
		board = wire.Object().
			Append("tasks", func(b []byte) []byte {
				return wire.List(b, r.tasks, func(b []byte, t *coord.BoardTask) []byte { return wire.AppendTask(b, t, "") })
			}).
			Strs("ready", ready).
			Append("progress", func(b []byte) []byte {
				return wire.List(b, r.notes, func(b []byte, n *coord.Note) []byte { return wire.AppendNote(b, n) })
			}).Bytes()
	}
	if board == nil {
		s.fail(sender, "shutting_down", "Hub is shutting down.")
		return
	}
	s.h.m.framesOut.WithLabelValues("board_snapshot").Inc()
	s.reply(s.frame("board_snapshot", sender, "Board snapshot").Raw("board", board).Bytes())
}

// advertise stores a capability card (PROTOCOL.md §2.13) and broadcasts it.
func (s *session) advertise(sender string, in *wire.Inbound) {
	h := s.h
	persist, _, ok := in.Bool("persist")
	if !ok {
		s.fail(sender, "malformed_frame", "Malformed frame: 'persist' must be a boolean.")
		return
	}
	dispatchable, hasDispatchable, ok := in.Bool("dispatchable")
	if !ok {
		s.fail(sender, "malformed_frame", "Malformed frame: 'dispatchable' must be a boolean.")
		return
	}
	agent := sender
	if a := strings.TrimSpace(in.Str("agent")); a != "" {
		if a != sender && a != identity(sender) {
			s.fail(sender, "capability_identity", "Capability registration for another identity requires the connection to be that identity or a recognised receiver sidecar.")
			return
		}
		agent = a
	}
	if persist && coord.NamespaceOf(agent) == "" {
		s.fail(sender, "capability_identity", "Persistent capability registration requires a project-scoped seat identity (<project>/<seat>).")
		return
	}
	now := h.now()
	var contracts []any
	if list, ok := in.Value("contracts").([]any); ok {
		for _, c := range list {
			if _, ok := c.(map[string]any); ok {
				contracts = append(contracts, c)
			}
		}
	}
	if contracts == nil {
		contracts = []any{}
	}
	sig, _ := in.Value("signature").(map[string]any)
	if sig == nil {
		sig = map[string]any{}
	}
	meta, _ := in.Value("meta").(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	cf := wire.Object().Str("agent", agent).Str("description", in.Text("description")).
		Strs("skills", in.StringItems("skills")).Strs("task_classes", in.StringItems("task_classes")).
		Str("model", in.Text("model")).Str("project", coord.NamespaceOf(agent)).
		Str("manifest_digest", in.Str("manifest_digest")).
		Append("contracts", func(b []byte) []byte { return wire.AppendAny(b, contracts, nil) }).
		Append("meta", func(b []byte) []byte { return wire.AppendAny(b, meta, nil) }).
		Append("signature", func(b []byte) []byte { return wire.AppendAny(b, sig, nil) }).
		Raw("verification", wire.Object().Str("detail", "card is unsigned and remains advisory discovery").
			Str("result", "missing_signature").Bytes()).
		Float("advertised_at", now)
	if persist {
		cf.Bool("persistent", true)
		if hasDispatchable {
			cf.Bool("dispatchable", dispatchable)
		}
	}
	cardBytes := cf.Bytes()
	b := s.frame("capability_advertised", "all", "Capability advertised by "+agent).Str("agent", agent).Raw("card", cardBytes).Bytes()
	h.mu.Lock()
	h.reg.cards[agent] = &card{frame: cardBytes, at: now, persistent: persist}
	h.broadcastLocked(b, claimAudience("", agent), "capability_advertised")
	h.mu.Unlock()
}

func (s *session) manifestRequest(sender string) {
	h := s.h
	h.mu.Lock()
	now := h.now()
	names := make([]string, 0, len(h.reg.cards))
	for n, c := range h.reg.cards {
		ttl := cardTTL
		if c.persistent {
			ttl = persistentCardTTL
		}
		if now-c.at > ttl {
			delete(h.reg.cards, n)
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	list := wire.List(nil, names, func(b []byte, n string) []byte { return append(b, h.reg.cards[n].frame...) })
	h.mu.Unlock()
	h.m.framesOut.WithLabelValues("manifest_snapshot").Inc()
	s.reply(s.frame("manifest_snapshot", sender, "Manifest snapshot").Raw("manifest", list).Bytes())
}
