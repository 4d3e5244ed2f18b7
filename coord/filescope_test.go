package coord_test

import (
	"slices"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// Scopes are sets of files (docs/claims.md): a glob covers its matches, a
// file itself alone, a literal path itself and its subtree (INV-ME-2), the
// whole worktree everything (INV-ME-4). These tests take the claims through
// the state's decisions, index included.

func globClaim(agent, task string, globs ...string) coord.ClaimRequest {
	return coord.ClaimRequest{Agent: agent, TaskID: task, Globs: globs}
}

func fileClaim(agent, task string, files ...string) coord.ClaimRequest {
	return coord.ClaimRequest{Agent: agent, TaskID: task, Files: files}
}

func pathClaim(agent, task string, paths ...string) coord.ClaimRequest {
	return coord.ClaimRequest{Agent: agent, TaskID: task, Paths: paths}
}

// "You take the Go files, I take the docs": two globs that differ by
// extension share no file, so both are granted; a glob that does share
// some is refused, naming the holder's pattern.
func TestClaim_GlobsOfDisjointExtensionsDoNotOverlap_INV_ME_2(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.ok(globClaim("a", "GO", "src/**/*.go"))
	r.ok(globClaim("b", "TXT", "src/**/*.txt"))
	r.ok(globClaim("b", "MD", "**/*.md"))
	r.refused(globClaim("b", "T", "src/a/*.go"), coord.CodeScopeConflict,
		"Task 'T' file scope conflicts with 'GO' held by a (exclusive 'src/**/*.go').")
	r.refused(globClaim("c", "T", "src/**"), coord.CodeScopeConflict, // the globs at the root come first
		"Task 'T' file scope conflicts with 'MD' held by b (exclusive '**/*.md').")
}

// A file covers itself alone: beside a glob that does not match it, it is
// granted; the same name as a literal path still covers what could lie
// below it ("src/a/readme.md/x.go" matches the glob), so it is refused.
func TestClaim_FileBesideAGlobOfOtherFiles_INV_ME_2(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.ok(globClaim("a", "GO", "src/**/*.go"))
	r.ok(fileClaim("b", "README", "src/a/readme.md"))
	if c := r.s.Claim("README"); !slices.Equal(c.Files, []string{"src/a/readme.md"}) || c.Paths != nil || c.WholeWorktree() {
		t.Fatalf("granted %+v, want the file alone", c)
	}
	r.refused(pathClaim("c", "T", "src/a/readme.md"), coord.CodeScopeConflict,
		"Task 'T' file scope conflicts with 'GO' held by a (exclusive 'src/**/*.go').")
	r.refused(fileClaim("c", "T", "src/a/x.go"), coord.CodeScopeConflict,
		"Task 'T' file scope conflicts with 'GO' held by a (exclusive 'src/**/*.go').")
}

// A file overlaps a held folder that holds it and a held file of its name,
// and a held glob that matches it; it does not overlap a literal path below
// it (no path is both), another file in its folder, or its own folder named
// as a file.
func TestClaim_FileOverlapsItsFolderAndItself_INV_ME_2(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.ok(pathClaim("a", "DIR", "src/a"))
	r.refused(fileClaim("b", "T", "src/a/readme.md"), coord.CodeScopeConflict,
		"Task 'T' file scope conflicts with 'DIR' held by a (exclusive 'src/a').")
	r.ok(coord.ReleaseRequest{Agent: "a", TaskID: "DIR"})

	r.ok(fileClaim("a", "F", "src/a/readme.md"))
	r.refused(fileClaim("b", "T", "src/a/readme.md"), coord.CodeScopeConflict,
		"Task 'T' file scope conflicts with 'F' held by a (exclusive 'src/a/readme.md').")
	r.refused(pathClaim("b", "T", "src/a"), coord.CodeScopeConflict,
		"Task 'T' file scope conflicts with 'F' held by a (exclusive 'src/a/readme.md').")
	r.refused(pathClaim("b", "T", "src/a/readme.md"), coord.CodeScopeConflict,
		"Task 'T' file scope conflicts with 'F' held by a (exclusive 'src/a/readme.md').")
	r.refused(globClaim("b", "T", "src/*/*.md"), coord.CodeScopeConflict,
		"Task 'T' file scope conflicts with 'F' held by a (exclusive 'src/a/readme.md').")
	r.refused(coord.ClaimRequest{Agent: "b", TaskID: "T"}, coord.CodeScopeConflict, // INV-ME-4
		"Task 'T' file scope conflicts with 'F' held by a (exclusive 'src/a/readme.md').")
	r.ok(pathClaim("b", "BELOW", "src/a/readme.md/x"))
	r.ok(fileClaim("b", "SIBLING", "src/a/x.go"))
	r.ok(fileClaim("b", "FOLDER", "src/a"))
	r.ok(globClaim("b", "GLOB", "src/a/*.go", "src/**/*.txt"))
}

// "dir/**" names a subtree: it overlaps every path and file under dir, and
// dir itself; not a sibling that shares its prefix.
func TestClaim_SubtreeGlobOverlapsPathsBelow_INV_ME_2(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.ok(globClaim("a", "TREE", "dir/**"))
	for _, req := range []coord.ClaimRequest{
		pathClaim("b", "T", "dir/sub/x"), fileClaim("b", "T", "dir/sub/x"), fileClaim("b", "T", "dir"),
		pathClaim("b", "T", "dir"), globClaim("b", "T", "dir/*/*.go"),
	} {
		r.refused(req, coord.CodeScopeConflict, "Task 'T' file scope conflicts with 'TREE' held by a (exclusive 'dir/**').")
	}
	r.ok(pathClaim("b", "SIBLING", "dirs/x"))
	r.ok(fileClaim("b", "OTHER", "other/dir"))
}

// Shared readers of files coexist; a writer of the same file waits for
// them (the modes are as for every other scope).
func TestClaim_SharedFileReaders_INV_ME_2(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.ok(coord.ClaimRequest{Agent: "a", TaskID: "R1", Files: []string{"go.mod"}, Shared: true})
	r.ok(coord.ClaimRequest{Agent: "b", TaskID: "R2", Paths: []string{"go.mod"}, Shared: true})
	r.refused(fileClaim("c", "W", "go.mod"), coord.CodeScopeConflict, // at a node, paths before files
		"Task 'W' file scope conflicts with 'R2' held by b (shared 'go.mod').")
	r.ok(fileClaim("c", "W2", "go.sum"))
}

// A handoff keeps the files and checks them against everyone but the
// recipient (INV-CR-2 with INV-ME-2), the giver's other claims included:
// refused while the giver also holds the folder, granted beside a glob of
// other files.
func TestHandoff_KeepsFilesAndGuardsThem_INV_CR_2(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.ok(fileClaim("a", "F", "src/a/readme.md", "src/b.md"))
	r.ok(pathClaim("a", "DIR", "src/a"))
	r.ok(globClaim("a", "GO", "src/**/*.go"))
	r.refused(coord.HandoffRequest{Agent: "a", TaskID: "F", To: "b", ToOnline: true}, coord.CodeScopeConflict,
		"Task 'F' file scope conflicts with 'DIR' held by a (exclusive 'src/a').")
	r.ok(coord.ReleaseRequest{Agent: "a", TaskID: "DIR"})
	r.ok(coord.HandoffRequest{Agent: "a", TaskID: "F", To: "b", ToOnline: true})
	if c := r.s.Claim("F"); c.Owner != "b" || !slices.Equal(c.Files, []string{"src/a/readme.md", "src/b.md"}) || c.Paths != nil {
		t.Fatalf("handed-off claim %v", c)
	}
}
