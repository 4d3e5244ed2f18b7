package coord

import (
	"strings"
	"unicode/utf8"
)

// Scope entries as sets of files (docs/claims.md). A scope is a set of
// normalised paths, and each entry is compiled to a pattern that matches
// exactly the paths it covers:
//
//   - a literal path P covers P and everything below it: P's segments and
//     a trailing "**";
//   - a file F covers F alone: its segments;
//   - a glob covers what it matches, nothing below: a segment that is
//     exactly "**" matches any number of segments, none included; "*"
//     elsewhere in a segment matches any run of characters, "/" aside; "?"
//     matches exactly one character, "/" aside. Every other character, "["
//     and "]" among them, is itself ("dir/**" names a subtree).
//
// Two entries overlap when some path matches both patterns; the check below
// decides that exactly, by intersecting the two patterns as automata over
// segments.

// patItem is one segment of a compiled pattern.
type patItem struct {
	kind patKind
	text string // the segment: the literal, or the segment pattern
}

type patKind uint8

const (
	patLiteral patKind = iota // the segment itself
	patSegment                // a segment with "*" or "?"
	patAny                    // "**": any number of segments
)

// pattern is a compiled scope entry: a literal path, a file or a glob.
type pattern []patItem

// isGlobMeta reports whether a segment holds a wildcard.
func isGlobMeta(seg string) bool { return strings.ContainsAny(seg, "*?") }

// IsGlob reports whether a normalised pattern holds a wildcard.
func IsGlob(p string) bool { return isGlobMeta(p) }

// compileLiteral compiles a literal path: every segment is itself, "*" and
// "?" included, then the subtree below it.
func compileLiteral(p string) pattern {
	return append(compileFile(p), patItem{kind: patAny})
}

// compileFile compiles a file: every segment is itself, and nothing below.
func compileFile(p string) pattern {
	var out pattern
	segments(p, func(seg string) bool {
		out = append(out, patItem{kind: patLiteral, text: seg})
		return true
	})
	return out
}

// compileGlob compiles a normalised glob.
func compileGlob(p string) pattern {
	var out pattern
	segments(p, func(seg string) bool {
		switch {
		case seg == "**":
			if len(out) == 0 || out[len(out)-1].kind != patAny { // "**/**" is "**"
				out = append(out, patItem{kind: patAny})
			}
		case isGlobMeta(seg):
			out = append(out, patItem{kind: patSegment, text: seg})
		default:
			out = append(out, patItem{kind: patLiteral, text: seg})
		}
		return true
	})
	return out
}

// prefix is the pattern's literal segments before its first wildcard,
// joined: where the scope index files it.
func (p pattern) prefix() []string {
	var out []string
	for _, it := range p {
		if it.kind != patLiteral {
			break
		}
		out = append(out, it.text)
	}
	return out
}

// itemsCommon reports whether some segment matches both items (a "**"
// item matches any one segment when it consumes one).
func itemsCommon(a, b patItem) bool {
	switch {
	case a.kind == patAny || b.kind == patAny:
		return true
	case a.kind == patLiteral && b.kind == patLiteral:
		return a.text == b.text
	case a.kind == patLiteral:
		return segmentMatch(b.text, a.text)
	case b.kind == patLiteral:
		return segmentMatch(a.text, b.text)
	}
	return segmentsIntersect(a.text, b.text)
}

// itemMatches reports whether the segment seg matches item it.
func itemMatches(it patItem, seg string) bool {
	switch it.kind {
	case patAny:
		return true
	case patLiteral:
		return it.text == seg
	}
	return segmentMatch(it.text, seg)
}

// segmentMatch reports whether the segment s matches the segment pattern
// pat ("*" any run, "?" one character): the classic greedy match that
// backtracks to the last "*", without allocating.
func segmentMatch(pat, s string) bool {
	pi, si := 0, 0
	starP, starS := -1, 0
	for si < len(s) {
		if pi < len(pat) {
			switch pc := pat[pi]; {
			case pc == '*':
				starP, starS = pi, si
				pi++
				continue
			case pc == '?':
				_, n := utf8.DecodeRuneInString(s[si:])
				pi, si = pi+1, si+n
				continue
			case pc == s[si]:
				pi, si = pi+1, si+1
				continue
			}
		}
		if starP < 0 {
			return false
		}
		_, n := utf8.DecodeRuneInString(s[starS:])
		starS += n
		pi, si = starP+1, starS
	}
	for pi < len(pat) && pat[pi] == '*' {
		pi++
	}
	return pi == len(pat)
}

