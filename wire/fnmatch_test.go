package wire

import (
	"strings"
	"testing"
)

// Expected values are Python 3.12 fnmatch.fnmatchcase results.
func TestFnmatch_PythonFnmatchcaseSemantics(t *testing.T) {
	cases := []struct {
		name, pat string
		want      bool
	}{
		{"proj/a", "proj/*", true},
		{"proj/a/b", "proj/*", true}, // '*' crosses '/'
		{"proj", "proj/*", false},
		{"proj/a", "*", true},
		{"", "*", true},
		{"", "", true},
		{"a", "", false},
		{"proj/a", "proj/?", true},
		{"proj/ab", "proj/?", false},
		{"proj/a", "proj/[ab]", true},
		{"proj/c", "proj/[!ab]", true},
		{"proj/a", "proj/[!ab]", false},
		{"proj/x", "proj/[a-z]", true},
		{"proj/X", "proj/[a-z]", false}, // case-sensitive
		{"Proj/a", "proj/*", false},
		{"a]", "[]]]", false},
		{"]", "[]]", true},
		{"!", "[!]", false},
		{"[a", "[a", true}, // unclosed bracket is a literal
		{`a\b`, `a\b`, true},
		{`a*b`, `a\*b`, false}, // no backslash escapes: '\' is literal, '*' a star
		{`a\xb`, `a\*b`, true},
		{"aXbXc", "a*b*c", true},
		{"abcabd", "*abd", true},
		{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaab", "*a*a*a*a*a*a*c", false},
		{"z", "[z-a]", false},
		{"-", "[a-]", true},
		{"é", "?", true},
		{"proj/a", "proj/a", true}, // literal patterns: the name itself only
		{"proj/a", "proj/A", false},
		{"proj/ab", "proj/a", false},
		{"a\xffb", "a\xfeb", true}, // invalid bytes compare as U+FFFD, as Fnmatch always did
		{"a\xffb", "a\uFFFDb", true},
		// A '!' bared by dropping a reversed range negates (found by
		// FuzzFnmatch; checked against CPython 3.11's fnmatchcase).
		{"y", "[c-a!x]", true},
		{"x", "[c-a!x]", false},
		{"!", "[c-a!x]", true},
		{"q", "[c-a!-z]", true},
		{"-", "[c-a!-z]", false},
		{"y", "[c-ab-a!x]", true},
		{"!", "[xc-a!y]", true}, // not bared: a literal
		{"q", "[c-a!]", true},
		{"!", "[!c-a!x]", false}, // negated once only
	}
	for _, c := range cases {
		if got := Fnmatch(c.name, c.pat); got != c.want {
			t.Errorf("Fnmatch(%q, %q) = %v, want %v", c.name, c.pat, got, c.want)
		}
	}
}

func TestLiteral_OnlyPatternsThatMatchThemselves(t *testing.T) {
	for pat, want := range map[string]bool{
		"proj/a": true, "proj": true, "": true, `a\b`: true, "é": true,
		"proj/*": false, "proj/?": false, "proj/[ab]": false, "[a": false,
		"a\xffb": false, "a\uFFFDb": false,
	} {
		if got := Literal(pat); got != want {
			t.Errorf("Literal(%q) = %v, want %v", pat, got, want)
		}
	}
}

// A glob target's literal prefix begins every name it matches, so the hub
// may find a chat's recipients by range over sorted names (INV-DG-1: none is
// missed).
func TestGlobPrefix_BeginsEveryMatch_INV_DG_1(t *testing.T) {
	names := []string{"p/a", "p/ab", "p/b", "q/a", "p/\xffx", "p/ä1", ""}
	for _, g := range []string{"p/*", "p/a*", "p/?", "*", "p/[ab]*", "p/ä*", "p/\xff*", "q/a"} {
		prefix := GlobPrefix(g)
		for _, n := range names {
			if Fnmatch(n, g) && !strings.HasPrefix(n, prefix) {
				t.Errorf("%q matches %q but does not begin with its prefix %q", n, g, prefix)
			}
		}
	}
	if PrefixedTarget("p/*, *") || !PrefixedTarget("p/*, q/a") {
		t.Error("PrefixedTarget: a bare * has no prefix; p/* and a name do")
	}
}
