package mcpserver

// The tools. Each takes a typed input (its JSON schema comes from the
// struct and its jsonschema tags), answers with one or two lines of text
// plus structured content, and reports a refusal as a tool error (IsError)
// whose text says what to do next.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/synapse-hub/synapse/client"
)

// callTimeout bounds one request to the hub.
const callTimeout = 15 * time.Second

// Wait tool bounds.
const (
	// DefaultWait is the wait tool's timeout when the call gives none:
	// under the 60 s after which the MCP TypeScript SDK's clients give up
	// on a request (-32001 Request timed out).
	DefaultWait = 50 * time.Second
	// DefaultProgressEvery is how often a waiting wait tool reports
	// progress to a client that gave a progress token: well inside that
	// 60 s, so a client that resets its timeout on progress keeps waiting.
	DefaultProgressEvery = 10 * time.Second
	maxWait              = time.Hour
)

// addTool registers a tool unless the profile leaves it out. Its input
// schema comes from In, with list arguments plain arrays; its output
// schema from Out only when Options.OutputSchemas asks (the results carry
// structured content either way): the schemas of every result would
// more than double tools/list, which every host pays for on every turn.
func addTool[In, Out any](s *Server, name, desc string, readOnly bool, h mcp.ToolHandlerFor[In, Out]) {
	if s.profile == ProfileMinimal && !minimalTools[name] {
		return
	}
	t := &mcp.Tool{Name: name, Description: desc, InputSchema: inputSchema[In]()}
	if readOnly {
		t.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: true}
	}
	if s.outputSchemas {
		mcp.AddTool(s.srv, t, h)
		return
	}
	mcp.AddTool(s.srv, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		return h(ctx, req, in)
	})
}

// inputSchema is In's JSON schema with every list argument typed "array",
// not ["null","array"] (what the schema package makes of a Go slice):
// clients such as the MCP Inspector offer no way to fill the latter.
func inputSchema[In any]() *jsonschema.Schema {
	sc, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: input schema of %T: %v", *new(In), err))
	}
	for _, p := range sc.Properties {
		if slices.Equal(p.Types, []string{"null", "array"}) {
			p.Types, p.Type = nil, "array"
		}
	}
	return sc
}

func (s *Server) addTools() {
	addTool(s, "claim", "Claim a task and the files you will edit; renewed in the background until released.", false, s.claim)
	addTool(s, "renew", "Renew a claim you hold now (the server also renews in the background).", false, s.renew)
	addTool(s, "release", "Release a claim you hold, with evidence of what was done.", false, s.release)
	addTool(s, "handoff", "Pass a claim you hold to another online agent in one step.", false, s.handoff)
	addTool(s, "claim_update", "Change the status, note or data_ref of a claim you hold (board tasks: task_update).", false, s.updateTask)
	addTool(s, "checkpoint", "Save a resume point on a claim you hold; the next holder inherits it.", false, s.checkpoint)
	addTool(s, "wait", "Block until a task is free to claim (woken by the hub), up to a timeout.", true, s.wait)
	addTool(s, "send", "Send a message to an agent, a project, a role or all.", false, s.send)
	addTool(s, "inbox", "Read messages sent to you; ack the ones you handled.", false, s.readInbox)
	addTool(s, "who", "List the agents online.", true, s.who)
	addTool(s, "status", "The hub, the agents online, and the claims you hold.", true, s.status)
	addTool(s, "board", "Show the task board: tasks, ready list, recent progress.", true, s.board)
	addTool(s, "task_declare", "Declare a task on the shared board.", false, s.taskDeclare)
	addTool(s, "task_update", "Change a board task's status, suggested owner or project.", false, s.taskUpdate)
	addTool(s, "task_progress", "Post a progress note on a board task.", false, s.taskProgress)
}

// ok is a successful result: text for the model, out as structured content.
func ok[Out any](out Out, format string, args ...any) (*mcp.CallToolResult, Out, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}, out, nil
}

// refuse is a tool error: the hub said no, or it could not be asked.
func refuse[Out any](out Out, text string) (*mcp.CallToolResult, Out, error) {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}

