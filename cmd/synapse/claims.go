package main

// The claim family: claim, renew, release, handoff, update, checkpoint,
// wait and lock.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/synapse-hub/synapse/client"
)

// claimJSON is the --json form of a claim result (granted or refused).
type claimJSON struct {
	Granted        bool     `json:"granted"`
	TaskID         string   `json:"task_id"`
	Owner          string   `json:"owner,omitempty"`
	Epoch          int64    `json:"epoch,omitempty"`
	Version        int64    `json:"version"`
	Status         string   `json:"status,omitempty"`
	Paths          []string `json:"paths,omitempty"`
	Globs          []string `json:"globs,omitempty"`
	Files          []string `json:"files,omitempty"`
	Mode           string   `json:"mode,omitempty"` // "shared"; absent = exclusive
	Worktree       string   `json:"worktree"`
	Note           string   `json:"note,omitempty"`
	Checkpoint     string   `json:"checkpoint,omitempty"`
	LeaseExpiresAt float64  `json:"lease_expires_at,omitempty"`
	LeaseExpires   string   `json:"lease_expires,omitempty"`
	TTLSeconds     float64  `json:"ttl_seconds,omitempty"`
	PreviousOwner  string   `json:"previous_owner,omitempty"`
	Code           string   `json:"code,omitempty"`
	Message        string   `json:"message,omitempty"`
	Holder         string   `json:"holder,omitempty"`
	ConflictTask   string   `json:"conflict_task,omitempty"`
	// The holder's path, glob or file and mode, when a glob, a file or a shared claim is involved.
	ConflictPattern string   `json:"conflict_pattern,omitempty"`
	ConflictMode    string   `json:"conflict_mode,omitempty"`
	BoardTask       string   `json:"board_task,omitempty"` // a task-bound claim's board task
	ReleaseOn       string   `json:"release_on,omitempty"` // commit or merge: the git hooks release it (claim --release-on)
	Pending         []string `json:"pending,omitempty"`    // BOARD_TASK_NOT_READY: its undone dependencies
}

func claimResult(c *client.Claim) claimJSON {
	return claimJSON{
		Granted: true, TaskID: c.TaskID, Owner: c.Owner, Epoch: c.Epoch, Version: c.Version,
		Status: c.Status, Paths: c.Paths, Globs: c.Globs, Files: c.Files, Mode: c.Mode, Worktree: c.Worktree, Note: c.Note, Checkpoint: c.Checkpoint,
		LeaseExpiresAt: c.LeaseExpiresAt, LeaseExpires: fmtTime(c.LeaseExpiresAt), TTLSeconds: c.TTL().Seconds(),
		PreviousOwner: c.PreviousOwner, BoardTask: c.BoardTask,
	}
}

func refusalResult(task string, ref *client.Refused) claimJSON {
	return claimJSON{TaskID: task, Code: ref.Code, Message: ref.Message, Holder: ref.Holder, ConflictTask: ref.ConflictTask, Pending: ref.Pending,
		ConflictPattern: ref.ConflictPattern, ConflictMode: ref.ConflictMode}
}

// printClaim prints a grant for people.
func printClaim(w io.Writer, verb string, c *client.Claim) {
	fmt.Fprintf(w, "%s '%s' as %s (epoch %d).\n", verb, c.TaskID, c.Owner, c.Epoch)
	now := c.GrantedAt
	if now == 0 {
		now = c.ClaimedAt
	}
	fmt.Fprintf(w, "  lease:    until %s (%s); renew with 'synapse renew %s'\n", fmtTime(c.LeaseExpiresAt), fmtIn(c.LeaseExpiresAt, now), c.TaskID)
	switch {
	case len(c.Paths) > 0:
		fmt.Fprintf(w, "  paths:    %s\n", strings.Join(c.Paths, ", "))
	case len(c.Globs) == 0 && len(c.Files) == 0:
		fmt.Fprintf(w, "  paths:    the whole worktree\n")
	}
	if len(c.Globs) > 0 {
		fmt.Fprintf(w, "  globs:    %s\n", strings.Join(c.Globs, ", "))
	}
	if len(c.Files) > 0 {
		fmt.Fprintf(w, "  files:    %s\n", strings.Join(c.Files, ", "))
	}
	if c.Shared() {
		fmt.Fprintf(w, "  mode:     shared (others may read beside you; no one may write)\n")
	}
	if c.Worktree != "" {
		fmt.Fprintf(w, "  worktree: %s\n", c.Worktree)
	}
	if c.Checkpoint != "" {
		fmt.Fprintf(w, "  checkpoint: %s\n", c.Checkpoint)
	}
	if c.BoardTask != "" {
		fmt.Fprintf(w, "  board:    '%s' in progress; finish with 'synapse release %s --outcome done'\n", c.BoardTask, c.TaskID)
	}
}

