package client

import (
	"errors"
	"slices"
	"testing"

	"github.com/synapse-hub/synapse/hub"
)

// The SDK's task-bound claim: BoardTask on the request, on the grant and
// on the board; the refusals' codes, holder and pending dependencies; and
// the release outcome.
func TestTaskBound_SDKClaimAndRelease(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a, b := th.dial(t, "p/a"), th.dial(t, "p/b")
	if _, err := a.TaskDeclare(ctx, TaskDeclaration{TaskID: "design", Title: "Design"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.TaskDeclare(ctx, TaskDeclaration{TaskID: "build", Title: "Build", DependsOn: []string{"design"}}); err != nil {
		t.Fatal(err)
	}
	_, err := b.Claim(ctx, ClaimRequest{TaskID: "T2", Paths: []string{"src/b"}, BoardTask: "build"})
	var r *Refused
	if !errors.As(err, &r) || r.Code != "BOARD_TASK_NOT_READY" || !slices.Equal(r.Pending, []string{"design"}) {
		t.Fatalf("claim of a task with undone dependencies: %v (%+v)", err, r)
	}
	cl, err := a.Claim(ctx, ClaimRequest{TaskID: "T1", Paths: []string{"src/a"}, BoardTask: "design"})
	if err != nil || cl.BoardTask != "design" {
		t.Fatalf("claim = %+v, %v", cl, err)
	}
	if cl, err = a.Renew(ctx, cl); err != nil || cl.BoardTask != "design" {
		t.Fatalf("renew = %+v, %v", cl, err)
	}
	board, err := b.Board(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, bt := range board.Tasks {
		if bt.TaskID == "design" && (bt.Status != "in_progress" || bt.Owner != "p/a") {
			t.Fatalf("board task = %+v", bt)
		}
	}
	_, err = b.Claim(ctx, ClaimRequest{TaskID: "T3", Paths: []string{"src/c"}, BoardTask: "design"})
	if !errors.As(err, &r) || r.Code != "BOARD_TASK_HELD" || r.Holder != "p/a" {
		t.Fatalf("claim of a held task: %v", err)
	}
	if _, err := a.Release(ctx, "T1", ReleaseOptions{Outcome: "failed"}); err != nil {
		t.Fatal(err)
	}
	board, err = b.Board(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, bt := range board.Tasks {
		if bt.TaskID == "design" && (bt.Status != "blocked" || bt.Owner != "") {
			t.Fatalf("board task after a failed release = %+v", bt)
		}
	}
}
