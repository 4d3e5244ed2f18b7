package coord_test

// An independent definition of what a scope covers, for the glob tests and
// the model: a backtracking matcher over segments with the standard
// library's path.Match inside a segment (the vocabularies here avoid "[",
// "]" and "\", the only characters path.Match reads differently), and
// coverage as "some segment prefix of the path matches".

import (
	"path"
	"strings"
)

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

func splitSegs(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// oracleCovers reports whether the scope entry (a literal path, or a glob
// when glob is true) covers the path p: p or one of its ancestors matches.
func oracleCovers(entry string, glob bool, p string) bool {
	segs := splitSegs(p)
	pat := splitSegs(entry)
	for k := 1; k <= len(segs); k++ {
		if glob {
			if oracleMatch(pat, segs[:k]) {
				return true
			}
		} else if strings.Join(segs[:k], "/") == entry {
			return true
		}
	}
	return false
}

// oracleScopeCovers reports whether a normalised scope (no paths and no
// globs: the whole worktree) covers p.
func oracleScopeCovers(paths, globs []string, p string) bool {
	if len(paths) == 0 && len(globs) == 0 {
		return true
	}
	for _, e := range paths {
		if oracleCovers(e, false, p) {
			return true
		}
	}
	for _, g := range globs {
		if oracleCovers(g, true, p) {
			return true
		}
	}
	return false
}
