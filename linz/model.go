// Package linz checks that the hub's claim registry is linearizable under
// crashes and pauses: a history of claims and releases recorded against a
// real hub process is checked by porcupine against the sequential model
// here. The model is partitioned by task id; each task is a holder, the
// holder's epoch and lease deadline, and the highest epoch seen.
//
// Lease expiry is time-driven and the hub's clock is the test's clock (one
// machine), so the model lets a lease lapse exactly when it may have: it is
// certainly live before its deadline, certainly gone after it, and either
// inside the operation's [call, return] window (a nondeterministic step).
package linz

import (
	"fmt"

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
)

// Input is one call. Call and Return bound, in the test's clock (unix
// nanoseconds), when the hub may have decided it; Return is the real
// response time even for unknown outcomes, whose porcupine Return is
// infinity.
type Input struct {
	Verb  Verb
	Task  string
	Agent string
	Epoch int64 // release, update, checkpoint, handoff: the fencing epoch sent; 0 sends none (unfenced)
	// Expected is task_update's expected_version; -1 sends none.
	Expected int64
	To       string // handoff: the recipient
	Call     int64
	Return   int64
}

// Output is the hub's answer.
type Output struct {
	Outcome Outcome
	Epoch   int64  // claim or handoff granted: the fresh epoch
	Expires int64  // claim or handoff granted: lease deadline, unix nanoseconds
	Version int64  // claim, update or checkpoint granted: the claim's version
	Holder  string // read: the holder, "" when free (and the claim's Epoch and Version)
	Code    string // denied: the hub's reason code, for the reader of a violation
	// Offline marks a handoff refused because the recipient was not
	// connected, which the model cannot know (it was reconnecting).
	Offline bool
}

// State is one possible state of one task.
type State struct {
	Holder  string // "" when free
	Epoch   int64  // the holder's epoch; 0 when unknown (a claim of unknown outcome)
	Expires int64  // the holder's lease deadline; 0 when unknown
	Version int64  // the holder's claim version; -1 when unknown
	Max     int64  // every epoch granted on this task so far is ≤ Max (a lower bound)
}

// ClockSlack absorbs the rounding of the hub's float-second timestamps and
// the gap between the hub deciding an expiry and sending its frame.
var ClockSlack int64 = 250e6