// explain turns a client error into a sentence that says what to do next.
func (s *Server) explain(err error) string {
	var ref *client.Refused
	var rej *client.RejectedError
	switch {
	case errors.As(err, &ref):
		msg := ref.Message
		if msg == "" {
			msg = ref.Error()
		}
		if ref.Code != "" && !strings.Contains(msg, ref.Code) {
			msg += " (" + ref.Code + ")"
		}
		switch {
		case ref.Code == "LEASE_LIVE" && ref.Holder != "":
			msg += fmt.Sprintf(" Call wait with task_id %q to be woken when it is free, or send %s a message.", ref.TaskID, ref.Holder)
		case ref.Code == "SCOPE_CONFLICT" && ref.Holder != "":
			msg += fmt.Sprintf(" Narrow paths, call wait with task_id %q, or send %s a message.", ref.ConflictTask, ref.Holder)
		case ref.Code == "BOARD_TASK_NOT_READY" && len(ref.Pending) > 0:
			msg += fmt.Sprintf(" Its dependencies are not done yet (%s); pick a task from the board's ready list.", strings.Join(ref.Pending, ", "))
		case ref.Code == "BOARD_TASK_HELD" && ref.Holder != "":
			msg += fmt.Sprintf(" Pick another ready task from the board, or send %s a message.", ref.Holder)
		case ref.Code == "NOT_CLAIMED":
			msg += " Claim it first with the claim tool."
		case ref.Code == "NOT_OWNER" && ref.Holder != "":
			msg += fmt.Sprintf(" Only %s can do that; send them a message.", ref.Holder)
		}
		return msg + ownership(ref, msg)
	case errors.As(err, &rej):
		return rej.Error() + ". Restart the MCP server with another --name."
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("The hub at %s did not answer in time. Check that `synapse hub` is running, then retry.", s.c.URI())
	case errors.Is(err, client.ErrDisconnected):
		why := s.c.DownReason()
		if errors.As(why, &rej) {
			return fmt.Sprintf("Not connected to the hub at %s as %s: %v. The server keeps trying and binds the name once it is free; or restart it with another --name.", s.c.URI(), s.c.Name(), why)
		}
		if why == nil || errors.Is(why, client.ErrDisconnected) {
			return fmt.Sprintf("Lost the connection to the hub at %s; the server reconnects by itself. Retry in a few seconds; if it persists, check that `synapse hub` is running.", s.c.URI())
		}
		return fmt.Sprintf("Not connected to the hub at %s (%v); the server keeps trying by itself. Start it with `synapse hub` if it is not running, then retry.", s.c.URI(), why)
	case errors.Is(err, client.ErrClosed):
		return fmt.Sprintf("The connection to the hub at %s is closed (%v). Restart the MCP server (and check that `synapse hub` is running and the token is right).", s.c.URI(), err)
	}
	return err.Error()
}

// ownership names the namespace and the hub that owns it when a federated
// hub's ownership gate refused, unless the hub's sentence already does
// (a reference hub words it its own way): a model should learn which hub
// decides, not only that this one would not.
func ownership(ref *client.Refused, msg string) string {
	if ref.Ownership == "" && ref.OwnerHubID == "" {
		return ""
	}
	quoted := "'" + ref.Namespace + "'"
	if strings.Contains(msg, ref.OwnerHubID) && (ref.Namespace == "" || strings.Contains(msg, quoted)) && strings.Contains(msg, ref.ForwardError) {
		return ""
	}
	ns := "Namespace " + quoted
	if ref.Namespace == "" {
		ns = "The namespace of bare names"
	}
	switch {
	case ref.OwnerHubID == "":
		return fmt.Sprintf(" %s has no owning hub, so no hub grants claims in it.", ns)
	case ref.ForwardError != "":
		return fmt.Sprintf(" %s is owned by hub %s, which this hub could not reach (%s): retry shortly.", ns, ref.OwnerHubID, ref.ForwardError)
	case len(ref.Contesting) > 0:
		return fmt.Sprintf(" %s is owned by hub %s but contested by %s: nothing is granted there until the hubs agree.", ns, ref.OwnerHubID, strings.Join(ref.Contesting, ", "))
	}
	return fmt.Sprintf(" %s is owned by hub %s (%s here).", ns, ref.OwnerHubID, ref.Ownership)
}

func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callTimeout)
}

// ClaimView is a claim as the tools and resources show it.
type ClaimView struct {
	TaskID       string   `json:"task_id"`
	Owner        string   `json:"owner"`
	Epoch        int64    `json:"epoch"`
	Status       string   `json:"status"`
	Paths        []string `json:"paths" jsonschema:"files or folders, each with what lies below it; empty with no globs and no files = the whole worktree"`
	Globs        []string `json:"globs,omitempty" jsonschema:"glob patterns the claim covers beside its paths: the files they match"`
	Files        []string `json:"files,omitempty" jsonschema:"files the claim covers, each itself alone"`
	Mode         string   `json:"mode,omitempty" jsonschema:"shared for a read claim; absent = exclusive"`
	Worktree     string   `json:"worktree,omitempty"`
	Note         string   `json:"note,omitempty"`
	Checkpoint   string   `json:"checkpoint,omitempty"`
	LeaseExpires string   `json:"lease_expires" jsonschema:"RFC 3339, UTC"`
	KeptAlive    bool     `json:"kept_alive,omitempty" jsonschema:"this server renews the lease in the background"`
	BoardTask    string   `json:"board_task,omitempty" jsonschema:"the board task this claim holds in progress"`
}

func (s *Server) view(cl *client.Claim) ClaimView {
	paths := cl.Paths
	if paths == nil {
		paths = []string{}
	}
	v := ClaimView{TaskID: cl.TaskID, Owner: cl.Owner, Epoch: cl.Epoch, Status: cl.Status, Paths: paths, Globs: cl.Globs, Files: cl.Files, Mode: cl.Mode, Worktree: cl.Worktree,
		Note: cl.Note, Checkpoint: cl.Checkpoint, LeaseExpires: rfc3339(cl.LeaseExpiresAt), BoardTask: cl.BoardTask}
	s.mu.Lock()
	_, v.KeptAlive = s.keepers[cl.TaskID]
	s.mu.Unlock()
	return v
}

func pathsText(p []string) string {
	if len(p) == 0 {
		return "the whole worktree"
	}
	return strings.Join(p, ", ")
}

