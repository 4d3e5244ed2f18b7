package main

// The files a Codex apply_patch patch changes, read from the patch text
// (the format of codex-rs/apply-patch: "*** Begin Patch", then "*** Add
// File: P", "*** Delete File: P" or "*** Update File: P" with an optional
// "*** Move to: Q", ..., "*** End Patch").

import (
	"errors"
	"fmt"
	"strings"
)

// errPatchUnreadable is a patch the guard cannot read the file list of.
var errPatchUnreadable = errors.New("the patch cannot be read")

// patchFiles is every path the patch adds, deletes, updates or moves to,
// in order, as written in the patch (relative to the tool's cwd, or
// absolute).
func patchFiles(patch string) ([]string, error) {
	lines := strings.Split(strings.ReplaceAll(strings.TrimSpace(patch), "\r\n", "\n"), "\n")
	// Codex also accepts the patch wrapped in a here-document (<<'EOF' ... EOF).
	if len(lines) >= 2 && strings.HasPrefix(strings.TrimSpace(lines[0]), "<<") {
		lines = lines[1 : len(lines)-1]
	}
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != "*** Begin Patch" {
		return nil, fmt.Errorf("%w: it does not start with \"*** Begin Patch\"", errPatchUnreadable)
	}
	var files []string
	ended := false
	for _, l := range lines[1:] {
		t := strings.TrimSpace(l)
		if t == "*** End Patch" {
			ended = true
			break
		}
		for _, op := range []string{"*** Add File:", "*** Delete File:", "*** Update File:", "*** Move to:"} {
			if p, ok := strings.CutPrefix(t, op); ok {
				p = strings.TrimSpace(p)
				if p == "" {
					return nil, fmt.Errorf("%w: %q names no file", errPatchUnreadable, t)
				}
				files = append(files, p)
			}
		}
	}
	switch {
	case !ended:
		return files, fmt.Errorf("%w: it does not end with \"*** End Patch\"", errPatchUnreadable)
	case len(files) == 0:
		return nil, fmt.Errorf("%w: it names no file", errPatchUnreadable)
	}
	return files, nil
}
