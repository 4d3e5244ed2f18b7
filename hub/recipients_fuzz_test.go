package hub

import (
	"slices"
	"strings"
	"testing"
)

// Names and roles the recipients fuzzer binds: projects, nested names,
// sidecars of sidecars, a bare "-rx", roles that are also names or
// projects, so every lookup the index makes has a near miss beside it.
var (
	fuzzProjects = []string{"", "p/", "q/", "p/x/"}
	fuzzBases    = []string{"a", "b", "c", ""}
	fuzzSuffixes = []string{"", "-rx", "-pane-rx", "-pane", "-rx-rx"}
	fuzzRoles    = []string{"p", "p/a", "r", "q/c", "p/reviewer", "a-rx", "q"}
)

// FuzzRecipients binds, unbinds, takes over and re-roles names on a bare
// registry as the program in its input says, then resolves targets — the
// fuzzed one, one drawn from the names and roles after each step, and a
// comma list of those — through the indexes (recipientsLocked) and by the
// definition (addressedLocked over every bound name): both must reach the
// same names, each once, never the sender; and the indexes must hold
// exactly the bound names.
func FuzzRecipients(f *testing.F) {
	f.Add([]byte{0, 5, 1, 0, 9, 2, 3, 3, 0, 1}, "p/a")
	f.Add([]byte("bind many names and roles, then leave"), "p")
	f.Add([]byte{0, 1, 0, 2, 0, 3, 2, 1, 7, 0, 4, 1}, "p/reviewer, q ,")
	f.Add([]byte{0, 6, 0, 7, 1, 6}, "p/a*")
	f.Add([]byte{0, 10, 0, 11, 0, 12}, "-rx")
	f.Add([]byte{0, 1, 0, 2, 0, 3, 2, 1, 7, 0, 4, 1}, "p/rev*, q/[a-c]")
	f.Add([]byte{0, 1, 0, 2, 0, 3, 2, 1, 7, 0, 4, 1}, "p\xff*")
	f.Fuzz(func(t *testing.T, prog []byte, target string) {
		h := &Hub{}
		h.reg.init()
		next := func() int {
			if len(prog) == 0 {
				return 0
			}
			v := int(prog[0])
			prog = prog[1:]
			return v
		}
		name := func() string {
			n := next()
			return fuzzProjects[n%4] + fuzzBases[n/4%4] + fuzzSuffixes[n/16%5]
		}
		roles := func() []string {
			mask := next()
			var rs []string
			for i, r := range fuzzRoles {
				if mask&(1<<i) != 0 {
					rs = append(rs, r)
				}
			}
			return rs
		}
		var targets []string
		for step := 0; len(prog) > 0 && step < 32; step++ {
			switch op := next() % 4; op {
			case 0, 1: // bind, superseding a holder of the name
				if n := name(); n != "" {
					h.reg.bind(&session{name: n, roles: roles(), scoped: op == 1})
				}
			case 2: // leave
				if s := h.reg.byName[name()]; s != nil {
					h.reg.unbind(s)
				}
			case 3: // a heartbeat changing roles
				if s := h.reg.byName[name()]; s != nil {
					h.reg.unindex(s)
					s.roles = roles()
					h.reg.index(s)
				}
			}
			if n := next(); n%2 == 0 {
				targets = append(targets, name())
			} else {
				targets = append(targets, fuzzRoles[n/2%len(fuzzRoles)])
			}
		}

		if err := h.reg.checkIndexes(); err != nil {
			t.Fatal(err)
		}
		senders := []string{"", name()}
		list := strings.Join(targets[:min(len(targets), 4)], ",") // a comma list; longer ones only cost time
		// Globs with a literal prefix are resolved by range (the online
		// list, the sorted roles), those that begin with a metacharacter by
		// a scan: each target's first bytes with a star, and its last ones
		// behind one, try both.
		var globs []string
		for _, tg := range targets {
			globs = append(globs, tg[:min(len(tg), 2)]+"*", "*"+tg[max(0, len(tg)-2):], tg[:len(tg)/2]+"?"+tg[min(len(tg), len(tg)/2+1):])
		}
		for _, tg := range append(append(targets, globs...), target, list) {
			tg = strings.TrimSpace(tg)
			for _, sender := range senders {
				got, want := h.resolvedRecipients(tg, sender), h.scanRecipients(tg, sender)
				if !slices.Equal(got, want) {
					t.Fatalf("target %q from %q reaches %v through the indexes, %v by definition", tg, sender, got, want)
				}
				if slices.Contains(got, sender) && sender != "" {
					t.Fatalf("target %q reaches its sender %q", tg, sender)
				}
				if len(slices.Compact(slices.Clone(got))) != len(got) {
					t.Fatalf("target %q reaches a name twice: %v", tg, got)
				}
			}
		}
	})
}