// ClaimResult is the answer of claim, renew and handoff.
type ClaimResult struct {
	Granted      bool       `json:"granted"`
	TaskID       string     `json:"task_id"`
	Claim        *ClaimView `json:"claim,omitempty" jsonschema:"the claim, when granted"`
	Code         string     `json:"code,omitempty" jsonschema:"why it was refused: LEASE_LIVE, SCOPE_CONFLICT, NOT_OWNER, ..."`
	Message      string     `json:"message,omitempty"`
	Holder       string     `json:"holder,omitempty" jsonschema:"who holds the task or the conflicting files"`
	ConflictTask string     `json:"conflict_task,omitempty" jsonschema:"the task whose files overlap yours"`
	// ConflictPattern and ConflictMode come when a glob, a file or a shared claim is involved.
	ConflictPattern string   `json:"conflict_pattern,omitempty" jsonschema:"the holder's path, glob or file that overlaps yours"`
	ConflictMode    string   `json:"conflict_mode,omitempty" jsonschema:"the holder's mode: shared or exclusive"`
	Namespace       string   `json:"namespace,omitempty" jsonschema:"on federated hubs: the namespace whose ownership refused the claim"`
	OwnerHubID      string   `json:"owner_hub_id,omitempty" jsonschema:"on federated hubs: the hub that owns the namespace and decides its claims"`
	Pending         []string `json:"pending,omitempty" jsonschema:"BOARD_TASK_NOT_READY: the board task's dependencies that are not done"`
}

func (s *Server) refusedClaim(task string, err error) (*mcp.CallToolResult, ClaimResult, error) {
	out := ClaimResult{TaskID: task}
	var ref *client.Refused
	text := s.explain(err)
	if errors.As(err, &ref) {
		out.Code, out.Message, out.Holder, out.ConflictTask = ref.Code, ref.Message, ref.Holder, ref.ConflictTask
		out.ConflictPattern, out.ConflictMode = ref.ConflictPattern, ref.ConflictMode
		out.Namespace, out.OwnerHubID, out.Pending = ref.Namespace, ref.OwnerHubID, ref.Pending
		if conflict := conflictTask(ref); conflict != "" && s.ch.watch(conflict, EventConflictResolved, ref.Holder) {
			text += " A channel event (kind conflict_resolved) will tell you when it is gone."
		}
	}
	return refuse(out, text)
}

// conflictTask is the live claim another agent holds that refused a
// claim: the task itself (LEASE_LIVE) or the one whose files overlap.
func conflictTask(ref *client.Refused) string {
	switch {
	case ref.Code == "LEASE_LIVE" && ref.Holder != "":
		return ref.TaskID
	case ref.Code == "SCOPE_CONFLICT" && ref.Holder != "":
		return ref.ConflictTask
	}
	return ""
}

type claimIn struct {
	TaskID     string   `json:"task_id" jsonschema:"the task to claim, e.g. fix-login-bug"`
	Paths      []string `json:"paths,omitempty" jsonschema:"files or folders you will edit, relative to the repository root; a folder covers what lies below it, an existing file itself alone; none (and no globs or files) = the whole worktree"`
	Globs      []string `json:"globs,omitempty" jsonschema:"glob patterns of the files you will edit, e.g. src/**/*.go: * and ? within a path segment, ** any number of segments; src/**/*.go and src/**/*.md never conflict"`
	Files      []string `json:"files,omitempty" jsonschema:"files you will edit, each covering itself alone, whether it exists yet or not"`
	Shared     bool     `json:"shared,omitempty" jsonschema:"claim for reading only: other readers may hold overlapping files, no one may write them"`
	Worktree   string   `json:"worktree,omitempty" jsonschema:"checkout label, when agents work in separate worktrees"`
	Note       string   `json:"note,omitempty" jsonschema:"what you are doing, shown to others"`
	TTLSeconds float64  `json:"ttl_seconds,omitempty" jsonschema:"lease length in seconds (default: the hub's, 1 hour); renewed in the background either way"`
	BoardTask  string   `json:"board_task,omitempty" jsonschema:"a board task to take in progress with the files, in one step; it must be ready (open, dependencies done)"`
	ReleaseOn  string   `json:"release_on,omitempty" jsonschema:"commit or merge: released by itself once git commits, or merges, all its files (synapse git-hook install)"`
}

