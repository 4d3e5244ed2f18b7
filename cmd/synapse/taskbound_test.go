package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/hub"
)

// synapse claim --task takes a ready board task with the files; a task
// with undone dependencies or held by another is refused (exit 1, with what
// to do); release --outcome done finishes it.
func TestClaim_TaskBound(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	as := func(name string, args ...string) (int, string, string) {
		return runCmd(append(args, "--uri", uri, "--name", name)...)
	}
	for _, args := range [][]string{
		{"task", "declare", "design", "--title", "Design"},
		{"task", "declare", "build", "--title", "Build", "--depends-on", "design"},
	} {
		if code, _, errOut := as("proj/alpha", args...); code != 0 {
			t.Fatal(errOut)
		}
	}
	code, _, errOut := as("proj/bravo", "claim", "T2", "--paths", "src/b", "--task", "build")
	want := `synapse claim: Board task 'build' waits for 'design'.
Its dependencies are not done: design. See 'synapse board'.
`
	if code != exitRefused || errOut != want {
		t.Fatalf("exit %d\n--- got\n%s--- want\n%s", code, errOut, want)
	}
	code, out, errOut := as("proj/alpha", "claim", "T1", "--paths", "src/a", "--task", "design")
	want = `Claimed 'T1' as proj/alpha (epoch 1).
  lease:    until 2026-06-28T13:00:00Z (in 1h0m0s); renew with 'synapse renew T1'
  paths:    src/a
  board:    'design' in progress; finish with 'synapse release T1 --outcome done'
`
	if code != 0 || out != want {
		t.Fatalf("exit %d\n--- got\n%s--- want\n%s--- stderr\n%s", code, out, want, errOut)
	}
	if _, out, _ := as("proj/bravo", "board"); !strings.Contains(out, "design           in_progress  proj/alpha") {
		t.Fatalf("board does not show the holder:\n%s", out)
	}
	code, out, _ = as("proj/bravo", "claim", "T3", "--paths", "src/c", "--task", "design", "--json")
	var ref claimJSON
	if err := json.Unmarshal([]byte(out), &ref); err != nil || code != exitRefused || ref.Code != "BOARD_TASK_HELD" || ref.Holder != "proj/alpha" {
		t.Fatalf("exit %d: %v: %s", code, err, out)
	}
	if code, _, errOut := as("proj/alpha", "release", "T1", "--outcome", "shipped"); code != exitUsage {
		t.Fatalf("bad outcome: exit %d %s", code, errOut)
	}
	if code, _, errOut := as("proj/alpha", "release", "T1", "--outcome", "done"); code != 0 {
		t.Fatal(errOut)
	}
	code, out, errOut = as("proj/bravo", "claim", "T2", "--paths", "src/b", "--task", "build", "--json")
	var got claimJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 || got.BoardTask != "build" {
		t.Fatalf("exit %d: %v: %s %s", code, err, out, errOut)
	}
}

// synapse lock --task finishes the board task with the command's status.
func TestLock_TaskBoundFinishesTheTaskWithTheCommandsStatus(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	as := func(name string, args ...string) (int, string, string) {
		return runCmd(append(args, "--uri", uri, "--name", name)...)
	}
	for _, id := range []string{"ok", "bad"} {
		if code, _, errOut := as("proj/pm", "task", "declare", id, "--title", id); code != 0 {
			t.Fatal(errOut)
		}
	}
	if code, _, e := runCmd("lock", "T1", "--paths", "a", "--task", "ok", "--uri", uri, "--name", "proj/alpha", "--", "true"); code != 0 {
		t.Fatalf("lock true: %d %s", code, e)
	}
	if code, _, e := runCmd("lock", "T2", "--paths", "b", "--task", "bad", "--uri", uri, "--name", "proj/alpha", "--", "false"); code != 1 {
		t.Fatalf("lock false: %d %s", code, e)
	}
	_, out, _ := as("proj/pm", "board")
	for _, want := range []string{"ok               done", "bad              blocked"} {
		if !strings.Contains(out, want) {
			t.Fatalf("board lacks %q:\n%s", want, out)
		}
	}
}
