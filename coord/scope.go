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
// This is the rule the scope index implements; it is the oracle in tests.
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
