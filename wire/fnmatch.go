package wire

import (
	"strings"
	"unicode/utf8"
)

// Fnmatch reports whether name matches pattern with the semantics of
// Python's fnmatch.fnmatchcase, which the reference uses for chat targets
// (PROTOCOL.md §2.2, §9.3): case-sensitive; '*' matches any run of
// characters, '/' included; '?' one character; '[seq]' and '[!seq]' a
// character class with a-z ranges; a '[' without its ']' is a literal; no
// backslash escapes. path.Match differs on every one of the '/', '!' and
// '\' points.
func Fnmatch(name, pattern string) bool {
	if Literal(pattern) {
		return name == pattern
	}
	toks := compileGlob(pattern)
	s := []rune(name)
	// Greedy match with backtracking to the last star: linear in practice,
	// O(len(s)·len(toks)) at worst, never exponential.
	si, ti := 0, 0
	star, starS := -1, 0
	for si < len(s) {
		if ti < len(toks) && toks[ti].kind != tokStar && toks[ti].match(s[si]) {
			si++
			ti++
			continue
		}
		if ti < len(toks) && toks[ti].kind == tokStar {
			star, starS = ti, si
			ti++
			continue
		}
		if star >= 0 {
			starS++
			si, ti = starS, star+1
			continue
		}
		return false
	}
	for ti < len(toks) && toks[ti].kind == tokStar {
		ti++
	}
	return ti == len(toks)
}

// HasGlob reports whether a target part is a glob with '*' (an "audience"
// message in the reference: never dead-lettered, never replayed).
func HasGlob(target string) bool {
	for i := 0; i < len(target); i++ {
		if target[i] == '*' {
			return true
		}
	}
	return false
}

// Literal reports whether an fnmatch pattern matches only the name spelled
// like it: it has no '*', '?' or '[', and is valid UTF-8 without U+FFFD
// (Fnmatch compares runes, and every invalid byte of a name decodes to
// U+FFFD). Chat routing resolves such targets by lookup instead of a scan.
func Literal(pattern string) bool {
	return !strings.ContainsAny(pattern, "*?[\uFFFD") && utf8.ValidString(pattern)
}

type tokKind uint8

const (
	tokLit tokKind = iota
	tokAny
	tokStar
	tokClass
)

type globTok struct {
	kind   tokKind
	lit    rune
	negate bool
	ranges [][2]rune
}

func (t *globTok) match(c rune) bool {
	switch t.kind {
	case tokLit:
		return c == t.lit
	case tokAny:
		return true
	case tokClass:
		in := false
		for _, r := range t.ranges {
			if r[0] <= c && c <= r[1] {
				in = true
				break
			}
		}
		return in != t.negate
	}
	return false
}

func compileGlob(pattern string) []globTok {
	p := []rune(pattern)
	var toks []globTok
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*':
			if len(toks) == 0 || toks[len(toks)-1].kind != tokStar {
				toks = append(toks, globTok{kind: tokStar})
			}
		case '?':
			toks = append(toks, globTok{kind: tokAny})
		case '[':
			j := i + 1
			if j < len(p) && p[j] == '!' {
				j++
			}
			if j < len(p) && p[j] == ']' {
				j++
			}
			for j < len(p) && p[j] != ']' {
				j++
			}
			if j >= len(p) { // no closing bracket: a literal '['
				toks = append(toks, globTok{kind: tokLit, lit: '['})
				continue
			}
			body := p[i+1 : j]
			t := globTok{kind: tokClass}
			if len(body) > 0 && body[0] == '!' {
				t.negate, body = true, body[1:]
			}
			// Python drops reversed ranges by splicing them out of the
			// bracket's text, then reads a leading '!' as negation: so in
			// "[c-a!x]" the '!' bared by dropping "c-a" negates ([^x]), and
			// in "[c-a!-z]" it negates what is left, "-z". Found by
			// FuzzFnmatch against a transcription of fnmatch.translate.
			bared := false // reversed ranges dropped before any kept item
			keep := func(lo, hi rune) {
				if bared && !t.negate && lo == '!' {
					t.negate = true
					if lo != hi {
						t.ranges = append(t.ranges, [2]rune{'-', '-'}, [2]rune{hi, hi})
					}
				} else {
					t.ranges = append(t.ranges, [2]rune{lo, hi})
				}
				bared = false
			}
			for k := 0; k < len(body); {
				if k+2 < len(body) && body[k+1] == '-' {
					if body[k] <= body[k+2] {
						keep(body[k], body[k+2])
					} else if len(t.ranges) == 0 && !t.negate {
						bared = true
					}
					k += 3
					continue
				}
				keep(body[k], body[k])
				k++
			}
			toks = append(toks, t)
			i = j
		default:
			toks = append(toks, globTok{kind: tokLit, lit: c})
		}
	}
	return toks
}

// GlobPrefix is the text before a glob's first metacharacter, cut before
// anything Fnmatch reads as U+FFFD (it matches runes), so every string the
// glob matches begins with it byte for byte.
func GlobPrefix(p string) string {
	if i := strings.IndexAny(p, "*?["); i >= 0 {
		p = p[:i]
	}
	for i, r := range p {
		if r == utf8.RuneError {
			return p[:i]
		}
	}
	return p
}

// PrefixedTarget reports whether every glob part of a chat target (names,
// patterns, comma-separated) has a literal prefix, so the names it reaches
// can be found by range.
func PrefixedTarget(t string) bool {
	for part := range strings.SplitSeq(t, ",") {
		if p := strings.TrimSpace(part); p != "" && !Literal(p) && GlobPrefix(p) == "" {
			return false
		}
	}
	return true
}
