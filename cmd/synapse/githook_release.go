package main

// Release on commit: the post-commit and post-merge hooks release the
// claims whose holders asked for it ('synapse claim --release-on'), once
// git says their files are committed, or merged (issue 21 item 4;
// docs/claims.md, "Release on commit").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/synapse-hub/synapse/client"
)

const gitHookPostCommitUsage = `Usage: synapse git-hook post-commit [--uri U] [--json]

Run by the post-commit hook. Releases each claim this checkout's lease
ledger holds with release_on "commit" ('synapse claim --release-on commit')
once the commit just made changed at least one of its files and none of its
files is left uncommitted (modified, staged, or new and not ignored). It
releases as the claim's owner, on the hub the grant came from, with the
epoch it recorded, the commit as evidence. While the owner's name is online
in another process (its agent's 'synapse mcp'), the hook marks the record
due in the ledger and that process releases it within seconds. A claim that
cannot be released (the hub is down, the lease moved on) stays, and the
hook says why; it never fails the commit. Exits at once,
without asking the hub, when no recorded claim asked for it.
`

const gitHookPostMergeUsage = `Usage: synapse git-hook post-merge [--uri U] [--json] [SQUASH]

Run by the post-merge hook after 'git merge' or 'git pull' (git passes
SQUASH, 1 for a squash merge, which releases nothing: its commit does).
Releases each claim recorded with release_on "merge" in the lease ledger of
any worktree of this repository (this checkout and its linked worktrees,
each with its own ledger) once: the merge changed at least one of its
files, none of its files is left uncommitted in the worktree that claimed
it, and that worktree's HEAD is now part of this checkout's HEAD (its work
is merged). Otherwise as post-commit.
`

// releaseCandidate is one recorded claim that asked git to release it,
// with the ledger and worktree it was recorded in.
type releaseCandidate struct {
	rec    client.LeaseRecord
	ledger *client.Ledger
	root   string // the worktree that recorded it
}

// releaseOutcome is what the hook did with one candidate (--json).
type releaseOutcome struct {
	TaskID   string   `json:"task_id"`
	Owner    string   `json:"owner"`
	Released bool     `json:"released"`
	Files    []string `json:"files,omitempty"`  // its files the commit or merge changed
	Reason   string   `json:"reason,omitempty"` // why it stays
}

func gitHookPostCommit(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("git-hook post-commit", gitHookPostCommitUsage, "", stderr)
	f.register(fs)
	if _, code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if err := f.resolve(); err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
		return exitUsage
	}
	wd, _ := os.Getwd()
	root, err := gitClean(wd, "rev-parse", "--show-toplevel")
	if err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: not in a git repository (%v)\n", err)
		return exitUsage
	}
	cands, err := candidatesIn(root, ledgerFor(root), client.ReleaseOnCommit)
	if err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v; no claim released.\n", err)
		return exitOK
	}
	if len(cands) == 0 {
		return finishRelease(&f, stdout, nil)
	}
	head, _ := gitClean(root, "rev-parse", "--short", "HEAD")
	changed, err := gitPaths(root, "diff-tree", "--no-commit-id", "--name-only", "-r", "-z", "--root", "HEAD")
	if err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v; no claim released.\n", err)
		return exitOK
	}
	var outs []releaseOutcome
	for _, c := range cands {
		outs = append(outs, decideRelease(&f, c, changed, "committed in "+head, nil, stderr))
	}
	return finishRelease(&f, stdout, outs)
}