func (s *Server) claim(ctx context.Context, _ *mcp.CallToolRequest, in claimIn) (*mcp.CallToolResult, ClaimResult, error) {
	on, err := client.ParseReleaseTrigger(in.ReleaseOn)
	if err != nil || on != "" && s.ledger == nil {
		msg := fmt.Sprintf("release_on %q: want commit or merge (or leave it out). Nothing was claimed.", in.ReleaseOn)
		if err == nil {
			msg = "release_on needs a lease ledger (synapse mcp in a git checkout); this server has none. Nothing was claimed."
		}
		return refuse(ClaimResult{TaskID: in.TaskID}, msg)
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	defer s.ch.claim(in.TaskID)()
	cl, err := s.c.Claim(ctx, client.ClaimRequest{TaskID: in.TaskID, Paths: in.Paths, Globs: in.Globs, Files: in.Files, Shared: in.Shared, Worktree: in.Worktree, Note: in.Note,
		TTL: time.Duration(in.TTLSeconds * float64(time.Second)), BoardTask: in.BoardTask, Checkout: s.checkout})
	if err != nil {
		return s.refusedClaim(in.TaskID, err)
	}
	s.keep(cl)
	if on != "" {
		if err := s.ledger.RecordReleaseOn(s.c.URI(), cl, on); err != nil {
			s.log.Warn("synapse mcp: release_on not recorded", "task", cl.TaskID, "err", err)
		}
	}
	v := s.view(cl)
	return ok(ClaimResult{Granted: true, TaskID: cl.TaskID, Claim: &v},
		"Claimed '%s' as %s (epoch %d): %s. The lease runs until %s and this server renews it until you release it.",
		cl.TaskID, cl.Owner, cl.Epoch, scopeText(cl), v.LeaseExpires)
}

// scopeText is a claim's scope for a sentence: its paths, its globs, its
// files, and "(shared)" for a read claim.
func scopeText(cl *client.Claim) string {
	var parts []string
	if len(cl.Paths) > 0 {
		parts = append(parts, pathsText(cl.Paths))
	}
	if len(cl.Globs) > 0 {
		parts = append(parts, strings.Join(cl.Globs, ", "))
	}
	switch len(cl.Files) {
	case 0:
	case 1:
		parts = append(parts, "the file "+cl.Files[0])
	default:
		parts = append(parts, "the files "+strings.Join(cl.Files, ", "))
	}
	t := strings.Join(parts, ", ")
	if t == "" {
		t = pathsText(nil)
	}
	if cl.Shared() {
		t += " (shared)"
	}
	return t
}

type renewIn struct {
	TaskID     string  `json:"task_id" jsonschema:"a task you hold"`
	TTLSeconds float64 `json:"ttl_seconds,omitempty" jsonschema:"new lease length in seconds (default: the current one)"`
}

// held finds the live claim on task and checks this agent holds it.
func (s *Server) held(ctx context.Context, task string) (*client.Claim, error) {
	st, err := s.c.State(ctx)
	if err != nil {
		return nil, err
	}
	cl := st.Claim(task)
	switch {
	case cl == nil:
		return nil, &client.Refused{Code: "NOT_CLAIMED", TaskID: task, Message: fmt.Sprintf("Task '%s' is not currently claimed.", task)}
	case cl.Owner != s.c.Name():
		return nil, &client.Refused{Code: "NOT_OWNER", TaskID: task, Holder: cl.Owner, Message: fmt.Sprintf("Task '%s' is held by %s, not %s.", task, cl.Owner, s.c.Name())}
	}
	return cl, nil
}

// renewFence refuses to renew a claim the ledger recorded under another
// epoch: it was re-granted since, and renewing would make the write-path
// checks take the new epoch as this agent's own. Claiming it again (the
// claim tool) is the deliberate way back.
func (s *Server) renewFence(live *client.Claim) error {
	if s.ledger == nil {
		return nil
	}
	r, ok, err := s.ledger.Lookup(live.Owner, live.TaskID)
	if err != nil || !ok || r.Epoch == live.Epoch {
		return nil
	}
	return &client.Refused{Code: "EPOCH_STALE", TaskID: live.TaskID, Holder: live.Owner, Message: fmt.Sprintf(
		"Task '%s' is live under epoch %d, but you were granted epoch %d: it was re-granted since. Re-check your work against the current files, then take it with the claim tool.",
		live.TaskID, live.Epoch, r.Epoch)}
}

func (s *Server) renew(ctx context.Context, _ *mcp.CallToolRequest, in renewIn) (*mcp.CallToolResult, ClaimResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	cl, err := s.held(ctx, in.TaskID)
	if err != nil {
		return s.refusedClaim(in.TaskID, err)
	}
	if err := s.renewFence(cl); err != nil {
		return s.refusedClaim(in.TaskID, err)
	}
	defer s.ch.claim(in.TaskID)()
	req := cl.Request()
	if in.TTLSeconds > 0 {
		req.TTL = time.Duration(in.TTLSeconds * float64(time.Second))
	}
	next, err := s.c.Claim(ctx, req)
	if err != nil {
		return s.refusedClaim(in.TaskID, err)
	}
	s.keep(next) // the keeper must fence on the new epoch
	v := s.view(next)
	return ok(ClaimResult{Granted: true, TaskID: next.TaskID, Claim: &v}, "Renewed '%s' (epoch %d) until %s.", next.TaskID, next.Epoch, v.LeaseExpires)
}

type releaseIn struct {
	TaskID        string   `json:"task_id" jsonschema:"a task you hold"`
	Evidence      []string `json:"evidence,omitempty" jsonschema:"what shows the work is done, e.g. 'go test ./... passed'"`
	KnownFailures []string `json:"known_failures,omitempty" jsonschema:"what is still broken"`
	ChangedFiles  []string `json:"changed_files,omitempty"`
	Artifacts     []string `json:"artifacts,omitempty" jsonschema:"commits, PRs, files produced"`
	Outcome       string   `json:"outcome,omitempty" jsonschema:"done or failed: moves the board task of a claim taken with board_task (failed shows as blocked)"`
}

// ReleaseResult is the hub's receipt of a release.
type ReleaseResult struct {
	Released        bool     `json:"released"`
	TaskID          string   `json:"task_id"`
	EpistemicStatus string   `json:"epistemic_status,omitempty" jsonschema:"the hub's advisory verdict on the evidence"`
	Reasons         []string `json:"reasons,omitempty"`
	Code            string   `json:"code,omitempty"`
	Message         string   `json:"message,omitempty"`
}

func (s *Server) release(ctx context.Context, _ *mcp.CallToolRequest, in releaseIn) (*mcp.CallToolResult, ReleaseResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	o := client.ReleaseOptions{Evidence: in.Evidence, KnownFailures: in.KnownFailures, ChangedFiles: in.ChangedFiles, Artifacts: in.Artifacts,
		Outcome: in.Outcome}
	var r *client.Receipt
	var err error
	if k := s.unkeep(in.TaskID); k != nil {
		r, err = k.Release(ctx, o)
	} else {
		r, err = s.c.Release(ctx, in.TaskID, o)
	}
	if err != nil {
		out := ReleaseResult{TaskID: in.TaskID}
		var ref *client.Refused
		if errors.As(err, &ref) {
			out.Code, out.Message = ref.Code, ref.Message
		}
		return refuse(out, s.explain(err))
	}
	s.forget(in.TaskID)
	out := ReleaseResult{Released: true, TaskID: in.TaskID, EpistemicStatus: r.EpistemicStatus, Reasons: r.EpistemicReasons}
	verdict := r.EpistemicStatus
	if len(r.EpistemicReasons) > 0 {
		verdict += ": " + strings.Join(r.EpistemicReasons, "; ")
	}
	if verdict == "" {
		verdict = "ok"
	}
	return ok(out, "Released '%s' (receipt: %s).", in.TaskID, verdict)
}

type handoffIn struct {
	TaskID string `json:"task_id" jsonschema:"a task you hold"`
	To     string `json:"to" jsonschema:"the online agent to hand it to, e.g. proj/reviewer-1"`
	Note   string `json:"note,omitempty" jsonschema:"replaces the claim's note: what the next holder should know"`
}

func (s *Server) handoff(ctx context.Context, _ *mcp.CallToolRequest, in handoffIn) (*mcp.CallToolResult, ClaimResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	cl, err := s.c.Handoff(ctx, client.HandoffRequest{TaskID: in.TaskID, To: in.To, Note: in.Note})
	if err != nil {
		return s.refusedClaim(in.TaskID, err)
	}
	if k := s.unkeep(in.TaskID); k != nil {
		k.Stop()
	}
	s.forget(in.TaskID)
	v := s.view(cl)
	return ok(ClaimResult{Granted: true, TaskID: cl.TaskID, Claim: &v}, "Handed '%s' to %s (epoch %d). Stop editing its files.", cl.TaskID, cl.Owner, cl.Epoch)
}

type updateIn struct {
	TaskID  string `json:"task_id" jsonschema:"a task you hold"`
	Status  string `json:"status,omitempty" jsonschema:"working, input_required, done or failed (done and failed are final)"`
	Note    string `json:"note,omitempty"`
	DataRef string `json:"data_ref,omitempty" jsonschema:"pointer to the output: a PR, a branch, a file"`
}

// UpdateResult is a claim after claim_update.
type UpdateResult struct {
	TaskID  string `json:"task_id"`
	Owner   string `json:"owner,omitempty"`
	Status  string `json:"status,omitempty"`
	DataRef string `json:"data_ref,omitempty"`
	Version int64  `json:"version,omitempty"`
}

func (s *Server) updateTask(ctx context.Context, _ *mcp.CallToolRequest, in updateIn) (*mcp.CallToolResult, UpdateResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	u, err := s.c.Update(ctx, client.UpdateRequest{TaskID: in.TaskID, Status: in.Status, Note: in.Note, DataRef: in.DataRef})
	if err != nil {
		return refuse(UpdateResult{TaskID: in.TaskID}, s.explain(err))
	}
	return ok(UpdateResult{TaskID: u.TaskID, Owner: u.Owner, Status: u.Status, DataRef: u.DataRef, Version: u.Version},
		"Updated '%s': status %s, version %d.", u.TaskID, u.Status, u.Version)
}

type checkpointIn struct {
	TaskID     string `json:"task_id" jsonschema:"a task you hold"`
	Checkpoint string `json:"checkpoint" jsonschema:"where you are and what is next, so whoever resumes the task can continue"`
}

// CheckpointResult is a saved checkpoint.
type CheckpointResult struct {
	TaskID  string `json:"task_id"`
	Saved   bool   `json:"saved"`
	Version int64  `json:"version,omitempty"`
}

func (s *Server) checkpoint(ctx context.Context, _ *mcp.CallToolRequest, in checkpointIn) (*mcp.CallToolResult, CheckpointResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	v, err := s.c.Checkpoint(ctx, in.TaskID, in.Checkpoint, 0)
	if err != nil {
		return refuse(CheckpointResult{TaskID: in.TaskID}, s.explain(err))
	}
	return ok(CheckpointResult{TaskID: in.TaskID, Saved: true, Version: v}, "Checkpoint saved for '%s' (version %d).", in.TaskID, v)
}

type waitIn struct {
	TaskID         string  `json:"task_id" jsonschema:"the task to wait for (for a file conflict: the conflicting task)"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"give up after this many seconds (default 50, at most 3600)"`
}

// WaitResult says whether the task became free.
type WaitResult struct {
	TaskID string `json:"task_id"`
	Free   bool   `json:"free"`
	Reason string `json:"reason" jsonschema:"release, expiry, handoff, free (it was not held), or timeout"`
	Holder string `json:"holder,omitempty" jsonschema:"who held it when the wait began"`
}

func (s *Server) wait(ctx context.Context, req *mcp.CallToolRequest, in waitIn) (*mcp.CallToolResult, WaitResult, error) {
	d := s.waitDefault
	if in.TimeoutSeconds > 0 {
		d = min(time.Duration(in.TimeoutSeconds*float64(time.Second)), maxWait)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if req != nil && req.Session != nil && req.Params.GetProgressToken() != nil {
		stop := s.reportProgress(ctx, req, in.TaskID, d)
		defer stop()
	}
	var holder string
	w, err := s.c.WaitWithNotice(ctx, in.TaskID, func(h string) { holder = h })
	if errors.Is(err, context.DeadlineExceeded) {
		text := fmt.Sprintf("'%s' is still held by %s after %s. Call wait again, or send %s a message.", in.TaskID, orSomeone(holder), d, orSomeone(holder))
		if s.ch.watch(in.TaskID, EventTaskFree, holder) {
			text += " A channel event (kind task_free) will tell you when it is free."
		}
		return ok(WaitResult{TaskID: in.TaskID, Reason: "timeout", Holder: holder}, "%s", text)
	}
	if err != nil {
		return refuse(WaitResult{TaskID: in.TaskID, Reason: "refused"}, s.explain(err))
	}
	return ok(WaitResult{TaskID: w.TaskID, Free: true, Reason: w.Reason, Holder: w.Holder},
		"'%s' is free (%s). Claim it now with the claim tool.", w.TaskID, w.Reason)
}

// reportProgress sends notifications/progress for req every
// progressEvery (seconds waited of the total) until stop is called, so a
// client that resets its request timeout on progress keeps waiting.
func (s *Server) reportProgress(ctx context.Context, req *mcp.CallToolRequest, task string, total time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	token := req.Params.GetProgressToken()
	start := time.Now()
	go func() {
		defer close(done)
		t := time.NewTicker(s.progressEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			waited := time.Since(start)
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
				Progress: waited.Seconds(), Total: total.Seconds(), Message: fmt.Sprintf("waiting for '%s' (%s of %s)", task, waited.Round(time.Second), total)})
			if err != nil {
				s.log.Debug("wait progress", "err", err)
			}
		}
	}()
	return func() { cancel(); <-done }
}

