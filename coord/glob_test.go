package coord_test

import (
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/synapse-hub/synapse/coord"
)

func TestGlobCovers_Syntax(t *testing.T) {
	for _, tc := range []struct {
		glob, path string
		want       bool
	}{
		{"docs/*.md", "docs/guide.md", true},
		{"docs/*.md", "docs/guide.md/x", true}, // a match covers its subtree
		{"docs/*.md", "docs/sub/guide.md", false},
		{"docs/*.md", "docs", false},
		{"src/**/*.go", "src/x.go", true}, // "**" matches no segment too
		{"src/**/*.go", "src/a/b/c/x.go", true},
		{"src/**/*.go", "src/a/b/c/x.rs", false},
		{"src/**", "src", true},
		{"src/**", "srcs/x", false},
		{"src/?.go", "src/a.go", true},
		{"src/?.go", "src/ab.go", false},
		{"*", "anything/at/all", true},
		{"**/testdata/*", "a/b/testdata/x", true},
		{"**/testdata/*", "a/b/testdata", false},
		{"a*b", "ab", true},
		{"a*b", "a/b", false}, // "*" never crosses a segment
		{"[x]", "[x]", true},  // brackets are plain characters
		{"[x]", "x", false},
	} {
		if got := coord.GlobCovers(tc.glob, tc.path); got != tc.want {
			t.Errorf("GlobCovers(%q, %q) = %v, want %v", tc.glob, tc.path, got, tc.want)
		}
		if tc.glob != "[x]" {
			if want := oracleCovers(tc.glob, true, tc.path); want != tc.want {
				t.Errorf("oracle: covers(%q, %q) = %v, the table says %v", tc.glob, tc.path, want, tc.want)
			}
		}
	}
}

func TestScopesOverlap_Globs_INV_ME_2(t *testing.T) {
	sc := func(paths, globs []string) coord.Scope {
		return coord.Scope{Worktree: "/r", Paths: paths, Globs: globs}
	}
	for _, tc := range []struct {
		a, b coord.Scope
		want bool
	}{
		{sc(nil, []string{"docs/*.md"}), sc([]string{"docs/guide.md"}, nil), true},
		{sc(nil, []string{"docs/*.md"}), sc([]string{"docs"}, nil), true},            // docs covers docs/x.md
		{sc(nil, []string{"docs/*.md"}), sc([]string{"docs/img/a.png"}, nil), false}, // not below a match
		{sc(nil, []string{"docs/*.md"}), sc([]string{"src"}, nil), false},
		{sc(nil, []string{"src/**/*.go"}), sc(nil, []string{"**/*_test.go"}), true},
		{sc(nil, []string{"src/**/*.go"}), sc(nil, []string{"src/**/*.rs"}), true}, // src/x.go/y.rs: a match covers its subtree
		{sc(nil, []string{"src/*.go"}), sc(nil, []string{"docs/*.go"}), false},
		{sc(nil, []string{"a*"}), sc(nil, []string{"*b"}), true},
		{sc(nil, []string{"a?"}), sc(nil, []string{"abc"}), false},
		{sc(nil, []string{"*"}), sc([]string{"x/y/z"}, nil), true},
		{sc(nil, nil), sc(nil, []string{"x/*"}), true},                                           // the whole worktree (INV-ME-4)
		{sc(nil, []string{"**"}), coord.Scope{Worktree: "/other", Globs: []string{"**"}}, false}, // INV-ME-3
	} {
		got, back := coord.ScopesOverlap(tc.a, tc.b), coord.ScopesOverlap(tc.b, tc.a)
		if got != tc.want || back != got {
			t.Errorf("ScopesOverlap(%+v, %+v) = %v (reversed %v), want %v", tc.a, tc.b, got, back, tc.want)
		}
	}
}

func TestScopesConflictModes_SharedReadersCoexist(t *testing.T) {
	r := coord.Scope{Worktree: "/r", Globs: []string{"src/**"}, Mode: coord.ModeShared}
	w := coord.Scope{Worktree: "/r", Paths: []string{"src/x.go"}}
	if coord.ScopesConflictModes(r, r) {
		t.Error("two shared scopes conflict")
	}
	if !coord.ScopesConflictModes(r, w) || !coord.ScopesConflictModes(w, r) || !coord.ScopesConflictModes(w, w) {
		t.Error("an exclusive scope does not conflict with an overlapping one")
	}
}

