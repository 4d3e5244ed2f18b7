package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// matchTask builds a matcher for a verb whose success frame names the task
// and an agent field equal to this client, and whose denial names the task.
func (c *Client) matchTask(task, okType, agentField, deniedType string) func(Frame) (bool, bool) {
	return func(f Frame) (bool, bool) {
		switch f.Type {
		case okType:
			ok := f.String("task_id") == task && (agentField == "" || f.String(agentField) == c.opts.Name)
			return ok, ok
		case deniedType:
			ok := deniedType != "" && f.String("task_id") == task
			return ok, ok
		}
		return false, false
	}
}

func matchType(typ string) func(Frame) (bool, bool) {
	return func(f Frame) (bool, bool) { ok := f.Type == typ; return ok, ok }
}

// reply runs one call and returns its frame, or a *Refused when the frame
// is not okType. A refusal NAMESPACE_MOVING (a namespace changing hands
// between hubs of a fleet: nothing was decided) is retried after the
// hub's hint until ctx ends, unless Options.NoMovingRetry.
func (c *Client) reply(ctx context.Context, m map[string]any, task, okType string, match func(Frame) (bool, bool)) (Frame, error) {
	for {
		frames, err := c.do(ctx, m, match)
		if err != nil {
			return Frame{}, err
		}
		f := frames[len(frames)-1]
		if f.Type == okType {
			return f, nil
		}
		ref := refusedFrom(f, task)
		if ref.Code != CodeNamespaceMoving || c.opts.NoMovingRetry {
			return f, ref
		}
		wait := time.Duration(f.Int("retry_after_ms")) * time.Millisecond
		wait = min(max(wait, 5*time.Millisecond), 2*time.Second)
		select {
		case <-ctx.Done():
			return f, ref
		case <-time.After(wait):
		}
	}
}

// CodeNamespaceMoving is the refusal of a request whose namespace is
// changing hands: nothing was decided, retry shortly.
const CodeNamespaceMoving = "NAMESPACE_MOVING"

func (c *Client) taskEnvelope(typ, task string) map[string]any {
	m := c.envelope(typ, task)
	m["task_id"] = task
	return m
}

func setIdem(m map[string]any, key string) {
	if key != "" {
		m["idem_key"] = key
	}
}

func setEpoch(m map[string]any, epoch int64) {
	if epoch > 0 {
		m["epoch"] = epoch
	}
}

// Claim asks for a task and its files. A grant returns the claim; a
// refusal returns a *Refused whose Code is the hub's reason_code
// (LEASE_LIVE, SCOPE_CONFLICT, QUOTA_EXCEEDED, ...) and whose Holder says
// who is in the way. Claiming a task this agent already holds renews it.
func (c *Client) Claim(ctx context.Context, r ClaimRequest) (*Claim, error) {
	task := strings.TrimSpace(r.TaskID)
	m := c.taskEnvelope("claim", task)
	m["note"] = r.Note
	m["worktree"] = r.Worktree
	paths, files := r.Paths, r.Files
	if r.Checkout != "" && c.HasFeature("file_scopes") {
		var found []string
		paths, found = SplitFiles(r.Checkout, paths)
		files = append(slices.Clone(files), found...)
	}
	if paths == nil {
		paths = []string{}
	}
	m["paths"] = paths
	// A hub without the features would ignore the fields and grant a
	// narrower scope (paths alone, or none: the whole worktree) or an
	// exclusive one: refuse here instead.
	if len(r.Globs) > 0 {
		if !c.HasFeature("glob_scopes") {
			return nil, fmt.Errorf("%w: glob_scopes", ErrUnsupported)
		}
		m["globs"] = r.Globs
	}
	if len(files) > 0 {
		if !c.HasFeature("file_scopes") {
			return nil, fmt.Errorf("%w: file_scopes", ErrUnsupported)
		}
		m["files"] = files
	}
	if r.Shared {
		if !c.HasFeature("shared_claims") {
			return nil, fmt.Errorf("%w: shared_claims", ErrUnsupported)
		}
		m["mode"] = "shared"
	}
	if r.TTL > 0 {
		m["ttl_seconds"] = r.TTL.Seconds()
	}
	if r.Git != nil {
		m["git"] = r.Git
	}
	if bt := strings.TrimSpace(r.BoardTask); bt != "" {
		m["board_task"] = bt
	}
	setIdem(m, r.IdemKey)
	f, err := c.reply(ctx, m, task, "claim_granted", c.matchTask(task, "claim_granted", "owner", "claim_denied"))
	if err != nil {
		return nil, err
	}
	cl, err := claimFrom(f)
	if err != nil {
		return nil, err
	}
	cl.requestedTTL = r.TTL
	return cl, nil
}