func gitHookPostMerge(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("git-hook post-merge", gitHookPostMergeUsage, "", stderr)
	f.register(fs)
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if err := f.resolve(); err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
		return exitUsage
	}
	if len(pos) > 0 && pos[0] == "1" {
		return finishRelease(&f, stdout, nil) // a squash merge: the commit that follows it is what counts
	}
	wd, _ := os.Getwd()
	root, err := gitClean(wd, "rev-parse", "--show-toplevel")
	if err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: not in a git repository (%v)\n", err)
		return exitUsage
	}
	var cands []releaseCandidate
	if os.Getenv("SYNAPSE_LEASES") != "" {
		cands, err = candidatesIn(root, ledgerFor(root), client.ReleaseOnMerge)
	} else {
		cands, err = mergeCandidates(root)
	}
	if err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v; no claim released.\n", err)
		return exitOK
	}
	if len(cands) == 0 {
		return finishRelease(&f, stdout, nil)
	}
	head, err := gitClean(root, "rev-parse", "HEAD")
	if err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v; no claim released.\n", err)
		return exitOK
	}
	changed, err := gitPaths(root, "diff", "--name-only", "-z", "ORIG_HEAD", "HEAD")
	if err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v (no ORIG_HEAD: not after a merge?); no claim released.\n", err)
		return exitOK
	}
	merged := func(c releaseCandidate) string {
		wHead, err := gitClean(c.root, "rev-parse", "HEAD")
		if err != nil {
			return "its worktree " + c.root + " has no HEAD"
		}
		if _, err := gitClean(root, "merge-base", "--is-ancestor", wHead, head); err != nil {
			return "the work of " + c.root + " is not merged here yet"
		}
		return ""
	}
	var outs []releaseOutcome
	for _, c := range cands {
		outs = append(outs, decideRelease(&f, c, changed, "merged into "+head[:min(len(head), 12)], merged, stderr))
	}
	return finishRelease(&f, stdout, outs)
}

// decideRelease releases c when the commit or merge changed one of its
// files, none is left uncommitted in its worktree and extra (if any) finds
// nothing against it; otherwise it says why it stays.
func decideRelease(f *clientFlags, c releaseCandidate, changed []string, evidence string, extra func(releaseCandidate) string, stderr io.Writer) releaseOutcome {
	out := releaseOutcome{TaskID: c.rec.TaskID, Owner: c.rec.Agent}
	for _, p := range changed {
		if c.rec.Covers(p) {
			out.Files = append(out.Files, p)
		}
	}
	stay := func(why string) releaseOutcome {
		out.Reason = why
		fmt.Fprintf(stderr, "synapse git-hook: '%s' (%s) stays claimed: %s.\n", c.rec.TaskID, c.rec.Agent, why)
		return out
	}
	if len(out.Files) == 0 {
		out.Reason = "none of its files changed"
		return out // quiet: most commits touch other claims' files
	}
	dirty, err := uncommitted(c.root)
	if err != nil {
		return stay(err.Error())
	}
	for _, p := range dirty {
		if c.rec.Covers(p) {
			return stay(fmt.Sprintf("%s is not committed yet in %s", p, c.root))
		}
	}
	if extra != nil {
		if why := extra(c); why != "" {
			return stay(why)
		}
	}
	why, released := releaseRecorded(f, c, evidence, out.Files)
	if !released {
		return stay(why)
	}
	out.Released = true
	fmt.Fprintf(stderr, "synapse git-hook: released '%s' (%s, epoch %d): its files are %s.\n", c.rec.TaskID, c.rec.Agent, c.rec.Epoch, evidence)
	return out
}

