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
	"unicode/utf8"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/delivery"
	"github.com/synapse-hub/synapse/wire"
)

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

// globPrefix is the text before a glob's first metacharacter, cut before
// anything Fnmatch reads as U+FFFD (it matches runes), so every string the
// glob matches begins with it byte for byte.
func globPrefix(p string) string {
	if i := strings.IndexAny(p, "*?["); i >= 0 {
		p = p[:i]
	}
	for i, r := range p {
		if r == utf8.RuneError {
			return p[:i]
		}
	}
	return p
}

// prefixedTarget reports whether every glob part of a chat target has a
// literal prefix, so the names it reaches can be found by range.
func prefixedTarget(t string) bool {
	for part := range strings.SplitSeq(t, ",") {
		if p := strings.TrimSpace(part); p != "" && !wire.Literal(p) && globPrefix(p) == "" {
			return false
		}
	}
	return true
}

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
	if !delivery.LiteralTarget(t) && !prefixedTarget(t) {
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
			prefix := globPrefix(p)
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
