package coord_test

// An independent definition of what a scope covers, for the glob tests and
// the model, written from docs/claims.md's file-set model and not from
// coord's automata: a scope is a set of paths; a literal path covers itself
// and the paths below it (a segment prefix of theirs), a file covers itself
// alone, and a glob covers the paths it matches, by a backtracking matcher
// over segments with the standard library's path.Match inside a segment
// (the vocabularies here avoid "[", "]" and "\", the only characters
// path.Match reads differently). Two scopes overlap iff some path is in
// both: oracleOverlap looks for one among the paths of a small alphabet.

import (
	"path"
	"strings"
)

// entryKind is what a scope entry is.
type entryKind uint8

const (
	kindPath entryKind = iota // a literal path: itself and its subtree
	kindGlob                  // a glob: its matches
	kindFile                  // a file: itself
)

func (k entryKind) String() string {
	return [...]string{"path", "glob", "file"}[k]
}

// oracleEntry is one normalised scope entry.
type oracleEntry struct {
	e    string
	kind entryKind
}

// oracleMatch reports whether the segments segs match the glob segments pat
// exactly; "**" matches any number of segments.
func oracleMatch(pat, segs []string) bool {
	if len(pat) == 0 {
		return len(segs) == 0
	}
	if pat[0] == "**" {
		return oracleMatch(pat[1:], segs) || len(segs) > 0 && oracleMatch(pat, segs[1:])
	}
	if len(segs) == 0 {
		return false
	}
	ok, err := path.Match(pat[0], segs[0])
	return err == nil && ok && oracleMatch(pat[1:], segs[1:])
}

// oracleMatchesBelow reports whether some path starting with the segments
// segs (segs itself included) can match the glob segments pat: every glob
// segment matches some segment, so a pattern not yet exhausted can go on.
func oracleMatchesBelow(pat, segs []string) bool {
	if len(segs) == 0 {
		return true
	}
	if len(pat) == 0 {
		return false
	}
	if pat[0] == "**" {
		return oracleMatchesBelow(pat[1:], segs) || oracleMatchesBelow(pat, segs[1:])
	}
	ok, err := path.Match(pat[0], segs[0])
	return err == nil && ok && oracleMatchesBelow(pat[1:], segs[1:])
}

func splitSegs(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// oracleCovers reports whether the scope entry covers the path p.
func oracleCovers(entry string, kind entryKind, p string) bool {
	switch kind {
	case kindGlob:
		return p != "" && oracleMatch(splitSegs(entry), splitSegs(p))
	case kindFile:
		return p == entry
	}
	segs := splitSegs(p)
	for k := 1; k <= len(segs); k++ {
		if strings.Join(segs[:k], "/") == entry {
			return true
		}
	}
	return false
}

// oracleMayCover reports whether the entry covers p or a path below it.
func oracleMayCover(entry string, kind entryKind, p string) bool {
	switch kind {
	case kindGlob:
		return oracleMatchesBelow(splitSegs(entry), splitSegs(p))
	case kindFile:
		return entry == p || strings.HasPrefix(entry, p+"/")
	}
	return oracleCovers(entry, kindPath, p) || strings.HasPrefix(entry, p+"/")
}

// scopeEntries lists a normalised scope's entries.
func scopeEntries(paths, globs, files []string) []oracleEntry {
	var out []oracleEntry
	for _, p := range paths {
		out = append(out, oracleEntry{p, kindPath})
	}
	for _, g := range globs {
		out = append(out, oracleEntry{g, kindGlob})
	}
	for _, f := range files {
		out = append(out, oracleEntry{f, kindFile})
	}
	return out
}

// oracleScopeCovers reports whether a normalised scope (no paths, globs or
// files: the whole worktree) covers p.
func oracleScopeCovers(paths, globs, files []string, p string) bool {
	entries := scopeEntries(paths, globs, files)
	if len(entries) == 0 {
		return true
	}
	for _, e := range entries {
		if oracleCovers(e.e, e.kind, p) {
			return true
		}
	}
	return false
}

// oracleOverlap reports whether some path of at most depth segments over
// the alphabet segs is covered by both entries: a walk of that tree of
// paths, pruned where either entry can cover nothing below.
func oracleOverlap(a, b oracleEntry, segs []string, depth int) bool {
	var walk func(p string, d int) bool
	walk = func(p string, d int) bool {
		for _, s := range segs {
			q := s
			if p != "" {
				q = p + "/" + s
			}
			if !oracleMayCover(a.e, a.kind, q) || !oracleMayCover(b.e, b.kind, q) {
				continue
			}
			if oracleCovers(a.e, a.kind, q) && oracleCovers(b.e, b.kind, q) {
				return true
			}
			if d > 1 && walk(q, d-1) {
				return true
			}
		}
		return false
	}
	return walk("", depth)
}

// witnessBound is how deep a path both entries cover need be looked for: a
// shortest one spends each segment on a segment of one entry other than
// "**" (a segment both read as "**" can go), so the two entries' other
// segments bound it.
func witnessBound(a, b oracleEntry) int {
	n := 0
	for _, e := range []oracleEntry{a, b} {
		for _, s := range splitSegs(e.e) {
			if e.kind != kindGlob || s != "**" {
				n++
			}
		}
	}
	return n
}
