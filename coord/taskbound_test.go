package coord_test

import (
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// boundClaim asks for claim task with board task bt and the file path.
func boundClaim(agent, task, bt string, paths ...string) coord.ClaimRequest {
	return coord.ClaimRequest{Agent: agent, TaskID: task, BoardTask: bt, Paths: paths}
}

func wantBoard(t *testing.T, r *rig, id, status, owner string) {
	t.Helper()
	bt := r.s.BoardTask(id)
	if bt == nil || bt.Status != status || bt.Owner != owner {
		t.Fatalf("board task %s = %+v, want status %s owner %q", id, bt, status, owner)
	}
}

func TestTaskBound_GrantTakesTaskAndFilesInOneStep(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	evs := r.ok(boundClaim("B", "T1", "design", "src/api.go"))
	wantKinds(t, evs, "[claim,ledger_task]")
	g := one[coord.ClaimGranted](t, evs)
	if g.Claim.BoardTask != "design" {
		t.Fatalf("claim board task = %q", g.Claim.BoardTask)
	}
	p := one[coord.TaskPosted](t, evs)
	if !p.Update || p.Task.Version != 2 || p.Task.UpdatedAt != r.now {
		t.Fatalf("posted = %+v", p)
	}
	wantBoard(t, r, "design", "in_progress", "B")
	if oc := r.s.BoardTask("design").OwnerClaim; oc != "T1" {
		t.Fatalf("owner claim = %q", oc)
	}
	// A same-owner renewal keeps the binding and does not touch the board again.
	evs = r.ok(coord.ClaimRequest{Agent: "B", TaskID: "T1", Paths: []string{"src/api.go"}})
	wantKinds(t, evs, "[claim]")
	if c := r.s.Claim("T1"); c.BoardTask != "design" {
		t.Fatalf("renewal dropped the binding: %+v", c)
	}
	r.ok(boundClaim("B", "T1", "design", "src/api.go"))
	wantBoard(t, r, "design", "in_progress", "B")
}

func TestTaskBound_RefusesMissingBoardTask(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	o := r.refused(boundClaim("B", "T1", "nope"), coord.CodeBoardTaskNotFound, "Task 'nope' is not on the board.")
	wantKinds(t, o.Events, "[claim_denial]")
}

func TestTaskBound_RefusesUndoneDependenciesNamingThem(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "ship", Title: "Ship", DependsOn: []string{"test", "build", "design"}})
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr("cancelled")})
	o := r.refused(boundClaim("B", "T1", "ship"), coord.CodeBoardTaskNotReady, "Board task 'ship' waits for 'build', 'test'.")
	wantEqual(t, "pending", o.Refusal.Pending, []string{"build", "test"})
	// Once every dependency is done (or cancelled) the task is ready.
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "build", Status: ptr("done")})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "test", Title: "Test"})
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "test", Status: ptr("done")})
	r.ok(boundClaim("B", "T1", "ship"))
	wantBoard(t, r, "ship", "in_progress", "B")
}

// On a fleet a dependency may be on another hub's board: the hub passes
// its status there (DepsElsewhere, read from the fleet's board) and the
// decision judges it as one of its own; this board's word wins for its own
// tasks, and a dependency on neither board is not met (issue 22).
func TestTaskBound_DependencyOnAnotherBoardIsJudgedByItsStatusThere_Issue22(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "ship", Title: "Ship", DependsOn: []string{"design", "alpha-api", "alpha-docs"}})
	wantEqual(t, "dependencies elsewhere", r.s.DepsElsewhere("ship"), []string{"alpha-api", "alpha-docs"})
	if got := r.s.DepsElsewhere("nope"); got != nil {
		t.Fatalf("dependencies elsewhere of a task not on the board: %v", got)
	}
	ship := func(elsewhere map[string]string) coord.ClaimRequest {
		c := boundClaim("B", "T1", "ship")
		c.DepsElsewhere = elsewhere
		return c
	}
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr("done")})
	o := r.refused(ship(nil), coord.CodeBoardTaskNotReady, "Board task 'ship' waits for 'alpha-api', 'alpha-docs'.")
	wantEqual(t, "pending", o.Refusal.Pending, []string{"alpha-api", "alpha-docs"})
	o = r.refused(ship(map[string]string{"alpha-api": "done", "alpha-docs": "in_progress"}), coord.CodeBoardTaskNotReady, "Board task 'ship' waits for 'alpha-docs'.")
	wantEqual(t, "pending", o.Refusal.Pending, []string{"alpha-docs"})
	// This board's own task is judged here, whatever the other board says.
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr("open")})
	r.refused(ship(map[string]string{"design": "done", "alpha-api": "done", "alpha-docs": "cancelled"}), coord.CodeBoardTaskNotReady, "Board task 'ship' waits for 'design'.")
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr("done")})
	r.ok(ship(map[string]string{"alpha-api": "done", "alpha-docs": "cancelled"}))
	wantBoard(t, r, "ship", "in_progress", "B")
}

