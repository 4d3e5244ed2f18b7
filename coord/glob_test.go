package coord_test

import (
	"path"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/synapse-hub/synapse/coord"
)

// A glob covers the paths it matches and nothing below them: "dir/**"
// names a subtree (docs/claims.md, "Glob syntax").
func TestGlobCovers_Syntax(t *testing.T) {
	for _, tc := range []struct {
		glob, path string
		want       bool
	}{
		{"docs/*.md", "docs/guide.md", true},
		{"docs/*.md", "docs/guide.md/x", false}, // a match covers itself, not what lies below it
		{"docs/*.md", "docs/sub/guide.md", false},
		{"docs/*.md", "docs", false},
		{"src/**/*.go", "src/x.go", true}, // "**" matches no segment too
		{"src/**/*.go", "src/a/b/c/x.go", true},
		{"src/**/*.go", "src/a/b/c/x.rs", false},
		{"src/**/*.go", "src/x.go/y.txt", false},
		{"src/**", "src", true}, // a subtree, its root included
		{"src/**", "src/a/b", true},
		{"src/**", "srcs/x", false},
		{"src/?.go", "src/a.go", true},
		{"src/?.go", "src/ab.go", false},
		{"*", "anything", true},
		{"*", "anything/at/all", false},
		{"**", "anything/at/all", true},
		{"**/testdata/*", "a/b/testdata/x", true},
		{"**/testdata/*", "a/b/testdata/x/y", false},
		{"**/testdata/*", "a/b/testdata", false},
		{"a*b", "ab", true},
		{"a*b", "a/b", false},          // "*" never crosses a segment
		{"src/a.go", "src/a.go", true}, // no wildcard: one path, like a file
		{"src/a.go", "src/a.go/x", false},
		{"[x]", "[x]", true}, // brackets are plain characters
		{"[x]", "x", false},
	} {
		if got := coord.GlobCovers(tc.glob, tc.path); got != tc.want {
			t.Errorf("GlobCovers(%q, %q) = %v, want %v", tc.glob, tc.path, got, tc.want)
		}
		if tc.glob != "[x]" {
			if want := oracleCovers(tc.glob, kindGlob, tc.path); want != tc.want {
				t.Errorf("oracle: covers(%q, %q) = %v, the table says %v", tc.glob, tc.path, want, tc.want)
			}
		}
	}
}

// TestScopesOverlap_EveryPairOfKinds_INV_ME_2 is the table of
// docs/claims.md ("Scopes are sets of files"): for every pair of entry
// kinds — the whole worktree, a literal path, a file, a glob — two scopes
// overlap iff some path is in both. Each row is checked both ways, and
// against the independent oracle's search for a common path.
func TestScopesOverlap_EveryPairOfKinds_INV_ME_2(t *testing.T) {
	path := func(p string) coord.Scope { return coord.Scope{Worktree: "/r", Paths: []string{p}} }
	glob := func(g string) coord.Scope { return coord.Scope{Worktree: "/r", Globs: []string{g}} }
	file := func(f string) coord.Scope { return coord.Scope{Worktree: "/r", Files: []string{f}} }
	whole := coord.Scope{Worktree: "/r"}
	for _, tc := range []struct {
		name string
		a, b coord.Scope
		want bool
	}{
		{"whole/whole", whole, whole, true}, // INV-ME-4
		{"whole/path", whole, path("src"), true},
		{"whole/file", whole, file("src/a/readme.md"), true},
		{"whole/glob", whole, glob("x/*"), true},
		{"other worktree", glob("**"), coord.Scope{Worktree: "/other", Globs: []string{"**"}}, false}, // INV-ME-3
		{"path/path ancestor", path("src"), path("src/a"), true},
		{"path/path sibling", path("src/a"), path("src/ab"), false},
		{"path/file below", path("src/a"), file("src/a/readme.md"), true},
		{"path/file itself", path("src/a/readme.md"), file("src/a/readme.md"), true},
		{"path below the file", path("src/a/readme.md/x"), file("src/a/readme.md"), false}, // no path is both
		{"path/file elsewhere", path("docs"), file("src/a/readme.md"), false},
		{"file/file same", file("src/a/readme.md"), file("src/a/readme.md"), true},
		{"file/file other", file("src/a"), file("src/a/readme.md"), false}, // a file covers itself alone
		{"glob/file match", glob("src/**/*.go"), file("src/a/x.go"), true},
		{"glob/file no match", glob("src/**/*.go"), file("src/a/readme.md"), false},
		{"glob/file below a match", glob("src/*"), file("src/a/readme.md"), false},
		{"glob/path covering matches", glob("src/**/*.go"), path("src"), true},
		{"glob/path below", glob("dir/**"), path("dir/sub/x"), true},
		{"glob/path match", glob("docs/*.md"), path("docs/guide.md"), true},
		{"glob/path below a match", glob("docs/*.md"), path("docs/guide.md/x"), false},
		{"glob/path elsewhere", glob("docs/*.md"), path("src"), false},
		{"glob/path not below a match", glob("docs/*.md"), path("docs/img/a.png"), false},
		{"glob/path one level", glob("*"), path("x/y/z"), false},
		{"glob/glob disjoint extensions", glob("src/**/*.go"), glob("src/**/*.txt"), false},
		{"glob/glob disjoint folders", glob("src/*.go"), glob("docs/*.go"), false},
		{"glob/glob common suffix", glob("src/**/*.go"), glob("**/*_test.go"), true},
		{"glob/glob within a segment", glob("a*"), glob("*b"), true},
		{"glob/glob lengths", glob("a?"), glob("abc"), false},
		{"glob/glob depths", glob("*/*"), glob("*"), false},
		{"glob/glob subtree and below", glob("dir/**"), glob("dir/*/x.go"), true},
	} {
		got, back := coord.ScopesOverlap(tc.a, tc.b), coord.ScopesOverlap(tc.b, tc.a)
		if got != tc.want || back != got {
			t.Errorf("%s: ScopesOverlap(%+v, %+v) = %v (reversed %v), want %v", tc.name, tc.a, tc.b, got, back, tc.want)
		}
		if tc.a.Worktree != tc.b.Worktree || tc.a.Whole() || tc.b.Whole() {
			continue
		}
		ea, eb := scopeEntries(tc.a.Paths, tc.a.Globs, tc.a.Files)[0], scopeEntries(tc.b.Paths, tc.b.Globs, tc.b.Files)[0]
		if o := oracleOverlap(ea, eb, tableSegs, witnessBound(ea, eb)); o != tc.want {
			t.Errorf("%s: the oracle finds a common path: %v, the table says %v", tc.name, o, tc.want)
		}
	}
}

