package hub

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/sequencer"
	"github.com/synapse-hub/synapse/transport"
	"github.com/synapse-hub/synapse/wire"
)

// Registry bounds and windows.
const (
	maxLastSeen        = 4096 // state_snapshot.agents (the reference never prunes)
	takeoverCooldown   = 2.0  // seconds between two takeovers of a name
	takeoverWindow     = 30.0 // seconds in which the 5th takeover quarantines
	maxTakeoverRecords = 1024 // damping records kept before idle ones are swept
	takeoverBurst      = 5
	takeoverQuarantine = 60.0
	livenessWindow     = 90.0 // a reaction this recent proves a seat live
	activityStep       = 10.0 // seconds between two of an agent's dashboard activity events: liveness is shown to this
)

// registry is the hub's connection-side state, guarded by Hub.mu.
type registry struct {
	gen           atomic.Uint64 // bumped at every change of the online list (the fleet's roster, fleetview.go)
	sessions      map[*session]struct{}
	unauthed      int // sessions not yet authenticated (a secured hub\'s pre-auth window)
	perHost       map[string]int
	byName        map[string]*session
	byProject     map[string]map[string]struct{} // project → bound names in it (recipients.go)
	byRole        map[string]map[string]struct{} // role → bound names holding it (recipients.go)
	roleKeys      []string                       // byRole's keys, sorted (recipients.go)
	fullFanout    map[*session]struct{}          // bound sockets with the full fan-out (recipients.go)
	refPresence   map[*session]struct{}          // bound sockets with the reference's presence form (presence.go)
	broadcastMark uint64                         // numbers scoped broadcasts, to mark a socket reached once (recipients.go)
	chatMark      uint64                         // numbers recipient resolutions of chats, to mark a socket reached once (recipients.go)
	lastSeen      map[string]float64
	offline       []offlineName // names in the order they went offline (touchLocked)
	takeovers     map[string]*damping
	cards         map[string]*card
	leases        map[string]*nameLease // name-ownership leases (namelease.go)

	online     []string                     // bound names, sorted; replaced on change (presence.go)
	onlineJSON []byte                       // online encoded, nil until asked for after a change
	presence   [presenceForms]presenceBatch // what each form's sockets have not been told yet

	presenceChanges uint64 // joins and leaves so far
}

func (r *registry) init() {
	r.sessions = make(map[*session]struct{})
	r.perHost = make(map[string]int)
	r.byName = make(map[string]*session)
	r.byProject = make(map[string]map[string]struct{})
	r.byRole = make(map[string]map[string]struct{})
	r.fullFanout = make(map[*session]struct{})
	r.refPresence = make(map[*session]struct{})
	r.lastSeen = make(map[string]float64)
	r.takeovers = make(map[string]*damping)
	r.cards = make(map[string]*card)
	r.leases = make(map[string]*nameLease)
	for f := range r.presence {
		r.presence[f] = presenceBatch{form: presenceForm(f), seq: 1}
	}
}

// damping is a name's takeover history (PROTOCOL.md §1.7).
type damping struct {
	times           []float64 // successful takeovers within takeoverWindow
	quarantineUntil float64
}

// idle reports whether the damping record no longer affects anything: no
// quarantine in force and no takeover within the window.
func (d *damping) idle(now float64) bool {
	return now >= d.quarantineUntil && (len(d.times) == 0 || now-d.times[len(d.times)-1] >= takeoverWindow)
}

// sweepTakeoversLocked forgets idle damping records once there are many,
// so names that once took over do not accumulate forever.
func (r *registry) sweepTakeoversLocked(now float64) {
	if len(r.takeovers) < maxTakeoverRecords {
		return
	}
	for name, d := range r.takeovers {
		if d.idle(now) {
			delete(r.takeovers, name)
		}
	}
}