// refusedClaim reports a refused claim: who holds what, and what to do.
func refusedClaim(f *clientFlags, stdout, stderr io.Writer, cmd, task string, err error) int {
	var ref *client.Refused
	if !errors.As(err, &ref) {
		return f.failure(stderr, cmd, err)
	}
	if f.asJSON {
		printJSON(stdout, refusalResult(task, ref))
	}
	fmt.Fprintf(stderr, "synapse %s: %s\n", cmd, ref.Message)
	switch {
	case ref.Code == "LEASE_LIVE":
		fmt.Fprintf(stderr, "Wait for it with 'synapse wait %s', or ask %s with 'synapse send %s TEXT'.\n", task, ref.Holder, ref.Holder)
	case ref.Code == "SCOPE_CONFLICT" && ref.ConflictMode != "":
		fmt.Fprintf(stderr, "Narrow --paths, --glob or --file (%s holds '%s' %s), wait with 'synapse wait %s', or ask %s with 'synapse send %s TEXT'.\n",
			ref.Holder, ref.ConflictPattern, ref.ConflictMode, ref.ConflictTask, ref.Holder, ref.Holder)
	case ref.Code == "SCOPE_CONFLICT" && ref.ConflictTask != "":
		fmt.Fprintf(stderr, "Narrow --paths, wait with 'synapse wait %s', or ask %s with 'synapse send %s TEXT'.\n", ref.ConflictTask, ref.Holder, ref.Holder)
	case ref.Code == "BOARD_TASK_NOT_READY" && len(ref.Pending) > 0:
		fmt.Fprintf(stderr, "Its dependencies are not done: %s. See 'synapse board'.\n", strings.Join(ref.Pending, ", "))
	case ref.Code == "BOARD_TASK_HELD":
		fmt.Fprintf(stderr, "Pick another ready task from 'synapse board', or ask %s with 'synapse send %s TEXT'.\n", ref.Holder, ref.Holder)
	}
	return exitRefused
}

const claimUsage = `Usage: synapse claim ID [--paths P]... [--glob PATTERN]... [--file F]... [--shared] [--worktree W] [--ttl DURATION] [--note TEXT] [--task BOARD_TASK_ID] [--release-on commit|merge]

Claims task ID and its files for --name, with a lease (default 1h on the
hub, or --ttl). No two agents hold the same task or a common file in the
same worktree. A --paths entry covers itself and everything below it.
--glob claims the files a pattern matches ("*" and "?" within a segment,
"**" any number of segments: --glob 'src/**/*.go'), and --file a file
alone; so --glob 'src/**/*.go' and --glob 'src/**/*.txt' never conflict.
A --paths entry that is an existing regular file in this checkout is
claimed as a file (on a hub that takes files). --shared claims for
reading: other readers may overlap you, writers may not (docs/claims.md). Claiming a task you already hold renews it. The lease does not
end when this command exits: release it with 'synapse release ID', or use
'synapse lock ID -- CMD' to hold it for the life of a command.

With --task, the claim also takes board task BOARD_TASK_ID, in the same
step: the task must be ready (open, its dependencies done), and it becomes
in_progress with you as its owner. Finish it with 'synapse release ID
--outcome done' (or failed); if the lease expires, the task is ready again.

With --release-on commit, git releases the claim for you once a commit in
this checkout changed its files and none of them is left uncommitted; with
--release-on merge, once that work is merged into a checkout of the
repository (git merge, git pull). The wish is kept in this checkout's lease
ledger beside the grant, and acted on by the post-commit and post-merge
hooks of 'synapse git-hook install' (docs/claims.md, "Release on commit").
Off by default; a renewal keeps it; --release-on off clears it.

A refused claim exits 1 and says who holds what:
  synapse claim: Task 'T1' is already claimed by proj/alpha.
`

