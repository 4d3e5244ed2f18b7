package hub

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/journal"
)

// A task-bound claim over real sockets: welcome announces the feature, a
// claim naming a board task with undone dependencies is refused with the
// pending ones named, a granted one carries board_task and moves the board
// task to in_progress with its owner, a second agent is refused with the
// holder, release with outcome done finishes it and readies its dependents,
// and the journal gives all of it back after a restart.
func TestTaskBound_ClaimReleaseOverSockets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	st, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	th := startHub(t, Config{Journal: st})
	a := th.join("p/a")
	b := th.join("p/b")
	a.send(f("ledger_task", "task_id", "design", "title", "Design"))
	a.expect("ledger_task_posted")
	a.send(f("ledger_task", "task_id", "build", "title", "Build", "depends_on", []string{"design"}))
	a.expect("ledger_task_posted")

	b.send(f("claim", "sender", "p/b", "task_id", "T2", "paths", []string{"src/b"}, "board_task", "build"))
	d := b.expect("claim_denied")
	if d["error_code"] != "BOARD_TASK_NOT_READY" || fmt.Sprint(d["pending"]) != "[design]" {
		t.Fatalf("denial = %v", d)
	}

	a.send(f("claim", "task_id", "T1", "paths", []string{"src/a"}, "board_task", "design"))
	g := a.expect("claim_granted")
	if g["board_task"] != "design" {
		t.Fatalf("claim_granted = %v", g)
	}
	u := a.expect("ledger_task_updated")
	task := u["task"].(map[string]any)
	if task["status"] != "in_progress" || task["owner"] != "p/a" {
		t.Fatalf("board task = %v", task)
	}

	b.send(f("claim", "sender", "p/b", "task_id", "T3", "paths", []string{"src/c"}, "board_task", "design"))
	d = b.expect("claim_denied")
	if d["error_code"] != "BOARD_TASK_HELD" || d["holder"] != "p/a" {
		t.Fatalf("denial = %v", d)
	}

	a.send(f("release", "task_id", "T1", "outcome", "done"))
	a.expect("release_granted")
	u = a.expectWhere("ledger_task_updated", func(m map[string]any) bool { return m["task"].(map[string]any)["status"] == "done" })
	if _, held := u["task"].(map[string]any)["owner"]; held {
		t.Fatalf("released task still has an owner: %v", u)
	}
	b.send(f("claim", "sender", "p/b", "task_id", "T2", "paths", []string{"src/b"}, "board_task", "build"))
	if g := b.expect("claim_granted"); g["board_task"] != "build" {
		t.Fatalf("claim_granted = %v", g)
	}
	b.sync("p/b")

	if err := th.h.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	s := replayClosed(t, st)
	if c := s.Claim("T2"); c == nil || c.BoardTask != "build" {
		t.Fatalf("replayed claim T2 = %+v", c)
	}
	if bt := s.BoardTask("build"); bt.Status != "in_progress" || bt.Owner != "p/b" {
		t.Fatalf("replayed build = %+v", bt)
	}
	if bt := s.BoardTask("design"); bt.Status != "done" || bt.Owner != "" {
		t.Fatalf("replayed design = %+v", bt)
	}
}

func TestTaskBound_WelcomeAnnouncesTheFeature(t *testing.T) {
	th := startHub(t, Config{})
	w := th.dial().expect("welcome")
	fs, _ := w["features"].([]any)
	if !slices.Contains(fs, any("task_bound_claims")) {
		t.Fatalf("welcome.features = %v", fs)
	}
}

func TestTaskBound_ReleaseWithUnknownOutcomeIsRefused(t *testing.T) {
	th := startHub(t, Config{})
	a := th.join("p/a")
	a.send(f("claim", "task_id", "T1", "paths", []string{"src/a"}))
	a.expect("claim_granted")
	a.send(f("release", "task_id", "T1", "outcome", "shipped"))
	d := a.expect("release_denied")
	if d["error_code"] != "OUTCOME_INVALID" {
		t.Fatalf("release_denied = %v", d)
	}
}

// With federation a task-bound claim is decided by the namespace's owner
// like any other: the forwarded frame keeps board_task, the owner's board
// moves, and a claim on the owner for the same board task is refused.
func TestTaskBound_ForwardedClaimDecidedByOwner(t *testing.T) {
	n := twoHubs(t)
	ctx := ctx10(t)
	alice := n.agent("syn-b", "proj/alice")
	bob := n.agent("syn-a", "proj/bob")
	if _, err := bob.TaskDeclare(ctx, client.TaskDeclaration{TaskID: "design", Title: "Design"}); err != nil {
		t.Fatal(err)
	}
	cl, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src/a"}, BoardTask: "design"})
	if err != nil || cl.BoardTask != "design" || cl.HubID != "syn-a" {
		t.Fatalf("forwarded task-bound claim = %+v, %v", cl, err)
	}
	board, err := bob.Board(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(board.Tasks) != 1 || board.Tasks[0].Status != "in_progress" || board.Tasks[0].Owner != "proj/alice" {
		t.Fatalf("owner's board = %+v", board.Tasks)
	}
	_, err = bob.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"src/b"}, BoardTask: "design"})
	if r := wantRefused(t, err, "BOARD_TASK_HELD"); r.Holder != "proj/alice" {
		t.Fatalf("holder %q", r.Holder)
	}
	if _, err := alice.Release(ctx, "T1", client.ReleaseOptions{Outcome: "done"}); err != nil {
		t.Fatal(err)
	}
	if board, err = bob.Board(ctx); err != nil || board.Tasks[0].Status != "done" {
		t.Fatalf("owner's board after release = %+v, %v", board, err)
	}
}

// Expiry over sockets, on a hub clock the test moves: when the lease of a
// task-bound claim lapses, the board task is open again (broadcast as
// ledger_task_updated) and the next agent takes it.
func TestTaskBound_ExpiryPutsTheTaskBackOverSockets(t *testing.T) {
	var mu sync.Mutex
	clock := nowTS()
	th := startHub(t, Config{Clock: func() float64 { mu.Lock(); defer mu.Unlock(); return clock }})
	a := th.join("p/a")
	b := th.join("p/b")
	a.send(f("ledger_task", "task_id", "design", "title", "Design"))
	a.expect("ledger_task_posted")
	a.send(f("claim", "task_id", "T1", "paths", []string{"src/a"}, "board_task", "design", "ttl_seconds", 30))
	a.expect("claim_granted")
	mu.Lock()
	clock += 31
	mu.Unlock()
	b.send(f("claim", "sender", "p/b", "task_id", "T2", "paths", []string{"src/b"}, "board_task", "design"))
	if g := b.expect("claim_granted"); g["board_task"] != "design" {
		t.Fatalf("claim_granted = %v", g)
	}
	reopened := a.expectWhere("ledger_task_updated", func(m map[string]any) bool { return m["task"].(map[string]any)["status"] == "open" })
	if _, held := reopened["task"].(map[string]any)["owner"]; held {
		t.Fatalf("expired task still held: %v", reopened)
	}
	taken := a.expectWhere("ledger_task_updated", func(m map[string]any) bool { return m["task"].(map[string]any)["owner"] == "p/b" })
	if taken["task"].(map[string]any)["status"] != "in_progress" {
		t.Fatalf("taken = %v", taken)
	}
}