// possible are the states the task may be in when op is decided: the lease
// may lapse from just before the call to the return.
func possible(s State, in Input) []State {
	if s.Holder == "" {
		return []State{s}
	}
	free := State{Max: s.Max}
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

// step applies a known-outcome op to one pre-state; ok is false when the
// hub's answer is impossible from it.
func step(s State, in Input, out Output) (State, bool) {
	// mine: the agent holds the task and the fence passes; sure: it is
	// certain (no unknown epoch decides it).
	mine := s.Holder == in.Agent && (in.Epoch == 0 || s.Epoch == 0 || s.Epoch == in.Epoch)
	sure := mine && (in.Epoch == 0 || s.Epoch != 0)
	switch in.Verb {
	case VerbClaim:
		held := s.Holder != "" && s.Holder != in.Agent
		switch out.Outcome {
		case Granted: // INV-ME-1: only a free task or the holder's own (renewal, INV-LL-4); INV-EF-1: fresh epoch
			if held || out.Epoch <= s.Max {
				return s, false
			}
			v := int64(0) // a new claim starts at version 0; a renewal keeps it
			if s.Holder == in.Agent {
				v = s.Version
			}
			if v >= 0 && out.Version != v {
				return s, false
			}
			return State{Holder: in.Agent, Epoch: out.Epoch, Expires: out.Expires, Version: out.Version, Max: out.Epoch}, true
		case Denied:
			return s, held
		}
	case VerbRelease:
		switch out.Outcome {
		case Granted:
			return State{Max: s.Max}, mine
		case Denied: // INV-EF-2: a stale epoch is fenced out
			return s, !sure
		}
	case VerbUpdate, VerbCheckpoint:
		cas := in.Verb == VerbUpdate && in.Expected >= 0
		switch out.Outcome {
		case Granted: // INV-EF-3: the version guard holds and the version rises by one
			if !mine || (cas && s.Version >= 0 && s.Version != in.Expected) || (s.Version >= 0 && out.Version != s.Version+1) {
				return s, false
			}
			n := s
			n.Version = out.Version
			return n, true
		case Denied:
			return s, !sure || (cas && (s.Version < 0 || s.Version != in.Expected))
		}
	case VerbHandoff:
		switch out.Outcome {
		case Granted: // INV-CR-2: straight to the recipient, fresh epoch, version reset
			if !mine || out.Epoch <= s.Max {
				return s, false
			}
			return State{Holder: in.To, Epoch: out.Epoch, Expires: out.Expires, Max: out.Epoch}, true
		case Denied:
			return s, !sure || out.Offline
		}
	case VerbRead: // after recovery: every acknowledged grant, update and checkpoint is there (INV-JA-1)
		if s.Holder != out.Holder {
			return s, false
		}
		return s, s.Holder == "" || ((s.Epoch == 0 || s.Epoch == out.Epoch) && (s.Version < 0 || s.Version == out.Version))
	}
	return s, false
}

// next are the states after op from one pre-state.
func next(s State, in Input, out Output) []State {
	var res []State
	for _, p := range possible(s, in) {
		if out.Outcome != Unknown {
			if n, ok := step(p, in, out); ok {
				res = append(res, n)
			}
			continue
		}
		res = append(res, p) // not applied
		switch in.Verb {
		case VerbClaim:
			switch p.Holder {
			case "":
				res = append(res, State{Holder: in.Agent, Version: 0, Max: p.Max})
			case in.Agent:
				res = append(res, State{Holder: in.Agent, Version: p.Version, Max: p.Max})
			}
		case VerbRelease:
			if n, ok := step(p, in, Output{Outcome: Granted}); ok {
				res = append(res, n)
			}
		case VerbUpdate, VerbCheckpoint:
			if p.Holder == in.Agent && (in.Epoch == 0 || p.Epoch == 0 || p.Epoch == in.Epoch) &&
				(in.Verb == VerbCheckpoint || in.Expected < 0 || p.Version < 0 || p.Version == in.Expected) {
				n := p
				if n.Version >= 0 {
					n.Version++
				}
				res = append(res, n)
			}
		case VerbHandoff:
			if p.Holder == in.Agent && (in.Epoch == 0 || p.Epoch == 0 || p.Epoch == in.Epoch) {
				res = append(res, State{Holder: in.To, Max: p.Max})
			}
		}
	}
	return res
}

// Model is the claim registry as porcupine sees it, one partition per task.
var Model = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byTask := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range h {
			t := op.Input.(Input).Task
			if _, ok := byTask[t]; !ok {
				order = append(order, t)
			}
			byTask[t] = append(byTask[t], op)
		}
		var parts [][]porcupine.Operation
		for _, t := range order {
			parts = append(parts, byTask[t])
		}
		return parts
	},
	Init: func() []any { return []any{State{}} },
	Step: func(state, input, output any) []any {
		var res []any
		for _, n := range next(state.(State), input.(Input), output.(Output)) {
			res = append(res, n)
		}
		return res
	},
	Equal: func(a, b any) bool { return a.(State) == b.(State) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		res := [...]string{"granted", "denied", "unknown"}[out.Outcome]
		if out.Code != "" {
			res += " " + out.Code
		}
		switch in.Verb {
		case VerbClaim:
			if out.Outcome == Granted {
				return fmt.Sprintf("claim(%s, %s) → epoch %d", in.Agent, in.Task, out.Epoch)
			}
			return fmt.Sprintf("claim(%s, %s) → %s", in.Agent, in.Task, res)
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
			return fmt.Sprintf("checkpoint(%s, %s, epoch %d) → %s", in.Agent, in.Task, in.Epoch, res)
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
		s := state.(State)
		if s.Holder == "" {
			return fmt.Sprintf("free (max epoch %d)", s.Max)
		}
		return fmt.Sprintf("%s @%d v%d until %d (max %d)", s.Holder, s.Epoch, s.Version, s.Expires, s.Max)
	},
}
