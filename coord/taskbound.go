package coord

import "slices"

// Task-bound claims: a claim that names a board task takes the task and the
// files in one decision. The grant and the board change are events of the
// same Step, so the journal commits them as one batch and no other agent can
// take the task between them.
//
// A held board task names its holder (Owner, and the claim's task id in
// OwnerClaim) and is in_progress. The board moves:
//
//	claim granted            open (ready)  → in_progress, Owner = claimant
//	handoff                  Owner         → the recipient
//	release, outcome done    in_progress   → done
//	release, outcome failed  in_progress   → blocked (the board has no "failed"; a person or agent reopens it)
//	release, no outcome      in_progress   → open, unless the claim itself is done/failed (then as above)
//	lease expiry             in_progress   → open (ready again)
//
// Owner is cleared whenever the claim goes; a status someone set by hand
// meanwhile (ledger_task_update) is kept.

// Release outcomes.
const (
	OutcomeDone   = "done"
	OutcomeFailed = "failed"
)

// bindBoardTask decides the board side of claim r on task: the board task
// the new claim holds and the event that marks it in progress. existing is
// the claimant's own live claim on task (a renewal), or nil.
func (s *State) bindBoardTask(r ClaimRequest, task string, existing *Claim, now float64) (string, []Event, *Refusal) {
	want := strip(r.BoardTask)
	if existing != nil && existing.BoardTask != "" { // a renewal keeps its binding
		if want == "" || want == existing.BoardTask {
			return existing.BoardTask, nil, nil
		}
		return "", nil, refuse(CodeBoardTaskBound, task, "Task '%s' holds board task '%s', not '%s'.", task, existing.BoardTask, want)
	}
	if want == "" {
		return "", nil, nil
	}
	t := s.tasks[want]
	if t == nil {
		return "", nil, refuse(CodeBoardTaskNotFound, task, "Task '%s' is not on the board.", want)
	}
	status := t.Status
	if t.Owner != "" && !s.holdsBoardTask(t, now) && status == "in_progress" {
		// Its holder left with its namespace for another hub (Disown): the
		// task it left in progress here is free again.
		status = "open"
	}
	switch {
	case t.Owner != "" && s.holdsBoardTask(t, now):
		ref := refuse(CodeBoardTaskHeld, task, "Board task '%s' is in progress, held by %s.", want, t.Owner)
		ref.Holder = t.Owner
		return "", nil, ref
	case status == "done" || status == "cancelled":
		return "", nil, refuse(CodeBoardTaskClosed, task, "Board task '%s' is %s.", want, status)
	case status != "open":
		return "", nil, refuse(CodeBoardTaskNotReady, task, "Board task '%s' is %s, not open.", want, status)
	}
	if pending := s.pendingDeps(t, r.DepsElsewhere); len(pending) > 0 {
		ref := refuse(CodeBoardTaskNotReady, task, "Board task '%s' waits for %s.", want, quoteList(pending))
		ref.Pending = pending
		return "", nil, ref
	}
	n := *t
	n.Status, n.Owner, n.OwnerClaim = "in_progress", r.Agent, task
	n.Version++
	n.UpdatedAt = now
	return want, []Event{TaskPosted{Task: &n, By: r.Agent, Update: true}}, nil
}

// holdsBoardTask reports whether the claim t names as its holder is live
// here and bound to t. It always is, but for a claim that moved to another
// hub with its agent's namespace while t stayed (Disown).
func (s *State) holdsBoardTask(t *BoardTask, now float64) bool {
	c := s.liveClaim(t.OwnerClaim, now)
	return c != nil && c.Owner == t.Owner && c.BoardTask == t.TaskID
}

// pendingDeps returns t's dependencies that are not met (done or cancelled,
// as ReadyOf counts them), sorted. A dependency not on this board is
// judged by its status elsewhere (ClaimRequest.DepsElsewhere).
func (s *State) pendingDeps(t *BoardTask, elsewhere map[string]string) []string {
	var out []string
	for _, d := range t.DependsOn {
		status := elsewhere[d]
		if dt := s.tasks[d]; dt != nil {
			status = dt.Status // this board is the newer word on its own tasks
		}
		if status != "done" && status != "cancelled" {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// DepsElsewhere returns the dependencies of board task id that are not on
// this board, sorted: on a fleet, the tasks of namespaces other hubs own,
// which a task-bound claim of id judges from the fleet's board
// (ClaimRequest.DepsElsewhere). nil when id is not on the board.
func (s *State) DepsElsewhere(id string) []string {
	t := s.tasks[strip(id)]
	if t == nil {
		return nil
	}
	var out []string
	for _, d := range t.DependsOn {
		if s.tasks[d] == nil {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

func quoteList(ids []string) string {
	out := ""
	for i, id := range ids {
		if i > 0 {
			out += ", "
		}
		out += "'" + id + "'"
	}
	return out
}

// validOutcome reports whether o is a release outcome ("" is none).
func validOutcome(o string) bool { return o == "" || o == OutcomeDone || o == OutcomeFailed }

// releaseBoardTask returns the event that frees the board task claim c
// holds as c goes: by release with outcome (expired false) or by expiry.
// It returns nil when c holds none.
func (s *State) releaseBoardTask(c *Claim, outcome string, expired bool, now float64) []Event {
	if outcome == "" && !expired && c.Status.Terminal() {
		outcome = c.Status.String()
	}
	return s.moveBoardTask(c, now, func(n *BoardTask) {
		n.Owner, n.OwnerClaim = "", ""
		if n.Status != "in_progress" {
			return // a status set by hand meanwhile stands
		}
		switch outcome {
		case OutcomeDone:
			n.Status = "done"
		case OutcomeFailed:
			n.Status = "blocked"
		default:
			n.Status = "open"
		}
	})
}

// handOffBoardTask returns the event that moves the board task claim c
// holds to its new owner to, or nil.
func (s *State) handOffBoardTask(c *Claim, to string, now float64) []Event {
	return s.moveBoardTask(c, now, func(n *BoardTask) { n.Owner = to })
}

// moveBoardTask returns the event that stores change applied to a copy of
// the board task claim c holds, or nil when c holds none. The task must
// name c itself, not only its owner: replay skips claim_expired rows, so an
// expired claim lingers until the final Tick and must not free the task a
// later claim of the same agent took.
func (s *State) moveBoardTask(c *Claim, now float64, change func(*BoardTask)) []Event {
	if c.BoardTask == "" {
		return nil
	}
	t := s.tasks[c.BoardTask]
	if t == nil || t.Owner != c.Owner || t.OwnerClaim != c.TaskID {
		return nil
	}
	n := *t
	change(&n)
	n.Version++
	n.UpdatedAt = now
	return []Event{TaskPosted{Task: &n, By: c.Owner, Update: true}}
}