func orSomeone(h string) string {
	if h == "" {
		return "another agent"
	}
	return h
}

type sendIn struct {
	To       string `json:"to" jsonschema:"an agent (proj/bravo), a comma list, a project (proj), a role, a glob (proj/*) or all"`
	Text     string `json:"text"`
	Priority bool   `json:"priority,omitempty"`
}

// SendResult is a relayed message.
type SendResult struct {
	To         string   `json:"to"`
	MsgID      int64    `json:"msg_id"`
	Seq        int64    `json:"seq,omitempty"`
	Delivered  bool     `json:"delivered" jsonschema:"someone online received it (always true for broadcasts and globs)"`
	Recipients []string `json:"recipients,omitempty"`
	Reason     string   `json:"reason,omitempty"`
}

func (s *Server) send(ctx context.Context, _ *mcp.CallToolRequest, in sendIn) (*mcp.CallToolResult, SendResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	to := strings.TrimSpace(in.To)
	directed := to != "" && to != "all" && !strings.ContainsAny(to, "*?[")
	sent, err := s.c.Send(ctx, to, in.Text, client.SendOptions{ReceiptRequested: directed, Priority: in.Priority})
	if err != nil {
		return refuse(SendResult{To: to}, s.explain(err))
	}
	out := SendResult{To: to, MsgID: sent.MsgID, Seq: sent.Seq, Delivered: true}
	if r := sent.Receipt; r != nil {
		out.Delivered, out.Recipients, out.Reason = r.Delivered, r.Recipients, r.Reason
		if !r.Delivered {
			return refuse(out, fmt.Sprintf("Nobody online received it (%s): %s. Check who is online with the who tool.", r.Reason, r.Message))
		}
		return ok(out, "Sent to %s (msg %d): %s.", to, sent.MsgID, r.Message)
	}
	return ok(out, "Sent to %s (msg %d).", to, sent.MsgID)
}

