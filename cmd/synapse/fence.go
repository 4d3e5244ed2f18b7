package main

// Write-path fencing: the lease ledger the claim commands keep, and the
// check guard and git-hook run against it (docs/claims.md, "Write-path
// fencing").

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/synapse-hub/synapse/client"
)

// ledgerFor is the lease ledger of the checkout dir is in: $SYNAPSE_LEASES
// when set, else <git dir>/synapse/leases.json (per worktree: a linked
// worktree has its own git dir). nil outside a git repository, where
// nothing is recorded.
func ledgerFor(dir string) *client.Ledger {
	if p := os.Getenv("SYNAPSE_LEASES"); p != "" {
		return &client.Ledger{Path: p}
	}
	gd, err := gitOut(dir, "rev-parse", "--absolute-git-dir")
	if err != nil || gd == "" {
		return nil
	}
	return &client.Ledger{Path: filepath.Join(gd, "synapse", "leases.json")}
}

// recordGrant notes cl's epoch in the ledger of the current directory's
// checkout; a failure only warns, since the grant itself stands.
func recordGrant(uri string, cl *client.Claim, stderr io.Writer) {
	wd, _ := os.Getwd()
	l := ledgerFor(wd)
	if l == nil {
		return
	}
	if err := l.Record(uri, cl); err != nil {
		fmt.Fprintf(stderr, "synapse: warning: the grant of '%s' (epoch %d) was not recorded (%v); guard and git-hook will not fence on it.\n", cl.TaskID, cl.Epoch, err)
	}
}

// forgetGrant drops agent's record of task from the current checkout's
// ledger (after a release or a handoff).
func forgetGrant(agent, task string, stderr io.Writer) {
	wd, _ := os.Getwd()
	if l := ledgerFor(wd); l != nil {
		if err := l.Forget(agent, task); err != nil {
			fmt.Fprintf(stderr, "synapse: warning: cannot update the lease ledger: %v\n", err)
		}
	}
}

// fenceVerdict is what the write-path check says about one file.
type fenceVerdict struct {
	allowed bool
	warn    string // allowed, but say this (a claim of yours with no recorded grant)
	reason  string // refused: what happened and what to do
	short   string // refused: the reason in a few words, for a list of files
}

// fenceCheck is the write-path check of one checkout against the hub's
// live claims and the checkout's ledger; guard and git-hook check run it
// for each file.
type fenceCheck struct {
	claims         []client.Claim
	recs           []client.LeaseRecord
	worktree, root string // the claims of this checkout: this worktree label or the root's path
	me             string
	needClaim      bool // refuse a file no claim covers (the guard)
	strict         bool
	// fileFlag is how a suggested claim names the file: "--file" on a hub
	// that takes files (file_scopes), so it claims the file alone.
	fileFlag string
	// uri is the hub the writer uses when it is not the default one, so
	// the advice claims there; mcp says the writer has the synapse MCP
	// server, so the advice names its tools rather than CLI commands.
	uri string
	mcp bool
}

// claimAdvice is how me claims task with the scope again: the MCP claim
// tool's call, or the CLI command under me's own identity.
func (fc *fenceCheck) claimAdvice(task string, paths, globs, files []string) string {
	if fc.mcp {
		args := map[string]any{"task_id": task}
		for k, v := range map[string][]string{"paths": paths, "globs": globs, "files": files} {
			if len(v) > 0 {
				args[k] = v
			}
		}
		b, _ := json.Marshal(args)
		return fmt.Sprintf("the synapse MCP server's `claim` tool with %s", b)
	}
	return fmt.Sprintf("`synapse claim %s%s%s`", task, scopeFlags(paths, globs, files), fc.identity())
}

// identity is the --name (and --uri) flags that act as me.
func (fc *fenceCheck) identity() string {
	s := " --name " + shellJoin([]string{fc.me})
	if fc.uri != "" {
		s += " --uri " + shellJoin([]string{fc.uri})
	}
	return s
}

// fileScope is the scope a suggested claim of rel alone names.
func (fc *fenceCheck) fileScope(rel string) (paths, files []string) {
	if fc.fileFlag == "--file" {
		return nil, []string{rel}
	}
	return []string{rel}, nil
}