// releaseRecorded releases the recorded claim as its owner, fenced on the
// recorded epoch, and drops the record; a claim no longer the owner's
// drops the record too. It says why when the claim stays.
func releaseRecorded(f *clientFlags, c releaseCandidate, evidence string, files []string) (string, bool) {
	g := *f
	if c.rec.Hub != "" && f.uri == client.DefaultURI {
		g.uri = c.rec.Hub
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	cl, err := g.dial(ctx, c.rec.Agent, false)
	var rej *client.RejectedError
	switch {
	case errors.As(err, &rej) && (rej.Code == 4009 || rej.Code == 4016):
		if ok, merr := c.ledger.MarkReleaseDue(c.rec.Agent, c.rec.TaskID, c.rec.Epoch, evidence, files); merr == nil && ok {
			return fmt.Sprintf("%s is online in another session; marked due in the lease ledger, which its 'synapse mcp' reads and releases within seconds (any other session must release it: 'release' tool or 'synapse release %s')", c.rec.Agent, c.rec.TaskID), false
		}
		return fmt.Sprintf("%s is online in another session (its agent's MCP server, say), which must release it ('release' tool or 'synapse release %s')", c.rec.Agent, c.rec.TaskID), false
	case err != nil:
		return fmt.Sprintf("cannot reach the hub at %s (%v); release it with 'synapse release %s --name %s'", g.uri, err, c.rec.TaskID, c.rec.Agent), false
	}
	defer cl.Close()
	rctx, rcancel := g.callCtx()
	defer rcancel()
	_, err = cl.Release(rctx, c.rec.TaskID, client.ReleaseOptions{Epoch: c.rec.Epoch, Evidence: []string{"git: " + evidence}, ChangedFiles: files})
	var ref *client.Refused
	switch {
	case err == nil:
		_ = c.ledger.Forget(c.rec.Agent, c.rec.TaskID)
		return "", true
	case errors.As(err, &ref) && (ref.Code == "NOT_CLAIMED" || ref.Code == "NOT_OWNER"):
		_ = c.ledger.Forget(c.rec.Agent, c.rec.TaskID)
		return "it is no longer " + c.rec.Agent + "'s (" + ref.Code + "); its record is dropped", false
	case errors.As(err, &ref):
		return fmt.Sprintf("the hub refused the release: %s", ref.Message), false
	}
	return fmt.Sprintf("the release failed (%v)", err), false
}

func finishRelease(f *clientFlags, stdout io.Writer, outs []releaseOutcome) int {
	if f.asJSON {
		if outs == nil {
			outs = []releaseOutcome{}
		}
		printJSON(stdout, map[string]any{"claims": outs})
	}
	return exitOK
}

// candidatesIn are the records of l that asked for trigger.
func candidatesIn(root string, l *client.Ledger, trigger client.ReleaseTrigger) ([]releaseCandidate, error) {
	if l == nil {
		return nil, nil
	}
	if _, err := os.Stat(l.Path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	recs, err := l.Records()
	if err != nil {
		return nil, err
	}
	var out []releaseCandidate
	for _, r := range recs {
		if r.ReleaseOn == trigger {
			out = append(out, releaseCandidate{rec: r, ledger: l, root: root})
		}
	}
	return out, nil
}

// mergeCandidates are the records asking for release on merge in the
// ledger of every worktree of root's repository (git worktree list).
func mergeCandidates(root string) ([]releaseCandidate, error) {
	list, err := gitClean(root, "worktree", "list", "--porcelain")
	if err != nil {
		return nil, err
	}
	var out []releaseCandidate
	for _, block := range strings.Split(list, "\n\n") {
		lines := strings.Split(block, "\n")
		wt, ok := strings.CutPrefix(lines[0], "worktree ")
		if !ok || slices.Contains(lines, "bare") {
			continue
		}
		if fi, err := os.Stat(wt); err != nil || !fi.IsDir() {
			continue // a worktree whose folder is gone (prunable)
		}
		gd, err := gitClean(wt, "rev-parse", "--absolute-git-dir")
		if err != nil {
			continue
		}
		c, err := candidatesIn(wt, &client.Ledger{Path: filepath.Join(gd, "synapse", "leases.json")}, client.ReleaseOnMerge)
		if err != nil {
			return nil, err
		}
		out = append(out, c...)
	}
	return out, nil
}

// gitClean runs git in dir without the GIT_DIR, GIT_WORK_TREE and
// GIT_INDEX_FILE a hook inherits, which would point a command meant for
// another worktree back at this one.
func gitClean(dir string, args ...string) (string, error) {
	return gitRun(withoutGitEnv(os.Environ()), dir, args...)
}

// withoutGitEnv is env without the variables that tie git to one
// repository and worktree.
func withoutGitEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "GIT_DIR" || k == "GIT_WORK_TREE" || k == "GIT_INDEX_FILE" || k == "GIT_PREFIX" || k == "GIT_COMMON_DIR"
	})
}

// gitPaths runs a git command printing NUL-separated paths (diff -z)
// and returns them.
func gitPaths(dir string, args ...string) ([]string, error) {
	out, err := gitClean(dir, args...)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(strings.Split(out, "\x00"), func(p string) bool { return p == "" }), nil
}

// uncommitted is every path git status reports in dir's worktree
// (modified, staged, deleted, new and not ignored), a rename's source too.
func uncommitted(dir string) ([]string, error) {
	out, err := gitClean(dir, "status", "--porcelain=v1", "-z", "--untracked-files=all")
	if err != nil {
		return nil, err
	}
	var paths []string
	fields := strings.Split(out, "\x00")
	for i := 0; i < len(fields); i++ {
		e := fields[i]
		if len(e) < 4 {
			continue
		}
		paths = append(paths, e[3:])
		if (e[0] == 'R' || e[0] == 'C') && i+1 < len(fields) {
			i++
			paths = append(paths, fields[i]) // -z puts the source after the entry, without a code
		}
	}
	return paths, nil
}