type inboxIn struct {
	AckThrough int64 `json:"ack_through,omitempty" jsonschema:"mark every message with id up to this one read, before listing"`
	All        bool  `json:"all,omitempty" jsonschema:"list read messages too"`
	Limit      int   `json:"limit,omitempty" jsonschema:"at most this many (the newest); default 50"`
}

// InboxResult lists messages.
type InboxResult struct {
	Messages []Message `json:"messages"`
	Unread   int       `json:"unread"`
	Acked    int       `json:"acked,omitempty"`
}

func (s *Server) readInbox(ctx context.Context, _ *mcp.CallToolRequest, in inboxIn) (*mcp.CallToolResult, InboxResult, error) {
	limit := in.Limit
	if limit <= 0 {
		limit = 50
	}
	fctx, cancel := context.WithTimeout(ctx, mailboxTimeout)
	s.fetchMailbox(fctx) // mail kept while offline; best effort
	cancel()
	s.mu.Lock()
	acked, seqs := 0, []int64(nil)
	if in.AckThrough > 0 {
		acked, seqs = s.inbox.ackThrough(in.AckThrough)
	}
	out := InboxResult{Messages: s.inbox.list(in.All, limit), Unread: s.inbox.unread(), Acked: acked}
	s.mu.Unlock()
	var b strings.Builder
	if acked > 0 {
		s.notify(InboxURI)
		actx, cancel := withTimeout(ctx)
		for _, seq := range seqs {
			if err := s.c.Ack(actx, seq); err != nil {
				fmt.Fprintf(&b, "(The hub did not get the ack of seq %d: %s) ", seq, s.explain(err))
				break
			}
		}
		cancel()
		fmt.Fprintf(&b, "Acked %d. ", acked)
	}
	if len(out.Messages) == 0 {
		b.WriteString("No unread messages.")
		return ok(out, "%s", b.String())
	}
	fmt.Fprintf(&b, "%d unread:", out.Unread)
	for _, m := range out.Messages {
		fmt.Fprintf(&b, "\n#%d %s from %s to %s: %s", m.ID, m.At, m.From, m.To, m.Text)
	}
	fmt.Fprintf(&b, "\nWhen handled, call inbox with ack_through %d.", out.Messages[len(out.Messages)-1].ID)
	return ok(out, "%s", b.String())
}