func runClaim(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	var paths stringList
	fs := newFlagSet("claim", claimUsage, "", stderr)
	f.register(fs)
	var globs, files stringList
	fs.Var(&paths, "paths", "a file or folder the claim covers, with what lies below it (repeatable); none (and no --glob or --file) = the whole worktree")
	fs.Var(&globs, "glob", "a glob pattern the claim covers, e.g. 'src/**/*.go' (repeatable)")
	fs.Var(&files, "file", "a file the claim covers, itself alone (repeatable)")
	shared := fs.Bool("shared", false, "a shared (read) claim: other readers may overlap it, writers may not")
	worktree := fs.String("worktree", "", "checkout the paths are in (default: the hub's default worktree)")
	ttl := fs.Duration("ttl", 0, "lease length, e.g. 30m (default: the hub's, 1h; clamped to 30s..30 days)")
	note := fs.String("note", "", "what you are doing, shown to others")
	idem := fs.String("idem-key", "", "retry key: a repeated key gets the first answer instead of a second claim")
	boardTask := fs.String("task", "", "board task to take in progress with the files, in one step (it must be ready)")
	releaseOn := fs.String("release-on", "", "commit or merge: the git hooks release the claim once its files are committed, or merged (off: never; default off)")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, "claim", "give exactly one task ID")
	}
	trigger, err := client.ParseReleaseTrigger(*releaseOn)
	if err != nil {
		return usageError(stderr, "claim", "--release-on %q is not commit, merge or off", *releaseOn)
	}
	wd, _ := os.Getwd()
	ledger := ledgerFor(wd)
	if *releaseOn != "" && ledger == nil {
		return usageError(stderr, "claim", "--release-on needs a git checkout: run it inside the repository whose commits release the claim")
	}
	c, code := f.start(stderr, "claim", false, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	cl, err := c.Claim(ctx, client.ClaimRequest{TaskID: pos[0], Paths: paths, Globs: globs, Files: files, Shared: *shared,
		Worktree: *worktree, TTL: *ttl, Note: *note, IdemKey: *idem, BoardTask: *boardTask, Checkout: checkout(*worktree)})
	if err != nil {
		return refusedClaim(&f, stdout, stderr, "claim", pos[0], err)
	}
	if *releaseOn == "" {
		recordGrant(f.uri, cl, stderr)
	} else if err := ledger.RecordReleaseOn(f.uri, cl, trigger); err != nil {
		fmt.Fprintf(stderr, "synapse claim: warning: the grant of '%s' and its --release-on were not recorded (%v); git will not release it.\n", cl.TaskID, err)
	}
	res := claimResult(cl)
	if r, ok, _ := ledger.Lookup(cl.Owner, cl.TaskID); ok {
		res.ReleaseOn = string(r.ReleaseOn)
	}
	if f.asJSON {
		printJSON(stdout, res)
		return exitOK
	}
	printClaim(stdout, "Claimed", cl)
	if res.ReleaseOn != "" {
		fmt.Fprintf(stdout, "  release:  when its files are %s (synapse git-hook's post-%s hook)\n", map[string]string{"commit": "committed", "merge": "merged"}[res.ReleaseOn], res.ReleaseOn)
		if !gitHookInstalled(wd, "post-"+res.ReleaseOn) {
			fmt.Fprintf(stderr, "synapse claim: warning: this repository has no Synapse post-%s hook, so nothing will release '%s' on %s: run 'synapse git-hook install'.\n", res.ReleaseOn, cl.TaskID, res.ReleaseOn)
		}
	}
	return exitOK
}

