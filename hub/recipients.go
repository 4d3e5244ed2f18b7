package hub

// Recipient resolution (PROTOCOL.md §2.2 step 7). A target part reaches a
// bound name n when it matches n, the identity n serves as a sidecar, n's
// project, or a role held by n or by that identity (addressedLocked). A
// part without fnmatch metacharacters (wire.Literal) matches only what is
// spelled like it, so the names it reaches are found by lookup:
//
//   - p itself and its sidecars p-rx, p-pane-rx (byName);
//   - the names in project p (byProject);
//   - the names holding role p, and their sidecars (byRole, byName).
//
// A glob part matches only strings that begin with its literal prefix (the
// text before its first metacharacter), and a name's identity and project
// are prefixes of the name, so the names it can reach are found by range:
//
//   - the bound names that begin with the prefix (the sorted online list);
//   - the names holding a role that begins with it, and their sidecars
//     (the sorted role list, byRole, byName).
//
// Each candidate is still checked with addressedLocked, the one definition
// of who a target reaches: the indexes make a target cost O(candidates)
// instead of O(bound sockets), they never change who is reached. Only a
// glob part that begins with a metacharacter ("*/reviewer") is matched
// against every bound name.
//
// The indexes hold exactly the names in byName (bound, not superseded),
// guarded by Hub.mu like the rest of the registry.

import (
	"slices"
	"strings"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/delivery"
	"github.com/synapse-hub/synapse/wire"
)

// recipientsLocked calls reached once for every bound socket that chat
// target t (trimmed) reaches, except the sockets bound to sender.
func (h *Hub) recipientsLocked(t, sender string, reached func(rs *session)) {
	h.reg.chatMark++
	mark := h.reg.chatMark
	try := func(rs *session) {
		if rs == nil || rs.chatMark == mark {
			return
		}
		rs.chatMark = mark
		if rs.name != sender && h.addressedLocked(t, rs) {
			reached(rs)
		}
	}
	if !delivery.LiteralTarget(t) && !wire.PrefixedTarget(t) {
		for _, rs := range h.reg.byName {
			try(rs)
		}
		return
	}
	seat := func(name string) { // the name and its sidecars
		try(h.reg.byName[name])
		for _, sc := range wire.Sidecars(name) {
			try(h.reg.byName[sc])
		}
	}
	for part := range strings.SplitSeq(t, ",") {
		p := strings.TrimSpace(part)
		if p == "" {
			continue
		}
		if !wire.Literal(p) {
			prefix := wire.GlobPrefix(p)
			online := h.reg.online
			for i, _ := slices.BinarySearch(online, prefix); i < len(online) && strings.HasPrefix(online[i], prefix); i++ {
				try(h.reg.byName[online[i]])
			}
			roles := h.reg.roleKeys
			for i, _ := slices.BinarySearch(roles, prefix); i < len(roles) && strings.HasPrefix(roles[i], prefix); i++ {
				for n := range h.reg.byRole[roles[i]] {
					seat(n)
				}
			}
			continue
		}
		seat(p)
		for n := range h.reg.byProject[p] {
			try(h.reg.byName[n])
		}
		for n := range h.reg.byRole[p] {
			seat(n)
		}
	}
}

// audienceLocked calls f once for every socket a broadcast to aud
// reaches: the bound sockets with the full fan-out, and the scoped ones
// aud concerns (audience.reaches), found through the indexes — a claim in
// one namespace costs O(sockets that see it), not O(sockets). An audience
// of everyone, or one naming the unnamespaced, is a scan.
func (r *registry) audienceLocked(aud audience, f func(*session)) {
	if aud.everyone || slices.Contains(aud.namespaces, "") {
		for _, s := range r.byName {
			if s.receivesBroadcasts() && (!s.scoped || aud.reaches(s)) {
				f(s)
			}
		}
		return
	}
	for s := range r.fullFanout {
		f(s)
	}
	r.broadcastMark++
	scoped := func(name string) {
		if s := r.byName[name]; s != nil && s.scoped && s.broadcastMark != r.broadcastMark && aud.reaches(s) {
			s.broadcastMark = r.broadcastMark
			f(s)
		}
	}
	for _, ns := range aud.namespaces {
		for name := range r.byProject[ns] {
			scoped(name)
		}
	}
	for _, id := range aud.names {
		scoped(id)
		for _, sc := range wire.Sidecars(id) {
			scoped(sc)
		}
	}
}

// addressedLocked reports whether a chat target reaches socket rs: a
// target part matches its name, its identity (for a sidecar), the
// identity's project, or a role held by the name or its identity.
func (h *Hub) addressedLocked(target string, rs *session) bool {
	roles := rs.roles
	id := identity(rs.name)
	if id != rs.name {
		if owner := h.reg.byName[id]; owner != nil {
			roles = append(slices.Clip(roles), owner.roles...)
		}
	}
	return delivery.IsRecipient(target, []string{rs.name, id}, roles)
}

// audience says which scoped sockets a broadcast concerns; sockets with the
// full fan-out get every broadcast.
type audience struct {
	everyone   bool
	names      []string // identities addressed
	namespaces []string // project prefixes concerned
}

func (a *audience) reaches(s *session) bool {
	if a.everyone {
		return true
	}
	id := identity(s.name)
	for _, n := range a.names {
		if n == id || n == s.name {
			return true
		}
	}
	if s.ownOnly {
		return false // its own fan-out: only what names it
	}
	ns := coord.NamespaceOf(id)
	for _, n := range a.namespaces {
		if n == ns {
			return true
		}
	}
	return false
}

// broadcastLocked enqueues one encoded frame on every bound socket it
// concerns. Unbound and unauthenticated sockets get nothing.
func (h *Hub) broadcastLocked(b []byte, aud audience, typ string) {
	// A broadcast never overtakes a presence change: the reference's
	// clients see its order, with consecutive changes merged. This costs
	// at most one presence frame per broadcast frame.
	h.flushPresenceLocked(&h.reg.presence[presenceFull])
	n := 0
	h.reg.audienceLocked(aud, func(s *session) {
		if s.send(b) {
			n++
		}
	})
	// The agents a broadcast names (a grant's owner, a handoff's giver)
	// who belong to a peer hub get it over that peer's link: a forwarded
	// request is answered as a local one is.
	for _, name := range aud.names {
		if h.reg.byName[name] == nil && h.fed.DeliverRemote(name, b) {
			n++
		}
	}
	h.m.framesOut.WithLabelValues(typ).Add(float64(n))
}

// sendToLocked enqueues a private frame on the socket bound to name, or,
// for an agent of a peer hub that forwarded for it, on that peer's link.
func (h *Hub) sendToLocked(name string, b []byte, typ string) {
	if s := h.reg.byName[name]; s != nil {
		if s.send(b) {
			h.m.framesOut.WithLabelValues(typ).Inc()
		}
		return
	}
	if h.fed.DeliverRemote(name, b) {
		h.m.framesOut.WithLabelValues(typ).Inc()
	}
}
