// Package linz checks that the hub's claim registry is linearizable under
// crashes and pauses: a history of claims and releases recorded against a
// real hub process is checked by porcupine against the sequential model
// here. The model is partitioned by worktree: the tasks of one worktree
// may declare overlapping scopes, so they are decided together (INV-ME-2,
// INV-ME-4), while two worktrees never contend (INV-ME-3). Each task is a
// holder, the holder's epoch, version and lease deadline, the scope it
// holds, and the highest epoch seen.
//
// Lease expiry is time-driven and the hub's clock is the test's clock (one
// machine), so the model lets a lease lapse exactly when it may have: it is
// certainly live before its deadline, certainly gone after it, and either
// inside the operation's [call, return] window (a nondeterministic step).
package linz

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Verb is what an operation does.
type Verb int

const (
	VerbClaim      Verb = iota // claim (or same-owner renewal) of a task
	VerbRelease                // release of a task with an epoch (fenced)
	VerbRead                   // the task's holder in a state snapshot
	VerbUpdate                 // task_update, fenced by epoch and, optionally, expected_version
	VerbCheckpoint             // checkpoint, fenced by epoch
	VerbHandoff                // handoff to another agent, fenced by epoch
)

// Outcome is what the hub answered.
type Outcome int

const (
	Granted Outcome = iota // claim_granted / release_granted
	Denied                 // claim_denied / release_denied
	Unknown                // the connection was lost: it may or may not have applied
	// Unavailable is a refusal that decided nothing: on a fleet, the
	// namespace was changing hands or its owner could not be reached
	// before anything was sent (NAMESPACE_MOVING, OWNER_UNREACHABLE
	// without forward_error lost). The hub promises it did not apply, so
	// the model holds it to that: the state is unchanged.
	Unavailable
)

// Input is one call. Call and Return bound, in the test's clock (unix
// nanoseconds), when the hub may have decided it; Return is the real
// response time even for unknown outcomes, whose porcupine Return is
// infinity.
type Input struct {
	Verb  Verb
	Task  string
	Agent string
	// Worktree is the task's worktree: the model's partition. Slot is the
	// task's place in its worktree (0..GroupSize-1) and Path the one path
	// its claims declare, "" for the whole worktree.
	Worktree string
	Slot     int
	Path     string
	Epoch    int64 // release, update, checkpoint, handoff: the fencing epoch sent; 0 sends none (unfenced)
	// Expected is task_update's expected_version; -1 sends none.
	Expected int64
	To       string // handoff: the recipient
	// Checkpoint is what a checkpoint call saves (unique per call).
	Checkpoint string
	Call       int64
	Return     int64
}

// Output is the hub's answer.
type Output struct {
	Outcome Outcome
	Epoch   int64  // claim or handoff granted: the fresh epoch
	Expires int64  // claim or handoff granted: lease deadline, unix nanoseconds
	Version int64  // claim, update or checkpoint granted: the claim's version
	Holder  string // read: the holder, "" when free (and the claim's Epoch and Version)
	// Checkpoint is the claim's checkpoint: of a claim or handoff granted,
	// and of the holder's claim in a read.
	Checkpoint string
	Code       string // denied: the hub's reason code, for the reader of a violation
	// Offline marks a handoff refused because the recipient was not
	// connected, which the model cannot know (it was reconnecting).
	Offline bool
	// By is who a refusal named as the holder (LEASE_LIVE, SCOPE_CONFLICT),
	// for the reader of a violation; the model ignores it.
	By string
	// Hub is the hub that decided a grant (claim_granted's hub_id), on a
	// fleet; the model ignores it, the fleet's ownership checks read it.
	Hub string
}

// State is one possible state of one task.
type State struct {
	Holder  string // "" when free
	Path    string // the holder's scope in the worktree, "" for all of it
	Epoch   int64  // the holder's epoch; 0 when unknown (a claim of unknown outcome)
	Expires int64  // the holder's lease deadline; 0 when unknown
	Version int64  // the holder's claim version; -1 when unknown
	Max     int64  // every epoch granted on this task so far is ≤ Max (a lower bound)
	// Checkpoint is the holder's checkpoint; Retained, when the task is
	// free, the checkpoint its last claim lapsed with, which the next
	// claimant resumes from (INV-CR-3). A release drops it.
	Checkpoint, Retained string
}

// lapsed is the task after its lease lapses: free, keeping the claim's
// checkpoint, if it had one, for the next claimant (INV-LL-2, INV-CR-3).
func lapsed(s State) State {
	f := State{Max: s.Max, Retained: s.Retained}
	if s.Checkpoint != "" {
		f.Retained = s.Checkpoint
	}
	return f
}

// GroupSize is how many tasks one worktree holds at most.
const GroupSize = 3

// Group is one possible state of one worktree: its tasks by slot.
type Group [GroupSize]State

// ClockSlack absorbs the rounding of the hub's float-second timestamps on
// the wire. The hub reads its clock for a decision after the request has
// arrived (sequencer: one reading per batch, taken once the batch is
// collected), so no scheduling gap needs absorbing: a lease certainly lapsed
// before a call, or is certainly live until the return, to within this.
var ClockSlack int64 = 1e6

