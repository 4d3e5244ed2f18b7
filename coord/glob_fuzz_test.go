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

// FuzzGlobOverlap checks scope overlap against the independent oracle
// (glob_oracle_test.go) for every pair of entry kinds — two globs, a
// literal path and a file: when a path is covered by two entries they must
// be reported as overlapping (soundness: never a false "no conflict");
// where the oracle's search for a common path is complete, the two agree
// exactly (INV-ME-2 in the file-set model: overlap iff some path is in
// both); the relation is symmetric and reflexive, and GlobCovers agrees
// with the oracle on every path tried.
func FuzzGlobOverlap(f *testing.F) {
	f.Add([]byte{2, 0, 11, 7, 1, 1, 3, 0, 2, 4})
	f.Add([]byte("src/**/*.go against docs/*.md and a literal"))
	f.Add([]byte{3, 11, 11, 5, 2, 6, 11, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{2, 1, 11, 7, 2, 1, 11, 4, 2, 2, 5, 4, 2, 2, 5, 4}) // b/**/*.go and b/**/y.md (disjoint), a literal and a file
	f.Fuzz(func(t *testing.T, in []byte) {
		g := &globBytes{b: in}
		entries := []oracleEntry{
			{g.entry(globPieces), kindGlob}, {g.entry(globPieces), kindGlob},
			{g.entry(pathPieces), kindPath}, {g.entry(pathPieces), kindFile},
		}
		for _, e := range entries {
			if e.e == "" {
				return
			}
		}
		scope := func(e oracleEntry) coord.Scope {
			return coord.Scope{Worktree: "/r", Paths: only(e, kindPath), Globs: only(e, kindGlob), Files: only(e, kindFile)}
		}
		overlap := make([][]bool, len(entries))
		for i, x := range entries {
			overlap[i] = make([]bool, len(entries))
			for j, y := range entries {
				overlap[i][j] = coord.ScopesOverlap(scope(x), scope(y))
			}
		}
		for i, x := range entries {
			if !overlap[i][i] {
				t.Fatalf("the %s %q does not overlap itself", x.kind, x.e)
			}
			for j, y := range entries[:i] {
				if overlap[i][j] != overlap[j][i] {
					t.Fatalf("overlap of the %s %q and the %s %q is not symmetric", x.kind, x.e, y.kind, y.e)
				}
				if d := witnessBound(x, y); d <= 4 {
					if want := oracleOverlap(x, y, witnessPieces, d); overlap[i][j] != want {
						t.Fatalf("ScopesOverlap(the %s %q, the %s %q) = %v, but a common path exists: %v", x.kind, x.e, y.kind, y.e, overlap[i][j], want)
					}
				}
			}
		}
		for len(g.b) > 0 {
			p := g.entry(pathPieces)
			if p == "" {
				continue
			}
			if got, want := coord.GlobCovers(entries[0].e, p), oracleCovers(entries[0].e, kindGlob, p); got != want {
				t.Fatalf("GlobCovers(%q, %q) = %v, the oracle says %v", entries[0].e, p, got, want)
			}
			for i, x := range entries {
				for j, y := range entries[:i] {
					if !overlap[i][j] && oracleCovers(x.e, x.kind, p) && oracleCovers(y.e, y.kind, p) {
						t.Fatalf("the %s %q and the %s %q both cover %q, but ScopesOverlap says no", x.kind, x.e, y.kind, y.e, p)
					}
				}
			}
		}
	})
}
