package cluster_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
)

// A task-bound claim on a fleet judges its board task's dependencies in
// other namespaces too, from the fleet's board: refused BOARD_TASK_NOT_READY
// while a dependency another hub owns is undone, granted at once (no
// polling: read-your-writes) after it was marked done through that hub;
// the same through a hub that forwards the claim to the owner (issue 22).
func TestFleet_TaskBoundClaimSeesDependenciesInOtherNamespaces_Issue22(t *testing.T) {
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ann := dial(t, a.uri, "alpha/ann") // alpha: syn-a
	bob := dial(t, b.uri, "beta/bob")  // beta: syn-b
	cal := dial(t, a.uri, "beta/cal")  // beta through syn-a: forwarded to syn-b
	for _, d := range []struct {
		c    *client.Client
		task string
		deps []string
	}{
		{ann, "A1", nil}, {ann, "A2", nil},
		{bob, "B0", nil}, {bob, "B1", []string{"A1", "B0"}}, {bob, "B2", []string{"A2"}},
	} {
		if _, err := d.c.TaskDeclare(ctx, client.TaskDeclaration{TaskID: d.task, Title: d.task, DependsOn: d.deps}); err != nil {
			t.Fatal(err)
		}
	}
	done := "done"
	if _, err := bob.TaskUpdate(ctx, client.BoardTaskUpdate{TaskID: "B0", Status: &done}); err != nil {
		t.Fatal(err)
	}
	notReady := func(c *client.Client, task, board string, pending ...string) {
		t.Helper()
		_, err := c.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{task}, BoardTask: board})
		var r *client.Refused
		if !errors.As(err, &r) || r.Code != "BOARD_TASK_NOT_READY" || !slices.Equal(r.Pending, pending) {
			t.Fatalf("%s claims %s on %s: %v; want BOARD_TASK_NOT_READY pending %v", c.Name(), task, board, err, pending)
		}
	}
	notReady(bob, "TB1", "B1", "A1")
	notReady(cal, "TB2", "B2", "A2")
	for _, id := range []string{"A1", "A2"} {
		if _, err := ann.TaskUpdate(ctx, client.BoardTaskUpdate{TaskID: id, Status: &done}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		c           *client.Client
		task, board string
	}{{bob, "TB1", "B1"}, {cal, "TB2", "B2"}} {
		g, err := c.c.Claim(ctx, client.ClaimRequest{TaskID: c.task, Paths: []string{c.task}, BoardTask: c.board})
		if err != nil || g.HubID != "syn-b" {
			t.Fatalf("%s claims %s on %s once its dependency on syn-a's board is done: %+v %v; want granted by syn-b", c.c.Name(), c.task, c.board, g, err)
		}
	}
}
