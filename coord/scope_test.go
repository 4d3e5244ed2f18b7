package coord_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/synapse-hub/synapse/coord"
)

func TestNormalizePath_PROTOCOL_3_4(t *testing.T) {
	long := strings.Repeat("a/", 2047) + "bc" // 4096 chars
	cases := []struct {
		name, in, want string
	}{
		{"plain", "src/core/a.py", "src/core/a.py"},
		{"surrounding white space stripped", " \t src/a \n", "src/a"},
		{"backslashes become slashes", `src\core\a.py`, "src/core/a.py"},
		{"leading slash is the root", "/etc/passwd", ""},
		{"leading backslash is the root", `\etc`, ""},
		{"dot-dot segment is the root", "src/../secret", ""},
		{"trailing dot-dot is the root", "src/..", ""},
		{"dot-dot via backslashes is the root", `src\..\x`, ""},
		{"dot-dot prefix of a name is a name", "src/..hidden", "src/..hidden"},
		{"dot segments dropped", "./src/./a", "src/a"},
		{"empty segments dropped", "src//a///b/", "src/a/b"},
		{"only dots is the root", "./.", ""},
		{"empty is the root", "", ""},
		{"blank is the root", "   ", ""},
		{"4096 chars kept", long, long},
		{"4097 chars is the root", long + "d", ""},
		{"NUL is not printable", "src/a\x00b", ""},
		{"inner tab is not printable", "src/a\tb", ""},
		{"DEL is not printable", "src/a\x7fb", ""},
		{"inner space is printable", "src/a b", "src/a b"},
		{"unicode is printable", "src/é/ü.go", "src/é/ü.go"},
		{"case kept", "Src/A", "Src/A"},
		{"globs are literal", "src/*.go", "src/*.go"},
		// Found by FuzzPathOverlap: these gave " a" and "a/ ", which a
		// second pass turns into "a" — not idempotent.
		{"white space bared by a dot segment is the root", "./ a", ""},
		{"white space bared by a trailing dot is the root", "a/ /.", ""},
		{"white space inside a segment is kept", "a/ b /c", "a/ b /c"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := coord.NormalizePath(c.in, 4096); got != c.want {
				t.Fatalf("NormalizePath(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
	if got := coord.NormalizePath("abcdef", 5); got != "" {
		t.Fatalf("maxLen is honoured: %q", got)
	}
}

// TestNormalizePath_LengthCountsCharacters: the 4096 limit is in characters
// (PROTOCOL.md §3.2 "max path length 4096 chars"; the reference's Python
// len()), not in UTF-8 bytes.
func TestNormalizePath_LengthCountsCharacters(t *testing.T) {
	p := strings.Repeat("é", 4096) // 4096 chars, 8192 bytes
	if got := coord.NormalizePath(p, 4096); got != p {
		t.Fatalf("a 4096-character path was widened to %q", got)
	}
	if got := coord.NormalizePath(p+"é", 4096); got != "" {
		t.Fatal("a 4097-character path was kept")
	}
}

func TestNormalizePaths_PROTOCOL_3_4(t *testing.T) {
	def := coord.DefaultLimits()
	distinct := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("f/%d", i)
		}
		return out
	}
	cases := []struct {
		name string
		in   []string
		want []string
	}{
		{"nil is the whole worktree", nil, nil},
		{"empty is the whole worktree", []string{}, nil},
		{"normalised in declaration order", []string{"b/", `a\x`}, []string{"b", "a/x"}},
		{"duplicates dropped, first kept", []string{"b", "a", "./b", "b/", "a"}, []string{"b", "a"}},
		{"a root entry widens the set", []string{"src/a", "", "src/b"}, nil},
		{"an escaping entry widens the set", []string{"src/a", "../up"}, nil},
		{"an absolute entry widens the set", []string{"src/a", "/abs"}, nil},
		{"a too long entry widens the set", []string{"src/a", strings.Repeat("x", 4097)}, nil},
		{"a non-printable entry widens the set", []string{"src/a", "bad\x01"}, nil},
		{"512 distinct paths kept", distinct(512), distinct(512)},
		{"513 distinct paths widen", distinct(513), nil},
		{"513 entries with a duplicate are 512 distinct", append(distinct(512), "f/0"), distinct(512)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := coord.NormalizePaths(c.in, def)
			if !slices.Equal(got, c.want) || (c.want == nil) != (len(got) == 0) {
				t.Fatalf("NormalizePaths = %q, want %q", got, c.want)
			}
		})
	}
	small := coord.Limits{MaxPathsPerClaim: 2, MaxPathLength: 8}
	if got := coord.NormalizePaths([]string{"a", "b"}, small); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("at MaxPathsPerClaim: %q", got)
	}
	if got := coord.NormalizePaths([]string{"a", "b", "c"}, small); got != nil {
		t.Fatalf("past MaxPathsPerClaim: %q", got)
	}
	if got := coord.NormalizePaths([]string{"a", "123456789"}, small); got != nil {
		t.Fatalf("past MaxPathLength: %q", got)
	}
}

