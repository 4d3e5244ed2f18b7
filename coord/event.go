package coord

// Durability says how an event must reach the journal (INV-JA-4).
type Durability uint8

const (
	// Volatile events are recomputed from time or from connections and are
	// never journalled: lease expiry, waits.
	Volatile Durability = iota
	// Normal events may commit at synchronous=NORMAL (progress notes, offers).
	Normal
	// Full events commit at synchronous=FULL: the claim family, the board,
	// audit records.
	Full
)

// Event is a fact the state applies. Kind is the journal's event kind, so a
// journal we write reads as the reference's (PROTOCOL.md §4.2); volatile
// kinds are ours and never reach the journal.
type Event interface {
	Kind() string
	Durability() Durability
}

// ClaimGranted is a new claim, a same-owner renewal or a takeover.
type ClaimGranted struct {
	Claim   *Claim
	Renewal bool // the same owner held it live before
}

// TaskUpdated is a task_update that changed a claim's lifecycle or data.
type TaskUpdated struct{ Claim *Claim }

// CheckpointSaved is a claim with a new checkpoint.
type CheckpointSaved struct{ Claim *Claim }

// HandedOff is a claim moved atomically to a new owner (INV-CR-2).
type HandedOff struct {
	Claim *Claim
	From  string
}

// Released is a claim dropped by its owner; it drops the retained
// checkpoint too (INV-CR-3).
type Released struct {
	TaskID  string
	Owner   string
	Epoch   int64
	Receipt *Receipt // advisory closeout assessment; not journalled
}

// ClaimDenied records a refused claim as audit evidence. Applying it changes
// nothing (INV-RR-3).
type ClaimDenied struct {
	Claimant string
	TaskID   string
	Code     Code
	Worktree string
	Paths    []string
}

// ClaimExpired is a lease that reached its expiry (INV-LL-2). Its checkpoint
// is retained for the next claimant.
type ClaimExpired struct {
	TaskID string
	Epoch  int64
	// Checkpoint is the lapsed claim's checkpoint, retained for the task's
	// next claimant (INV-CR-3): a fleet keeps it in etcd, so the
	// namespace's next owner has it too.
	Checkpoint string
}

// WaitAdded records that Waiter waits for TaskID, held by Holder.
type WaitAdded struct{ Waiter, TaskID, Holder string }

// WaitReady says TaskID became free for Waiters (it was released or expired,
// or handed to the waiter), so the hub can wake them. Applying it ends their
// waits on the task.
type WaitReady struct {
	TaskID  string
	Waiters []string // sorted
	Reason  string   // "release", "expiry" or "handoff"
}

// WaitsDropped ends every wait of an agent that went away.
type WaitsDropped struct {
	Waiter string
	Tasks  []string // sorted
}

// ResourceOffered is a new or refreshed resource offer.
type ResourceOffered struct{ Offer *Offer }

// ResourceExpired is an offer that was not refreshed within its TTL.
type ResourceExpired struct {
	Key       string
	OfferedAt float64
}

// TaskPosted is a board task declared, re-declared or updated.
type TaskPosted struct {
	Task         *BoardTask
	By           string // who declared or updated it (not journalled)
	Update       bool   // ledger_task_update rather than a declaration
	Redeclared   bool   // a declaration of a task already on the board
	CausalParent string // opaque JSON kept in the journal only
}

// ProgressPosted is a progress note on the board.
type ProgressPosted struct {
	Note    *Note
	Receipt bool // the assessment note of a release with evidence (not journalled)
}

func (ClaimGranted) Kind() string    { return "claim" }
func (TaskUpdated) Kind() string     { return "task_update" }
func (CheckpointSaved) Kind() string { return "checkpoint" }
func (HandedOff) Kind() string       { return "handoff" }
func (Released) Kind() string        { return "release" }
func (ClaimDenied) Kind() string     { return "claim_denial" }
func (ClaimExpired) Kind() string    { return "claim_expired" }
func (WaitAdded) Kind() string       { return "wait" }
func (WaitReady) Kind() string       { return "wait_ready" }
func (WaitsDropped) Kind() string    { return "wait_dropped" }
func (ResourceOffered) Kind() string { return "resource" }
func (ResourceExpired) Kind() string { return "resource_expired" }
func (TaskPosted) Kind() string      { return "ledger_task" }
func (ProgressPosted) Kind() string  { return "ledger_progress" }

func (ClaimGranted) Durability() Durability    { return Full }
func (TaskUpdated) Durability() Durability     { return Full }
func (CheckpointSaved) Durability() Durability { return Full }
func (HandedOff) Durability() Durability       { return Full }
func (Released) Durability() Durability        { return Full }
func (ClaimDenied) Durability() Durability     { return Full }

// ClaimExpired is journalled (NORMAL) as an audit record, so a peer that
// watches this hub's log sees the lease lapse (PROTOCOL.md §6.4 [obs]);
// replay ignores it and recomputes expiry from lease_expires_at.
func (ClaimExpired) Durability() Durability    { return Normal }
func (WaitAdded) Durability() Durability       { return Volatile }
func (WaitReady) Durability() Durability       { return Volatile }
func (WaitsDropped) Durability() Durability    { return Volatile }
func (ResourceOffered) Durability() Durability { return Normal }
func (ResourceExpired) Durability() Durability { return Volatile }
func (TaskPosted) Durability() Durability      { return Full }
func (ProgressPosted) Durability() Durability  { return Normal }
