package access

import "strings"

// Match reports whether s matches pattern: '*' matches any run of bytes
// ('/' included, so "alpha/*" matches "alpha/x" and "alpha/x/y"), '?'
// exactly one byte, and every other byte itself. There are no character
// classes and no escapes, so every string is a valid pattern. The match
// is linear in len(pattern)+len(s) times the backtracking of the last
// '*' only (the classic greedy algorithm).
func Match(pattern, s string) bool {
	if !strings.ContainsAny(pattern, "*?") {
		return pattern == s
	}
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]) && pattern[p] != '*':
			p++
			i++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// literalNamespace is the namespace every name a principal pattern matches
// lies in, when the pattern fixes one: the part before the first '/' if it
// has no wildcard ("alpha/*" → "alpha"), "" for a bare name without
// wildcards ("alpha", whose namespace is ""). ok is false when the pattern
// can match names of several namespaces ("*", "al*/x", "*/reviewer").
func literalNamespace(pattern string) (ns string, ok bool) {
	if i := strings.IndexByte(pattern, '/'); i >= 0 {
		if strings.ContainsAny(pattern[:i], "*?") {
			return "", false
		}
		return pattern[:i], true
	}
	if strings.ContainsAny(pattern, "*?") {
		return "", false
	}
	return "", true
}

// NamespaceOf is a name's namespace: everything before the first '/', ""
// for a bare name (PROTOCOL.md §1.7; coord.NamespaceOf says the same).
func NamespaceOf(name string) string {
	if i := strings.IndexByte(name, '/'); i >= 0 {
		return name[:i]
	}
	return ""
}

// glob is a compiled pattern: a pattern without '?' is split at its '*'s,
// so a match is a prefix test, a suffix test and a strings.Index for each
// part between (leftmost is right for '*' alone), instead of Match's
// backtracking. Patterns with '?' use Match.
type glob struct {
	pattern string
	parts   []string // nil: compare with Match
	exact   bool
}

func compileGlob(pattern string) glob {
	g := glob{pattern: pattern}
	switch {
	case !strings.ContainsAny(pattern, "*?"):
		g.exact = true
	case !strings.Contains(pattern, "?"):
		g.parts = strings.Split(pattern, "*")
	}
	return g
}

func (g *glob) match(s string) bool {
	switch {
	case g.exact:
		return g.pattern == s
	case g.parts == nil:
		return Match(g.pattern, s)
	}
	first, last := g.parts[0], g.parts[len(g.parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[len(first) : len(s)-len(last)]
	for _, part := range g.parts[1 : len(g.parts)-1] {
		i := strings.Index(s, part)
		if i < 0 {
			return false
		}
		s = s[i+len(part):]
	}
	return true
}