// Renew extends a held claim by claiming it again with the same scope and
// lease length. The hub grants a fresh epoch; use the returned claim's.
func (c *Client) Renew(ctx context.Context, cl *Claim) (*Claim, error) {
	return c.Claim(ctx, cl.Request())
}

func claimFrom(f Frame) (*Claim, error) {
	var cl Claim
	if err := f.Decode(&cl); err != nil {
		return nil, fmt.Errorf("client: decode %s: %w", f.Type, err)
	}
	if cl.Paths == nil {
		cl.Paths = []string{}
	}
	cl.GrantedAt = f.Timestamp
	return &cl, nil
}

// Release gives up a held claim, with optional fencing and closeout
// evidence, and returns the hub's receipt.
func (c *Client) Release(ctx context.Context, task string, o ReleaseOptions) (*Receipt, error) {
	task = strings.TrimSpace(task)
	m := c.taskEnvelope("release", task)
	setEpoch(m, o.Epoch)
	for k, v := range map[string][]string{
		"evidence": o.Evidence, "artifacts": o.Artifacts, "known_failures": o.KnownFailures,
		"changed_files": o.ChangedFiles, "generated_artifacts": o.GeneratedArtifacts, "approvals": o.Approvals,
	} {
		if len(v) > 0 {
			m[k] = v
		}
	}
	if o.Confidence != "" {
		m["confidence"] = o.Confidence
	}
	if o.FreshnessSeconds != nil {
		m["freshness_seconds"] = *o.FreshnessSeconds
	}
	if o.Outcome != "" {
		m["outcome"] = o.Outcome
	}
	setIdem(m, o.IdemKey)
	f, err := c.reply(ctx, m, task, "release_granted", c.matchTask(task, "release_granted", "owner", "release_denied"))
	if err != nil {
		return nil, err
	}
	r := &Receipt{TaskID: task, Owner: c.opts.Name, Released: true}
	if err := f.DecodeField("receipt", r); err != nil {
		return nil, fmt.Errorf("client: decode release receipt: %w", err)
	}
	return r, nil
}

// Update changes a held claim's status, note or data_ref. The hub refuses
// with a plain error frame, returned as a *Refused.
func (c *Client) Update(ctx context.Context, r UpdateRequest) (*TaskUpdated, error) {
	task := strings.TrimSpace(r.TaskID)
	m := c.taskEnvelope("task_update", task)
	if r.Status != "" {
		m["status"] = r.Status
	}
	if r.Note != "" {
		m["note"] = r.Note
	}
	if r.DataRef != "" {
		m["data_ref"] = r.DataRef
	}
	setEpoch(m, r.Epoch)
	if r.ExpectedVersion != nil {
		m["expected_version"] = *r.ExpectedVersion
	}
	setIdem(m, r.IdemKey)
	f, err := c.reply(ctx, m, task, "task_updated", c.matchTask(task, "task_updated", "owner", ""))
	if err != nil {
		return nil, err
	}
	var u TaskUpdated
	if err := f.Decode(&u); err != nil {
		return nil, fmt.Errorf("client: decode task_updated: %w", err)
	}
	return &u, nil
}

// Checkpoint stores an opaque resume token on a held claim and returns the
// claim's new version. The checkpoint outlives the lease: the next
// claimant of the task inherits it.
func (c *Client) Checkpoint(ctx context.Context, task, checkpoint string, epoch int64) (int64, error) {
	task = strings.TrimSpace(task)
	m := c.taskEnvelope("checkpoint", task)
	m["checkpoint"] = checkpoint
	setEpoch(m, epoch)
	f, err := c.reply(ctx, m, task, "checkpoint_saved", c.matchTask(task, "checkpoint_saved", "", "checkpoint_denied"))
	if err != nil {
		return 0, err
	}
	return f.Int("version"), nil
}

// Handoff passes a held claim to another online agent in one step (no
// window in which a third agent could take it) and returns the new claim.
func (c *Client) Handoff(ctx context.Context, r HandoffRequest) (*Claim, error) {
	task := strings.TrimSpace(r.TaskID)
	m := c.taskEnvelope("handoff", task)
	m["to_agent"] = r.To
	if r.Note != "" {
		m["note"] = r.Note
	}
	setEpoch(m, r.Epoch)
	setIdem(m, r.IdemKey)
	f, err := c.reply(ctx, m, task, "handoff_granted", c.matchTask(task, "handoff_granted", "previous_owner", "handoff_denied"))
	if err != nil {
		return nil, err
	}
	return claimFrom(f)
}

// pollInterval is how often Wait polls a hub that does not announce
// wait_ready (the reference CLI's retry period). A variable so tests can
// shorten it.
var pollInterval = time.Second

