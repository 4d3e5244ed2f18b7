package coord

import (
	"slices"
	"strings"
	"testing"
)

// indexProgram reads a fuzz input as operations on a scope index: claims
// from a small vocabulary (so overlaps, shared prefixes like "a"/"ab" and
// deep nesting are common), replaced, removed one by one or in bulk.
type indexProgram struct{ b []byte }

func (p *indexProgram) next() int {
	if len(p.b) == 0 {
		return 0
	}
	v := int(p.b[0])
	p.b = p.b[1:]
	return v
}

var (
	fuzzSegs      = []string{"a", "ab", "b", "a.go", "c"}
	fuzzWorktrees = []string{"", "/wt/1", "/wt/2"}
	fuzzOwners    = []string{"A", "B", "C"}
)

// scope draws a worktree and a normalised path set; nil (the whole
// worktree) one time in eight.
func (p *indexProgram) scope() (string, []string) {
	wt := fuzzWorktrees[p.next()%len(fuzzWorktrees)]
	n := p.next() % 8
	if n == 0 {
		return wt, nil
	}
	var paths []string
	for range 1 + n%3 {
		parts := make([]string, 1+p.next()%4)
		for i := range parts {
			parts[i] = fuzzSegs[p.next()%len(fuzzSegs)]
		}
		if s := strings.Join(parts, "/"); !slices.Contains(paths, s) {
			paths = append(paths, s)
		}
	}
	return wt, paths
}

// FuzzScopeIndex runs a random program of inserts, replacements, removals
// and bulk removals on the scope index, and after each step asks it about a
// random scope: its verdict must be a linear scan's over the claims it
// holds with ScopesConflict (INV-ME-2..4; the rule FuzzPathOverlap checks
// against the spec's definition), the claimant's own claims, the task
// itself and expired claims never blocking; and the claim it names must be
// a real conflict.
func FuzzScopeIndex(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2, 0, 1, 3, 7, 1, 0, 0, 1, 1, 1, 3, 1, 0, 4, 9})
	f.Add([]byte("claims over a, ab, a/b and the whole worktree, then gone"))
	f.Add([]byte{0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 2, 0, 0, 0, 3, 0, 255, 0, 0})
	f.Fuzz(func(t *testing.T, prog []byte) {
		p := &indexProgram{b: prog}
		x := newScopeIndex()
		live := map[string]*Claim{} // task → claim, what the index should hold
		for step := 0; len(p.b) > 0 && step < 64; step++ {
			task := "T" + string(rune('0'+p.next()%12))
			switch op := p.next() % 6; {
			case op < 3: // claim or replace, as putClaim does
				if old := live[task]; old != nil {
					x.remove(old)
				}
				wt, paths := p.scope()
				c := &Claim{TaskID: task, Owner: fuzzOwners[p.next()%len(fuzzOwners)], Worktree: wt, Paths: paths,
					ExpiresAt: float64(p.next() % 16)}
				x.insert(c)
				live[task] = c
			case op < 5:
				if old := live[task]; old != nil {
					x.remove(old)
					delete(live, task)
				}
			default: // a bulk expiry: every claim whose bit is set
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
			wt, paths := p.scope()
			owner := fuzzOwners[p.next()%len(fuzzOwners)]
			probeTask := "T" + string(rune('0'+p.next()%16)) // T12..T15 are never held
			now := float64(p.next() % 16)
			var want []*Claim
			for _, c := range live {
				if c.Owner != owner && c.TaskID != probeTask && c.ExpiresAt > now && ScopesConflict(wt, paths, c.Worktree, c.Paths) {
					want = append(want, c)
				}
			}
			got := x.conflict(Scope{Worktree: wt, Paths: paths}, owner, probeTask, now)
			if (got != nil) != (len(want) > 0) || got != nil && !slices.Contains(want, got) {
				t.Fatalf("step %d: scope %q %q by %s for %s at %v: index names %v, the scan finds %v",
					step, wt, paths, owner, probeTask, now, got, want)
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