// overlap is the spec's ancestry rule within one worktree (INV-ME-2): two
// paths overlap when equal, when either is the whole worktree (""), or when
// one is a directory ancestor of the other. Written here from the spec, not
// taken from package coord, so the model does not share the hub's bugs.
func overlap(a, b string) bool {
	return a == "" || b == "" || a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

// conflicts reports whether a task of g other than slot, held by someone
// other than the exempt agents, holds a scope overlapping path.
func conflicts(g *Group, slot int, path string, exempt string) bool {
	for j := range g {
		if j != slot && g[j].Holder != "" && g[j].Holder != exempt && overlap(g[j].Path, path) {
			return true
		}
	}
	return false
}

// possible are the states the task may be in when op is decided: the lease
// may lapse from just before the call to the return.
func possible(s State, in Input) []State {
	if s.Holder == "" {
		return []State{s}
	}
	free := lapsed(s)
	switch {
	case s.Expires == 0 || in.Return == 0: // deadline or decision time unknown
		return []State{s, free}
	case s.Expires+ClockSlack < in.Call: // lapsed before the call (INV-LL-2)
		return []State{free}
	case s.Expires-ClockSlack <= in.Return:
		return []State{s, free}
	default:
		return []State{s}
	}
}

// possibleGroups are the states the worktree may be in when op is decided:
// every combination of its tasks' possible states.
func possibleGroups(g Group, in Input) []Group {
	res := []Group{g}
	for i := range g {
		ps := possible(g[i], in)
		if len(ps) == 1 {
			for k := range res {
				res[k][i] = ps[0]
			}
			continue
		}
		var more []Group
		for _, r := range res {
			for _, p := range ps {
				r[i] = p
				more = append(more, r)
			}
		}
		res = more
	}
	return res
}

// step applies a known-outcome op to one pre-state; ok is false when the
// hub's answer is impossible from it.
func step(g Group, in Input, out Output) (Group, bool) {
	if out.Outcome == Unavailable { // decided nothing
		return g, true
	}
	s := g[in.Slot]
	set := func(n State) Group { g[in.Slot] = n; return g }
	// mine: the agent holds the task and the fence passes; sure: it is
	// certain (no unknown epoch decides it).
	mine := s.Holder == in.Agent && (in.Epoch == 0 || s.Epoch == 0 || s.Epoch == in.Epoch)
	sure := mine && (in.Epoch == 0 || s.Epoch != 0)
	switch in.Verb {
	case VerbClaim:
		held := s.Holder != "" && s.Holder != in.Agent
		// INV-ME-2..4: another agent's live claim in the worktree overlaps.
		scope := conflicts(&g, in.Slot, in.Path, in.Agent)
		switch out.Outcome {
		case Granted: // INV-ME-1: only a free task or the holder's own (renewal, INV-LL-4); INV-EF-1: fresh epoch
			if held || scope || out.Epoch <= s.Max {
				return g, false
			}
			// A new claim starts at version 0 and resumes from the
			// retained checkpoint (INV-CR-3); a renewal keeps both.
			v, cp := int64(0), s.Retained
			if s.Holder == in.Agent {
				v, cp = s.Version, s.Checkpoint
			}
			if (v >= 0 && out.Version != v) || out.Checkpoint != cp {
				return g, false
			}
			return set(State{Holder: in.Agent, Path: in.Path, Epoch: out.Epoch, Expires: out.Expires, Version: out.Version, Max: out.Epoch, Checkpoint: cp}), true
		case Denied:
			return g, held || scope
		}
	case VerbRelease:
		switch out.Outcome {
		case Granted:
			return set(State{Max: s.Max}), mine
		case Denied: // INV-EF-2: a stale epoch is fenced out
			return g, !sure
		}
	case VerbUpdate, VerbCheckpoint:
		cas := in.Verb == VerbUpdate && in.Expected >= 0
		switch out.Outcome {
		case Granted: // INV-EF-3: the version guard holds and the version rises by one
			if !mine || (cas && s.Version >= 0 && s.Version != in.Expected) || (s.Version >= 0 && out.Version != s.Version+1) {
				return g, false
			}
			s.Version = out.Version
			if in.Verb == VerbCheckpoint {
				s.Checkpoint = in.Checkpoint
			}
			return set(s), true
		case Denied:
			return g, !sure || (cas && (s.Version < 0 || s.Version != in.Expected))
		}
	case VerbHandoff:
		// INV-CR-2 with INV-ME-2: the moved scope may not overlap a live
		// claim of anyone but the recipient (the giver's own included).
		scope := mine && conflicts(&g, in.Slot, s.Path, in.To)
		switch out.Outcome {
		case Granted: // INV-CR-2: straight to the recipient, fresh epoch, version reset
			if !mine || scope || out.Epoch <= s.Max || out.Checkpoint != s.Checkpoint {
				return g, false
			}
			return set(State{Holder: in.To, Path: s.Path, Epoch: out.Epoch, Expires: out.Expires, Max: out.Epoch, Checkpoint: s.Checkpoint}), true
		case Denied:
			return g, !sure || out.Offline || scope
		}
	case VerbRead: // after recovery: every acknowledged grant, update and checkpoint is there (INV-JA-1)
		if s.Holder != out.Holder {
			return g, false
		}
		return g, s.Holder == "" || ((s.Epoch == 0 || s.Epoch == out.Epoch) && (s.Version < 0 || s.Version == out.Version) && s.Checkpoint == out.Checkpoint)
	}
	return g, false
}

// next are the states after op from one pre-state.
func next(g Group, in Input, out Output) []Group {
	var res []Group
	for _, p := range possibleGroups(g, in) {
		if out.Outcome != Unknown {
			if n, ok := step(p, in, out); ok {
				res = append(res, n)
			}
			continue
		}
		res = append(res, p) // not applied
		s := p[in.Slot]
		mine := s.Holder == in.Agent && (in.Epoch == 0 || s.Epoch == 0 || s.Epoch == in.Epoch)
		applied := func(n State) { p[in.Slot] = n; res = append(res, p) }
		switch in.Verb {
		case VerbClaim:
			if conflicts(&p, in.Slot, in.Path, in.Agent) {
				break
			}
			switch s.Holder {
			case "":
				applied(State{Holder: in.Agent, Path: in.Path, Version: 0, Max: s.Max, Checkpoint: s.Retained})
			case in.Agent:
				applied(State{Holder: in.Agent, Path: in.Path, Version: s.Version, Max: s.Max, Checkpoint: s.Checkpoint})
			}
		case VerbRelease:
			if n, ok := step(p, in, Output{Outcome: Granted}); ok {
				res = append(res, n)
			}
		case VerbUpdate, VerbCheckpoint:
			if mine && (in.Verb == VerbCheckpoint || in.Expected < 0 || s.Version < 0 || s.Version == in.Expected) {
				if s.Version >= 0 {
					s.Version++
				}
				if in.Verb == VerbCheckpoint {
					s.Checkpoint = in.Checkpoint
				}
				applied(s)
			}
		case VerbHandoff:
			if mine && !conflicts(&p, in.Slot, s.Path, in.To) {
				applied(State{Holder: in.To, Path: s.Path, Max: s.Max, Checkpoint: s.Checkpoint})
			}
		}
	}
	return res
}

// Model is the claim registry as porcupine sees it, one partition per
// worktree.
var Model = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byTree := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range h {
			w := op.Input.(Input).Worktree
			if _, ok := byTree[w]; !ok {
				order = append(order, w)
			}
			byTree[w] = append(byTree[w], op)
		}
		var parts [][]porcupine.Operation
		for _, w := range order {
			parts = append(parts, byTree[w])
		}
		return parts
	},
	Init: func() []any { return []any{Group{}} },
	Step: func(state, input, output any) []any {
		var res []any
		for _, n := range next(state.(Group), input.(Input), output.(Output)) {
			res = append(res, n)
		}
		return res
	},
	Equal: func(a, b any) bool { return a.(Group) == b.(Group) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		res := [...]string{"granted", "denied", "unknown", "unavailable"}[out.Outcome]
		if out.Code != "" {
			res += " " + out.Code
		}
		switch in.Verb {
		case VerbClaim:
			if out.Outcome == Granted {
				res = fmt.Sprintf("epoch %d", out.Epoch)
			}
			return fmt.Sprintf("claim(%s, %s, %q) → %s", in.Agent, in.Task, in.Path, res)
		case VerbRelease:
			return fmt.Sprintf("release(%s, %s, epoch %d) → %s", in.Agent, in.Task, in.Epoch, res)
		case VerbUpdate:
			if out.Outcome == Granted {
				res = fmt.Sprintf("v%d", out.Version)
			}
			return fmt.Sprintf("task_update(%s, %s, epoch %d, expect v%d) → %s", in.Agent, in.Task, in.Epoch, in.Expected, res)
		case VerbCheckpoint:
			if out.Outcome == Granted {
				res = fmt.Sprintf("v%d", out.Version)
			}
			return fmt.Sprintf("checkpoint(%s, %s, %q, epoch %d) → %s", in.Agent, in.Task, in.Checkpoint, in.Epoch, res)
		case VerbHandoff:
			if out.Outcome == Granted {
				res = fmt.Sprintf("epoch %d", out.Epoch)
			}
			return fmt.Sprintf("handoff(%s → %s, %s, epoch %d) → %s", in.Agent, in.To, in.Task, in.Epoch, res)
		default:
			return fmt.Sprintf("read(%s) → %q @%d v%d", in.Task, out.Holder, out.Epoch, out.Version)
		}
	},
	DescribeState: func(state any) string {
		var parts []string
		for i, s := range state.(Group) {
			if s.Holder == "" {
				parts = append(parts, fmt.Sprintf("[%d] free (max epoch %d, retained cp %q)", i, s.Max, s.Retained))
				continue
			}
			parts = append(parts, fmt.Sprintf("[%d] %s holds %q @%d v%d cp %q until %d (max %d)", i, s.Holder, s.Path, s.Epoch, s.Version, s.Checkpoint, s.Expires, s.Max))
		}
		return strings.Join(parts, "; ")
	},
}