// check decides a takeover of the name at now: "" admits it (and records
// it), otherwise the close reason.
func (d *damping) check(now float64) string {
	if now < d.quarantineUntil {
		return "takeover quarantine"
	}
	if n := len(d.times); n > 0 && now-d.times[n-1] < takeoverCooldown {
		return "takeover cooldown"
	}
	kept := d.times[:0]
	for _, t := range d.times {
		if now-t < takeoverWindow {
			kept = append(kept, t)
		}
	}
	d.times = kept
	if len(d.times)+1 >= takeoverBurst {
		d.times = d.times[:0]
		d.quarantineUntil = now + takeoverQuarantine
		return "takeover quarantine"
	}
	d.times = append(d.times, now)
	return ""
}

// reserved names may never be bound (PROTOCOL.md §1.4 step 4).
func reserved(name string) bool {
	switch strings.ToLower(name) {
	case "synapsehub", "synapse", "system":
		return true
	}
	return false
}

// identity maps a sidecar name (X-rx, X-pane-rx) to the identity it serves.
func identity(name string) string { return wire.Identity(name) }

// hasLiveSidecar reports whether a sidecar of identity id is connected
// (Hub.mu).
func (r *registry) hasLiveSidecar(id string) bool {
	for _, n := range wire.Sidecars(id) {
		if r.byName[n] != nil {
			return true
		}
	}
	return false
}

// admit applies the admission limits to a new socket and, on an open hub,
// sends its welcome (PROTOCOL.md §1.4).
func (h *Hub) admit(s *session) (int, string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closing.Load():
		return transport.StatusGoingAway, "hub shutting down", false
	case len(h.reg.sessions) >= h.cfg.MaxClients:
		return 4013, "hub at capacity", false
	case h.cfg.MaxConnectionsPerHost > 0 && h.reg.perHost[s.host] >= h.cfg.MaxConnectionsPerHost:
		return 4015, "too many connections from host", false
	case !s.authed && h.reg.unauthed >= h.cfg.MaxUnauthClients:
		return 4014, "too many unauthenticated connections", false
	}
	if !s.authed {
		h.reg.unauthed++
	}
	h.reg.sessions[s] = struct{}{}
	h.reg.perHost[s.host]++
	s.counted.Store(true)
	h.liveSockets.Add(1)
	if s.authed {
		s.send(s.welcomeLocked())
	}
	return 0, "", true
}

// authLocked marks s authenticated: it leaves the pre-auth count.
func (h *Hub) authLocked(s *session) {
	if !s.authed {
		s.authed = true
		h.reg.unauthed--
	}
}

// welcomeLocked encodes s's welcome; s then knows the whole online list.
func (s *session) welcomeLocked() []byte {
	h := s.h
	f := wire.NewFrame("welcome", "self", "Welcome to Synapse", h.now(), h.cfg.HubID).
		Int("connected_clients", h.liveSockets.Load())
	if s.presenceForm() == presenceNone {
		// Without the list; should it ask for the compact form later, its
		// next compact frame carries the list (presenceSeq never matches).
		s.presenceSeq = 0
		f.Int("online_count", int64(len(h.reg.online)))
	} else {
		s.presenceSeq = h.reg.presence[presenceCompact].seq
		f.Raw("online_agents", h.reg.onlineJSONLocked())
	}
	return f.Int("protocol_version", wire.ProtocolVersion).Strs("features", h.features).Bytes()
}