type whoIn struct {
	Project string `json:"project,omitempty" jsonschema:"only agents of this project"`
}

// WhoResult lists the agents online.
type WhoResult struct {
	HubID  string              `json:"hub_id"`
	Online []string            `json:"online"`
	Roles  map[string][]string `json:"roles,omitempty"`
}

func (s *Server) who(ctx context.Context, _ *mcp.CallToolRequest, in whoIn) (*mcp.CallToolResult, WhoResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	w, err := s.c.Who(ctx)
	if err != nil {
		return refuse(WhoResult{}, s.explain(err))
	}
	out := WhoResult{HubID: w.HubID, Online: []string{}}
	for _, a := range w.OnlineAgents {
		if in.Project == "" || strings.HasPrefix(a, in.Project+"/") {
			out.Online = append(out.Online, a)
			if r := w.AgentRoles[a]; len(r) > 0 {
				if out.Roles == nil {
					out.Roles = map[string][]string{}
				}
				out.Roles[a] = r
			}
		}
	}
	slices.Sort(out.Online)
	return ok(out, "%d online: %s.", len(out.Online), strings.Join(out.Online, ", "))
}

// StatusResult is the status tool's answer.
type StatusResult struct {
	Name            string      `json:"name" jsonschema:"the agent this server acts as"`
	HubID           string      `json:"hub_id"`
	URI             string      `json:"uri"`
	ProtocolVersion int         `json:"protocol_version"`
	HubVersion      string      `json:"hub_version,omitempty"`
	Online          []string    `json:"online"`
	ActiveClaims    int         `json:"active_claims"`
	MyClaims        []ClaimView `json:"my_claims"`
	Unread          int         `json:"unread"`
}

func (s *Server) status(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, StatusResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	w, err := s.c.Who(ctx)
	if err != nil {
		return refuse(StatusResult{}, s.explain(err))
	}
	st, err := s.c.State(ctx)
	if err != nil {
		return refuse(StatusResult{}, s.explain(err))
	}
	wel := s.c.Welcome()
	out := StatusResult{Name: s.c.Name(), HubID: wel.HubID, URI: s.c.URI(), ProtocolVersion: wel.ProtocolVersion, HubVersion: w.HubVersion,
		Online: slices.Sorted(slices.Values(w.OnlineAgents)), ActiveClaims: len(st.ActiveClaims), MyClaims: []ClaimView{}}
	var mine []string
	for i := range st.ActiveClaims {
		if cl := &st.ActiveClaims[i]; cl.Owner == s.c.Name() {
			v := s.view(cl)
			out.MyClaims = append(out.MyClaims, v)
			mine = append(mine, fmt.Sprintf("%s (%s, until %s)", cl.TaskID, scopeText(cl), v.LeaseExpires))
		}
	}
	s.mu.Lock()
	out.Unread = s.inbox.unread()
	s.mu.Unlock()
	held := "none"
	if len(mine) > 0 {
		held = strings.Join(mine, "; ")
	}
	return ok(out, "You are %s on hub %s at %s (protocol v%d). %d agents online, %d live claims. You hold: %s. Unread messages: %d.",
		out.Name, out.HubID, out.URI, out.ProtocolVersion, len(out.Online), out.ActiveClaims, held, out.Unread)
}

// BoardResult is the task board.
type BoardResult struct {
	Tasks    []client.BoardTask `json:"tasks"`
	Ready    []string           `json:"ready" jsonschema:"open tasks whose dependencies are done"`
	Progress []client.Note      `json:"progress" jsonschema:"the latest progress notes"`
}

// boardNotes is how many progress notes the board shows.
const boardNotes = 20

