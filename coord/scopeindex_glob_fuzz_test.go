package coord

import (
	"slices"
	"testing"
)

var fuzzGlobSegs = []string{"a", "ab", "*", "a*", "*.go", "?", "**"}

// globScope draws a scope with paths, globs, files or a mix, and a mode.
func (p *indexProgram) globScope() Scope {
	wt, paths := p.scope()
	sc := Scope{Worktree: wt, Paths: paths}
	if p.next()%4 == 0 {
		sc.Mode = ModeShared
	}
	if n := p.next() % 4; n > 0 && (paths != nil || p.next()%2 == 0) {
		for range n {
			parts := make([]string, 1+p.next()%3)
			for i := range parts {
				pool := fuzzSegs
				if p.next()%2 == 0 {
					pool = fuzzGlobSegs
				}
				parts[i] = pool[p.next()%len(pool)]
			}
			if g := NormalizePath(joinFuzz(parts), 4096); g != "" && !slices.Contains(sc.Globs, g) {
				sc.Globs = append(sc.Globs, g)
			}
		}
	}
	if n := p.next() % 3; n > 0 && (!sc.Whole() || p.next()%2 == 0) {
		for range n {
			parts := make([]string, 1+p.next()%4)
			for i := range parts {
				parts[i] = fuzzSegs[p.next()%len(fuzzSegs)]
			}
			if f := joinFuzz(parts); !slices.Contains(sc.Files, f) {
				sc.Files = append(sc.Files, f)
			}
		}
	}
	return sc
}

func joinFuzz(parts []string) string {
	s := ""
	for i, p := range parts {
		if i > 0 {
			s += "/"
		}
		s += p
	}
	return s
}

// FuzzScopeIndexGlobs is FuzzScopeIndex with globs, files and shared
// claims: after every insert, replacement and removal, the index's verdict
// on a random scope must be a linear scan's with ScopesConflictModes
// (exclusive conflicts with any overlapping holder, shared only with
// exclusive ones), and the claim it names must be a real conflict. The
// index therefore agrees with the brute-force pairwise check, which
// FuzzGlobOverlap checks against the independent definition (a path in
// both scopes).
func FuzzScopeIndexGlobs(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2, 0, 1, 3, 7, 1, 0, 0, 1, 1, 1, 3, 1, 0, 4, 9, 1, 2, 3})
	f.Add([]byte("globs over a/*, **/a.go and shared readers of ab, then gone"))
	f.Add([]byte("files a/a.go and ab beside globs a/*.go and **, then gone"))
	f.Add([]byte{0, 0, 0, 1, 0, 3, 1, 1, 0, 0, 2, 0, 0, 6, 3, 0, 255, 0, 0, 5, 5, 5})
	f.Fuzz(func(t *testing.T, prog []byte) {
		p := &indexProgram{b: prog}
		x := newScopeIndex()
		live := map[string]*Claim{}
		for step := 0; len(p.b) > 0 && step < 64; step++ {
			task := "T" + string(rune('0'+p.next()%12))
			switch op := p.next() % 6; {
			case op < 3:
				if old := live[task]; old != nil {
					x.remove(old)
				}
				sc := p.globScope()
				c := &Claim{TaskID: task, Owner: fuzzOwners[p.next()%len(fuzzOwners)], Worktree: sc.Worktree,
					Paths: sc.Paths, Globs: sc.Globs, Files: sc.Files, Mode: sc.Mode, ExpiresAt: float64(p.next() % 16)}
				x.insert(c)
				live[task] = c
			case op < 5:
				if old := live[task]; old != nil {
					x.remove(old)
					delete(live, task)
				}
			default:
				mask := p.next()<<8 | p.next()
				var going []*Claim
				for _, c := range live {
					if mask&(1<<(c.TaskID[1]-'0')) != 0 {
						going = append(going, c)
					}
				}
				x.removeAll(going)
				for _, c := range going {
					delete(live, c.TaskID)
				}
			}
			sc := p.globScope()
			owner := fuzzOwners[p.next()%len(fuzzOwners)]
			probeTask := "T" + string(rune('0'+p.next()%16))
			now := float64(p.next() % 16)
			var want []*Claim
			for _, c := range live {
				if c.Owner != owner && c.TaskID != probeTask && c.ExpiresAt > now && ScopesConflictModes(sc, c.Scope()) {
					want = append(want, c)
				}
			}
			got := x.conflict(sc, owner, probeTask, now)
			if (got != nil) != (len(want) > 0) || got != nil && !slices.Contains(want, got) {
				t.Fatalf("step %d: scope %+v by %s for %s at %v: index names %v, the scan finds %v",
					step, sc, owner, probeTask, now, got, want)
			}
		}
		for _, c := range live {
			x.remove(c)
		}
		if len(x.trees) != 0 {
			t.Fatalf("the index holds %d worktrees after every claim left", len(x.trees))
		}
	})
}