// checkout is the root of the checkout the claim's paths are in, where a
// --paths entry that is a regular file is claimed as a file
// (client.ClaimRequest.Checkout): the worktree when it names a folder by
// its absolute path (git-claim's form), else the current directory's
// repository root, or the current directory outside one.
func checkout(worktree string) string {
	if filepath.IsAbs(worktree) {
		if fi, err := os.Stat(worktree); err == nil && fi.IsDir() {
			return worktree
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	return projectRoot(wd)
}

// renewFence refuses to renew a claim this checkout recorded under an
// older epoch: the lease moved on while the writer was away, and a renewal
// would make the write-path checks take the new epoch as the writer's own.
func renewFence(live *client.Claim) error {
	wd, _ := os.Getwd()
	l := ledgerFor(wd)
	if l == nil {
		return nil
	}
	r, ok, err := l.Lookup(live.Owner, live.TaskID)
	if err != nil || !ok || r.Epoch == live.Epoch {
		return nil
	}
	return &client.Refused{Code: "EPOCH_STALE", TaskID: live.TaskID, Holder: live.Owner, Message: fmt.Sprintf(
		"Task '%s' is live under epoch %d, but this checkout recorded epoch %d: it was re-granted since (the lease lapsed and was claimed again, or another process under your name took it). "+
			"Re-check your work against the current files, then take it knowingly with 'synapse claim %s%s'.",
		live.TaskID, live.Epoch, r.Epoch, live.TaskID, pathFlags(live.Paths))}
}

// heldClaim finds the live claim on task and checks --name holds it.
func heldClaim(ctx context.Context, c *client.Client, task string) (*client.Claim, error) {
	st, err := c.State(ctx)
	if err != nil {
		return nil, err
	}
	cl := st.Claim(task)
	switch {
	case cl == nil:
		return nil, &client.Refused{Code: "NOT_CLAIMED", TaskID: task, Message: fmt.Sprintf("Task '%s' is not currently claimed: claim it with 'synapse claim %s'.", task, task)}
	case cl.Owner != c.Name():
		return nil, &client.Refused{Code: "NOT_OWNER", TaskID: task, Holder: cl.Owner, Message: fmt.Sprintf("Task '%s' is owned by %s, not %s.", task, cl.Owner, c.Name())}
	}
	return cl, nil
}

const renewUsage = `Usage: synapse renew ID [--ttl DURATION]

Renews your claim on task ID: the same paths and worktree, a fresh lease
(the same length unless --ttl) and a fresh epoch. Exits 1 if you do not
hold it, or if this checkout recorded an older epoch of it than the live
one (it was re-granted since: renewing would hide that; re-check your work,
then take it knowingly with 'synapse claim ID'). To keep a claim alive
while a command runs, use 'synapse lock'.
`

func runRenew(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("renew", renewUsage, "", stderr)
	f.register(fs)
	ttl := fs.Duration("ttl", 0, "new lease length (default: the claim's current one)")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, "renew", "give exactly one task ID")
	}
	c, code := f.start(stderr, "renew", false, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	cl, err := heldClaim(ctx, c, pos[0])
	if err != nil {
		return f.failure(stderr, "renew", err)
	}
	if err := renewFence(cl); err != nil {
		return f.failure(stderr, "renew", err)
	}
	req := cl.Request()
	if *ttl > 0 {
		req.TTL = *ttl
	}
	next, err := c.Claim(ctx, req)
	if err != nil {
		return refusedClaim(&f, stdout, stderr, "renew", pos[0], err)
	}
	recordGrant(f.uri, next, stderr)
	if f.asJSON {
		printJSON(stdout, claimResult(next))
	} else {
		printClaim(stdout, "Renewed", next)
	}
	return exitOK
}

const releaseUsage = `Usage: synapse release ID [--epoch N] [--outcome done|failed] [--evidence TEXT]... [--known-failure TEXT]...

Releases your claim on task ID, with optional closeout evidence. The hub
turns the evidence into a receipt with an advisory verdict (degraded when a
known failure is given, unsupported without positive evidence, ...) and
posts it as a progress note. It drops this checkout's record of the grant
(the lease ledger guard and git-hook fence on), also when the hub answers
that the claim is no longer yours (exit 1 all the same).

A claim taken with --task moves its board task: --outcome done marks it
done, --outcome failed marks it blocked, and no outcome puts it back to open.
`

func runRelease(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	var o client.ReleaseOptions
	var evidence, artifacts, failures, changed, generated, approvals stringList
	fs := newFlagSet("release", releaseUsage, "", stderr)
	f.register(fs)
	fs.Int64Var(&o.Epoch, "epoch", 0, "refuse unless this is still the claim's epoch (fencing)")
	fs.Var(&evidence, "evidence", "what shows the work is done, e.g. 'go test ./... ok' (repeatable)")
	fs.Var(&artifacts, "artifact", "an artifact produced (repeatable)")
	fs.Var(&failures, "known-failure", "a known failure (repeatable)")
	fs.Var(&changed, "changed-file", "a file changed (repeatable)")
	fs.Var(&generated, "generated-artifact", "a generated artifact (repeatable)")
	fs.Var(&approvals, "approval", "an approval obtained (repeatable)")
	fs.StringVar(&o.Confidence, "confidence", "", "your confidence, free text")
	fresh := fs.Float64("freshness-seconds", -1, "age of the evidence in seconds")
	fs.StringVar(&o.IdemKey, "idem-key", "", "retry key")
	fs.StringVar(&o.Outcome, "outcome", "", "done or failed: moves a task-bound claim's board task")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, "release", "give exactly one task ID")
	}
	if o.Outcome != "" && o.Outcome != "done" && o.Outcome != "failed" {
		return usageError(stderr, "release", "--outcome is done or failed")
	}
	o.Evidence, o.Artifacts, o.KnownFailures, o.ChangedFiles, o.GeneratedArtifacts, o.Approvals = evidence, artifacts, failures, changed, generated, approvals
	if *fresh >= 0 {
		o.FreshnessSeconds = fresh
	}
	c, code := f.start(stderr, "release", false, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	r, err := c.Release(ctx, pos[0], o)
	var ref *client.Refused
	if errors.As(err, &ref) && (ref.Code == "NOT_CLAIMED" || ref.Code == "NOT_OWNER") {
		// Not ours any more: letting go also drops this checkout's record,
		// which would otherwise keep refusing the files as "gone".
		forgetGrant(f.name, pos[0], stderr)
	}
	if err != nil {
		return f.failure(stderr, "release", err)
	}
	forgetGrant(f.name, pos[0], stderr)
	printReceipt(&f, stdout, r)
	return exitOK
}

