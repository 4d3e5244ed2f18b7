package coord

import (
	"strings"
	"unicode/utf8"
)

// NormalizePath puts a declared path in canonical form (PROTOCOL.md §3.4):
// back-slashes become slashes, empty and "." segments go, and a path that is
// absolute, climbs with "..", is too long (in characters, as Python counts)
// or is not printable becomes "" —
// the whole worktree. Over-claiming is safe; under-claiming is not.
//
// So does a path whose first or last kept segment starts or ends with white
// space ("./ a", "a/ /."): the result would not be its own normal form (a
// second pass strips it to "a"), and a client echoing its granted paths
// back would silently narrow its claim. Normalising is idempotent.
func NormalizePath(p string, maxLen int) string {
	p = strings.ReplaceAll(strip(p), `\`, "/")
	if strings.HasPrefix(p, "/") || utf8.RuneCountInString(p) > maxLen || !printable(p) {
		return ""
	}
	segs := strings.Split(p, "/")
	out := segs[:0]
	for _, s := range segs {
		switch s {
		case "", ".":
			continue
		case "..":
			return ""
		}
		out = append(out, s)
	}
	p = strings.Join(out, "/")
	if strip(p) != p {
		return ""
	}
	return p
}

// NormalizePaths canonicalises a declared path set: each path normalised,
// duplicates dropped in declaration order. The result is empty (the whole
// worktree) when the set names the root, or when it has more than maxPaths
// distinct paths.
func NormalizePaths(paths []string, l Limits) []string {
	if len(paths) == 0 {
		return nil
	}
	out := make([]string, 0, len(paths))
	seen := make(map[string]struct{}, len(paths))
	for _, raw := range paths {
		p := NormalizePath(raw, l.MaxPathLength)
		if p == "" {
			return nil
		}
		if _, dup := seen[p]; dup {
			continue
		}
		seen[p] = struct{}{}
		out = append(out, p)
		if len(out) > l.MaxPathsPerClaim {
			return nil
		}
	}
	return out
}

// PathsOverlap reports whether two normalised paths overlap (INV-ME-2): they
// are equal, either is the root "", or one is a directory ancestor of the
// other. The relation is reflexive and symmetric.
func PathsOverlap(a, b string) bool {
	if a == "" || b == "" || a == b {
		return true
	}
	if len(a) > len(b) {
		a, b = b, a
	}
	return strings.HasPrefix(b, a) && b[len(a)] == '/'
}

// ScopesConflict reports whether two claims' scopes conflict: never across
// worktrees (INV-ME-3); always when either covers the whole worktree
// (INV-ME-4); otherwise when any pair of paths overlaps (INV-ME-2).
// It is the literal rule of the reference (no globs, no modes), the oracle
// of the literal tests; ScopesOverlap and ScopesConflictModes extend it.
func ScopesConflict(worktreeA string, pathsA []string, worktreeB string, pathsB []string) bool {
	if worktreeA != worktreeB {
		return false
	}
	if len(pathsA) == 0 || len(pathsB) == 0 {
		return true
	}
	for _, a := range pathsA {
		for _, b := range pathsB {
			if PathsOverlap(a, b) {
				return true
			}
		}
	}
	return false
}

// Mode is how a claim holds its scope.
type Mode uint8

const (
	// ModeExclusive is the default: no other agent may hold an overlapping
	// live scope, shared or exclusive.
	ModeExclusive Mode = iota
	// ModeShared is a read claim: any number of agents may hold overlapping
	// shared scopes, but none while another agent holds it exclusively.
	ModeShared
)

func (m Mode) String() string {
	if m == ModeShared {
		return "shared"
	}
	return "exclusive"
}

// ParseMode returns the mode named s; "" is exclusive.
func ParseMode(s string) (Mode, bool) {
	switch s {
	case "", "exclusive":
		return ModeExclusive, true
	case "shared":
		return ModeShared, true
	}
	return 0, false
}

// Compatible reports whether holders in modes a and b may overlap: only
// when both are shared.
func (m Mode) Compatible(o Mode) bool { return m == ModeShared && o == ModeShared }

// Scope is what a claim covers in its worktree, a set of paths: literal
// paths (each with everything below it), globs (what each matches) and
// files (each itself alone). No path, no glob and no file is the whole
// worktree.
type Scope struct {
	Worktree string
	Paths    []string
	Globs    []string
	Files    []string
	Mode     Mode
}

// Scope returns the claim's scope.
func (c *Claim) Scope() Scope {
	return Scope{Worktree: c.Worktree, Paths: c.Paths, Globs: c.Globs, Files: c.Files, Mode: c.Mode}
}

// Whole reports whether the scope covers its entire worktree.
func (s Scope) Whole() bool { return len(s.Paths) == 0 && len(s.Globs) == 0 && len(s.Files) == 0 }

// NormalizeScope canonicalises a declared path, glob and file set. Globs
// and files are normalised as paths are; a glob without a wildcard stays a
// glob (it matches one path, like a file). Over-claiming is safe, so the
// whole worktree (nil, nil, nil) is the answer when any set names the root
// or holds an invalid entry, or when together they hold more than
// MaxPathsPerClaim entries.
func NormalizeScope(paths, globs, files []string, l Limits) (np, ng, nf []string) {
	np = NormalizePaths(paths, l)
	if len(paths) > 0 && len(np) == 0 {
		return nil, nil, nil
	}
	if len(globs) > 0 {
		if ng = NormalizePaths(globs, l); len(ng) == 0 {
			return nil, nil, nil
		}
	}
	if len(files) > 0 {
		if nf = NormalizePaths(files, l); len(nf) == 0 {
			return nil, nil, nil
		}
	}
	if len(np)+len(ng)+len(nf) > l.MaxPathsPerClaim {
		return nil, nil, nil
	}
	return np, ng, nf
}

// ScopesOverlap reports whether some path is covered by both scopes,
// whatever their modes: never across worktrees (INV-ME-3), always when
// either is the whole worktree (INV-ME-4), otherwise when any pair of
// entries overlaps (INV-ME-2, with globs and files). It is exact for globs
// and files too (see glob.go), and symmetric.
func ScopesOverlap(a, b Scope) bool {
	if a.Worktree != b.Worktree {
		return false
	}
	if a.Whole() || b.Whole() {
		return true
	}
	pa, pb := compileScope(a), compileScope(b)
	for _, x := range pa {
		for _, y := range pb {
			if patternsOverlap(x, y) {
				return true
			}
		}
	}
	return false
}

// ScopesConflictModes reports whether two holders' scopes conflict: they
// overlap and at least one of them is exclusive.
func ScopesConflictModes(a, b Scope) bool {
	return !a.Mode.Compatible(b.Mode) && ScopesOverlap(a, b)
}

func compileScope(s Scope) []pattern {
	out := make([]pattern, 0, len(s.Paths)+len(s.Globs)+len(s.Files))
	for _, p := range s.Paths {
		out = append(out, compileLiteral(p))
	}
	for _, g := range s.Globs {
		out = append(out, compileGlob(g))
	}
	for _, f := range s.Files {
		out = append(out, compileFile(f))
	}
	return out
}

// conflictEntry names the first of h's paths, globs and files that
// overlaps sc, for the refusal; "" when h holds the whole worktree.
func conflictEntry(sc Scope, h *Claim) string {
	for _, p := range h.Paths {
		if ScopesOverlap(sc, Scope{Worktree: h.Worktree, Paths: []string{p}}) {
			return p
		}
	}
	for _, g := range h.Globs {
		if ScopesOverlap(sc, Scope{Worktree: h.Worktree, Globs: []string{g}}) {
			return g
		}
	}
	for _, f := range h.Files {
		if ScopesOverlap(sc, Scope{Worktree: h.Worktree, Files: []string{f}}) {
			return f
		}
	}
	return ""
}
