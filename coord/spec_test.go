package coord_test

// The drift guard binds the normative spec (docs/spec/coordination-spec.txt,
// a copy of the seed) and docs/spec-map.md to the code: it fails when a
// normative constant the core owns disagrees with the code, when a rule the
// core must uphold has no row in the spec map, or when the map names a test
// that does not exist.

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

const (
	specPath    = "../docs/spec/coordination-spec.txt"
	specMapPath = "../docs/spec-map.md"
	seedPath    = "../../shared/seeds/coordination-spec.txt"
)

// normativeConstants parses the spec's "Normative constants" table:
// rows of "`NAME`<tab>`value` note<tab>`source`".
func normativeConstants(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatalf("read the spec: %v", err)
	}
	_, table, ok := strings.Cut(string(raw), "Normative constants")
	if !ok {
		t.Fatal("the spec has no Normative constants table")
	}
	row := regexp.MustCompile("(?m)^`?([^`\t\n]+?)`?\t`([^`]*)`")
	out := make(map[string]string)
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		out[m[1]] = m[2]
	}
	return out
}

func TestSpecConstants_MatchTheCore_DriftGuard(t *testing.T) {
	consts := normativeConstants(t)
	def := coord.DefaultLimits()
	owned := []struct {
		name string
		code float64
		lim  float64 // what DefaultLimits enforces
	}{
		{"MINIMUM_TTL_SECONDS", coord.MinimumTTLSeconds, def.MinTTL},                          // INV-LL-3
		{"MAXIMUM_TTL_SECONDS", coord.MaximumTTLSeconds, def.MaxTTL},                          // INV-LL-3
		{"default lease TTL", coord.DefaultTTLSeconds, def.DefaultTTL},                        // INV-LL-3
		{"MAX_CLAIMS_PER_AGENT", coord.MaxClaimsPerAgent, float64(def.MaxClaimsPerPrincipal)}, // INV-ME-5
		{"MAX_DECLARED_PATHS", coord.MaxDeclaredPaths, float64(def.MaxPathsPerClaim)},
		{"DEFAULT_RESOURCE_TTL_SECONDS", coord.DefaultResourceTTLSeconds, def.ResourceTTL},
	}
	for _, c := range owned {
		v, ok := consts[c.name]
		if !ok {
			t.Errorf("the spec's constants table has no row %q", c.name)
			continue
		}
		spec, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Errorf("%s: spec value %q is not a number", c.name, v)
			continue
		}
		if spec != c.code || spec != c.lim {
			t.Errorf("%s: spec says %v, code constant %v, default limit %v", c.name, spec, c.code, c.lim)
		}
	}
	wt, ok := consts["DEFAULT_WORKTREE"]
	if !ok || wt != `""` || coord.DefaultWorktree != "" {
		t.Errorf("DEFAULT_WORKTREE: spec %q (present %v), code %q", wt, ok, coord.DefaultWorktree)
	}
}

// TestSpecCopy_MatchesTheSeed keeps the repository's copy of the spec equal
// to the seed it was taken from, where the seed is beside the checkout (it
// is in CI and in every session).
func TestSpecCopy_MatchesTheSeed(t *testing.T) {
	seed, err := os.ReadFile(seedPath)
	if err != nil {
		t.Logf("no seed beside the checkout (%v): comparing nothing", err)
		return
	}
	ours, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(seed, ours) {
		t.Fatalf("docs/spec/coordination-spec.txt differs from %s: copy the seed again and re-check the spec map", seedPath)
	}
}

// requiredRules are the rules whose enforcement has landed; each must have
// a spec-map row naming at least one existing test.
var requiredRules = []string{
	"INV-ME-1", "INV-ME-2", "INV-ME-3", "INV-ME-4", "INV-ME-5",
	"INV-EF-1", "INV-EF-2", "INV-EF-3",
	"INV-LL-1", "INV-LL-2", "INV-LL-3", "INV-LL-4",
	"INV-CR-2", "INV-CR-3",
	"INV-JA-1", "INV-JA-2", "INV-JA-3", "INV-JA-4",
	"INV-RR-1", "INV-RR-2", "INV-RR-3",
	"INV-CR-1", "INV-DG-2", "INV-CK-1",
	"INV-DG-1", "INV-DG-3", "INV-CK-2",
	"INV-CR-4", "INV-MH-1", "INV-MH-2", "INV-MH-3", "INV-MH-4",
}

func TestSpecMap_CoversEveryRuleWithRealTests(t *testing.T) {
	raw, err := os.ReadFile(specMapPath)
	if err != nil {
		t.Fatalf("read the spec map: %v", err)
	}
	spec, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	tests := testFunctions(t, "..")
	rows := make(map[string][]string) // rule → tests named in its row
	testName := regexp.MustCompile(`\b(Test[A-Za-z0-9_]+|Fuzz[A-Za-z0-9_]+)\b`)
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "| INV-") {
			continue
		}
		cells := strings.Split(line, "|")
		rule := strings.TrimSpace(cells[1])
		if !strings.Contains(string(spec), rule+" —") {
			t.Errorf("spec map row %s names a rule the spec does not have", rule)
		}
		for _, name := range testName.FindAllString(line, -1) {
			if !tests[name] {
				t.Errorf("spec map row %s names %s, which no test file defines", rule, name)
			}
			rows[rule] = append(rows[rule], name)
		}
		if _, seen := rows[rule]; !seen {
			rows[rule] = nil
		}
	}
	for _, rule := range requiredRules {
		if len(rows[rule]) == 0 {
			t.Errorf("%s: no spec map row names a test that pins it", rule)
		}
	}
}

// testFunctions returns the names of every Test and Fuzz function under root.
func testFunctions(t *testing.T, root string) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	out := make(map[string]bool)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
				out[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
