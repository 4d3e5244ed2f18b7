package coord_test

// The model of task-bound claims: a rapid state machine declares board
// tasks with dependencies, claims them with files, releases with outcomes,
// hands off, changes statuses by hand and lets time pass. A shadow board,
// written from the rules rather than from taskbound.go, predicts
// every verdict and board move; after every step the test asserts that a
// held board task is held by exactly one live claim of its owner, that no
// task was taken with undone dependencies, and that replaying the recorded
// events rebuilds the state.

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/synapse-hub/synapse/coord"
)

var (
	tbBoardTasks = []string{"b1", "b2", "b3", "b4", "b5"} // b5 is never declared
	tbClaimTasks = []string{"c1", "c2", "c3", "c4"}
	tbStatuses   = []string{"open", "in_progress", "blocked", "done", "cancelled"}
	tbOutcomes   = []string{"", "done", "failed", "bogus"}
)

type tbTask struct {
	status, owner string
	deps          []string
}

type tbClaim struct {
	owner, board string
	shared       bool // claims the path every claim may share, so scopes collide
	expires      float64
}

// scopeConflict reports whether a claim on task by owner (with the shared
// path when shared) collides with another live claim: a third party's on
// the shared path.
func (mc *tbMachine) scopeConflict(task, owner string, shared bool) bool {
	for t, c := range mc.claims {
		if shared && c.shared && t != task && c.owner != owner {
			return true
		}
	}
	return false
}

type tbMachine struct {
	s      *coord.State
	now    float64
	board  map[string]*tbTask
	claims map[string]*tbClaim // live claims by claim task
	events []coord.Event
}

func TestModel_TaskBoundClaims(t *testing.T) {
	runSequences(t, modelSequences/4, func(rt *rapid.T) {
		mc := &tbMachine{s: coord.New(coord.Limits{}), now: modelStart, board: map[string]*tbTask{}, claims: map[string]*tbClaim{}}
		rt.Repeat(map[string]func(*rapid.T){
			"":        mc.check,
			"declare": mc.declare,
			"status":  mc.setStatus,
			"claim":   mc.claim,
			"release": mc.release,
			"handoff": mc.handoff,
			"advance": mc.advance,
		})
		mc.now += specMaxTTL + 1
		mc.tick()
		mc.check(rt)
		for id, bt := range mc.board {
			if bt.owner != "" {
				rt.Fatalf("board task %s still held by %s after every lease expired", id, bt.owner)
			}
		}
	})
}

func (mc *tbMachine) step(t *rapid.T, cmd coord.Command) *coord.Refusal {
	o := mc.s.Step(cmd, mc.now)
	mc.events = append(mc.events, o.Events...)
	return o.Refusal
}

func (mc *tbMachine) expect(t *rapid.T, cmd coord.Command, ref *coord.Refusal, want coord.Code) {
	t.Helper()
	got := coord.Code("")
	if ref != nil {
		got = ref.Code
	}
	if got != want {
		t.Fatalf("%+v: got %q (%v), shadow predicts %q", cmd, got, ref, want)
	}
}

func (mc *tbMachine) declare(t *rapid.T) {
	i := rapid.IntRange(0, 3).Draw(t, "declare")
	id := tbBoardTasks[i]
	// Dependencies only on earlier tasks: no cycles, so every declaration
	// is accepted.
	var deps []string
	for _, d := range tbBoardTasks[:i] {
		if rapid.IntRange(0, 2).Draw(t, "dep"+d) == 0 {
			deps = append(deps, d)
		}
	}
	cmd := coord.DeclareTask{Agent: "pm", TaskID: id, Title: "T " + id, DependsOn: deps}
	mc.expect(t, cmd, mc.step(t, cmd), "")
	if bt := mc.board[id]; bt != nil {
		bt.deps = deps // a re-declaration keeps status and owner
		return
	}
	mc.board[id] = &tbTask{status: "open", deps: deps}
}