func TestNormalizeScope_WidensWhatItCannotKeep(t *testing.T) {
	l := coord.DefaultLimits()
	for _, tc := range []struct {
		paths, globs         []string
		wantPaths, wantGlobs []string
	}{
		{[]string{"./src/"}, []string{"docs//*.md"}, []string{"src"}, []string{"docs/*.md"}},
		{nil, []string{"../*"}, nil, nil},               // climbing: the whole worktree
		{[]string{"."}, []string{"src/*.go"}, nil, nil}, // the root among paths: the whole worktree, globs too
		{nil, []string{"*.go", "*.go"}, nil, []string{"*.go"}},
	} {
		p, g := coord.NormalizeScope(tc.paths, tc.globs, l)
		if !slices.Equal(p, tc.wantPaths) || !slices.Equal(g, tc.wantGlobs) {
			t.Errorf("NormalizeScope(%q, %q) = %q %q, want %q %q", tc.paths, tc.globs, p, g, tc.wantPaths, tc.wantGlobs)
		}
	}
	many := make([]string, l.MaxPathsPerClaim)
	for i := range many {
		many[i] = "d/" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
	}
	if p, g := coord.NormalizeScope(many, []string{"x/*"}, l); p != nil || g != nil {
		t.Errorf("%d paths and a glob were kept (%d, %d), want the whole worktree", len(many), len(p), len(g))
	}
}

// Generators for the overlap properties: segments from a small alphabet so
// that patterns and paths meet often.
var (
	globPieces = []string{"a", "b", "ab", "x.go", "y.md", "*", "?", "*.go", "a*", "*b", "?.md", "**"}
	pathPieces = []string{"a", "b", "ab", "x.go", "y.md", "a.go", "b.md", "bb", "c"}
)

func drawGlob(t *rapid.T, label string) string {
	segs := rapid.SliceOfN(rapid.SampledFrom(globPieces), 1, 4).Draw(t, label)
	return coord.NormalizePath(joinSegs(segs), 4096)
}

func drawPath(t *rapid.T, label string) string {
	return joinSegs(rapid.SliceOfN(rapid.SampledFrom(pathPieces), 1, 5).Draw(t, label))
}

func joinSegs(segs []string) string {
	out := ""
	for i, s := range segs {
		if i > 0 {
			out += "/"
		}
		out += s
	}
	return out
}

// instantiate draws a path the glob matches: each "*" a short run, each "?"
// one character, each "**" zero to two segments; then maybe a subtree.
func instantiate(t *rapid.T, glob, label string) string {
	var segs []string
	for _, seg := range splitSegs(glob) {
		if seg == "**" {
			for range rapid.IntRange(0, 2).Draw(t, label+"Stars") {
				segs = append(segs, rapid.SampledFrom(pathPieces).Draw(t, label+"Seg"))
			}
			continue
		}
		out := ""
		for _, r := range seg {
			switch r {
			case '*':
				out += rapid.SampledFrom([]string{"", "a", "b", "ab", ".go"}).Draw(t, label+"Run")
			case '?':
				out += rapid.SampledFrom([]string{"a", "b", "."}).Draw(t, label+"Char")
			default:
				out += string(r)
			}
		}
		if out == "" {
			out = "a"
		}
		segs = append(segs, out)
	}
	if rapid.Bool().Draw(t, label+"Below") {
		segs = append(segs, rapid.SampledFrom(pathPieces).Draw(t, label+"Child"))
	}
	return joinSegs(segs)
}

// TestScopesOverlap_SoundOnSampledPaths_INV_ME_2: for paths that both
// scopes cover (by the independent oracle), the scopes are reported as
// overlapping; the relation is symmetric, and a scope overlaps itself.
func TestScopesOverlap_SoundOnSampledPaths_INV_ME_2(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ga, gb := drawGlob(rt, "globA"), drawGlob(rt, "globB")
		lit := drawPath(rt, "literal")
		a := coord.Scope{Worktree: "/r", Globs: []string{ga}}
		b := coord.Scope{Worktree: "/r", Globs: []string{gb}}
		l := coord.Scope{Worktree: "/r", Paths: []string{lit}}
		for _, p := range []string{instantiate(rt, ga, "pa"), instantiate(rt, gb, "pb"), drawPath(rt, "p"), lit} {
			if p == "" {
				continue // "**" matched no segment: the root is no path
			}
			ca, cb, cl := oracleCovers(ga, true, p), oracleCovers(gb, true, p), oracleCovers(lit, false, p)
			if ca && cb && !coord.ScopesOverlap(a, b) {
				rt.Fatalf("INV-ME-2: %q and %q both cover %q, but ScopesOverlap says no", ga, gb, p)
			}
			if ca && cl && !coord.ScopesOverlap(a, l) {
				rt.Fatalf("INV-ME-2: %q and the path %q both cover %q, but ScopesOverlap says no", ga, lit, p)
			}
			if ca != coord.GlobCovers(ga, p) {
				rt.Fatalf("GlobCovers(%q, %q) = %v, the oracle says %v", ga, p, !ca, ca)
			}
		}
		if coord.ScopesOverlap(a, b) != coord.ScopesOverlap(b, a) || coord.ScopesOverlap(a, l) != coord.ScopesOverlap(l, a) {
			rt.Fatalf("INV-ME-2: ScopesOverlap is not symmetric for %q / %q / %q", ga, gb, lit)
		}
		if !coord.ScopesOverlap(a, a) {
			rt.Fatalf("INV-ME-2: %q does not overlap itself", ga)
		}
	})
}