func TestPathsOverlap_ReflexiveSymmetricAncestry_INV_ME_2(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"src/a", "src/a", true},
		{"src", "src/a", true},
		{"src", "src/a/b/c", true},
		{"", "src/a", true},
		{"", "", true},
		{"src/a", "src/ab", false},
		{"src/a", "src/a.go", false},
		{"src/ab", "src/a/b", false},
		{"src/a", "src/b", false},
		{"src", "src2/x", false},
		{"a/b", "b", false},
		{"Src", "src", false},
	}
	for _, c := range cases {
		if got := coord.PathsOverlap(c.a, c.b); got != c.want {
			t.Errorf("PathsOverlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := coord.PathsOverlap(c.b, c.a); got != c.want {
			t.Errorf("PathsOverlap(%q, %q) = %v, want %v (symmetry)", c.b, c.a, got, c.want)
		}
		for _, p := range []string{c.a, c.b} {
			if !coord.PathsOverlap(p, p) {
				t.Errorf("PathsOverlap(%q, %q) = false (reflexivity)", p, p)
			}
		}
	}
	// Exhaustive over a small vocabulary: symmetry, reflexivity and the
	// definition by "/"-bounded prefix.
	vocab := randomPaths(rand.New(rand.NewPCG(1, 2)), 200)
	for _, a := range vocab {
		for _, b := range vocab {
			want := a == b || a == "" || b == "" || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
			if got := coord.PathsOverlap(a, b); got != want || got != coord.PathsOverlap(b, a) {
				t.Fatalf("PathsOverlap(%q, %q) = %v, want %v", a, b, got, want)
			}
		}
	}
}

func TestScopesConflict_Worktrees_INV_ME_3_INV_ME_4(t *testing.T) {
	cases := []struct {
		name   string
		wa     string
		pa     []string
		wb     string
		pb     []string
		expect bool
	}{
		{"different worktrees, same paths", "/wt/a", []string{"src"}, "/wt/b", []string{"src"}, false},
		{"different worktrees, both whole", "/wt/a", nil, "/wt/b", nil, false},
		{"default vs named worktree", "", nil, "/wt/b", []string{"x"}, false},
		{"whole vs a path", "/wt", nil, "/wt", []string{"deep/file"}, true},
		{"a path vs whole", "/wt", []string{"deep/file"}, "/wt", nil, true},
		{"whole vs whole", "", nil, "", nil, true},
		{"empty slice is whole", "", []string{}, "", []string{"a"}, true},
		{"disjoint paths", "", []string{"a", "b"}, "", []string{"c", "ab"}, false},
		{"any overlapping pair", "", []string{"a", "b/c"}, "", []string{"z", "b"}, true},
	}
	for _, c := range cases {
		if got := coord.ScopesConflict(c.wa, c.pa, c.wb, c.pb); got != c.expect {
			t.Errorf("%s: ScopesConflict = %v, want %v", c.name, got, c.expect)
		}
		if got := coord.ScopesConflict(c.wb, c.pb, c.wa, c.pa); got != c.expect {
			t.Errorf("%s (swapped): ScopesConflict = %v, want %v", c.name, got, c.expect)
		}
	}
}

func TestClaim_DifferentWorktreesNeverContend_INV_ME_3(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.claimIn("A", "T1", "/wt/a")
	r.claimIn("B", "T2", "/wt/b")
	r.claimIn("C", "T3", "/wt/c", "src")
	r.claimIn("D", "T4", "", "src")
	r.refused(coord.ClaimRequest{Agent: "E", TaskID: "T5", Worktree: "/wt/a", Paths: []string{"x"}},
		coord.CodeScopeConflict, "Task 'T5' file scope conflicts with 'T1' held by A.")
}

// randomPaths draws normalised paths from a small vocabulary, so overlaps,
// shared prefixes like "a" and "ab", and deep nesting are common.
func randomPaths(rng *rand.Rand, n int) []string {
	segs := []string{"a", "ab", "b", "a.go", "c"}
	out := make([]string, n)
	for i := range out {
		depth := 1 + rng.IntN(4)
		parts := make([]string, depth)
		for j := range parts {
			parts[j] = segs[rng.IntN(len(segs))]
		}
		out[i] = strings.Join(parts, "/")
	}
	return out
}

func randomScope(rng *rand.Rand) (string, []string) {
	worktree := []string{"", "/wt/1", "/wt/2"}[rng.IntN(3)]
	if rng.IntN(12) == 0 {
		return worktree, nil // whole worktree
	}
	return worktree, randomPaths(rng, 1+rng.IntN(3))
}

