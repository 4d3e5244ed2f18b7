package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/internal/testbin"
)

// gitIn runs git in dir as a user would, hooks and all, and returns its
// combined output.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func writeFiles(t *testing.T, dir string, files ...string) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(dir, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(f+" "+t.Name()+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// liveClaim is the hub's live claim on task, or nil.
func liveClaim(t *testing.T, uri, task string) *client.Claim {
	t.Helper()
	c := agent(t, uri, "test/observer")
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10e9)
	defer cancel()
	st, err := c.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.Claim(task)
}

// releaseRepo is a repository with a first commit and Synapse's hooks
// installed (the real binary), on a hub of its own.
func releaseRepo(t *testing.T) (uri, dir string) {
	t.Helper()
	bin := testbin.Synapse(t) // built before the test leaves the module's folder
	uri = startCLIHub(t, hub.Config{})
	dir = inDir(t)
	writeFiles(t, dir, "README.md")
	gitIn(t, dir, "add", "README.md")
	gitIn(t, dir, "commit", "-q", "-m", "first")
	if code, out, e := runCmd("git-hook", "install", "--name", "proj/alpha", "--uri", uri, "--command", bin); code != 0 {
		t.Fatalf("install: %d %s %s", code, out, e)
	}
	return uri, dir
}

// A claim taken with --release-on commit is released by the post-commit
// hook once a commit changed its files and none is left uncommitted; a
// commit that leaves one of them out keeps it; a claim that did not ask
// stays after its files are committed (issue 21 item 4).
func TestGitHook_PostCommitReleasesAClaimWhoseFilesAreAllCommitted_Issue21_4(t *testing.T) {
	uri, dir := releaseRepo(t)
	me := []string{"--uri", uri, "--name", "proj/alpha"}
	if code, out, e := runCmd(append([]string{"claim", "T1", "--paths", "src", "--release-on", "commit"}, me...)...); code != 0 || !strings.Contains(out, "release:  when its files are committed") {
		t.Fatalf("claim --release-on commit: %d %s %s", code, out, e)
	}
	if code, _, e := runCmd(append([]string{"claim", "T2", "--paths", "docs"}, me...)...); code != 0 {
		t.Fatalf("claim T2: %s", e)
	}
	writeFiles(t, dir, "src/a.go", "src/b.go", "docs/x.md")
	gitIn(t, dir, "add", "src/a.go", "docs/x.md")
	out := gitIn(t, dir, "commit", "-q", "-m", "half")
	if liveClaim(t, uri, "T1") == nil || !strings.Contains(out, "src/b.go is not committed yet") {
		t.Fatalf("T1 released with src/b.go uncommitted:\n%s", out)
	}
	gitIn(t, dir, "add", "src/b.go")
	out = gitIn(t, dir, "commit", "-q", "-m", "rest")
	if liveClaim(t, uri, "T1") != nil || !strings.Contains(out, "released 'T1' (proj/alpha, epoch") {
		t.Fatalf("T1 not released after all its files were committed:\n%s", out)
	}
	if liveClaim(t, uri, "T2") == nil {
		t.Fatal("T2 did not ask for release on commit, and was released")
	}
	l := ledgerFor(dir)
	if _, ok, _ := l.Lookup("proj/alpha", "T1"); ok {
		t.Fatal("the released claim's record is still in the ledger")
	}
	if _, ok, _ := l.Lookup("proj/alpha", "T2"); !ok {
		t.Fatal("T2's record went")
	}
}

