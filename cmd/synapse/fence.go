package main

// Write-path fencing: the lease ledger the claim commands keep, and the
// check guard and git-hook run against it (docs/claims.md, "Write-path
// fencing").

import (
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

// fenceFile decides whether me may write rel (INV-EF-2 on the write path):
//
//   - a live claim of me's covers rel and its epoch is the one the ledger
//     recorded: allowed;
//   - me's covering claim is live under a newer epoch than the recorded one
//     (the lease lapsed and was re-granted, or renewed or handed back by
//     another process under this name): refused, superseded;
//   - another agent's claim covers rel: refused;
//   - no live claim covers rel but a recorded grant of me's did: refused,
//     the claim is gone;
//   - a live claim of me's covers rel and nothing was recorded for it
//     (claimed by a tool that keeps no ledger): allowed with a warning,
//     refused under strict;
//   - nothing covers rel and nothing was recorded: refused when
//     needClaim (the guard, or strict), else allowed.
func fenceFile(claims []client.Claim, recs []client.LeaseRecord, rel, worktree, root, me string, needClaim, strict bool) fenceVerdict {
	mine, mineShared, others := covering(claims, rel, worktree, root, me)
	recorded := func(task string) (client.LeaseRecord, bool) {
		for _, r := range recs {
			if r.Agent == me && r.TaskID == task {
				return r, true
			}
		}
		return client.LeaseRecord{}, false
	}
	var stale *client.Claim
	var staleRec client.LeaseRecord
	for i, cl := range mine {
		r, ok := recorded(cl.TaskID)
		switch {
		case ok && r.Epoch == cl.Epoch:
			return fenceVerdict{allowed: true}
		case ok && stale == nil:
			stale, staleRec = &mine[i], r
		}
	}
	if stale != nil {
		return fenceVerdict{short: fmt.Sprintf("superseded: your claim on '%s' is live under epoch %d, you recorded epoch %d", stale.TaskID, stale.Epoch, staleRec.Epoch),
			reason: fmt.Sprintf("Your claim on '%s' was re-granted since you recorded it: you were granted epoch %d, the live claim is epoch %d. "+
				"Your lease lapsed or was renewed elsewhere under your name (%s), so someone else may have changed %s meanwhile. "+
				"Re-claim it (`synapse claim %s%s --name %s`), re-check your work against the current files, then retry.",
				stale.TaskID, staleRec.Epoch, stale.Epoch, me, rel, stale.TaskID, pathFlags(stale.Paths), me)}
	}
	if len(mine) > 0 {
		cl := mine[0]
		msg := fmt.Sprintf("Your claim on '%s' (epoch %d) covers %s but this checkout recorded no grant of it, so a superseded lease cannot be told from a live one. "+
			"Claim it here with `synapse claim %s%s --name %s` (or the synapse MCP server's claim tool) to fence on its epoch.",
			cl.TaskID, cl.Epoch, rel, cl.TaskID, pathFlags(cl.Paths), me)
		if strict {
			return fenceVerdict{reason: msg + " (--strict)", short: fmt.Sprintf("your claim on '%s' (epoch %d) was not recorded in this checkout (--strict)", cl.TaskID, cl.Epoch)}
		}
		return fenceVerdict{allowed: true, warn: msg}
	}
	var gone *client.LeaseRecord
	for i, r := range recs {
		if r.Agent == me && (r.Worktree == worktree || r.Worktree == root) && r.Covers(rel) {
			gone = &recs[i]
			break
		}
	}
	if len(others) > 0 {
		o := others[0]
		lost, short := "", fmt.Sprintf("claimed by %s (task %s)", o.Owner, o.TaskID)
		if gone != nil {
			lost = fmt.Sprintf("Your claim on '%s' (epoch %d) lapsed or was released and ", gone.TaskID, gone.Epoch)
			short += fmt.Sprintf("; your claim on '%s' (epoch %d) is gone", gone.TaskID, gone.Epoch)
		}
		return fenceVerdict{short: short, reason: fmt.Sprintf("%s%s is claimed by %s (task %s), not by you (%s). Ask them with `synapse send %s TEXT` or wait with `synapse wait %s`, then claim it: `synapse claim %s --paths %s`.",
			lost, rel, o.Owner, o.TaskID, me, o.Owner, o.TaskID, suggestTask(rel), rel)}
	}
	if len(mineShared) > 0 {
		cl := mineShared[0]
		return fenceVerdict{short: fmt.Sprintf("your claim on '%s' is shared (read only)", cl.TaskID),
			reason: fmt.Sprintf("Your claim on '%s' (epoch %d) covering %s is shared: it lets you read, and others read beside you, but not write. "+
				"Release it and claim the files exclusively (`synapse claim %s%s --name %s`, without --shared), then edit.",
				cl.TaskID, cl.Epoch, rel, cl.TaskID, scopeFlags(cl.Paths, cl.Globs), me)}
	}
	if gone != nil {
		return fenceVerdict{short: fmt.Sprintf("your claim on '%s' (epoch %d) is gone: expired or released", gone.TaskID, gone.Epoch),
			reason: fmt.Sprintf("Your claim on '%s' (epoch %d) is gone: its lease expired or it was released. Someone may have changed %s since. "+
				"Re-claim it (`synapse claim %s%s --name %s`), re-check your work against the current files, then retry; or, if you are done with it, drop the record with `synapse release %s --name %s`.",
				gone.TaskID, gone.Epoch, rel, gone.TaskID, pathFlags(gone.Paths), me, gone.TaskID, me)}
	}
	if needClaim || strict {
		return fenceVerdict{short: "no claim of yours covers it",
			reason: fmt.Sprintf("You (%s) hold no claim covering %s. Claim it first: `synapse claim %s --paths %s --name %s` (or the claim tool of the synapse MCP server), then edit.",
				me, rel, suggestTask(rel), rel, me)}
	}
	return fenceVerdict{allowed: true}
}

// pathFlags is " --paths P" for each path (nothing for a whole-worktree
// claim).
// scopeFlags is the --paths and --glob flags that claim paths and globs.
func scopeFlags(paths, globs []string) string {
	s := pathFlags(paths)
	for _, g := range globs {
		s += " --glob " + shellJoin([]string{g})
	}
	return s
}

func pathFlags(paths []string) string {
	s := ""
	for _, p := range paths {
		s += " --paths " + shellJoin([]string{p})
	}
	return s
}