func TestTaskBound_RefusesTaskHeldByAnotherClaim(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(boundClaim("B", "T1", "design", "src/a"))
	o := r.refused(boundClaim("C", "T2", "design", "src/b"), coord.CodeBoardTaskHeld, "Board task 'design' is in progress, held by B.")
	if o.Refusal.Holder != "B" {
		t.Fatalf("holder = %q", o.Refusal.Holder)
	}
	// The holder's second claim cannot take it twice either.
	r.refused(boundClaim("B", "T3", "design", "src/c"), coord.CodeBoardTaskHeld, "Board task 'design' is in progress, held by B.")
}

func TestTaskBound_RefusesClosedAndNotOpenTasks(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr("done")})
	r.refused(boundClaim("B", "T1", "design"), coord.CodeBoardTaskClosed, "Board task 'design' is done.")
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "x", Title: "X"})
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "x", Status: ptr("cancelled")})
	r.refused(boundClaim("B", "T1", "x"), coord.CodeBoardTaskClosed, "Board task 'x' is cancelled.")
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "x", Status: ptr("blocked")})
	r.refused(boundClaim("B", "T1", "x"), coord.CodeBoardTaskNotReady, "Board task 'x' is blocked, not open.")
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "x", Status: ptr("in_progress")})
	r.refused(boundClaim("B", "T1", "x"), coord.CodeBoardTaskNotReady, "Board task 'x' is in_progress, not open.")
}

func TestTaskBound_RenewalCannotRebind(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "x", Title: "X"})
	r.ok(boundClaim("B", "T1", "design", "src/a"))
	r.refused(boundClaim("B", "T1", "x", "src/a"), coord.CodeBoardTaskBound, "Task 'T1' holds board task 'design', not 'x'.")
	// An unbound live claim may take a board task on renewal.
	r.claim("C", "T2", "src/b")
	r.ok(boundClaim("C", "T2", "x", "src/b"))
	wantBoard(t, r, "x", "in_progress", "C")
}

func TestTaskBound_BoardRefusalLeavesFilesFree(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(boundClaim("B", "T1", "design", "src/a"))
	r.refused(boundClaim("C", "T2", "design", "src/b"), coord.CodeBoardTaskHeld, "Board task 'design' is in progress, held by B.")
	r.claim("D", "T3", "src/b") // the refused claim took no files
}

func TestTaskBound_ReleaseOutcomesMoveTheBoard(t *testing.T) {
	for _, tc := range []struct {
		outcome, claimStatus, want string
	}{
		{"done", "", "done"},
		{"failed", "", "blocked"},
		{"", "", "open"},
		{"", "done", "done"},
		{"", "failed", "blocked"},
		{"done", "failed", "done"}, // an explicit outcome wins
	} {
		r := boardFixture(t, coord.Limits{})
		r.ok(boundClaim("B", "T1", "design", "src/a"))
		if tc.claimStatus != "" {
			r.ok(coord.UpdateRequest{Agent: "B", TaskID: "T1", Status: tc.claimStatus})
		}
		evs := r.ok(coord.ReleaseRequest{Agent: "B", TaskID: "T1", Outcome: tc.outcome})
		wantKinds(t, evs, "[release,ledger_task]")
		wantBoard(t, r, "design", tc.want, "")
	}
}

func TestTaskBound_ReleaseOutcomeReadyingDependents(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(boundClaim("B", "T1", "design", "src/a"))
	r.refused(boundClaim("C", "T2", "build", "src/b"), coord.CodeBoardTaskNotReady, "Board task 'build' waits for 'design'.")
	r.ok(coord.ReleaseRequest{Agent: "B", TaskID: "T1", Outcome: "done"})
	wantEqual(t, "ready", r.s.Ready(), []string{"build"})
	r.ok(boundClaim("C", "T2", "build", "src/b"))
}

func TestTaskBound_RefusesUnknownOutcome(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(boundClaim("B", "T1", "design"))
	r.refused(coord.ReleaseRequest{Agent: "B", TaskID: "T1", Outcome: "shipped"}, coord.CodeOutcomeInvalid, "Release outcome 'shipped' is not done or failed.")
}

