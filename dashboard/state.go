package dashboard

// The JSON bodies of GET /api/state, /api/board and /api/mailbox
// (docs/api.md); the event bodies are in feed.go. The hub fills them
// (Backend); ClaimOf and TaskOf turn the core's claims and tasks into them.

import (
	"encoding/json"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/federation"
)

// APIState is the body of GET /api/state.
type APIState struct {
	HubID       string  `json:"hub_id"`
	Version     string  `json:"version"`
	GeneratedAt float64 `json:"generated_at"` // the hub's clock, unix seconds
	Secured     bool    `json:"secured"`      // the hub has a token: the page offers to sign out
	// EventID is the id of the last /api/events event this state reflects:
	// apply only events with a greater id.
	EventID     uint64             `json:"event_id"`
	Health      APIHealth          `json:"health"`
	Agents      []APIAgent         `json:"agents"`
	Claims      []APIClaim         `json:"claims"`
	Board       APIBoard           `json:"board"`
	Refusals    []APIRefusal       `json:"refusals"`
	DeadLetters []APIDeadLetter    `json:"dead_letters"`
	Mailbox     map[string]int64   `json:"mailbox_pending"` // null when the hub keeps no mailbox (no journal)
	Federation  *federation.Status `json:"federation,omitempty"`

	// ClaimsJSON, when not nil, is the claims already encoded, a JSON array
	// of AppendClaim's: it is sent in place of Claims, which is left empty.
	// The hub keeps each claim's encoding while the claim is unchanged, so
	// a read of 10,000 claims encodes only those that changed.
	ClaimsJSON []byte `json:"-"`
}

// APIHealth is the hub's and its journal's health.
type APIHealth struct {
	Status           string  `json:"status"` // ok, degraded, fenced
	Reason           string  `json:"reason,omitempty"`
	Journal          string  `json:"journal"` // sqlite, etcd, memory
	UptimeSeconds    float64 `json:"uptime_seconds"`
	OnlineAgents     int     `json:"online_agents"`
	ConnectedClients int     `json:"connected_clients"`
	ActiveClaims     int     `json:"active_claims"`
	BoardTasks       int     `json:"board_tasks"`
	Epoch            int64   `json:"epoch"` // the highest fencing epoch issued
	EventStreams     int     `json:"event_streams"`
	Commands         int64   `json:"commands"` // requests the sequencer answered
	Appends          int64   `json:"journal_appends"`
	Snapshots        int64   `json:"snapshots"`
	SnapshotErrors   int64   `json:"snapshot_errors"`
}

// APIAgent is one agent the hub has seen.
type APIAgent struct {
	Name     string   `json:"name"`
	Online   bool     `json:"online"`
	LastSeen float64  `json:"last_seen"`
	Roles    []string `json:"roles,omitempty"`
	// Hub is the hub of the fleet the agent is bound on (a fleet on etcd
	// only: every hub's agents are shown).
	Hub string `json:"hub_id,omitempty"`
	// LastReaction is when an online agent last sent anything but a
	// heartbeat; ProvenLive says it did within 90 s, or has a waiting
	// sidecar (who_snapshot.agent_liveness).
	LastReaction  float64 `json:"last_reaction,omitempty"`
	ProvenLive    bool    `json:"proven_live"`
	HasLiveWaiter bool    `json:"has_live_waiter,omitempty"`
	Claims        int     `json:"claims"` // live claims it owns
}

// APIClaim is one live claim.
type APIClaim struct {
	TaskID     string   `json:"task_id"`
	Owner      string   `json:"owner"`
	Worktree   string   `json:"worktree"`
	Paths      []string `json:"paths"` // empty with no globs and no files: the whole worktree
	Globs      []string `json:"globs,omitempty"`
	Files      []string `json:"files,omitempty"` // each covers itself alone
	Mode       string   `json:"mode,omitempty"`  // "shared" for a read claim; absent: exclusive
	Epoch      int64    `json:"epoch"`
	Version    int64    `json:"version"`
	Status     string   `json:"status"`
	Note       string   `json:"note,omitempty"`
	ClaimedAt  float64  `json:"claimed_at"`
	ExpiresAt  float64  `json:"lease_expires_at"`
	Checkpoint bool     `json:"has_checkpoint"`
	BoardTask  string   `json:"board_task,omitempty"` // the board task a task-bound claim holds
}

