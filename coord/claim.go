package coord

import "math"

// Status is a claim's lifecycle state (spec lifecycle, PROTOCOL.md §3.5).
type Status uint8

const (
	StatusClaimed Status = iota
	StatusWorking
	StatusInputRequired
	StatusDone
	StatusFailed
)

var statusNames = [...]string{"claimed", "working", "input_required", "done", "failed"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// ParseStatus returns the status named s.
func ParseStatus(s string) (Status, bool) {
	for i, n := range statusNames {
		if n == s {
			return Status(i), true
		}
	}
	return 0, false
}

// Terminal reports whether no transition leaves s.
func (s Status) Terminal() bool { return s == StatusDone || s == StatusFailed }

// CanTransition reports whether a claim may move from s to next.
// Re-asserting the current status is allowed.
func (s Status) CanTransition(next Status) bool {
	if s == next {
		return true
	}
	switch s {
	case StatusClaimed:
		return next == StatusWorking || next == StatusDone || next == StatusFailed
	case StatusWorking:
		return next == StatusInputRequired || next == StatusDone || next == StatusFailed
	case StatusInputRequired:
		return next == StatusWorking || next == StatusDone || next == StatusFailed
	}
	return false
}

// Git is the claim's optional git context; the hub stores it and never
// interprets it.
type Git struct {
	Branch        string
	Base          string
	AutoReleaseOn string
}

// Claim is a lease on a task, with an optional file scope. A *Claim held by
// the State is never modified: every change stores a new one, which is what
// lets readers keep a pointer and undo restore the old one.
type Claim struct {
	TaskID         string
	Owner          string
	Note           string
	Status         Status
	DataRef        string
	Worktree       string
	Paths          []string // normalised, in declaration order; no paths, globs or files is the whole worktree
	Globs          []string // normalised glob patterns (glob.go), in declaration order
	Files          []string // normalised files, each covering itself alone, in declaration order
	Mode           Mode     // exclusive (the zero value) or shared
	PathIdentity   string   // opaque canonical JSON of a v1 path identity; "" when absent
	Checkpoint     string
	Git            *Git
	QuotaPrincipal string
	ClaimedAt      float64
	ExpiresAt      float64 // live iff ExpiresAt > now (INV-LL-1)
	Epoch          int64
	Version        int64

	// BoardTask is the board task this claim holds in progress (a
	// task-bound claim, taskbound.go); "" when it names none.
	BoardTask string
}

// Live reports whether the lease is live at now: strictly before its expiry.
func (c *Claim) Live(now float64) bool { return c.ExpiresAt > now }

// WholeWorktree reports whether the claim covers its entire worktree. A
// stored claim declares no path, glob or file then: a path set naming the root "" (a
// replayed reference journal may hold one beside others) is canonicalised
// to none when the claim is applied.
func (c *Claim) WholeWorktree() bool {
	return len(c.Paths) == 0 && len(c.Globs) == 0 && len(c.Files) == 0
}

func (c *Claim) clone() *Claim {
	n := *c
	return &n
}

// ClampTTL returns the lease length for a requested TTL (INV-LL-3): a missing
// or non-finite request gets the default, and everything is clamped into
// [MinTTL, MaxTTL].
func (l Limits) ClampTTL(ttl float64, present bool) float64 {
	if !present || math.IsNaN(ttl) || math.IsInf(ttl, 0) {
		ttl = l.DefaultTTL
	}
	return math.Min(math.Max(ttl, l.MinTTL), l.MaxTTL)
}
