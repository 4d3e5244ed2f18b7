package client

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/coord"
)

// Times on the wire are unix seconds as floats, on the hub's clock.

// Git is a claim's git context, opaque to the hub.
type Git struct {
	Branch        string `json:"branch"`
	Base          string `json:"base"`
	AutoReleaseOn string `json:"auto_release_on"` // manual | commit | merge
}

// Claim is a lease on a task and its file scope (PROTOCOL.md §3.1), as a
// grant, a handoff or a state snapshot shows it.
type Claim struct {
	TaskID         string   `json:"task_id"`
	Owner          string   `json:"owner"`
	Note           string   `json:"note"`
	Status         string   `json:"status"` // claimed | working | input_required | done | failed
	Worktree       string   `json:"worktree"`
	Paths          []string `json:"paths"`           // [] with no globs and no files = the whole worktree
	Globs          []string `json:"globs,omitempty"` // glob patterns beside the paths (docs/claims.md)
	Files          []string `json:"files,omitempty"` // files, each covering itself alone
	Mode           string   `json:"mode,omitempty"`  // "shared" for a read claim; "" = exclusive
	Epoch          int64    `json:"epoch"`           // fencing token: fresh on every grant, renewal and handoff
	Version        int64    `json:"version"`
	Checkpoint     string   `json:"checkpoint"`
	DataRef        string   `json:"data_ref,omitempty"`
	Git            *Git     `json:"git"`
	LeaseExpiresAt float64  `json:"lease_expires_at"`
	ClaimedAt      float64  `json:"claimed_at,omitempty"` // state snapshots only
	PreviousOwner  string   `json:"previous_owner,omitempty"`
	// HubID is the hub that decided the grant: the namespace's owner on a
	// federated hub, where a grant made through another hub is forwarded.
	HubID string `json:"hub_id,omitempty"`
	// BoardTask is the board task a task-bound claim holds.
	BoardTask string `json:"board_task,omitempty"`

	// GrantedAt is the hub's clock when it sent the grant (the frame's
	// timestamp); 0 for claims read from a state snapshot.
	GrantedAt float64 `json:"-"`

	requestedTTL time.Duration
}

// Shared reports whether the claim is a shared (read) claim.
func (c *Claim) Shared() bool { return c.Mode == "shared" }

// Request is the claim request that renews c as it is: same scope (paths,
// globs, files), mode, note, git context, board task and lease length.
func (c *Claim) Request() ClaimRequest {
	return ClaimRequest{TaskID: c.TaskID, Paths: c.Paths, Globs: c.Globs, Files: c.Files, Shared: c.Shared(), Worktree: c.Worktree,
		Note: c.Note, Git: c.Git, TTL: c.TTL(), BoardTask: c.BoardTask}
}