// register runs the identity gates of one frame (PROTOCOL.md §1.4 steps
// 4 and 6–11; step 5, the token, is tokenGate's): reserved names, binding or takeover, and the per-frame
// presence bookkeeping. It reports false when the socket is being closed.
func (s *session) register(sender string, in *wire.Inbound, typ string) bool {
	h := s.h
	if reserved(sender) {
		s.reply(s.frame("name_conflict", sender, "Name '"+sender+"' is reserved for hub protocol provenance. Choose a non-reserved agent name.").Bytes())
		s.closeWith(4009, "reserved identity")
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	in.Delete("token") // checked by tokenGate, which every frame passed first
	now := h.now()
	first := s.name == ""
	if !first && s.name != sender {
		s.reply(s.frame("name_conflict", s.name, "Sender name switch denied: '"+s.name+"' -> '"+sender+"'. Reconnect with a new --name.").Bytes())
		s.closeWith(4009, "name switch")
		return false
	}
	if typ == "heartbeat" || first {
		// Before the bind: the join's presence_update already has the
		// newcomer's form.
		s.registrationFieldsLocked(in)
	}
	if first && !s.bindLocked(sender, in, now) {
		return false
	}
	if first && len(s.ignoredRoles) > 0 {
		s.tellRolesIgnoredLocked()
	}
	h.reg.touchLocked(sender, now)
	if first || typ != "heartbeat" {
		s.lastReaction = now
		if now-s.shownAt >= activityStep && h.feed.Listening() {
			s.shownAt = now
			if !first { // a join's presence event says it already
				h.feed.Activity(sender, now)
			}
		}
		if h.dead.ClearLocked(sender, now) {
			s.deadCleared = max(h.mb.LastDirectedLocked(), 1)
		}
	}
	return true
}

// bindLocked binds the first frame's sender to s: a new name, or a takeover
// of a live one (damped), or a refusal.
func (s *session) bindLocked(name string, in *wire.Inbound, now float64) bool {
	h := s.h
	if s.leaseRefusesLocked(name, in.Str("owner_lease"), now) { // whatever the takeover flag
		s.reply(s.frame("name_conflict", name, "Name '"+name+"' is owned by a live name lease. Reconnect with its owner_lease, or use another --name.").Bytes())
		s.closeWith(NameOwnedCloseCode, "name owned")
		return false
	}
	old := h.reg.byName[name]
	if old != nil {
		if !in.Truthy("takeover") {
			s.reply(s.frame("name_conflict", name, "Name '"+name+"' is already online from another session. Use a unique --name.").Bytes())
			s.closeWith(4009, "name conflict")
			return false
		}
		d := h.reg.takeovers[name]
		if d == nil {
			h.reg.sweepTakeoversLocked(now)
			d = &damping{}
			h.reg.takeovers[name] = d
		}
		if reason := d.check(now); reason != "" {
			if reason == "takeover quarantine" {
				h.m.takeoverQuarantines.Inc()
			}
			s.closeWith(4014, reason)
			return false
		}
		h.m.takeovers.Inc()
		// Takeover is silent to others: the name stays online throughout.
		old.superseded = true
		old.closeWith(4010, "superseded")
	}
	var welcome []byte
	if !s.authed {
		h.authLocked(s)
		welcome = s.welcomeLocked() // before the bind: online_agents excludes the newcomer
	}
	s.name = name
	h.reg.bind(s)
	h.reg.leaseOnlineLocked(name)
	h.mailboxPresenceLocked(name)
	if welcome != nil {
		s.send(welcome)
	}
	if in.Truthy("lease") {
		s.grantLeaseLocked(name)
	}
	if old == nil {
		h.presenceJoinLocked(s)
	}
	return true
}

// registrationFieldsLocked applies the fields any heartbeat may carry:
// roles, wake capability, fan-out mode, presence form.
func (s *session) registrationFieldsLocked(in *wire.Inbound) {
	// Roles and the fan-out mode are indexed: a bound socket is taken out
	// of the indexes while they change (a superseded socket's late
	// heartbeat is not indexed).
	if bound := s.h.reg.byName[s.name] == s; bound {
		s.h.reg.unindex(s)
		defer s.h.reg.index(s)
	}
	if list, ok := in.Value("roles").([]any); ok {
		roles := make([]string, 0, len(list))
		for _, v := range list {
			if r, ok := v.(string); ok && strings.TrimSpace(r) != "" {
				roles = append(roles, strings.TrimSpace(r))
			}
		}
		slices.Sort(roles)
		name := s.name
		if name == "" { // the first frame, before its bind
			name = strings.TrimSpace(in.Str("sender"))
		}
		kept, ignored := s.grantedRolesLocked(name, slices.Compact(roles)) // issue 23 item 3 (access.go)
		s.roles = kept
		if s.ignoredRoles = ignored; len(ignored) > 0 && s.name != "" { // a first frame's is told after its welcome
			s.tellRolesIgnoredLocked()
		}
	}
	if in.Has("wake_capability") {
		switch w := in.Str("wake_capability"); w {
		case "direct", "passive", "pane_bridge":
			s.wake = w
		default:
			s.wake = ""
		}
	}
	switch in.Str("fanout") {
	case "scoped":
		s.scoped, s.ownOnly = true, false
	case "own":
		s.scoped, s.ownOnly = true, true
	case "full", "all":
		s.scoped, s.ownOnly = false, false
	}
	if p := in.Str("presence"); validPresence(p) {
		s.presenceAsk = p
	}
}

// offlineName is a name that went offline and when it was last seen then.
type offlineName struct {
	name string
	at   float64
}

// validPresence reports whether p names a presence form a socket may ask for.
func validPresence(p string) bool {
	switch p {
	case "full", "compact", "none":
		return true
	}
	return false
}

// touchLocked records that name was seen, keeping the map bounded (the
// reference never prunes it): past maxLastSeen names, each new one makes
// the hub forget the name that went offline longest ago. Online names are
// never forgotten. O(1) amortised, however many names are online: the
// queue of offline names is read from its head, and a stale entry (a name
// that came back) is skipped there or dropped when the queue is compacted.
func (r *registry) touchLocked(name string, now float64) {
	_, known := r.lastSeen[name]
	r.lastSeen[name] = now
	if known {
		return
	}
	for len(r.lastSeen) > maxLastSeen && len(r.offline) > 0 {
		o := r.offline[0]
		r.offline[0] = offlineName{}
		r.offline = r.offline[1:]
		if r.current(o) {
			delete(r.lastSeen, o.name)
		}
	}
	if len(r.offline) > 2*len(r.lastSeen)+64 {
		r.offline = slices.DeleteFunc(r.offline, func(o offlineName) bool { return !r.current(o) })
	}
}

// wentOfflineLocked queues a freed name for forgetting (touchLocked).
func (r *registry) wentOfflineLocked(name string) {
	if at, ok := r.lastSeen[name]; ok {
		r.offline = append(r.offline, offlineName{name, at})
	}
}

// current reports whether o is still true: its name is offline and was not
// seen since.
func (r *registry) current(o offlineName) bool {
	at, ok := r.lastSeen[o.name]
	return ok && at == o.at && r.byName[o.name] == nil
}

// leave forgets a socket that ended. If it still owned its name the name is
// freed, its live card forgotten, its waits ended, and the others told.
func (h *Hub) leave(s *session) {
	s.uncount()
	h.mu.Lock()
	if _, ok := h.reg.sessions[s]; ok && !s.authed {
		h.reg.unauthed--
	}
	delete(h.reg.sessions, s)
	if h.reg.perHost[s.host]--; h.reg.perHost[s.host] <= 0 {
		delete(h.reg.perHost, s.host)
	}
	name := h.unbindLocked(s)
	h.mu.Unlock()
	h.m.connections.Dec()
	if name != "" {
		h.disconnect(name)
		h.fed.AgentLeft(name)
	}
}

// unbindLocked frees the name s owns, if it still owns one: its live card
// is forgotten, its lease starts its offline clock, and the others are
// told. It returns the name freed ("" if none).
func (h *Hub) unbindLocked(s *session) string {
	if s.name == "" || h.reg.byName[s.name] != s {
		return ""
	}
	name := s.name
	h.reg.unbind(s)
	h.reg.wentOfflineLocked(name)
	h.reg.leaseOfflineLocked(name, h.now())
	if c := h.reg.cards[name]; c != nil && !c.persistent {
		delete(h.reg.cards, name)
	}
	h.presenceLocked(name, false)
	h.mailboxPresenceLocked(name)
	return name
}

// leaveVerb is the additive `leave` verb (feature "leave"): the hub frees
// the name now, confirms with a private `left`, and closes the socket. A
// client that closes after `left` knows its name is free, so the next
// process may bind it at once; after a bare close the name is freed only
// once the close handshake has completed on the hub's side.
func (s *session) leaveVerb(sender string) {
	h := s.h
	h.mu.Lock()
	name := h.unbindLocked(s)
	h.mu.Unlock()
	if name != "" {
		h.disconnect(name)
		h.fed.AgentLeft(name)
	}
	s.reply(s.frame("left", sender, "Left the hub.").Bytes())
	s.closeWith(1000, "left")
}

// unbound reports whether no name is bound to s yet.
func (s *session) unbound() bool {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.name == ""
}

// disconnect ends the waits of an agent whose socket closed.
func (h *Hub) disconnect(name string) {
	if !h.beginSubmit() {
		return
	}
	defer h.submits.Done()
	_, _ = h.seq.Submit(context.Background(), sequencer.Request{Cmd: coord.Disconnect{Agent: name}})
}

// card is an advertised capability card, kept in memory only.
type card struct {
	frame      []byte // the card dict, encoded
	at         float64
	persistent bool
}

// bind makes s the owner of its name, replacing a superseded owner, or
// adds the name to the online list.
func (r *registry) bind(s *session) {
	if old := r.byName[s.name]; old != nil {
		r.unindex(old)
	} else {
		r.setOnline(s.name, true)
	}
	r.byName[s.name] = s
	r.index(s)
}

// unbind frees the name s owns.
func (r *registry) unbind(s *session) {
	delete(r.byName, s.name)
	r.unindex(s)
	r.setOnline(s.name, false)
}

// setOnline adds name to the sorted online list or removes it, in place:
// a connect storm of N names moves O(N) string headers per bind, and
// allocates nothing (a copy per bind was a quarter of a 10,000-agent
// storm's CPU). Nobody keeps the list past Hub.mu; its encoding, which
// frames do keep, is made anew after a change (onlineJSONLocked).
func (r *registry) setOnline(name string, on bool) {
	i, found := slices.BinarySearch(r.online, name)
	if found == on {
		return
	}
	if on {
		r.online = slices.Insert(r.online, i, name)
	} else {
		r.online = slices.Delete(r.online, i, i+1)
	}
	r.onlineJSON = nil
	r.gen.Add(1)
}

// index adds the bound name of s under its project and its roles, s to the
// full fan-out set unless it asked for scoped fan-out, and to the
// reference's presence set unless it asked for another form.
func (r *registry) index(s *session) {
	if !s.scoped {
		r.fullFanout[s] = struct{}{}
	}
	if s.presenceForm() == presenceReference {
		r.refPresence[s] = struct{}{}
	}
	if p := coord.NamespaceOf(s.name); p != "" {
		addName(r.byProject, p, s.name)
	}
	for _, role := range s.roles {
		if r.byRole[role] == nil {
			i, _ := slices.BinarySearch(r.roleKeys, role)
			r.roleKeys = slices.Insert(r.roleKeys, i, role)
		}
		addName(r.byRole, role, s.name)
	}
}

// unindex removes what index added for s.
func (r *registry) unindex(s *session) {
	delete(r.fullFanout, s)
	delete(r.refPresence, s)
	if p := coord.NamespaceOf(s.name); p != "" {
		removeName(r.byProject, p, s.name)
	}
	for _, role := range s.roles {
		removeName(r.byRole, role, s.name)
		if r.byRole[role] == nil {
			if i, found := slices.BinarySearch(r.roleKeys, role); found {
				r.roleKeys = slices.Delete(r.roleKeys, i, i+1)
			}
		}
	}
}

func addName(idx map[string]map[string]struct{}, key, name string) {
	set := idx[key]
	if set == nil {
		set = make(map[string]struct{})
		idx[key] = set
	}
	set[name] = struct{}{}
}

func removeName(idx map[string]map[string]struct{}, key, name string) {
	if set := idx[key]; set != nil {
		delete(set, name)
		if len(set) == 0 {
			delete(idx, key)
		}
	}
}