type segTok struct {
	r    rune
	kind uint8 // 0 literal r, 1 "?", 2 "*"
}

func segTokens(p string) []segTok {
	var out []segTok
	for _, r := range p {
		switch {
		case r == '*':
			if len(out) == 0 || out[len(out)-1].kind != 2 {
				out = append(out, segTok{kind: 2})
			}
		case r == '?':
			out = append(out, segTok{kind: 1})
		default:
			out = append(out, segTok{r: r})
		}
	}
	return out
}

// segmentsIntersect reports whether some string matches both segment
// patterns: a search over pairs of positions, a "*" either skipped or
// consuming a character while staying put. If the only common string is
// "", both patterns are all "*" and every segment matches both.
func segmentsIntersect(a, b string) bool {
	// A common string starts with both literal heads and ends with both
	// literal tails: a cheap refusal before the search.
	ha, hb := a[:strings.IndexAny(a+"*", "*?")], b[:strings.IndexAny(b+"*", "*?")]
	if !strings.HasPrefix(ha, hb) && !strings.HasPrefix(hb, ha) {
		return false
	}
	sa, sb := a[strings.LastIndexAny(a, "*?")+1:], b[strings.LastIndexAny(b, "*?")+1:]
	if !strings.HasSuffix(sa, sb) && !strings.HasSuffix(sb, sa) {
		return false
	}
	ta, tb := segTokens(a), segTokens(b)
	if (len(ta)+1)*(len(tb)+1) > maxOverlapStates {
		return true // too costly to decide: conservatively, they may meet
	}
	return intersect(len(ta), len(tb),
		func(i int) bool { return ta[i].kind == 2 },
		func(j int) bool { return tb[j].kind == 2 },
		func(i, j int) bool { return ta[i].kind != 0 || tb[j].kind != 0 || ta[i].r == tb[j].r })
}

// patternsOverlap reports whether some path matches both patterns (is
// covered by both entries): their intersection is searched over pairs of
// item positions.
func patternsOverlap(a, b pattern) bool {
	if cheapDisjoint(a, b) {
		return false
	}
	la, lb := len(a), len(b)
	if (la+1)*(lb+1) > maxOverlapStates {
		return true // too costly to decide: conservatively, they overlap
	}
	return intersect(la, lb,
		func(i int) bool { return a[i].kind == patAny },
		func(j int) bool { return b[j].kind == patAny },
		func(i, j int) bool { return itemsCommon(a[i], b[j]) })
}

// intersect reports whether two sequences of la and lb items accept a
// common word, by a search over pairs of positions ((la+1)·(lb+1) at most).
// A star item (starA, starB) matches any run: the search skips it, or lets
// it consume an element and stays put; common(i, j) says items i and j may
// consume the same element. The segment search (characters) and the
// pattern search (segments) are both this.
func intersect(la, lb int, starA, starB func(int) bool, common func(i, j int) bool) bool {
	w := lb + 1
	seen := make([]bool, (la+1)*w)
	stack := []int{0}
	seen[0] = true
	push := func(i, j int) {
		if k := i*w + j; !seen[k] {
			seen[k] = true
			stack = append(stack, k)
		}
	}
	for len(stack) > 0 {
		k := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		i, j := k/w, k%w
		if i == la && j == lb {
			return true
		}
		sa, sb := i < la && starA(i), j < lb && starB(j)
		if sa {
			push(i+1, j)
		}
		if sb {
			push(i, j+1)
		}
		if i < la && j < lb && common(i, j) {
			ni, nj := i+1, j+1
			if sa {
				ni = i
			}
			if sb {
				nj = j
			}
			push(ni, nj)
		}
	}
	return false
}

// cheapDisjoint is the cheap common case, in O(length): before either
// pattern's first "**" their items sit at the same depth, and so do they
// after the last one counted from the end (the last segments of a common
// path match both last items: "src/**/*.go" and "src/**/*.txt" part there);
// two items there that no segment matches both make the patterns disjoint.
// So does a pattern without "**" (a fixed number of segments) shorter than
// the segments the other needs.
func cheapDisjoint(a, b pattern) bool {
	na, openA := a.minSegments()
	nb, openB := b.minSegments()
	if !openA && len(a) < nb || !openB && len(b) < na {
		return true
	}
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i].kind == patAny || b[i].kind == patAny {
			break
		}
		if !itemsCommon(a[i], b[i]) {
			return true
		}
	}
	for i, j := len(a)-1, len(b)-1; i >= 0 && j >= 0; i, j = i-1, j-1 {
		if a[i].kind == patAny || b[j].kind == patAny {
			break
		}
		if !itemsCommon(a[i], b[j]) {
			return true
		}
	}
	return false
}