// Covers reports whether the claim's scope covers the worktree-relative
// path rel — the hub's own definition (docs/claims.md, scopes are sets of
// files): it has no paths, globs or files (the whole worktree), or rel is
// one of its paths or below one, or matches one of its globs
// (coord.GlobCovers: a glob covers its matches, not what lies below them),
// or is one of its files.
func (c *Claim) Covers(rel string) bool {
	rel = coord.NormalizePath(rel, 1<<20)
	if len(c.Paths) == 0 && len(c.Globs) == 0 && len(c.Files) == 0 {
		return true
	}
	for _, p := range c.Paths {
		if p == "" || rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	for _, g := range c.Globs {
		if coord.GlobCovers(g, rel) {
			return true
		}
	}
	return slices.Contains(c.Files, rel)
}

// Expires is when the lease ends unless renewed.
func (c *Claim) Expires() time.Time { return unixTime(c.LeaseExpiresAt) }

// TTL is the lease length the claim was granted with: the one asked for,
// else what the hub's times say.
func (c *Claim) TTL() time.Duration {
	if c.requestedTTL > 0 {
		return c.requestedTTL
	}
	base := c.ClaimedAt
	if base == 0 {
		base = c.GrantedAt
	}
	if base == 0 || c.LeaseExpiresAt <= base {
		return 0
	}
	d := time.Duration((c.LeaseExpiresAt - base) * float64(time.Second))
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// ClaimRequest asks for a task and its files.
type ClaimRequest struct {
	TaskID   string
	Paths    []string      // files or folders, each with what lies below it; none (and no globs or files) = the whole worktree
	Globs    []string      // glob patterns: "*" and "?" within a segment, "**" any segments (docs/claims.md)
	Files    []string      // files, each covering itself alone (hub feature "file_scopes")
	Shared   bool          // a shared (read) claim: other readers may overlap it, writers may not
	Worktree string        // label of the checkout; "" = the default one
	TTL      time.Duration // lease length; 0 = the hub's default (1 h), clamped to its window
	Note     string
	Git      *Git
	// IdemKey makes a retry safe: the hub answers a repeated key with the
	// first answer instead of acting twice.
	IdemKey string
	// BoardTask takes a ready board task in the same decision as the files
	// (a task-bound claim; hub feature "task_bound_claims"): the hub marks
	// it in_progress with the caller as its owner, or refuses the claim.
	BoardTask string
	// Checkout is the root of the checkout the paths are in, for tools
	// that run in one: when set and the hub announces "file_scopes", each
	// of Paths that names an existing regular file there is sent as a file
	// (it covers itself alone, not a subtree). A hub without the feature
	// gets Paths as they are.
	Checkout string
}

// ReleaseOptions are the optional parts of a release: fencing and the
// closeout evidence the hub turns into a receipt (PROTOCOL.md §2.5).
type ReleaseOptions struct {
	Epoch              int64 // when > 0, refuse unless this is still the claim's epoch
	Evidence           []string
	Artifacts          []string
	KnownFailures      []string
	ChangedFiles       []string
	GeneratedArtifacts []string
	Approvals          []string
	Confidence         string
	FreshnessSeconds   *float64
	IdemKey            string
	// Outcome moves a task-bound claim's board task: "done" or "failed"
	// (the board shows failed as blocked); "" puts it back to open unless
	// the claim itself was updated to done or failed.
	Outcome string
}

// Receipt is the hub's account of a release.
type Receipt struct {
	TaskID             string   `json:"task_id"`
	Owner              string   `json:"owner"`
	Released           bool     `json:"released"`
	Evidence           []string `json:"evidence"`
	Artifacts          []string `json:"artifacts"`
	KnownFailures      []string `json:"known_failures"`
	ChangedFiles       []string `json:"changed_files"`
	GeneratedArtifacts []string `json:"generated_artifacts"`
	Approvals          []string `json:"approvals"`
	// EpistemicStatus is the hub's advisory verdict: degraded,
	// unsupported, needs_freshness, stale or unverified.
	EpistemicStatus  string   `json:"epistemic_status"`
	EpistemicReasons []string `json:"epistemic_reasons"`
	Confidence       string   `json:"confidence,omitempty"`
	FreshnessSeconds *float64 `json:"freshness_seconds,omitempty"`
}

// UpdateRequest changes a held claim's status, note or data_ref
// (task_update).
type UpdateRequest struct {
	TaskID          string
	Status          string // "" = unchanged; claimed → working | done | failed ...
	Note            string
	DataRef         string
	Epoch           int64  // when > 0, fence on it
	ExpectedVersion *int64 // compare-and-set on the claim's version
	IdemKey         string
}

// TaskUpdated is the claim after an update.
type TaskUpdated struct {
	TaskID  string `json:"task_id"`
	Owner   string `json:"owner"`
	Status  string `json:"status"`
	DataRef string `json:"data_ref"`
	Version int64  `json:"version"`
}

// HandoffRequest passes a held claim to another online agent.
type HandoffRequest struct {
	TaskID  string
	To      string
	Note    string // replaces the claim's note when not ""
	Epoch   int64
	IdemKey string
}

// Wakeup says why Wait returned.
type Wakeup struct {
	TaskID string
	// Reason is the hub's: "release", "expiry" or "handoff" (wait_ready);
	// "free" when the task was not claimed at all; "poll" when a hub
	// without wait_ready was polled and the task was found free.
	Reason string
	Holder string // who held the task when the wait began ("" if free)
}

// SendOptions are the optional parts of a chat.
type SendOptions struct {
	// ClientMsgID is the sender's retry identity, which receivers dedup on;
	// a random one is chosen when empty.
	ClientMsgID string
	// ReceiptRequested asks the hub for a delivery_receipt; Send then
	// waits for it.
	ReceiptRequested bool
	Priority         bool
	Channel          string
}

// Sent is a chat the hub relayed.
type Sent struct {
	MsgID       int64
	Seq         int64 // durable seq; 0 on a hub without a journal
	Timestamp   float64
	ClientMsgID string
	Receipt     *DeliveryReceipt // when asked for
}

// DeliveryReceipt is the hub's verdict on a chat's delivery.
type DeliveryReceipt struct {
	Message           string   `json:"payload"` // "delivered to X" / "delivery failed: ..."
	MessageTarget     string   `json:"message_target"`
	MessageID         int64    `json:"message_id"`
	MessageSeq        int64    `json:"message_seq"`
	Delivered         bool     `json:"delivered"`
	Deferred          bool     `json:"deferred"`
	Recipients        []string `json:"recipients"`
	MatchedRecipients []string `json:"matched_recipients"`
	StaleRecipients   []string `json:"stale_recipients"`
	Reason            string   `json:"reason"`
	DeadLettered      bool     `json:"dead_lettered"`
}

// Who is the hub's who_snapshot.
type Who struct {
	HubID            string              `json:"hub_id"`
	OnlineAgents     []string            `json:"online_agents"`
	AgentRoles       map[string][]string `json:"agent_roles"`
	ConnectedClients int                 `json:"connected_clients"`
	HubVersion       string              `json:"hub_version"`
	ConfigEpoch      string              `json:"config_epoch"`
	MailboxPending   map[string]int      `json:"mailbox_pending"` // nil without a journal
	AgentLiveness    map[string]Liveness `json:"agent_liveness"`
	WakeCapabilities map[string]string   `json:"wake_capabilities"`
	// ObservedAgents are owners of claims seen in watched peers' logs, as
	// name@HUB (advisory).
	ObservedAgents []string `json:"observed_agents,omitempty"`
	// AgentHubs names the hub each online agent is bound on (a fleet on
	// etcd, whose who answers for every hub).
	AgentHubs map[string]string `json:"agent_hubs,omitempty"`
}

// Liveness is who_snapshot's view of one seat.
type Liveness struct {
	ProvenLive      bool    `json:"proven_live"`
	HasLiveWaiter   bool    `json:"has_live_waiter"`
	LastReactionAge float64 `json:"last_reaction_age"`
}

// State is the hub's state_snapshot.
type State struct {
	ActiveClaims []Claim      `json:"active_claims"` // sorted by task id
	Agents       []AgentSeen  `json:"agents"`
	Resources    []Resource   `json:"resources"`
	GeneratedAt  float64      `json:"generated_at"`
	DeadLetters  []DeadLetter `json:"dead_letters"`
	// ObservedClaims are claims seen in watched peers' logs
	// (--multihub-watch): advisory, they grant nothing here.
	ObservedClaims []ObservedClaim `json:"observed_claims,omitempty"`
}

// ObservedClaim is a claim seen in a peer hub's log, shown as Owner@HubID.
type ObservedClaim struct {
	TaskID         string   `json:"task_id"`
	Owner          string   `json:"owner"`
	HubID          string   `json:"hub_id"`
	ObservedAs     string   `json:"observed_as"` // owner@hub
	Worktree       string   `json:"worktree"`
	Paths          []string `json:"paths"`
	Epoch          int64    `json:"epoch"`
	Status         string   `json:"status"`
	LeaseExpiresAt float64  `json:"lease_expires_at"`
}

// Claim returns the live claim on task, or nil.
func (s *State) Claim(task string) *Claim {
	for i := range s.ActiveClaims {
		if s.ActiveClaims[i].TaskID == task {
			return &s.ActiveClaims[i]
		}
	}
	return nil
}

// AgentSeen is one name the hub has seen and when.
type AgentSeen struct {
	Agent    string  `json:"agent"`
	LastSeen float64 `json:"last_seen"`
	HubID    string  `json:"hub_id,omitempty"` // the hub it is on (a fleet on etcd)
}

// Resource is an offered resource.
type Resource struct {
	Agent    string         `json:"agent"`
	Kind     string         `json:"kind"`
	Name     string         `json:"name"`
	Capacity int            `json:"capacity"`
	Meta     map[string]any `json:"meta"`
}

// DeadLetter counts directed chats that reached nobody.
type DeadLetter struct {
	Target     string  `json:"target"`
	Count      int64   `json:"count"`
	LastTS     float64 `json:"last_ts"`
	LastSender string  `json:"last_sender"`
}

// Board is the hub's board_snapshot.
type Board struct {
	Tasks    []BoardTask `json:"tasks"`
	Ready    []string    `json:"ready"` // open tasks whose dependencies are met
	Progress []Note      `json:"progress"`
}

// BoardTask is a task on the shared plan (PROTOCOL.md §3.9).
type BoardTask struct {
	TaskID         string   `json:"task_id"`
	Title          string   `json:"title"`
	Description    string   `json:"description"`
	DependsOn      []string `json:"depends_on"`
	Status         string   `json:"status"` // open | in_progress | blocked | done | cancelled
	SuggestedOwner string   `json:"suggested_owner"`
	Project        string   `json:"project"`
	Version        int64    `json:"version"`
	CreatedBy      string   `json:"created_by"`
	CreatedAt      float64  `json:"created_at"`
	UpdatedAt      float64  `json:"updated_at"`
	Owner          string   `json:"owner,omitempty"`       // who holds it through a task-bound claim
	OwnerClaim     string   `json:"owner_claim,omitempty"` // and that claim's task id
}

// Note is a progress note on a board task.
type Note struct {
	TaskID   string  `json:"task_id"`
	Author   string  `json:"author"`
	Kind     string  `json:"kind"` // note | blocked | assessment | usage | approval
	Text     string  `json:"text"`
	PostedAt float64 `json:"posted_at"`
}

// TaskDeclaration declares (or re-declares) a board task (ledger_task).
type TaskDeclaration struct {
	TaskID         string
	Title          string
	Description    string
	DependsOn      []string
	SuggestedOwner string
	Project        string
	// ExpectedVersion is a compare-and-set; 0 means "create only".
	ExpectedVersion *int64
	IdemKey         string
}

// BoardTaskUpdate changes a board task (ledger_task_update); nil fields
// are left alone.
type BoardTaskUpdate struct {
	TaskID          string
	Status          *string
	SuggestedOwner  *string
	Project         *string
	ExpectedVersion *int64
	IdemKey         string
}

// unixTime turns hub seconds into a time.Time.
func unixTime(s float64) time.Time {
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(frac*1e9))
}