// tableSegs spell every segment the table's entries need to meet.
var tableSegs = []string{"src", "a", "ab", "readme.md", "x", "x.go", "x_test.go", "y.txt", "docs", "guide.md", "img", "dir", "sub", "abc", "y"}

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
		paths, globs, files             []string
		wantPaths, wantGlobs, wantFiles []string
	}{
		{[]string{"./src/"}, []string{"docs//*.md"}, nil, []string{"src"}, []string{"docs/*.md"}, nil},
		{nil, []string{"../*"}, nil, nil, nil, nil},               // climbing: the whole worktree
		{[]string{"."}, []string{"src/*.go"}, nil, nil, nil, nil}, // the root among paths: the whole worktree, globs too
		{nil, []string{"*.go", "*.go"}, nil, nil, []string{"*.go"}, nil},
		{nil, nil, []string{`src\a.go`, "./src/a.go"}, nil, nil, []string{"src/a.go"}},
		{[]string{"src"}, nil, []string{"../x"}, nil, nil, nil}, // an escaping file widens the claim too
		{[]string{"src"}, []string{"*.go"}, []string{"."}, nil, nil, nil},
	} {
		p, g, f := coord.NormalizeScope(tc.paths, tc.globs, tc.files, l)
		if !slices.Equal(p, tc.wantPaths) || !slices.Equal(g, tc.wantGlobs) || !slices.Equal(f, tc.wantFiles) {
			t.Errorf("NormalizeScope(%q, %q, %q) = %q %q %q, want %q %q %q", tc.paths, tc.globs, tc.files, p, g, f, tc.wantPaths, tc.wantGlobs, tc.wantFiles)
		}
	}
	many := make([]string, l.MaxPathsPerClaim)
	for i := range many {
		many[i] = "d/" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
	}
	if p, g, f := coord.NormalizeScope(many, []string{"x/*"}, nil, l); p != nil || g != nil || f != nil {
		t.Errorf("%d paths and a glob were kept (%d, %d), want the whole worktree", len(many), len(p), len(g))
	}
	if p, g, f := coord.NormalizeScope(many[1:], nil, []string{"f"}, l); len(p) != len(many)-1 || g != nil || len(f) != 1 {
		t.Errorf("%d paths and a file were not kept (%d, %d)", len(many)-1, len(p), len(f))
	}
	if p, _, f := coord.NormalizeScope(many, nil, []string{"f"}, l); p != nil || f != nil {
		t.Errorf("%d paths and a file were kept (%d, %d), want the whole worktree", len(many), len(p), len(f))
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
// overlapping, whatever the kinds of their entries (globs, literal paths,
// files); the relation is symmetric, and a scope overlaps itself. Where the
// oracle's search for a common path is complete (witnessBound), the two
// agree exactly: disjoint means no path is in both.
func TestScopesOverlap_SoundOnSampledPaths_INV_ME_2(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ga, gb := drawGlob(rt, "globA"), drawGlob(rt, "globB")
		lit, file := drawPath(rt, "literal"), drawPath(rt, "file")
		entries := []oracleEntry{{ga, kindGlob}, {gb, kindGlob}, {lit, kindPath}, {file, kindFile}}
		scope := func(e oracleEntry) coord.Scope {
			return coord.Scope{Worktree: "/r", Paths: only(e, kindPath), Globs: only(e, kindGlob), Files: only(e, kindFile)}
		}
		samples := []string{instantiate(rt, ga, "pa"), instantiate(rt, gb, "pb"), drawPath(rt, "p"), lit, file}
		for i, x := range entries {
			for _, y := range entries[i:] {
				got := coord.ScopesOverlap(scope(x), scope(y))
				if got != coord.ScopesOverlap(scope(y), scope(x)) {
					rt.Fatalf("INV-ME-2: ScopesOverlap is not symmetric for the %s %q and the %s %q", x.kind, x.e, y.kind, y.e)
				}
				for _, p := range samples {
					if p != "" && !got && oracleCovers(x.e, x.kind, p) && oracleCovers(y.e, y.kind, p) {
						rt.Fatalf("INV-ME-2: the %s %q and the %s %q both cover %q, but ScopesOverlap says no", x.kind, x.e, y.kind, y.e, p)
					}
				}
				if d := witnessBound(x, y); d <= 4 {
					if want := oracleOverlap(x, y, witnessPieces, d); got != want {
						rt.Fatalf("INV-ME-2: ScopesOverlap(the %s %q, the %s %q) = %v, but a common path exists: %v", x.kind, x.e, y.kind, y.e, got, want)
					}
				}
			}
		}
		for _, p := range samples {
			if p != "" && oracleCovers(ga, kindGlob, p) != coord.GlobCovers(ga, p) {
				rt.Fatalf("GlobCovers(%q, %q) = %v, the oracle says otherwise", ga, p, coord.GlobCovers(ga, p))
			}
		}
	})
}