func printReceipt(f *clientFlags, stdout io.Writer, r *client.Receipt) {
	if f.asJSON {
		printJSON(stdout, struct {
			Released bool            `json:"released"`
			TaskID   string          `json:"task_id"`
			Owner    string          `json:"owner"`
			Receipt  *client.Receipt `json:"receipt"`
		}{r.Released, r.TaskID, r.Owner, r})
		return
	}
	fmt.Fprintf(stdout, "Released '%s' (%s).\n", r.TaskID, r.Owner)
	fmt.Fprintf(stdout, "  receipt: %s", r.EpistemicStatus)
	if len(r.EpistemicReasons) > 0 {
		fmt.Fprintf(stdout, " (%s)", strings.Join(r.EpistemicReasons, "; "))
	}
	fmt.Fprintln(stdout)
}

const handoffUsage = `Usage: synapse handoff ID TO [--note TEXT] [--epoch N]

Passes your claim on task ID to agent TO, in one step: no one else can take
it in between. TO must be online. TO gets a fresh epoch and a full lease.
`

func runHandoff(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("handoff", handoffUsage, "", stderr)
	f.register(fs)
	note := fs.String("note", "", "replaces the claim's note")
	epoch := fs.Int64("epoch", 0, "refuse unless this is still the claim's epoch")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return usageError(stderr, "handoff", "give a task ID and the agent to hand it to")
	}
	c, code := f.start(stderr, "handoff", false, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	cl, err := c.Handoff(ctx, client.HandoffRequest{TaskID: pos[0], To: pos[1], Note: *note, Epoch: *epoch})
	if err != nil {
		return f.failure(stderr, "handoff", err)
	}
	forgetGrant(f.name, pos[0], stderr)
	if f.asJSON {
		printJSON(stdout, claimResult(cl))
	} else {
		printClaim(stdout, "Handed off", cl)
	}
	return exitOK
}

