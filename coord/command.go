package coord

// Command is a request the state decides. Agent is always the bound name of
// the caller, set by the hub, never taken from the frame's claims.
type Command interface{ command() }

// ClaimRequest asks for a lease on TaskID (PROTOCOL.md §2.4, §3.3).
type ClaimRequest struct {
	Agent     string
	Principal string // quota principal; "" means "legacy-agent:<Agent>"
	TaskID    string
	Note      string
	TTL       float64 // seconds; used only when HasTTL
	HasTTL    bool
	Worktree  string
	Paths     []string // raw; the state normalises them
	Globs     []string // raw glob patterns (glob.go); the state normalises them
	Files     []string // raw files, each covering itself alone; the state normalises them
	Shared    bool     // a shared (read) claim; exclusive otherwise
	// PathIdentity is the canonical JSON of a v1 path identity, validated by
	// the wire layer; the core keeps it opaque.
	PathIdentity string
	Git          *Git
	// BoardTask names a board task to take in the same decision: it must be
	// ready, and becomes in_progress with Agent as its owner (taskbound.go).
	BoardTask string
	// DepsElsewhere is the status of each of BoardTask's dependencies
	// that is not on this state's board (DepsElsewhere), by task id: on a
	// fleet, tasks of namespaces other hubs own, as the hub read the
	// fleet's board before submitting. A dependency on neither board is
	// not met. nil on one hub.
	DepsElsewhere map[string]string
}

// ReleaseRequest drops a claim.
type ReleaseRequest struct {
	Agent    string
	TaskID   string
	Epoch    int64
	HasEpoch bool
	Evidence *Evidence // optional closeout evidence
	// Outcome moves a task-bound claim's board task: "done" or "failed";
	// "" takes the claim's own terminal status, else puts the task back.
	Outcome string
}

// UpdateRequest moves a claim through its lifecycle (task_update).
type UpdateRequest struct {
	Agent              string
	TaskID             string
	Status             string // "" leaves it unchanged
	Note               string // "" leaves it unchanged
	DataRef            string // "" leaves it unchanged
	Epoch              int64
	HasEpoch           bool
	ExpectedVersion    int64
	HasExpectedVersion bool
}

// CheckpointRequest stores an opaque resume token on a claim.
type CheckpointRequest struct {
	Agent      string
	TaskID     string
	Checkpoint string
	Epoch      int64
	HasEpoch   bool
}

// HandoffRequest moves a claim to another agent atomically.
type HandoffRequest struct {
	Agent       string
	TaskID      string
	To          string
	ToOnline    bool   // the hub knows presence; the core does not
	ToPrincipal string // the recipient's quota principal; "" means "legacy-agent:<To>"
	Note        string // replaces the claim note when not ""
	Epoch       int64
	HasEpoch    bool
}

// WaitRequest asks to be told when TaskID frees.
type WaitRequest struct {
	Agent  string
	TaskID string
}

// Disconnect ends the waits of an agent whose last connection closed.
type Disconnect struct{ Agent string }

// OfferResource offers (or refreshes) a named resource.
type OfferResource struct {
	Agent    string
	Kind     string
	Name     string
	Capacity int
	Meta     string // opaque JSON object
}

// DeclareTask puts a task on the board or re-declares it (ledger_task).
type DeclareTask struct {
	Agent              string
	TaskID             string
	Title              string
	Description        string
	DependsOn          []string
	SuggestedOwner     string
	Project            string
	ExpectedVersion    int64
	HasExpectedVersion bool
	CausalParent       string // opaque JSON, journalled with the event only
}

// UpdateBoardTask changes a board task's status, suggested owner or project
// (ledger_task_update). A nil field is left alone.
type UpdateBoardTask struct {
	Agent              string
	TaskID             string
	Status             *string
	SuggestedOwner     *string
	Project            *string
	ExpectedVersion    int64
	HasExpectedVersion bool
	CausalParent       string
}

// PostProgress adds a progress note to the board (ledger_progress).
type PostProgress struct {
	Agent  string
	TaskID string
	Kind   string // "" means "note"
	Text   string
}

func (ClaimRequest) command()      {}
func (ReleaseRequest) command()    {}
func (UpdateRequest) command()     {}
func (CheckpointRequest) command() {}
func (HandoffRequest) command()    {}
func (WaitRequest) command()       {}
func (Disconnect) command()        {}
func (OfferResource) command()     {}
func (DeclareTask) command()       {}
func (UpdateBoardTask) command()   {}
func (PostProgress) command()      {}