// In a linked worktree (its own git dir and ledger) a commit releases the
// claim recorded there and nothing of the main checkout's; a claim asking
// for release on merge stays at its commit and goes when the main checkout
// merges its branch (issue 21 item 4).
func TestGitHook_ReleaseOnCommitAndMergeInALinkedWorktree_Issue21_4(t *testing.T) {
	uri, dir := releaseRepo(t)
	wt := filepath.Join(filepath.Dir(dir), filepath.Base(dir)+"-wt")
	gitIn(t, dir, "worktree", "add", "-q", "-b", "feat", wt)
	t.Cleanup(func() { os.RemoveAll(wt) })
	if code, _, e := runCmd("claim", "M1", "--paths", "src", "--release-on", "commit", "--uri", uri, "--name", "proj/alpha"); code != 0 {
		t.Fatalf("claim in main: %s", e)
	}
	t.Chdir(wt)
	bravo := []string{"--uri", uri, "--name", "proj/bravo"}
	for _, c := range [][]string{{"claim", "W1", "--paths", "lib", "--release-on", "commit"}, {"claim", "W2", "--paths", "pkg", "--release-on", "merge"}} {
		if code, out, e := runCmd(append(c, bravo...)...); code != 0 {
			t.Fatalf("%v: %d %s %s", c, code, out, e)
		}
	}
	mainLedger, wtLedger := ledgerFor(dir), ledgerFor(wt)
	if mainLedger.Path == wtLedger.Path {
		t.Fatalf("one ledger for both checkouts: %s", mainLedger.Path)
	}
	// One set of hooks serves both checkouts: the pre-commit check runs
	// as the committer's SYNAPSE_NAME.
	t.Setenv("SYNAPSE_NAME", "proj/bravo")
	writeFiles(t, wt, "lib/l.go", "pkg/p.go")
	gitIn(t, wt, "add", "lib", "pkg")
	out := gitIn(t, wt, "commit", "-q", "-m", "work")
	if liveClaim(t, uri, "W1") != nil || !strings.Contains(out, "released 'W1'") {
		t.Fatalf("W1 not released by its commit in the linked worktree:\n%s", out)
	}
	if liveClaim(t, uri, "W2") == nil {
		t.Fatal("W2 asked for release on merge and went at a commit")
	}
	if liveClaim(t, uri, "M1") == nil {
		t.Fatal("a commit in the linked worktree released the main checkout's claim")
	}
	if _, ok, _ := mainLedger.Lookup("proj/alpha", "M1"); !ok {
		t.Fatal("the main checkout's ledger lost M1")
	}
	// The main checkout merges feat: W2's work is in, its worktree is clean.
	t.Chdir(dir)
	out = gitIn(t, dir, "merge", "-q", "--no-edit", "feat")
	if liveClaim(t, uri, "W2") != nil || !strings.Contains(out, "released 'W2' (proj/bravo") {
		t.Fatalf("W2 not released when its branch was merged:\n%s", out)
	}
	if _, ok, _ := wtLedger.Lookup("proj/bravo", "W2"); ok {
		t.Fatal("W2's record is still in the linked worktree's ledger")
	}
	if liveClaim(t, uri, "M1") == nil {
		t.Fatal("the merge released M1, whose files it did not change")
	}
}

