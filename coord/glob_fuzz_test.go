package coord_test

import (
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// globBytes reads a fuzz input as globs and paths over small alphabets.
type globBytes struct{ b []byte }

func (g *globBytes) next() int {
	if len(g.b) == 0 {
		return 0
	}
	v := int(g.b[0])
	g.b = g.b[1:]
	return v
}

func (g *globBytes) entry(pieces []string) string {
	n := 1 + g.next()%4
	segs := make([]string, n)
	for i := range segs {
		segs[i] = pieces[g.next()%len(pieces)]
	}
	return coord.NormalizePath(joinSegs(segs), 4096)
}

// FuzzGlobOverlap checks the glob overlap against the independent oracle
// (glob_oracle_test.go): when a path is covered by both of two scope
// entries — globs, or a glob and a literal path — the scopes must be
// reported as overlapping (soundness: never a false "no conflict"), the
// relation is symmetric and reflexive, and GlobCovers agrees with the
// oracle on every path tried.
func FuzzGlobOverlap(f *testing.F) {
	f.Add([]byte{2, 0, 11, 7, 1, 1, 3, 0, 2, 4})
	f.Add([]byte("src/**/*.go against docs/*.md and a literal"))
	f.Add([]byte{3, 11, 11, 5, 2, 6, 11, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, in []byte) {
		g := &globBytes{b: in}
		ga, gb := g.entry(globPieces), g.entry(globPieces)
		lit := g.entry(pathPieces)
		if ga == "" || gb == "" || lit == "" {
			return
		}
		a := coord.Scope{Worktree: "/r", Globs: []string{ga}}
		b := coord.Scope{Worktree: "/r", Globs: []string{gb}}
		l := coord.Scope{Worktree: "/r", Paths: []string{lit}}
		ab, la := coord.ScopesOverlap(a, b), coord.ScopesOverlap(a, l)
		if ab != coord.ScopesOverlap(b, a) || la != coord.ScopesOverlap(l, a) || !coord.ScopesOverlap(a, a) {
			t.Fatalf("overlap of %q, %q, %q is not symmetric or not reflexive", ga, gb, lit)
		}
		for len(g.b) > 0 {
			p := g.entry(pathPieces)
			if p == "" {
				continue
			}
			ca := oracleCovers(ga, true, p)
			if got := coord.GlobCovers(ga, p); got != ca {
				t.Fatalf("GlobCovers(%q, %q) = %v, the oracle says %v", ga, p, got, ca)
			}
			if ca && oracleCovers(gb, true, p) && !ab {
				t.Fatalf("%q and %q both cover %q, but ScopesOverlap says no", ga, gb, p)
			}
			if ca && oracleCovers(lit, false, p) && !la {
				t.Fatalf("%q and the path %q both cover %q, but ScopesOverlap says no", ga, lit, p)
			}
		}
	})
}
