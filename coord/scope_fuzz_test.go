package coord

import (
	"slices"
	"strings"
	"testing"
)

// Fuzz targets for path normalisation, scope overlap and the scope index.
// Each compares the code with a brute-force definition written from the
// spec (INV-ME-2..4) rather than from the code. `go test` runs the seed
// corpus in testdata/fuzz; `.ci/fuzz` runs them for longer.

// bruteOverlap is INV-ME-2 by its definition: two normalised paths overlap
// when one's segment list is a prefix of the other's — equal, an ancestor
// directory, or the root (no segments at all).
func bruteOverlap(a, b string) bool {
	var sa, sb []string
	if a != "" {
		sa = strings.Split(a, "/")
	}
	if b != "" {
		sb = strings.Split(b, "/")
	}
	n := min(len(sa), len(sb))
	for i := range n {
		if sa[i] != sb[i] {
			return false
		}
	}
	return true
}

// bruteConflict is INV-ME-3 (worktrees never meet), INV-ME-4 (an empty
// path set is the whole worktree) and INV-ME-2 (any pair overlaps).
func bruteConflict(wa string, pa []string, wb string, pb []string) bool {
	if wa != wb {
		return false
	}
	if len(pa) == 0 || len(pb) == 0 {
		return true
	}
	for _, a := range pa {
		for _, b := range pb {
			if bruteOverlap(a, b) {
				return true
			}
		}
	}
	return false
}

// normalised reports what PROTOCOL.md §3.4 promises of a normalised path:
// relative, slash-separated, no empty, "." or ".." segment, nothing to strip.
func normalised(p string) bool {
	if p == "" {
		return true
	}
	if strings.ContainsRune(p, '\\') || strip(p) != p || !printable(p) {
		return false
	}
	for _, s := range strings.Split(p, "/") {
		if s == "" || s == "." || s == ".." {
			return false
		}
	}
	return true
}

// FuzzPathOverlap: NormalizePath is idempotent and gives a normalised path;
// PathsOverlap is reflexive, symmetric and agrees with bruteOverlap;
// ScopesConflict (the paths split on ',') is symmetric and agrees with
// bruteConflict.
func FuzzPathOverlap(f *testing.F) {
	for _, s := range [][2]string{
		{"src/core", "src/core/x.go"}, {"src/a", "src/ab"}, {"./src/./a", `src\a`}, {"/etc", "x"},
		{"src/../x", "src"}, {"a//b/", "a/b/c"}, {"./ a", "a"}, {"a/ /.", "a"}, {"", "docs"},
		{"src/é", "src/é/ü.go"}, {"a,b", "b/c,d"}, {"src/*.go", "src/x.go"}, {"a\tb", "a"},
	} {
		f.Add(s[0], s[1], "wt", "wt")
	}
	f.Add("a/b,c", "c/d", "wt1", "wt2")
	f.Fuzz(func(t *testing.T, rawA, rawB, wtA, wtB string) {
		const maxLen = 64
		a, b := NormalizePath(rawA, maxLen), NormalizePath(rawB, maxLen)
		for _, c := range [][2]string{{rawA, a}, {rawB, b}} {
			if !normalised(c[1]) {
				t.Fatalf("NormalizePath(%q) = %q is not normalised", c[0], c[1])
			}
			if again := NormalizePath(c[1], maxLen); again != c[1] {
				t.Fatalf("NormalizePath is not idempotent: %q → %q → %q", c[0], c[1], again)
			}
		}
		if !PathsOverlap(a, a) || !PathsOverlap(b, b) {
			t.Fatalf("INV-ME-2: overlap is not reflexive for %q or %q", a, b)
		}
		ab, ba := PathsOverlap(a, b), PathsOverlap(b, a)
		if ab != ba {
			t.Fatalf("INV-ME-2: PathsOverlap(%q, %q) = %v but reversed %v", a, b, ab, ba)
		}
		if want := bruteOverlap(a, b); ab != want {
			t.Fatalf("INV-ME-2: PathsOverlap(%q, %q) = %v, by definition %v", a, b, ab, want)
		}

		lim := Limits{MaxPathLength: maxLen, MaxPathsPerClaim: 4}
		pa := NormalizePaths(strings.Split(rawA, ","), lim)
		pb := NormalizePaths(strings.Split(rawB, ","), lim)
		for _, ps := range [][]string{pa, pb} {
			if len(ps) > lim.MaxPathsPerClaim {
				t.Fatalf("NormalizePaths kept %d paths, more than %d", len(ps), lim.MaxPathsPerClaim)
			}
			for i, p := range ps {
				if p == "" || !normalised(p) || slices.Contains(ps[:i], p) {
					t.Fatalf("NormalizePaths gave %q: %q is empty, unnormalised or repeated", ps, p)
				}
			}
			if again := NormalizePaths(ps, lim); !slices.Equal(again, ps) {
				t.Fatalf("NormalizePaths is not idempotent: %q → %q", ps, again)
			}
		}
		got := ScopesConflict(wtA, pa, wtB, pb)
		if rev := ScopesConflict(wtB, pb, wtA, pa); rev != got {
			t.Fatalf("ScopesConflict is not symmetric: %q %q vs %q %q", wtA, pa, wtB, pb)
		}
		if want := bruteConflict(wtA, pa, wtB, pb); got != want {
			t.Fatalf("ScopesConflict(%q %q, %q %q) = %v, by definition %v", wtA, pa, wtB, pb, got, want)
		}
		if !ScopesConflict(wtA, pa, wtA, pa) {
			t.Fatalf("a scope does not conflict with itself: %q %q", wtA, pa)
		}
	})
}

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
// holds (INV-ME-2..4, the claimant's own claims and the task itself never
// blocking, expired claims never blocking), and the claim it names must be
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
				if c.Owner != owner && c.TaskID != probeTask && c.ExpiresAt > now && bruteConflict(wt, paths, c.Worktree, c.Paths) {
					want = append(want, c)
				}
			}
			got := x.conflict(wt, paths, owner, probeTask, now)
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
