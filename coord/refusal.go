package coord

import "fmt"

// Code is the stable machine reason of a refusal. Claim refusals use the
// spec's codes; the others are ours (the reference leaves them as free text).
type Code string

// Claim refusals (spec §1, PROTOCOL.md §2.4).
const (
	CodeTaskIDRequired      Code = "TASK_ID_REQUIRED"
	CodePathIdentityInvalid Code = "PATH_IDENTITY_INVALID"
	CodeLeaseLive           Code = "LEASE_LIVE"
	CodeScopeConflict       Code = "SCOPE_CONFLICT"
	CodeQuotaExceeded       Code = "QUOTA_EXCEEDED"
	CodeClaimDenied         Code = "CLAIM_DENIED"
)

// Refusals of release, task_update, checkpoint, handoff and wait.
const (
	CodeNotClaimed        Code = "NOT_CLAIMED"        // release / handoff / wait: no live claim on the task
	CodeTaskNotFound      Code = "TASK_NOT_FOUND"     // task_update / checkpoint: no live claim on the task
	CodeNotOwner          Code = "NOT_OWNER"          // the caller does not hold the claim
	CodeEpochStale        Code = "EPOCH_STALE"        // INV-EF-2
	CodeEpochInvalid      Code = "EPOCH_INVALID"      // INV-EF-2: a non-integer epoch (refused by the hub's decoding)
	CodeVersionInvalid    Code = "VERSION_INVALID"    // INV-EF-3: a non-integer expected_version (likewise)
	CodeVersionConflict   Code = "VERSION_CONFLICT"   // INV-EF-3 (and the board's CAS)
	CodeIllegalTransition Code = "ILLEGAL_TRANSITION" // spec lifecycle table
	CodeUnknownStatus     Code = "UNKNOWN_STATUS"
	CodeTargetRequired    Code = "TARGET_REQUIRED"
	CodeTargetOffline     Code = "TARGET_OFFLINE"
	CodeAlreadyOwner      Code = "ALREADY_OWNER"
	CodeAlreadyHolder     Code = "ALREADY_HOLDER"
	CodeDeadlock          Code = "DEADLOCK"
	CodeWaitLimit         Code = "WAIT_LIMIT"
)

// Refusals of resource offers and board verbs.
const (
	CodeResourceInvalid     Code = "RESOURCE_INVALID"
	CodeResourceQuota       Code = "RESOURCE_QUOTA_EXCEEDED"
	CodeTitleRequired       Code = "TITLE_REQUIRED"
	CodeDependencyCycle     Code = "DEPENDENCY_CYCLE"
	CodeProjectConflict     Code = "PROJECT_CONFLICT"
	CodeBoardTaskNotFound   Code = "BOARD_TASK_NOT_FOUND"
	CodeUnknownLedgerStatus Code = "UNKNOWN_LEDGER_STATUS"
	CodeUnknownProgressKind Code = "UNKNOWN_PROGRESS_KIND"
	CodeBoardFull           Code = "BOARD_FULL"
	CodeUnknownCommand      Code = "UNKNOWN_COMMAND"
)

// Refusals of task-bound claims and of release outcomes (taskbound.go).
const (
	CodeBoardTaskNotReady Code = "BOARD_TASK_NOT_READY" // dependencies not done, or blocked / in progress by hand
	CodeBoardTaskHeld     Code = "BOARD_TASK_HELD"      // another claim holds the board task
	CodeBoardTaskClosed   Code = "BOARD_TASK_CLOSED"    // done or cancelled
	CodeBoardTaskBound    Code = "BOARD_TASK_BOUND"     // a renewal names another board task than its claim holds
	CodeOutcomeInvalid    Code = "OUTCOME_INVALID"      // a release outcome other than done or failed
)

// CodeTaskIDInUse refuses a fleet's Adopt (ownership.go): a live claim of
// the namespace has the task id of a live claim of another namespace this
// hub serves. Claims are keyed by task id on a hub, so installing it would
// replace the other's acknowledged grant in memory.
const CodeTaskIDInUse Code = "TASK_ID_IN_USE"

// Refusal is a command the state turned down. Message is the reference
// hub's human sentence, so clients that show it read the same text.
type Refusal struct {
	Code    Code
	Message string
	TaskID  string
	// Holder is who holds what stood in the way: the task's owner (a live
	// lease, a wait) or the owner of the conflicting scope.
	Holder string
	// ConflictTask is the task whose scope conflicts (SCOPE_CONFLICT).
	ConflictTask string
	// ConflictPattern and ConflictMode are the conflicting holder's path,
	// glob or file ("" for the whole worktree) and its mode, when a glob, a
	// file or a shared claim is involved (SCOPE_CONFLICT); "" otherwise, so
	// literal exclusive refusals stay the reference's.
	ConflictPattern string
	ConflictMode    string
	// Pending are the dependencies that are not done yet
	// (BOARD_TASK_NOT_READY), sorted.
	Pending []string
	// Owner is the live claim's owner when a fenced verb is refused
	// (NOT_OWNER, EPOCH_STALE): the other party, for audit (the
	// dashboard's refusals); it is not sent on the wire.
	Owner string
}

func (r *Refusal) Error() string { return string(r.Code) + ": " + r.Message }

func refuse(code Code, task string, format string, args ...any) *Refusal {
	return &Refusal{Code: code, TaskID: task, Message: fmt.Sprintf(format, args...)}
}