// file decides whether me may write rel by the write-path rule
// (client.Fence.Check, INV-EF-2 on the write path) and says why in the
// CLI's words.
func (fc *fenceCheck) file(rel string) fenceVerdict {
	me := fc.me
	f := client.Fence{Claims: fc.claims, Records: fc.recs, Worktree: fc.worktree, Root: fc.root, Agent: me, NeedClaim: fc.needClaim, Strict: fc.strict}
	d := f.Check(rel)
	cl, rec := d.Claim, d.Record
	newPaths, newFiles := fc.fileScope(rel)
	switch d.Verdict {
	case client.WriteSuperseded:
		return fenceVerdict{short: fmt.Sprintf("superseded: your claim on '%s' is live under epoch %d, you recorded epoch %d", cl.TaskID, cl.Epoch, rec.Epoch),
			reason: fmt.Sprintf("Your claim on '%s' was re-granted since you recorded it: you were granted epoch %d, the live claim is epoch %d. "+
				"Your lease lapsed or was renewed elsewhere under your name (%s), so someone else may have changed %s meanwhile. "+
				"Re-claim it (%s), re-check your work against the current files, then retry.",
				cl.TaskID, rec.Epoch, cl.Epoch, me, rel, fc.claimAdvice(cl.TaskID, cl.Paths, cl.Globs, cl.Files))}
	case client.WriteUnrecorded:
		msg := fmt.Sprintf("Your claim on '%s' (epoch %d) covers %s but this checkout recorded no grant of it, so a superseded lease cannot be told from a live one. "+
			"Claim it here with %s to fence on its epoch.",
			cl.TaskID, cl.Epoch, rel, fc.claimAdvice(cl.TaskID, cl.Paths, cl.Globs, cl.Files))
		if !d.Allowed {
			return fenceVerdict{reason: msg + " (--strict)", short: fmt.Sprintf("your claim on '%s' (epoch %d) was not recorded in this checkout (--strict)", cl.TaskID, cl.Epoch)}
		}
		return fenceVerdict{allowed: true, warn: msg}
	case client.WriteClaimed:
		lost, short := "", fmt.Sprintf("claimed by %s (task %s)", cl.Owner, cl.TaskID)
		if rec != nil {
			lost = fmt.Sprintf("Your claim on '%s' (epoch %d) lapsed or was released and ", rec.TaskID, rec.Epoch)
			short += fmt.Sprintf("; your claim on '%s' (epoch %d) is gone", rec.TaskID, rec.Epoch)
		}
		ask := fmt.Sprintf("Ask them with `synapse send %s TEXT%s` or wait with `synapse wait %s%s`", cl.Owner, fc.identity(), cl.TaskID, fc.identity())
		if fc.mcp {
			ask = fmt.Sprintf("Ask them with the synapse MCP server's `send` tool (to %q) or wait for the task with its `wait` tool", cl.Owner)
		}
		return fenceVerdict{short: short, reason: fmt.Sprintf("%s%s is claimed by %s (task %s), not by you (%s). %s, then claim it: %s.",
			lost, rel, cl.Owner, cl.TaskID, me, ask, fc.claimAdvice(suggestTask(rel), newPaths, nil, newFiles))}
	case client.WriteShared:
		return fenceVerdict{short: fmt.Sprintf("your claim on '%s' is shared (read only)", cl.TaskID),
			reason: fmt.Sprintf("Your claim on '%s' (epoch %d) covering %s is shared: it lets you read, and others read beside you, but not write. "+
				"Release it and claim the files exclusively (%s, not shared), then edit.",
				cl.TaskID, cl.Epoch, rel, fc.claimAdvice(cl.TaskID, cl.Paths, cl.Globs, cl.Files))}
	case client.WriteGone:
		drop := fmt.Sprintf("`synapse release %s%s`", rec.TaskID, fc.identity())
		if fc.mcp {
			drop = fmt.Sprintf("the synapse MCP server's `release` tool with {\"task_id\":%q}", rec.TaskID)
		}
		return fenceVerdict{short: fmt.Sprintf("your claim on '%s' (epoch %d) is gone: expired or released", rec.TaskID, rec.Epoch),
			reason: fmt.Sprintf("Your claim on '%s' (epoch %d) is gone: its lease expired or it was released. Someone may have changed %s since. "+
				"Re-claim it (%s), re-check your work against the current files, then retry; or, if you are done with it, drop the record with %s.",
				rec.TaskID, rec.Epoch, rel, fc.claimAdvice(rec.TaskID, rec.Paths, rec.Globs, rec.Files), drop)}
	case client.WriteUnclaimed:
		return fenceVerdict{short: "no claim of yours covers it",
			reason: fmt.Sprintf("You (%s) hold no claim covering %s. Claim it first with %s, then edit.",
				me, rel, fc.claimAdvice(suggestTask(rel), newPaths, nil, newFiles))}
	}
	return fenceVerdict{allowed: true}
}

// scopeFlags is the --paths, --glob and --file flags that claim a scope
// again (nothing for a whole-worktree claim).
func scopeFlags(paths, globs, files []string) string {
	s := pathFlags(paths)
	for _, g := range globs {
		s += " --glob " + shellJoin([]string{g})
	}
	for _, f := range files {
		s += " --file " + shellJoin([]string{f})
	}
	return s
}

// pathFlags is " --paths P" for each path.
func pathFlags(paths []string) string {
	s := ""
	for _, p := range paths {
		s += " --paths " + shellJoin([]string{p})
	}
	return s
}