func (mc *tbMachine) setStatus(t *rapid.T) {
	id := rapid.SampledFrom(tbBoardTasks[:4]).Draw(t, "statusTask")
	st := rapid.SampledFrom(tbStatuses).Draw(t, "status")
	cmd := coord.UpdateBoardTask{Agent: "pm", TaskID: id, Status: &st}
	bt := mc.board[id]
	if bt == nil {
		mc.expect(t, cmd, mc.step(t, cmd), coord.CodeBoardTaskNotFound)
		return
	}
	mc.expect(t, cmd, mc.step(t, cmd), "")
	bt.status = st // by hand: the owner stays
}

func (mc *tbMachine) met(id string) bool {
	d := mc.board[id]
	return d != nil && (d.status == "done" || d.status == "cancelled")
}

func (mc *tbMachine) claim(t *rapid.T) {
	agent := rapid.SampledFrom(modelAgents).Draw(t, "agent")
	task := rapid.SampledFrom(tbClaimTasks).Draw(t, "claimTask")
	want := rapid.SampledFrom(append([]string{""}, tbBoardTasks...)).Draw(t, "boardTask")
	ttl := rapid.Float64Range(30, 300).Draw(t, "ttl")
	shared := rapid.IntRange(0, 3).Draw(t, "sharedPath") == 0
	path := "f/" + task
	if shared {
		path = "f/shared"
	}
	cmd := coord.ClaimRequest{Agent: agent, TaskID: task, BoardTask: want, Paths: []string{path}, TTL: ttl, HasTTL: true}
	var pre map[string]bool // which tasks' dependencies were met before the step
	if want != "" && mc.board[want] != nil {
		pre = map[string]bool{}
		for _, d := range mc.board[want].deps {
			pre[d] = mc.met(d)
		}
	}
	ref := mc.step(t, cmd)
	c, bt := mc.claims[task], mc.board[want]
	var code coord.Code
	switch {
	case c != nil && c.owner != agent:
		code = coord.CodeLeaseLive
	case mc.scopeConflict(task, agent, shared): // the files are checked before the board
		code = coord.CodeScopeConflict
	case c != nil && c.board != "":
		if want != "" && want != c.board {
			code = coord.CodeBoardTaskBound
		}
		want = c.board
	case want == "":
	case bt == nil:
		code = coord.CodeBoardTaskNotFound
	case bt.owner != "":
		code = coord.CodeBoardTaskHeld
	case bt.status == "done" || bt.status == "cancelled":
		code = coord.CodeBoardTaskClosed
	case bt.status != "open" || slices.ContainsFunc(bt.deps, func(d string) bool { return !mc.met(d) }):
		code = coord.CodeBoardTaskNotReady
	}
	mc.expect(t, cmd, ref, code)
	if code != "" {
		return
	}
	if bt != nil && bt.owner == "" && want != "" {
		for d, ok := range pre {
			if !ok {
				t.Fatalf("board task %s taken while its dependency %s is not done", want, d)
			}
		}
		bt.status, bt.owner = "in_progress", agent
	}
	mc.claims[task] = &tbClaim{owner: agent, board: want, shared: shared, expires: mc.now + ttl}
}

// free is the shadow's rule for a claim that goes: by release with outcome,
// or by expiry (outcome "").
func (mc *tbMachine) free(c *tbClaim, outcome string) {
	bt := mc.board[c.board]
	if c.board == "" || bt == nil || bt.owner != c.owner {
		return
	}
	bt.owner = ""
	if bt.status != "in_progress" {
		return
	}
	switch outcome {
	case "done":
		bt.status = "done"
	case "failed":
		bt.status = "blocked"
	default:
		bt.status = "open"
	}
}