func TestTaskBound_ReleaseKeepsAStatusSetByHand(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(boundClaim("B", "T1", "design"))
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr("cancelled")})
	wantBoard(t, r, "design", "cancelled", "B")
	r.ok(coord.ReleaseRequest{Agent: "B", TaskID: "T1", Outcome: "done"})
	wantBoard(t, r, "design", "cancelled", "")
}

func TestTaskBound_ExpiryPutsTaskBackToReady(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(coord.ClaimRequest{Agent: "B", TaskID: "T1", BoardTask: "design", TTL: 60, HasTTL: true})
	wantEqual(t, "ready while held", r.s.Ready(), []string(nil))
	r.now += 61
	o := r.s.Tick(r.now)
	wantKinds(t, o.Events, "[claim_expired,ledger_task]")
	wantBoard(t, r, "design", "open", "")
	wantEqual(t, "ready", r.s.Ready(), []string{"design"})
	r.s.Rollback(&o) // the expiry undoes exactly
	wantBoard(t, r, "design", "in_progress", "B")
	r.s.Tick(r.now)
	r.ok(boundClaim("C", "T2", "design"))
	wantBoard(t, r, "design", "in_progress", "C")
}

func TestTaskBound_HandoffMovesTheBoardOwner(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(boundClaim("B", "T1", "design"))
	evs := r.ok(coord.HandoffRequest{Agent: "B", TaskID: "T1", To: "C", ToOnline: true})
	wantKinds(t, evs, "[ledger_progress,handoff,ledger_task]")
	wantBoard(t, r, "design", "in_progress", "C")
	r.ok(coord.ReleaseRequest{Agent: "C", TaskID: "T1", Outcome: "done"})
	wantBoard(t, r, "design", "done", "")
}

func TestTaskBound_RedeclareKeepsTheOwner(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(boundClaim("B", "T1", "design"))
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "design", Title: "Design v2"})
	wantBoard(t, r, "design", "in_progress", "B")
}

func TestTaskBound_RollbackUndoesBothHalves(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	before := r.s.Image()
	o := r.step(boundClaim("B", "T1", "design", "src/a"))
	r.s.Rollback(&o)
	wantEqual(t, "image after rollback", r.s.Image(), before)
}

// Replay applies the journalled events but not claim_expired (expiry is
// recomputed), so an expired claim lingers until the final Tick. Its
// expiry must not free the board task a later claim of the same agent
// took: the board task names the claim that holds it.
func TestTaskBound_LingeringExpiredClaimDoesNotFreeALaterHolder(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	start := r.s.Image()
	var log []coord.Event
	keep := func(o coord.Outcome) {
		for _, ev := range o.Events {
			if _, expired := ev.(coord.ClaimExpired); !expired {
				log = append(log, ev)
			}
		}
	}
	keep(r.step(coord.ClaimRequest{Agent: "B", TaskID: "T1", BoardTask: "design", Paths: []string{"a"}, TTL: 30, HasTTL: true}))
	r.now += 31
	keep(r.s.Tick(r.now))
	keep(r.step(boundClaim("B", "T2", "design", "b")))
	replay := coord.FromImage(coord.Limits{}, start)
	for _, ev := range log {
		replay.Apply(ev)
	}
	replay.Tick(r.now)
	if bt := replay.BoardTask("design"); bt.Status != "in_progress" || bt.Owner != "B" || bt.OwnerClaim != "T2" {
		t.Fatalf("after replay design = %+v", bt)
	}
}

func TestTaskBound_ReleaseReceiptNoteStaysNextToTheRelease(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(boundClaim("B", "T1", "design", "a"))
	evs := r.ok(coord.ReleaseRequest{Agent: "B", TaskID: "T1", Outcome: "done", Evidence: &coord.Evidence{Evidence: []string{"tests pass"}}})
	wantKinds(t, evs, "[release,ledger_progress,ledger_task]")
}

// On a fleet a namespace moves to another hub with its claims (Disown), and
// a board task another namespace declared stays. If one of the moved claims
// held it, the task is free to claim again here, not held forever.
func TestTaskBound_TaskLeftByAMovedHolderIsFreeAgain(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.ok(coord.DeclareTask{Agent: "two/pm", TaskID: "X", Title: "x"})
	r.ok(coord.ClaimRequest{Agent: "one/a", TaskID: "C", BoardTask: "X", Paths: []string{"a"}})
	r.ok(coord.Disown{Namespace: "one"})
	wantBoard(t, r, "X", "in_progress", "one/a") // left behind
	r.ok(coord.ClaimRequest{Agent: "two/b", TaskID: "D", BoardTask: "X", Paths: []string{"b"}})
	wantBoard(t, r, "X", "in_progress", "two/b")
}