const updateUsage = `Usage: synapse update ID [--status S] [--note TEXT] [--data-ref REF]

Updates your claim on task ID. Statuses: claimed -> working | done | failed;
working -> input_required | done | failed; input_required -> working | done |
failed. done and failed are final.
`

func runUpdate(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	var r client.UpdateRequest
	fs := newFlagSet("update", updateUsage, "", stderr)
	f.register(fs)
	fs.StringVar(&r.Status, "status", "", "new status")
	fs.StringVar(&r.Note, "note", "", "new note")
	fs.StringVar(&r.DataRef, "data-ref", "", "pointer to the work's output (a PR, a branch, a file)")
	fs.Int64Var(&r.Epoch, "epoch", 0, "refuse unless this is still the claim's epoch")
	ev := fs.Int64("expected-version", -1, "refuse unless the claim is at this version")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, "update", "give exactly one task ID")
	}
	r.TaskID = pos[0]
	if *ev >= 0 {
		r.ExpectedVersion = ev
	}
	c, code := f.start(stderr, "update", false, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	u, err := c.Update(ctx, r)
	if err != nil {
		return f.failure(stderr, "update", err)
	}
	if f.asJSON {
		printJSON(stdout, u)
	} else {
		fmt.Fprintf(stdout, "Updated '%s': status %s, version %d.\n", u.TaskID, u.Status, u.Version)
	}
	return exitOK
}

const checkpointUsage = `Usage: synapse checkpoint ID TEXT [--epoch N]

Saves TEXT as the resume point of your claim on task ID. A checkpoint
outlives the lease: whoever claims the task next inherits it.
`

func runCheckpoint(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("checkpoint", checkpointUsage, "", stderr)
	f.register(fs)
	epoch := fs.Int64("epoch", 0, "refuse unless this is still the claim's epoch")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) < 2 {
		return usageError(stderr, "checkpoint", "give a task ID and the checkpoint text")
	}
	c, code := f.start(stderr, "checkpoint", false, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	v, err := c.Checkpoint(ctx, pos[0], strings.Join(pos[1:], " "), *epoch)
	if err != nil {
		return f.failure(stderr, "checkpoint", err)
	}
	if f.asJSON {
		printJSON(stdout, map[string]any{"task_id": pos[0], "version": v})
	} else {
		fmt.Fprintf(stdout, "Checkpoint saved for '%s' (version %d).\n", pos[0], v)
	}
	return exitOK
}

const waitUsage = `Usage: synapse wait ID [--timeout 30s]

Blocks until task ID is free to claim: the hub wakes the waiter when the
holder releases it, hands it off, or lets its lease expire (no polling on
this hub). Exits 0 at once if nobody holds it. The hub refuses (exit 1) a
wait on a task you hold, or one that would deadlock (the holder waits on
something you hold). Then claim it with 'synapse claim ID'.

It waits for a task, not a message: 'synapse inbox --wait' waits for a
message to --name, and 'synapse arm NAME' runs a command for every one.
`