func (mc *tbMachine) release(t *rapid.T) {
	task := rapid.SampledFrom(tbClaimTasks).Draw(t, "releaseTask")
	agent := rapid.SampledFrom(modelAgents).Draw(t, "agent")
	if c := mc.claims[task]; c != nil && rapid.Bool().Draw(t, "asOwner") {
		agent = c.owner
	}
	outcome := rapid.SampledFrom(tbOutcomes).Draw(t, "outcome")
	cmd := coord.ReleaseRequest{Agent: agent, TaskID: task, Outcome: outcome}
	ref := mc.step(t, cmd)
	c := mc.claims[task]
	switch {
	case c == nil:
		mc.expect(t, cmd, ref, coord.CodeNotClaimed)
	case c.owner != agent:
		mc.expect(t, cmd, ref, coord.CodeNotOwner)
	case outcome == "bogus":
		mc.expect(t, cmd, ref, coord.CodeOutcomeInvalid)
	default:
		mc.expect(t, cmd, ref, "")
		mc.free(c, outcome)
		delete(mc.claims, task)
	}
}

func (mc *tbMachine) handoff(t *rapid.T) {
	var held []string
	for task := range mc.claims {
		held = append(held, task)
	}
	if len(held) == 0 {
		t.Skip("nothing held")
	}
	slices.Sort(held)
	task := rapid.SampledFrom(held).Draw(t, "handoffTask")
	c := mc.claims[task]
	to := otherAgent(t, c.owner)
	cmd := coord.HandoffRequest{Agent: c.owner, TaskID: task, To: to, ToOnline: true}
	if mc.scopeConflict(task, to, c.shared) {
		mc.expect(t, cmd, mc.step(t, cmd), coord.CodeScopeConflict)
		return
	}
	mc.expect(t, cmd, mc.step(t, cmd), "")
	if bt := mc.board[c.board]; c.board != "" && bt != nil && bt.owner == c.owner {
		bt.owner = to
	}
	c.owner = to
	c.expires = mc.now + specDefaultTTL
}

func (mc *tbMachine) advance(t *rapid.T) {
	mc.now += rapid.Float64Range(0, 400).Draw(t, "dt")
	mc.tick()
}

func (mc *tbMachine) tick() {
	mc.events = append(mc.events, mc.s.Tick(mc.now).Events...)
	for _, task := range slices.Sorted(mapKeys(mc.claims)) {
		if c := mc.claims[task]; c.expires <= mc.now {
			mc.free(c, "")
			delete(mc.claims, task)
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (mc *tbMachine) check(t *rapid.T) {
	img := mc.s.Image()
	got := map[string]string{}
	for _, bt := range img.Tasks {
		got[bt.TaskID] = bt.Status + "/" + bt.Owner
	}
	want := map[string]string{}
	for id, bt := range mc.board {
		want[id] = bt.status + "/" + bt.owner
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("board = %v, shadow %v", got, want)
	}
	holders := map[string][]string{} // board task → live claims bound to it
	for _, c := range img.Claims {
		if !c.Live(mc.now) {
			continue
		}
		sc := mc.claims[c.TaskID]
		if sc == nil || sc.owner != c.Owner || sc.board != c.BoardTask {
			t.Fatalf("claim %s = %s bound to %q, shadow %+v", c.TaskID, c.Owner, c.BoardTask, sc)
		}
		if c.BoardTask != "" {
			if bt := mc.s.BoardTask(c.BoardTask); bt != nil && bt.Owner == c.Owner && bt.OwnerClaim == c.TaskID {
				holders[c.BoardTask] = append(holders[c.BoardTask], fmt.Sprintf("%s(%s)", c.TaskID, c.Owner))
			}
		}
	}
	for _, bt := range img.Tasks {
		if bt.Owner != "" && len(holders[bt.TaskID]) != 1 {
			t.Fatalf("board task %s owned by %s is held by live claims %v, want exactly one", bt.TaskID, bt.Owner, holders[bt.TaskID])
		}
	}
	replay := coord.New(coord.Limits{})
	for _, ev := range mc.events {
		replay.Apply(ev)
	}
	replay.Tick(mc.now)
	mc.s.Tick(mc.now)
	if r := replay.Image(); !reflect.DeepEqual(r.Tasks, img.Tasks) {
		t.Fatalf("replay board = %+v, live %+v", r.Tasks, img.Tasks)
	}
}