// minSegments is how many segments a path matching p has at least (its
// items other than "**"), and whether it may have more (open: p holds a
// "**").
func (p pattern) minSegments() (n int, open bool) {
	for _, it := range p {
		if it.kind == patAny {
			open = true
		} else {
			n++
		}
	}
	return n, open
}

// reaches reports whether the pattern, filed at depth at (its literal
// prefix), matches a path at or below the path whose segments below that
// depth are rest: whether its automaton survives reading them (every item
// left matches some segment, "**" none). This is patternsOverlap with a
// literal path under the pattern's prefix, without the search.
func (p pattern) reaches(at int, rest []string) bool {
	at, rest, ok := p.aligned(at, rest)
	switch {
	case !ok:
		return false
	case len(rest) == 0:
		return true // p matches the path, or goes on below it
	case at == len(p):
		return false // p's matches end above the path
	}
	return len(p.read(p.startStates(at), rest)) > 0
}

// accepts reports whether the pattern, filed at depth at, matches exactly
// the path whose segments below that depth are rest: patternsOverlap with
// a file under the pattern's prefix.
func (p pattern) accepts(at int, rest []string) bool {
	at, rest, ok := p.aligned(at, rest)
	switch {
	case !ok:
		return false
	case at == len(p):
		return len(rest) == 0
	}
	return p.read(p.startStates(at), rest).accepting(p)
}

// aligned reads the segments rest from position at while the pattern's
// items are not "**" (no search needed there); ok is false when one does
// not match.
func (p pattern) aligned(at int, rest []string) (int, []string, bool) {
	for len(rest) > 0 && at < len(p) && p[at].kind != patAny {
		if !itemMatches(p[at], rest[0]) {
			return at, rest, false
		}
		at, rest = at+1, rest[1:]
	}
	return at, rest, true
}

// read returns the states after reading the segments rest from s; empty
// when no path below can match.
func (p pattern) read(s patternStates, rest []string) patternStates {
	for _, seg := range rest {
		if s = p.step(s, seg); len(s) == 0 {
			return nil
		}
	}
	return s
}

// accepting reports whether the states include the pattern's end: the path
// read so far matches it.
func (s patternStates) accepting(p pattern) bool { return containsInt(s, len(p)) }

// maxOverlapStates bounds the searches above (pairs of positions), so a
// client cannot make a scope check cost much with very long patterns: past
// it the answer is "overlap", which is safe (never a false "no conflict").
// Patterns people write stay far below it (a segment of 250 characters
// against another, 30 segments against 30).
var maxOverlapStates = 1 << 16

// patternStates is a set of positions in a pattern: where a walk down the
// scope trie may be in the pattern. Position len(p) is its end: the path
// read so far matches it, and nothing below does unless another position
// survives.
type patternStates []int

// startStates are the positions after the pattern's first k items, closed
// over skipped "**".
func (p pattern) startStates(k int) patternStates {
	return p.close(patternStates{k})
}

func (p pattern) close(s patternStates) patternStates {
	for i := 0; i < len(s); i++ {
		if at := s[i]; at < len(p) && p[at].kind == patAny && !containsInt(s, at+1) {
			s = append(s, at+1)
		}
	}
	return s
}

// step returns the positions after reading one more segment; empty when no
// path below can match.
func (p pattern) step(s patternStates, seg string) patternStates {
	var out patternStates
	for _, at := range s {
		next := at + 1
		switch {
		case at == len(p):
			continue // the end: no segment follows a match
		case p[at].kind == patAny:
			next = at
		case !itemMatches(p[at], seg):
			continue
		}
		if !containsInt(out, next) {
			out = append(out, next)
		}
	}
	return p.close(out)
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// GlobCovers reports whether a normalised glob covers a normalised path:
// the path matches it (a glob covers its matches, nothing below them).
func GlobCovers(glob, path string) bool {
	return compileGlob(glob).accepts(0, splitPath(path))
}