func TestClaim_RefusalNamesTheHoldersPatternAndMode(t *testing.T) {
	s := coord.New(coord.Limits{})
	const now = 1_800_000_000
	steps := []struct {
		req  coord.ClaimRequest
		want string // "" = granted
	}{
		{coord.ClaimRequest{Agent: "a", TaskID: "R1", Worktree: "/r", Globs: []string{"docs/*.md"}, Shared: true}, ""},
		{coord.ClaimRequest{Agent: "b", TaskID: "R2", Worktree: "/r", Paths: []string{"docs/x.md"}, Shared: true}, ""},
		{coord.ClaimRequest{Agent: "c", TaskID: "W1", Worktree: "/r", Paths: []string{"docs"}},
			"Task 'W1' file scope conflicts with 'R1' held by a (shared 'docs/*.md')."},
		{coord.ClaimRequest{Agent: "c", TaskID: "W2", Worktree: "/r", Globs: []string{"src/**"}}, ""},
		{coord.ClaimRequest{Agent: "d", TaskID: "R3", Worktree: "/r", Globs: []string{"src/a/*.go"}, Shared: true},
			"Task 'R3' file scope conflicts with 'W2' held by c (exclusive 'src/**')."},
		{coord.ClaimRequest{Agent: "d", TaskID: "W3", Worktree: "/r", Shared: true},
			"Task 'W3' file scope conflicts with 'W2' held by c (exclusive 'src/**')."},
	}
	for _, st := range steps {
		o := s.Step(st.req, now)
		switch {
		case st.want == "" && o.Refusal != nil:
			t.Fatalf("%s refused: %v", st.req.TaskID, o.Refusal)
		case st.want != "" && (o.Refusal == nil || o.Refusal.Message != st.want || o.Refusal.ConflictMode == ""):
			t.Fatalf("%s: refusal %+v, want %q", st.req.TaskID, o.Refusal, st.want)
		}
	}
	// A shared claim is handed off only where no third party writes.
	if o := s.Step(coord.HandoffRequest{Agent: "a", TaskID: "R1", To: "b", ToOnline: true}, now); o.Refusal != nil {
		t.Fatalf("handoff of a read claim to another reader refused: %v", o.Refusal)
	}
	if c := s.Claim("R1"); c.Owner != "b" || c.Mode != coord.ModeShared || !slices.Equal(c.Globs, []string{"docs/*.md"}) {
		t.Fatalf("handed-off claim %v", c)
	}
}

// Very long patterns are not searched: the answer is a conservative
// "overlap", so a client cannot make the check expensive, and it is still
// never a false "no conflict".
func TestScopesOverlap_LongPatternsAreConservative(t *testing.T) {
	long := strings.Repeat("*a", 2000) + "*x"
	other := strings.Repeat("*b", 2000) + "*x"
	a := coord.Scope{Worktree: "/r", Globs: []string{"src/" + long}}
	b := coord.Scope{Worktree: "/r", Globs: []string{"src/" + other}}
	if !coord.ScopesOverlap(a, b) {
		t.Fatal("two huge segment patterns that meet were declared disjoint")
	}
	deep := coord.Scope{Worktree: "/r", Globs: []string{strings.Repeat("*/", 300) + "x"}}
	deeper := coord.Scope{Worktree: "/r", Globs: []string{strings.Repeat("**/?/", 150) + "x"}}
	if !coord.ScopesOverlap(deep, deeper) {
		t.Fatal("two deep patterns that meet were declared disjoint")
	}
}