// TestScopeIndex_AgreesWithBruteForce_INV_ME_2_INV_ME_3_INV_ME_4 is a
// differential test of the trie index: after random claims, renewals that
// move scopes, handoffs, releases and expirations, Decide's SCOPE_CONFLICT
// verdict for a random new scope must equal a scan of State.Claims() with
// ScopesConflict, and the holder it names must be a real conflict.
func TestScopeIndex_AgreesWithBruteForce_INV_ME_2_INV_ME_3_INV_ME_4(t *testing.T) {
	agents := []string{"A", "B", "C", "D", "E", "F"}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		s := coord.New(coord.Limits{})
		now := t0
		checks, conflicts := 0, 0
		for op := range 600 {
			now += float64(rng.IntN(5))
			s.Tick(now)
			agent := agents[rng.IntN(len(agents))]
			task := fmt.Sprintf("T%d", rng.IntN(80))
			switch k := rng.IntN(10); {
			case k < 5: // claim or renew, possibly with a new scope
				wt, paths := randomScope(rng)
				s.Step(coord.ClaimRequest{Agent: agent, TaskID: task, Worktree: wt, Paths: paths,
					TTL: float64(30 + rng.IntN(90)), HasTTL: true}, now)
			case k < 7:
				if c := s.Claim(task); c != nil {
					s.Step(coord.ReleaseRequest{Agent: c.Owner, TaskID: task}, now)
				}
			case k < 8:
				if c := s.Claim(task); c != nil {
					s.Step(coord.HandoffRequest{Agent: c.Owner, TaskID: task, To: agent, ToOnline: true}, now)
				}
			default: // probe with a fresh task id
				checks++
				if checkScopeVerdict(t, s, rng, agent, fmt.Sprintf("probe-%d", op), now) {
					conflicts++
				}
			}
			assertNoConflictingPair(t, s, now)
		}
		// Probe again after everything has expired: the pruned trie must
		// report no conflict at all.
		now += 4000 // handoffs carry the default 3600 s lease
		s.Tick(now)
		if s.ClaimCount() != 0 {
			t.Fatalf("seed %d: %d claims outlived their leases", seed, s.ClaimCount())
		}
		for i := range 20 {
			if checkScopeVerdict(t, s, rng, "A", fmt.Sprintf("late-%d", i), now) {
				t.Fatalf("seed %d: conflict reported on an empty registry", seed)
			}
		}
		if checks < 50 || conflicts == 0 || conflicts == checks {
			t.Fatalf("seed %d: weak run, %d probes, %d conflicts", seed, checks, conflicts)
		}
	}
}

// checkScopeVerdict probes one random scope and reports whether it conflicted.
func checkScopeVerdict(t *testing.T, s *coord.State, rng *rand.Rand, agent, task string, now float64) bool {
	t.Helper()
	wt, paths := randomScope(rng)
	norm := coord.NormalizePaths(paths, s.Limits())
	var holders []string
	for _, c := range s.Claims() {
		if c.Owner != agent && c.TaskID != task && c.Live(now) && coord.ScopesConflict(wt, norm, c.Worktree, c.Paths) {
			holders = append(holders, fmt.Sprintf("Task '%s' file scope conflicts with '%s' held by %s.", task, c.TaskID, c.Owner))
		}
	}
	_, ref := s.Decide(coord.ClaimRequest{Agent: agent, Principal: "probe:" + task, TaskID: task, Worktree: wt, Paths: paths}, now)
	got := ref != nil && ref.Code == coord.CodeScopeConflict
	if ref != nil && !got {
		t.Fatalf("probe %s refused with %v", task, ref)
	}
	if got != (len(holders) > 0) {
		t.Fatalf("scope %q %q by %s: index says conflict=%v, brute force finds %q", wt, paths, agent, got, holders)
	}
	if got && !slices.Contains(holders, ref.Message) {
		t.Fatalf("index names %q, not among the real conflicts %q", ref.Message, holders)
	}
	return got
}

// assertNoConflictingPair: no two different owners hold conflicting live
// scopes (INV-ME-2 consequence stated in the spec).
func assertNoConflictingPair(t *testing.T, s *coord.State, now float64) {
	t.Helper()
	cs := s.Claims()
	for i, a := range cs {
		if !a.Live(now) {
			t.Fatalf("claim %s not live after Tick(%v)", a.TaskID, now)
		}
		for _, b := range cs[i+1:] {
			if a.Owner != b.Owner && coord.ScopesConflict(a.Worktree, a.Paths, b.Worktree, b.Paths) {
				t.Fatalf("conflicting live pair: %v and %v", a, b)
			}
		}
	}
}

