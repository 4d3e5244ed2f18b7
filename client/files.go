package client

import (
	"os"
	"path/filepath"

	"github.com/synapse-hub/synapse/coord"
)

// SplitFiles separates the entries of paths that name an existing regular
// file under the checkout root from the rest. Tools that run in a checkout
// (the CLI, the MCP server) claim such a path as a file, which covers
// itself alone, rather than as a folder with everything below it
// (docs/claims.md). A symbolic link is not a regular file, and an entry the
// hub would not keep as it is (absolute, climbing with "..", the root) or
// that cannot be read stays a path: over-claiming is safe.
func SplitFiles(root string, paths []string) (rest, files []string) {
	for _, p := range paths {
		if n := coord.NormalizePath(p, coord.DefaultLimits().MaxPathLength); n != "" {
			if fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(n))); err == nil && fi.Mode().IsRegular() {
				files = append(files, p)
				continue
			}
		}
		rest = append(rest, p)
	}
	return rest, files
}