// witnessPieces spell a segment for every pair of pieces that some segment
// matches both (TestWitnessPieces_MeetEveryPairOfPieces), so a common path
// is found among theirs when there is one.
var witnessPieces = append(slices.Clone(pathPieces), "a.md")

func only(e oracleEntry, k entryKind) []string {
	if e.kind != k {
		return nil
	}
	return []string{e.e}
}

// TestWitnessPieces_MeetEveryPairOfPieces checks the fuzz oracle's
// alphabet against the pieces the generators draw segments from.
func TestWitnessPieces_MeetEveryPairOfPieces(t *testing.T) {
	checkSegmentAlphabet(t, append(slices.Clone(globPieces), pathPieces...), witnessPieces, 4)
}

// checkSegmentAlphabet checks that alphabet is enough to spell a common
// path of entries made of the segment patterns pats: for every pair of them
// that some segment matches (by brute force over the literal ones and the
// strings of up to maxLen of the wildcard ones' characters and a stranger),
// a segment of alphabet matches both. Every segment of a common path can
// then be replaced by one of alphabet.
func checkSegmentAlphabet(t *testing.T, pats, alphabet []string, maxLen int) {
	t.Helper()
	chars := []string{"z"}
	var strs []string
	for _, p := range pats {
		if !strings.ContainsAny(p, "*?") {
			strs = append(strs, p)
			continue
		}
		for _, r := range p {
			if r != '*' && r != '?' && !slices.Contains(chars, string(r)) {
				chars = append(chars, string(r))
			}
		}
	}
	level := []string{""}
	for range maxLen {
		var next []string
		for _, s := range level {
			for _, c := range chars {
				next = append(next, s+c)
			}
		}
		strs, level = append(strs, next...), next
	}
	match := func(pat, s string) bool { ok, _ := path.Match(pat, s); return ok && s != "." && s != ".." }
	for i, x := range pats {
		for _, y := range pats[i:] {
			if x == "**" || y == "**" {
				continue
			}
			meet := slices.ContainsFunc(strs, func(s string) bool { return match(x, s) && match(y, s) })
			found := slices.ContainsFunc(alphabet, func(s string) bool { return match(x, s) && match(y, s) })
			if meet != found {
				t.Errorf("%q and %q: some segment matches both: %v; one of the alphabet does: %v", x, y, meet, found)
			}
		}
	}
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