func runWait(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("wait", waitUsage, ", 4 timed out", stderr)
	f.register(fs)
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long (0 = wait forever)")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, "wait", "give exactly one task ID")
	}
	c, code := f.start(stderr, "wait", false, true)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx := context.Background()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	w, err := c.WaitWithNotice(ctx, pos[0], func(holder string) {
		if !f.asJSON {
			fmt.Fprintf(stderr, "Waiting for '%s' held by %s...\n", pos[0], holder)
		}
	})
	if errors.Is(err, context.DeadlineExceeded) {
		if f.asJSON {
			printJSON(stdout, map[string]any{"task_id": pos[0], "free": false, "reason": "timeout"})
		}
		fmt.Fprintf(stderr, "synapse wait: '%s' was still held after %s.\n", pos[0], *timeout)
		return exitTimeout
	}
	if err != nil {
		return f.failure(stderr, "wait", err)
	}
	if f.asJSON {
		printJSON(stdout, map[string]any{"task_id": w.TaskID, "free": true, "reason": w.Reason, "holder": w.Holder})
	} else {
		fmt.Fprintf(stdout, "'%s' is free (%s). Claim it with 'synapse claim %s'.\n", w.TaskID, w.Reason, w.TaskID)
	}
	return exitOK
}

const lockUsage = `Usage: synapse lock ID [--paths P]... [--glob PATTERN]... [--file F]... [--task BOARD_TASK_ID] [--wait-timeout 30s] -- CMD [ARGS...]

Claims task ID (its files as 'synapse claim' takes them: --paths, --glob,
--file, a --paths entry that is a regular file claimed as a file), waiting
up to --wait-timeout for it to be free, runs CMD
while renewing the lease in the background, then releases the claim with
CMD's exit status as evidence (a known failure when it is not 0) and exits
with CMD's exit code. If the lease is lost while CMD runs (the hub refused a
renewal) it says so on stderr; CMD keeps running. Messages go to stderr,
so CMD's output is its own. With --task, the claim also takes that board
task (as 'synapse claim --task'), and the release marks it done when CMD
exits 0, failed (blocked) otherwise.

Exit codes: CMD's, or 1 when the claim is refused, 4 when the task stayed
held past --wait-timeout, 127 when CMD cannot be started.
`