// A hook that was there keeps running, first: a failing pre-commit still
// stops the commit; --remove puts every hook back byte for byte
// (issue 21 item 4).
func TestGitHook_InstallChainsExistingHooksAndRemoveRestoresThem_Issue21_4(t *testing.T) {
	bin := testbin.Synapse(t)
	uri := startCLIHub(t, hub.Config{})
	dir := inDir(t)
	hooks := filepath.Join(dir, ".git", "hooks")
	os.MkdirAll(hooks, 0o755)
	marker := filepath.Join(dir, "..", filepath.Base(dir)+"-ran")
	t.Cleanup(func() { os.Remove(marker) })
	pre := "#!/bin/sh\necho pre >> '" + marker + "'\n[ ! -f " + filepath.Join(dir, "block") + " ]\n"
	post := "#!/bin/sh\necho post >> '" + marker + "'\n"
	os.WriteFile(filepath.Join(hooks, "pre-commit"), []byte(pre), 0o755)
	os.WriteFile(filepath.Join(hooks, "post-commit"), []byte(post), 0o755)
	code, out, e := runCmd("git-hook", "install", "--name", "proj/alpha", "--uri", uri, "--command", bin)
	if code != 0 || !strings.Contains(out, "it runs first") {
		t.Fatalf("install: %d %s %s", code, out, e)
	}
	writeFiles(t, dir, "a.go")
	gitIn(t, dir, "add", "a.go")
	gitIn(t, dir, "commit", "-q", "-m", "a")
	if got := readFile(t, marker); got != "pre\npost\n" {
		t.Fatalf("the chained hooks ran: %q", got)
	}
	writeFiles(t, dir, "block", "b.go")
	gitIn(t, dir, "add", "b.go")
	cmd := exec.Command("git", "-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "b")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("the chained pre-commit failed and the commit went through:\n%s", out)
	}
	// Installing again keeps the chain; removing restores.
	if code, _, e := runCmd("git-hook", "install", "--name", "proj/alpha", "--uri", uri, "--command", bin); code != 0 {
		t.Fatalf("install again: %s", e)
	}
	if code, out, e := runCmd("git-hook", "install", "--remove"); code != 0 || strings.Count(out, "put back") != 2 {
		t.Fatalf("remove: %d %s %s", code, out, e)
	}
	if readFile(t, filepath.Join(hooks, "pre-commit")) != pre || readFile(t, filepath.Join(hooks, "post-commit")) != post {
		t.Fatal("the hooks that were there are not back as they were")
	}
	if _, err := os.Stat(filepath.Join(hooks, "post-merge")); !os.IsNotExist(err) {
		t.Fatalf("Synapse's post-merge is still there: %v", err)
	}
}

// A trigger that is not commit, merge or off, or --release-on outside a
// git checkout, is a usage error that claims nothing (issue 21 item 4).
func TestClaim_ReleaseOnBadInputClaimsNothing_Issue21_4(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	inDir(t)
	if code, _, e := runCmd("claim", "T1", "--release-on", "push", "--uri", uri, "--name", "proj/alpha"); code != exitUsage || !strings.Contains(e, "not commit, merge or off") {
		t.Fatalf("bad trigger: %d %s", code, e)
	}
	t.Chdir(t.TempDir())
	if code, _, e := runCmd("claim", "T1", "--release-on", "commit", "--uri", uri, "--name", "proj/alpha"); code != exitUsage || !strings.Contains(e, "needs a git checkout") {
		t.Fatalf("outside git: %d %s", code, e)
	}
	if liveClaim(t, uri, "T1") != nil {
		t.Fatal("a refused --release-on claimed the task")
	}
}

// While the owner's name is online in another process (its agent's
// synapse mcp), the post-commit hook cannot bind it to release: it marks
// the record due in the lease ledger, fenced on the recorded epoch, for
// that process to release (issue 21 item 4; mcpserver's
// TestServer_ReleasesWhatAGitHookMarksDue_Issue21_4 is the other half).
func TestGitHook_OwnerOnlineMarksTheClaimDue_Issue21_4(t *testing.T) {
	uri, dir := releaseRepo(t)
	me := []string{"--uri", uri, "--name", "proj/alpha"}
	if code, _, e := runCmd(append([]string{"claim", "T1", "--paths", "src", "--release-on", "commit"}, me...)...); code != 0 {
		t.Fatalf("claim: %s", e)
	}
	waitOffline(t, uri, "proj/alpha")
	agent(t, uri, "proj/alpha") // the agent's MCP server, holding the name
	writeFiles(t, dir, "src/a.go")
	gitIn(t, dir, "add", "src/a.go")
	out := gitIn(t, dir, "commit", "-q", "-m", "work")
	if !strings.Contains(out, "marked due in the lease ledger") || liveClaim(t, uri, "T1") == nil {
		t.Fatalf("the hook did not hand the release over:\n%s", out)
	}
	r, ok, err := ledgerFor(dir).Lookup("proj/alpha", "T1")
	if err != nil || !ok || !strings.HasPrefix(r.ReleaseDue, "committed in ") || len(r.DueFiles) != 1 || r.DueFiles[0] != "src/a.go" {
		t.Fatalf("the record: %+v %v %v", r, ok, err)
	}
}
