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
// Each candidate is still checked with addressedLocked, the one definition
// of who a target reaches: the indexes make a literal target cost
// O(recipients) instead of O(bound sockets), they never change who is
// reached. A target with a glob part is matched against every bound name.
//
// The indexes hold exactly the names in byName (bound, not superseded),
// guarded by Hub.mu like the rest of the registry.

import (
	"slices"
	"strings"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/wire"
)

// bind makes s the owner of its name, replacing a superseded owner.
func (r *registry) bind(s *session) {
	if old := r.byName[s.name]; old != nil {
		r.unindex(old)
	}
	r.byName[s.name] = s
	r.index(s)
}

// unbind frees the name s owns.
func (r *registry) unbind(s *session) {
	delete(r.byName, s.name)
	r.unindex(s)
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

// literalTarget reports whether every part of a chat target is literal.
func literalTarget(t string) bool {
	for part := range strings.SplitSeq(t, ",") {
		if p := strings.TrimSpace(part); p != "" && !wire.Literal(p) {
			return false
		}
	}
	return true
}

// recipientsLocked calls reached once for every bound socket that chat
// target t (trimmed) reaches, except the sockets bound to sender.
func (h *Hub) recipientsLocked(t, sender string, reached func(rs *session)) {
	h.reg.visit++
	mark := h.reg.visit
	try := func(rs *session) {
		if rs == nil || rs.visit == mark {
			return
		}
		rs.visit = mark
		if rs.name != sender && h.addressedLocked(t, rs) {
			reached(rs)
		}
	}
	if !literalTarget(t) {
		for _, rs := range h.reg.byName {
			try(rs)
		}
		return
	}
	seat := func(name string) { // the name and its sidecars
		try(h.reg.byName[name])
		try(h.reg.byName[name+"-rx"])
		try(h.reg.byName[name+"-pane-rx"])
	}
	for part := range strings.SplitSeq(t, ",") {
		p := strings.TrimSpace(part)
		if p == "" {
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
	r.bcastSeq++
	scoped := func(name string) {
		if s := r.byName[name]; s != nil && s.scoped && s.bcast != r.bcastSeq && aud.reaches(s) {
			s.bcast = r.bcastSeq
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
		scoped(id + "-rx")
		scoped(id + "-pane-rx")
	}
}