// TestScopeIndex_ReplayedRootPathBlocksItsWorktree_INV_ME_4: a claim whose
// stored paths name the root "" (as a replayed reference event may) covers
// its whole worktree, as ScopesConflict says: a path claim there conflicts.
func TestScopeIndex_ReplayedRootPathBlocksItsWorktree_INV_ME_4(t *testing.T) {
	r := newRig(t, coord.Limits{})
	root := &coord.Claim{TaskID: "R", Owner: "A", Worktree: "/wt", Paths: []string{"docs", ""}, QuotaPrincipal: "legacy-agent:A",
		ClaimedAt: t0, ExpiresAt: t0 + 60, Epoch: 1}
	r.s.Apply(coord.ClaimGranted{Claim: root})
	if !coord.ScopesConflict("/wt", []string{"src/x"}, root.Worktree, root.Paths) {
		t.Fatal("oracle: the root entry must conflict")
	}
	r.refused(coord.ClaimRequest{Agent: "B", TaskID: "T2", Worktree: "/wt", Paths: []string{"src/x"}},
		coord.CodeScopeConflict, "Task 'T2' file scope conflicts with 'R' held by A.")
}

// FuzzPathOverlap: NormalizePath is idempotent and gives a normalised path;
// NormalizePaths is idempotent, bounded and gives distinct normalised paths;
// PathsOverlap is reflexive, symmetric and agrees with the spec's definition
// (shadowOverlap: one path's segments are a prefix of the other's, or either
// is the root); ScopesConflict, on the inputs split at ',', is symmetric,
// reflexive and agrees with INV-ME-2..4 written out (shadowConflict).
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
		a, b := coord.NormalizePath(rawA, maxLen), coord.NormalizePath(rawB, maxLen)
		for _, c := range [][2]string{{rawA, a}, {rawB, b}} {
			if !normalised(c[1]) {
				t.Fatalf("NormalizePath(%q) = %q is not normalised", c[0], c[1])
			}
			if again := coord.NormalizePath(c[1], maxLen); again != c[1] {
				t.Fatalf("NormalizePath is not idempotent: %q → %q → %q", c[0], c[1], again)
			}
		}
		if !coord.PathsOverlap(a, a) || !coord.PathsOverlap(b, b) {
			t.Fatalf("INV-ME-2: overlap is not reflexive for %q or %q", a, b)
		}
		ab, ba := coord.PathsOverlap(a, b), coord.PathsOverlap(b, a)
		if ab != ba {
			t.Fatalf("INV-ME-2: PathsOverlap(%q, %q) = %v but reversed %v", a, b, ab, ba)
		}
		if want := shadowOverlap(a, b); ab != want {
			t.Fatalf("INV-ME-2: PathsOverlap(%q, %q) = %v, by definition %v", a, b, ab, want)
		}

		lim := coord.Limits{MaxPathLength: maxLen, MaxPathsPerClaim: 4}
		pa := coord.NormalizePaths(strings.Split(rawA, ","), lim)
		pb := coord.NormalizePaths(strings.Split(rawB, ","), lim)
		for _, ps := range [][]string{pa, pb} {
			if len(ps) > lim.MaxPathsPerClaim {
				t.Fatalf("NormalizePaths kept %d paths, more than %d", len(ps), lim.MaxPathsPerClaim)
			}
			for i, p := range ps {
				if p == "" || !normalised(p) || slices.Contains(ps[:i], p) {
					t.Fatalf("NormalizePaths gave %q: %q is empty, unnormalised or repeated", ps, p)
				}
			}
			if again := coord.NormalizePaths(ps, lim); !slices.Equal(again, ps) {
				t.Fatalf("NormalizePaths is not idempotent: %q → %q", ps, again)
			}
		}
		got := coord.ScopesConflict(wtA, pa, wtB, pb)
		if rev := coord.ScopesConflict(wtB, pb, wtA, pa); rev != got {
			t.Fatalf("ScopesConflict is not symmetric: %q %q vs %q %q", wtA, pa, wtB, pb)
		}
		if want := shadowConflict(wtA, pa, wtB, pb); got != want {
			t.Fatalf("ScopesConflict(%q %q, %q %q) = %v, by definition %v", wtA, pa, wtB, pb, got, want)
		}
		if !coord.ScopesConflict(wtA, pa, wtA, pa) {
			t.Fatalf("a scope does not conflict with itself: %q %q", wtA, pa)
		}
	})
}

// normalised reports what PROTOCOL.md §3.4 promises of a normalised path:
// relative, slash-separated, printable, no empty, "." or ".." segment, and
// nothing a second pass would strip.
func normalised(p string) bool {
	if p == "" {
		return true
	}
	edge := func(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }
	if strings.ContainsRune(p, '\\') || strings.TrimFunc(p, edge) != p {
		return false
	}
	for _, r := range p {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	for _, s := range strings.Split(p, "/") {
		if s == "" || s == "." || s == ".." {
			return false
		}
	}
	return true
}