// Wait blocks until task is free to claim, or ctx ends. It registers the
// wait with the hub (which refuses a wait that would deadlock, or one on a
// task this agent holds, with a *Refused) and returns when the hub's
// wait_ready arrives. A hub without the wait_ready feature is polled every
// second instead. A wait survives reconnects: the hub forgets a
// disconnected agent's waits, so Wait registers again.
func (c *Client) Wait(ctx context.Context, task string) (*Wakeup, error) {
	return c.WaitWithNotice(ctx, task, nil)
}

// WaitWithNotice is Wait that calls onWaiting(holder) once the hub has
// registered the wait (again after a reconnect), so a caller can say whom
// it waits for. It is not called when the task is already free.
func (c *Client) WaitWithNotice(ctx context.Context, task string, onWaiting func(holder string)) (*Wakeup, error) {
	task = strings.TrimSpace(task)
	for {
		w, err := c.waitOnce(ctx, task, onWaiting)
		if !errors.Is(err, ErrDisconnected) {
			return w, err
		}
		if err := c.awaitUp(ctx); err != nil {
			return nil, err
		}
	}
}

func (c *Client) waitOnce(ctx context.Context, task string, onWaiting func(string)) (*Wakeup, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Subscribe before asking, so a wait_ready right behind wait_granted
	// cannot be missed.
	ready := c.Subscribe(sctx, func(f Frame) bool { return f.Type == "wait_ready" && f.String("task_id") == task })
	c.mu.Lock()
	cn := c.conn
	c.mu.Unlock()
	m := c.taskEnvelope("wait_request", task)
	f, err := c.reply(ctx, m, task, "wait_granted", c.matchTask(task, "wait_granted", "", "wait_denied"))
	if err != nil {
		var ref *Refused
		if errors.As(err, &ref) && ref.Code == "NOT_CLAIMED" {
			return &Wakeup{TaskID: task, Reason: "free"}, nil
		}
		return nil, err
	}
	holder := f.String("holder")
	if onWaiting != nil {
		onWaiting(holder)
	}
	if !c.HasFeature("wait_ready") {
		return c.pollFree(ctx, task, holder)
	}
	var down <-chan struct{}
	if cn != nil {
		down = cn.down
	}
	select {
	case f, ok := <-ready:
		if !ok {
			return nil, c.closedErr()
		}
		return &Wakeup{TaskID: task, Reason: f.String("reason"), Holder: holder}, nil
	case <-down:
		return nil, ErrDisconnected
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pollFree polls the state until task has no live claim.
func (c *Client) pollFree(ctx context.Context, task, holder string) (*Wakeup, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		st, err := c.State(ctx)
		if err != nil {
			return nil, err
		}
		if st.Claim(task) == nil {
			return &Wakeup{TaskID: task, Reason: "poll", Holder: holder}, nil
		}
	}
}

// Send relays a chat to target: "all" (or ""), a name, a comma list, a
// "project/*" glob, a project or a role. It returns once the hub has
// relayed it (and, with ReceiptRequested, once the receipt is in).
//
// Mailbox replay (delivery of directed chats sent while the recipient was
// offline, on its reconnect) is not implemented by this package yet.
func (c *Client) Send(ctx context.Context, target, text string, o SendOptions) (*Sent, error) {
	if strings.TrimSpace(target) == "" {
		target = "all"
	}
	id := o.ClientMsgID
	if id == "" {
		id = randomID()
	}
	m := c.envelope("chat", text)
	m["target"] = target
	m["client_msg_id"] = id
	if o.ReceiptRequested {
		m["receipt_requested"] = true
	}
	if o.Priority {
		m["priority"] = true
	}
	if o.Channel != "" {
		m["channel"] = o.Channel
	}
	me := c.opts.Name
	frames, err := c.do(ctx, m, func(f Frame) (bool, bool) {
		switch f.Type {
		case "chat":
			ok := f.Sender == me && f.String("client_msg_id") == id
			return ok, ok && !o.ReceiptRequested
		case "delivery_receipt":
			ok := f.String("client_msg_id") == id
			return ok, ok
		}
		return false, false
	})
	if err != nil {
		return nil, err
	}
	if frames[0].Type != "chat" {
		return nil, refusedFrom(frames[0], "")
	}
	echo := frames[0]
	s := &Sent{MsgID: echo.Int("msg_id"), Seq: echo.Int("seq"), Timestamp: echo.Timestamp, ClientMsgID: id}
	if len(frames) > 1 {
		var r DeliveryReceipt
		if err := frames[1].Decode(&r); err != nil {
			return nil, fmt.Errorf("client: decode delivery_receipt: %w", err)
		}
		s.Receipt = &r
	}
	return s, nil
}

// Who asks who is online.
func (c *Client) Who(ctx context.Context) (*Who, error) {
	f, err := c.reply(ctx, c.envelope("who_request", ""), "", "who_snapshot", matchType("who_snapshot"))
	if err != nil {
		return nil, err
	}
	var w Who
	if err := f.Decode(&w); err != nil {
		return nil, fmt.Errorf("client: decode who_snapshot: %w", err)
	}
	return &w, nil
}

// State asks for the live claims, agents seen, resources and dead letters.
func (c *Client) State(ctx context.Context) (*State, error) {
	f, err := c.reply(ctx, c.envelope("state_request", ""), "", "state_snapshot", matchType("state_snapshot"))
	if err != nil {
		return nil, err
	}
	var s State
	if err := f.DecodeField("snapshot", &s); err != nil {
		return nil, fmt.Errorf("client: decode state_snapshot: %w", err)
	}
	return &s, nil
}

// Board asks for the task board: tasks, the ready list and progress notes.
func (c *Client) Board(ctx context.Context) (*Board, error) {
	f, err := c.reply(ctx, c.envelope("board_request", ""), "", "board_snapshot", matchType("board_snapshot"))
	if err != nil {
		return nil, err
	}
	var b Board
	if err := f.DecodeField("board", &b); err != nil {
		return nil, fmt.Errorf("client: decode board_snapshot: %w", err)
	}
	return &b, nil
}

// matchBoardTask matches a board broadcast about task; declared, when set,
// also requires this agent's name in the payload ("declared by A."), since
// the task dict does not say who wrote it.
func (c *Client) matchBoardTask(typ, task string, declared bool) func(Frame) (bool, bool) {
	return func(f Frame) (bool, bool) {
		if f.Type != typ {
			return false, false
		}
		var t struct {
			TaskID string `json:"task_id"`
		}
		_ = f.DecodeField("task", &t)
		ok := t.TaskID == task && (!declared || strings.HasSuffix(f.Payload, " by "+c.opts.Name+"."))
		return ok, ok
	}
}

// TaskDeclare puts a task on the board, or re-declares it.
func (c *Client) TaskDeclare(ctx context.Context, d TaskDeclaration) (*BoardTask, error) {
	task := strings.TrimSpace(d.TaskID)
	m := c.taskEnvelope("ledger_task", task)
	m["title"] = d.Title
	m["description"] = d.Description
	deps := d.DependsOn
	if deps == nil {
		deps = []string{}
	}
	m["depends_on"] = deps
	m["suggested_owner"] = d.SuggestedOwner
	m["project"] = d.Project
	if d.ExpectedVersion != nil {
		m["expected_version"] = *d.ExpectedVersion
	}
	setIdem(m, d.IdemKey)
	return c.boardTaskReply(ctx, m, task, c.matchBoardTask("ledger_task_posted", task, true), "ledger_task_posted")
}

// TaskUpdate changes a board task's status, suggested owner or project.
func (c *Client) TaskUpdate(ctx context.Context, u BoardTaskUpdate) (*BoardTask, error) {
	task := strings.TrimSpace(u.TaskID)
	m := c.taskEnvelope("ledger_task_update", task)
	for k, v := range map[string]*string{"status": u.Status, "suggested_owner": u.SuggestedOwner, "project": u.Project} {
		if v != nil {
			m[k] = *v
		}
	}
	if u.ExpectedVersion != nil {
		m["expected_version"] = *u.ExpectedVersion
	}
	setIdem(m, u.IdemKey)
	return c.boardTaskReply(ctx, m, task, c.matchBoardTask("ledger_task_updated", task, false), "ledger_task_updated")
}

func (c *Client) boardTaskReply(ctx context.Context, m map[string]any, task string, match func(Frame) (bool, bool), okType string) (*BoardTask, error) {
	f, err := c.reply(ctx, m, task, okType, match)
	if err != nil {
		return nil, err
	}
	var t BoardTask
	if err := f.DecodeField("task", &t); err != nil {
		return nil, fmt.Errorf("client: decode %s: %w", okType, err)
	}
	return &t, nil
}

// TaskProgress posts a progress note on a board task. kind is note (the
// default), blocked, assessment, usage or approval.
func (c *Client) TaskProgress(ctx context.Context, task, text, kind string) (*Note, error) {
	task = strings.TrimSpace(task)
	if kind == "" {
		kind = "note"
	}
	m := c.taskEnvelope("ledger_progress", task)
	m["text"] = text
	m["kind"] = kind
	me := c.opts.Name
	f, err := c.reply(ctx, m, task, "ledger_progress_posted", func(f Frame) (bool, bool) {
		if f.Type != "ledger_progress_posted" {
			return false, false
		}
		var n Note
		_ = f.DecodeField("note", &n)
		ok := n.TaskID == task && n.Author == me && n.Kind == kind
		return ok, ok
	})
	if err != nil {
		return nil, err
	}
	var n Note
	if err := f.DecodeField("note", &n); err != nil {
		return nil, fmt.Errorf("client: decode ledger_progress_posted: %w", err)
	}
	return &n, nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