func boardResult(b *client.Board) BoardResult {
	out := BoardResult{Tasks: b.Tasks, Ready: b.Ready, Progress: b.Progress}
	if out.Tasks == nil {
		out.Tasks = []client.BoardTask{}
	}
	for i := range out.Tasks {
		if out.Tasks[i].DependsOn == nil {
			out.Tasks[i].DependsOn = []string{}
		}
	}
	if out.Ready == nil {
		out.Ready = []string{}
	}
	if len(out.Progress) > boardNotes {
		out.Progress = out.Progress[len(out.Progress)-boardNotes:]
	}
	if out.Progress == nil {
		out.Progress = []client.Note{}
	}
	return out
}

func (s *Server) board(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, BoardResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	b, err := s.c.Board(ctx)
	if err != nil {
		return refuse(BoardResult{Tasks: []client.BoardTask{}, Ready: []string{}, Progress: []client.Note{}}, s.explain(err))
	}
	out := boardResult(b)
	if len(out.Tasks) == 0 {
		return ok(out, "The board is empty. Declare a task with task_declare.")
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d tasks:", len(out.Tasks))
	for _, t := range out.Tasks {
		fmt.Fprintf(&sb, "\n%s [%s] %s", t.TaskID, t.Status, t.Title)
		if t.SuggestedOwner != "" {
			fmt.Fprintf(&sb, " (owner %s)", t.SuggestedOwner)
		}
		if len(t.DependsOn) > 0 {
			fmt.Fprintf(&sb, " (after %s)", strings.Join(t.DependsOn, ", "))
		}
	}
	fmt.Fprintf(&sb, "\nReady: %s", strings.Join(out.Ready, ", "))
	return ok(out, "%s", sb.String())
}

type declareIn struct {
	TaskID         string   `json:"task_id"`
	Title          string   `json:"title"`
	Description    string   `json:"description,omitempty"`
	DependsOn      []string `json:"depends_on,omitempty" jsonschema:"tasks that must be done first"`
	SuggestedOwner string   `json:"suggested_owner,omitempty"`
	Project        string   `json:"project,omitempty"`
}

// TaskResult is a board task after a change.
type TaskResult struct {
	TaskID         string   `json:"task_id"`
	Title          string   `json:"title,omitempty"`
	Status         string   `json:"status,omitempty"`
	DependsOn      []string `json:"depends_on,omitempty"`
	SuggestedOwner string   `json:"suggested_owner,omitempty"`
	Project        string   `json:"project,omitempty"`
	Version        int64    `json:"version,omitempty"`
}

func taskResult(t *client.BoardTask) TaskResult {
	return TaskResult{TaskID: t.TaskID, Title: t.Title, Status: t.Status, DependsOn: t.DependsOn, SuggestedOwner: t.SuggestedOwner, Project: t.Project, Version: t.Version}
}

func (s *Server) taskDeclare(ctx context.Context, _ *mcp.CallToolRequest, in declareIn) (*mcp.CallToolResult, TaskResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	t, err := s.c.TaskDeclare(ctx, client.TaskDeclaration{TaskID: in.TaskID, Title: in.Title, Description: in.Description,
		DependsOn: in.DependsOn, SuggestedOwner: in.SuggestedOwner, Project: in.Project})
	if err != nil {
		return refuse(TaskResult{TaskID: in.TaskID}, s.explain(err))
	}
	return ok(taskResult(t), "Declared '%s' (%s, version %d).", t.TaskID, t.Status, t.Version)
}

type taskUpdateIn struct {
	TaskID         string `json:"task_id"`
	Status         string `json:"status,omitempty" jsonschema:"open, in_progress, blocked, done or cancelled"`
	SuggestedOwner string `json:"suggested_owner,omitempty"`
	Project        string `json:"project,omitempty"`
}

func (s *Server) taskUpdate(ctx context.Context, _ *mcp.CallToolRequest, in taskUpdateIn) (*mcp.CallToolResult, TaskResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	u := client.BoardTaskUpdate{TaskID: in.TaskID}
	if in.Status != "" {
		u.Status = &in.Status
	}
	if in.SuggestedOwner != "" {
		u.SuggestedOwner = &in.SuggestedOwner
	}
	if in.Project != "" {
		u.Project = &in.Project
	}
	t, err := s.c.TaskUpdate(ctx, u)
	if err != nil {
		return refuse(TaskResult{TaskID: in.TaskID}, s.explain(err))
	}
	return ok(taskResult(t), "Updated board task '%s': %s (version %d).", t.TaskID, t.Status, t.Version)
}

type progressIn struct {
	TaskID string `json:"task_id"`
	Text   string `json:"text"`
	Kind   string `json:"kind,omitempty" jsonschema:"note (default), blocked, assessment, usage or approval"`
}

// ProgressResult is a posted note.
type ProgressResult struct {
	TaskID string `json:"task_id"`
	Posted bool   `json:"posted"`
	Kind   string `json:"kind,omitempty"`
}

func (s *Server) taskProgress(ctx context.Context, _ *mcp.CallToolRequest, in progressIn) (*mcp.CallToolResult, ProgressResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	kind := in.Kind
	if kind == "" {
		kind = "note"
	}
	n, err := s.c.TaskProgress(ctx, in.TaskID, in.Text, kind)
	if err != nil {
		return refuse(ProgressResult{TaskID: in.TaskID}, s.explain(err))
	}
	return ok(ProgressResult{TaskID: n.TaskID, Posted: true, Kind: n.Kind}, "Posted a %s on '%s'.", n.Kind, n.TaskID)
}
