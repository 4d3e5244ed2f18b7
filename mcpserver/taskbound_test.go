package mcpserver

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/client"
)

// The claim tool's board_task and the release tool's outcome: a task with
// undone dependencies is refused with them named, a ready one is taken with
// the files, and release with outcome done finishes it.
func TestTools_TaskBoundClaim(t *testing.T) {
	uri := startHub(t)
	pm := dial(t, uri, "proj/pm")
	ctx := context.Background()
	for _, d := range []client.TaskDeclaration{{TaskID: "design", Title: "Design"}, {TaskID: "build", Title: "Build", DependsOn: []string{"design"}}} {
		if _, err := pm.TaskDeclare(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	cs, _ := connectInMemory(t, New(Options{Client: serverClient(t, uri, "proj/bravo")}))

	var out ClaimResult
	res := call(t, cs, "claim", map[string]any{"task_id": "T2", "paths": []string{"src/b"}, "board_task": "build"}, &out)
	if !res.IsError || out.Code != "BOARD_TASK_NOT_READY" || !slices.Equal(out.Pending, []string{"design"}) || !strings.Contains(text(res), "design") {
		t.Fatalf("refusal: %+v %q", out, text(res))
	}
	out = ClaimResult{}
	res = call(t, cs, "claim", map[string]any{"task_id": "T1", "paths": []string{"src/a"}, "board_task": "design"}, &out)
	if res.IsError || out.Claim == nil || out.Claim.BoardTask != "design" {
		t.Fatalf("grant: %+v %q", out, text(res))
	}
	var rel ReleaseResult
	if res = call(t, cs, "release", map[string]any{"task_id": "T1", "outcome": "done", "evidence": []string{"ok"}}, &rel); res.IsError {
		t.Fatalf("release: %q", text(res))
	}
	b, err := pm.Board(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(b.Ready, "build") {
		t.Fatalf("build not ready after design was done: %+v", b)
	}
}