func runLock(args []string, stdout, stderr io.Writer) int {
	var cmdArgs []string
	for i, a := range args {
		if a == "--" {
			args, cmdArgs = args[:i], args[i+1:]
			break
		}
	}
	var f clientFlags
	var paths stringList
	fs := newFlagSet("lock", lockUsage, "", stderr)
	f.register(fs)
	var globs, files stringList
	fs.Var(&paths, "paths", "a file or folder the claim covers, with what lies below it (repeatable); none (and no --glob or --file) = the whole worktree")
	fs.Var(&globs, "glob", "a glob pattern the claim covers, e.g. 'src/**/*.go' (repeatable)")
	fs.Var(&files, "file", "a file the claim covers, itself alone (repeatable)")
	shared := fs.Bool("shared", false, "a shared (read) claim: other readers may overlap it, writers may not")
	worktree := fs.String("worktree", "", "checkout the paths are in")
	ttl := fs.Duration("ttl", 0, "lease length, renewed at a third of it (default: the hub's, 1h)")
	note := fs.String("note", "", "what you are doing")
	waitTimeout := fs.Duration("wait-timeout", 30*time.Second, "how long to wait for a held task (0 = do not wait)")
	boardTask := fs.String("task", "", "board task to take in progress with the files; CMD's exit status finishes it")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || len(cmdArgs) == 0 {
		return usageError(stderr, "lock", "give one task ID, then -- and the command to run")
	}
	task := pos[0]
	c, code := f.start(stderr, "lock", false, true)
	if c == nil {
		return code
	}
	defer c.Close()

	req := client.ClaimRequest{TaskID: task, Paths: paths, Globs: globs, Files: files, Shared: *shared, Worktree: *worktree, TTL: *ttl, Note: *note,
		BoardTask: *boardTask, Checkout: checkout(*worktree)}
	cl, err := claimOrWait(c, req, *waitTimeout, stderr)
	if errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(stderr, "synapse lock: '%s' was still held after --wait-timeout %s.\n", task, *waitTimeout)
		return exitTimeout
	}
	if err != nil {
		return refusedClaim(&f, stdout, stderr, "lock", task, err)
	}
	fmt.Fprintf(stderr, "synapse lock: holding '%s' (epoch %d) while %s runs.\n", task, cl.Epoch, cmdArgs[0])
	recordGrant(f.uri, cl, stderr)
	defer forgetGrant(f.name, task, stderr)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Each renewal is a fresh epoch: record it, or CMD's commits would look
	// superseded; and fence it, so a lock paused past its lease does not
	// adopt one that moved on.
	k := c.KeepLeaseWith(ctx, cl, client.KeepOptions{Fence: true, OnRenew: func(next *client.Claim) { recordGrant(f.uri, next, stderr) }})
	go func() {
		if err, ok := <-k.Lost(); ok {
			fmt.Fprintf(stderr, "synapse lock: LOST the lease on '%s': %v. %s keeps running without it.\n", task, err, cmdArgs[0])
		}
	}()

	exit, runErr := runChild(cmdArgs, stdout, stderr)
	shown := "`" + strings.Join(cmdArgs, " ") + "`"
	var o client.ReleaseOptions
	switch {
	case runErr != nil:
		o.KnownFailures = []string{shown + " could not start: " + runErr.Error()}
	case exit == 0:
		o.Evidence = []string{shown + " exited 0"}
	default:
		o.KnownFailures = []string{shown + " exited " + strconv.Itoa(exit)}
	}
	if cl.BoardTask != "" {
		o.Outcome = "failed"
		if runErr == nil && exit == 0 {
			o.Outcome = "done"
		}
	}
	rctx, rcancel := f.callCtx()
	defer rcancel()
	if r, err := k.Release(rctx, o); err != nil {
		fmt.Fprintf(stderr, "synapse lock: could not release '%s': %v\n", task, err)
	} else {
		fmt.Fprintf(stderr, "synapse lock: released '%s' (receipt: %s).\n", task, r.EpistemicStatus)
	}
	if runErr != nil {
		fmt.Fprintf(stderr, "synapse lock: cannot run %s: %v\n", cmdArgs[0], runErr)
		return 127
	}
	return exit
}

// claimOrWait claims, and while the task (or an overlapping one) is held,
// waits for the hub to say it is free and tries again, up to timeout.
func claimOrWait(c *client.Client, req client.ClaimRequest, timeout time.Duration, stderr io.Writer) (*client.Claim, error) {
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, 10*time.Second))
	defer cancel()
	deadline := time.Now().Add(timeout)
	for {
		cl, err := c.Claim(ctx, req)
		var ref *client.Refused
		if err == nil || !errors.As(err, &ref) || timeout <= 0 || (ref.Code != "LEASE_LIVE" && ref.Code != "SCOPE_CONFLICT") {
			return cl, err
		}
		blocker := req.TaskID
		if ref.ConflictTask != "" {
			blocker = ref.ConflictTask
		}
		fmt.Fprintf(stderr, "synapse lock: %s Waiting up to %s.\n", ref.Message, time.Until(deadline).Round(time.Second))
		wctx, wcancel := context.WithDeadline(context.Background(), deadline)
		_, err = c.Wait(wctx, blocker)
		wcancel()
		if err != nil {
			return nil, err
		}
	}
}

// runChild runs the command with this process's stdin and the given
// outputs, forwarding SIGINT and SIGTERM to it, and returns its exit code.
func runChild(argv []string, stdout, stderr io.Writer) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s := <-sig:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if code := ee.ExitCode(); code >= 0 {
			return code, nil
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return 1, nil
	}
	return 0, err
}