// APIBoard is the task board.
type APIBoard struct {
	Tasks []APITask `json:"tasks"`
	Ready []string  `json:"ready"` // open tasks whose dependencies are all done or cancelled

	// TasksJSON, when not nil, is Tasks already encoded, a JSON array of
	// AppendTask's, sent in its place (as APIState.ClaimsJSON).
	TasksJSON []byte `json:"-"`
}

// APITask is one board task.
type APITask struct {
	TaskID         string   `json:"task_id"`
	Title          string   `json:"title"`
	Status         string   `json:"status"`
	DependsOn      []string `json:"depends_on"`
	SuggestedOwner string   `json:"suggested_owner,omitempty"`
	Project        string   `json:"project,omitempty"`
	Version        int64    `json:"version"`
	CreatedBy      string   `json:"created_by,omitempty"`
	UpdatedAt      float64  `json:"updated_at"`
	Owner          string   `json:"owner,omitempty"`       // who holds it through a task-bound claim
	OwnerClaim     string   `json:"owner_claim,omitempty"` // and that claim's task id
}

// APIRefusal is one refused request, with both parties.
type APIRefusal struct {
	At     float64 `json:"at"`
	Verb   string  `json:"verb"` // the refusal frame: claim_denied, release_denied, error, ...
	Code   string  `json:"code"` // error_code: SCOPE_CONFLICT, EPOCH_STALE, ...
	Agent  string  `json:"agent"`
	TaskID string  `json:"task_id,omitempty"`
	// Holder is who stood in the way (a live lease's or a conflicting
	// scope's owner); ConflictTask the task whose scope conflicts.
	Holder       string `json:"holder,omitempty"`
	ConflictTask string `json:"conflict_task,omitempty"`
	Message      string `json:"message"`
}

// APIChannel is one private channel as /api/channels shows it: who is in
// it, never what was said (issue 23 item 5).
type APIChannel struct {
	Channel  string   `json:"channel"`
	Label    string   `json:"label"`
	Owner    string   `json:"owner"`
	Members  []string `json:"members"`
	Invited  []string `json:"invited"`
	Created  float64  `json:"created_at"`
	Retained int      `json:"retained_messages"`
}

// APIDeadLetter is a target whose directed chats found nobody.
type APIDeadLetter struct {
	Target     string  `json:"target"`
	Count      int64   `json:"count"`
	LastTS     float64 `json:"last_ts"`
	LastSender string  `json:"last_sender"`
}

// ClaimOf is c as the API shows it.
func ClaimOf(c *coord.Claim) APIClaim {
	paths := c.Paths
	if paths == nil {
		paths = []string{}
	}
	var mode string
	if c.Mode != coord.ModeExclusive {
		mode = c.Mode.String()
	}
	return APIClaim{TaskID: c.TaskID, Owner: c.Owner, Worktree: c.Worktree, Paths: paths, Globs: c.Globs, Files: c.Files, Mode: mode, Epoch: c.Epoch,
		Version: c.Version, Status: c.Status.String(), Note: c.Note, ClaimedAt: c.ClaimedAt, ExpiresAt: c.ExpiresAt,
		Checkpoint: c.Checkpoint != "", BoardTask: c.BoardTask}
}

// AppendClaim appends c's JSON as the API shows it (ClaimOf's).
func AppendClaim(b []byte, c *coord.Claim) []byte { return appendJSON(b, ClaimOf(c)) }

// AppendTask appends t's JSON as the API shows it (TaskOf's).
func AppendTask(b []byte, t *coord.BoardTask) []byte { return appendJSON(b, TaskOf(t)) }

func appendJSON(b []byte, v any) []byte {
	j, err := json.Marshal(v)
	if err != nil { // a float the hub never makes (NaN, ±Inf)
		return append(b, "null"...)
	}
	return append(b, j...)
}

// TaskOf is t as the API shows it.
func TaskOf(t *coord.BoardTask) APITask {
	deps := t.DependsOn
	if deps == nil {
		deps = []string{}
	}
	return APITask{TaskID: t.TaskID, Title: t.Title, Status: t.Status, DependsOn: deps,
		SuggestedOwner: t.SuggestedOwner, Project: t.Project, Version: t.Version, CreatedBy: t.CreatedBy,
		UpdatedAt: t.UpdatedAt, Owner: t.Owner, OwnerClaim: t.OwnerClaim}
}
