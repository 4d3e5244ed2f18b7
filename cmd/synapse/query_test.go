package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/hub"
)

func ioPipe() (*os.File, *os.File) {
	r, w, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	return r, w
}

func readLine(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

func drain(r io.Reader) { _, _ = io.Copy(io.Discard, r) }

func TestWho_Golden(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	agent(t, uri, "proj/alpha")
	agent(t, uri, "proj/bravo")
	code, out, e := runCmd("who", "--uri", uri, "--name", "proj/me")
	want := `2 online at syn-golden00:
  proj/alpha
  proj/bravo
`
	if code != 0 || out != want {
		t.Fatalf("exit %d\n--- got\n%s--- want\n%s%s", code, out, want, e)
	}
	code, out, _ = runCmd("who", "--json", "--uri", uri)
	var got struct {
		HubID        string   `json:"hub_id"`
		OnlineAgents []string `json:"online_agents"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 || got.HubID != "syn-golden00" || strings.Join(got.OnlineAgents, ",") != "proj/alpha,proj/bravo" {
		t.Fatalf("who --json: %d %v %s", code, err, out)
	}
}

func TestStateStatusBoard_HumanAndJSON(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	runCmd("claim", "T1", "--paths", "src", "--uri", uri, "--name", "proj/alpha")
	code, out, _ := runCmd("state", "--uri", uri)
	want := `TASK             OWNER                 EPOCH STATUS         EXPIRES        PATHS
T1               proj/alpha                1 claimed        in 1h0m0s      src
`
	if code != 0 || out != want {
		t.Fatalf("state\n--- got\n%s--- want\n%s", out, want)
	}
	code, out, _ = runCmd("state", "--json", "--owner", "nobody", "--uri", uri)
	if code != 0 || !strings.HasPrefix(out, `{"active_claims":[]`) {
		t.Fatalf("state --json: %s", out)
	}
	code, out, _ = runCmd("status", "--uri", uri, "--name", "proj/alpha")
	if code != 0 || !strings.Contains(out, "Hub syn-golden00 at "+uri+": ok") || !strings.Contains(out, "You (proj/alpha) hold 1:") {
		t.Fatalf("status: %s", out)
	}
	code, out, _ = runCmd("status", "--json", "--uri", uri, "--name", "proj/alpha")
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || st["hub_id"] != "syn-golden00" || st["active_claims"] != 1.0 || len(st["my_claims"].([]any)) != 1 {
		t.Fatalf("status --json: %v %s", err, out)
	}

	as := func(args ...string) (int, string, string) {
		return runCmd(append(args, "--uri", uri, "--name", "proj/alpha")...)
	}
	if code, out, e := as("task", "declare", "B1", "--title", "write the parser"); code != 0 || out != "Declared 'B1' (open, version 1): write the parser\n" {
		t.Fatalf("declare: %d %q %s", code, out, e)
	}
	if code, _, e := as("task", "declare", "B2", "--title", "tests", "--depends-on", "B1"); code != 0 {
		t.Fatal(e)
	}
	if code, _, e := as("task", "declare", "B1", "--title", "loop", "--depends-on", "B2"); code != exitRefused || !strings.Contains(e, "cycle") {
		t.Fatalf("cycle: %d %s", code, e)
	}
	if code, out, e := as("task", "progress", "B1", "half", "way"); code != 0 || out != "Posted a note on 'B1'.\n" {
		t.Fatalf("progress: %d %q %s", code, out, e)
	}
	if code, out, e := as("task", "update", "B1", "--status", "done", "--json"); code != 0 || !strings.Contains(out, `"status":"done"`) {
		t.Fatalf("update: %d %s %s", code, out, e)
	}
	if code, _, e := as("task", "update", "nope", "--status", "done"); code != exitRefused || !strings.Contains(e, "not on the board") {
		t.Fatalf("update unknown: %d %s", code, e)
	}
	code, out, _ = runCmd("board", "--uri", uri)
	want = `TASK             STATUS       OWNER                TITLE
B1               done                              write the parser
B2               open                              tests  (after B1)
Ready: B2
Progress:
  2026-06-28T12:00:00Z B1 [note] proj/alpha: half way
`
	if code != 0 || out != want {
		t.Fatalf("board\n--- got\n%s--- want\n%s", out, want)
	}
	code, out, _ = runCmd("board", "--json", "--uri", uri)
	var b struct {
		Tasks []struct {
			TaskID string `json:"task_id"`
		} `json:"tasks"`
		Ready []string `json:"ready"`
	}
	if err := json.Unmarshal([]byte(out), &b); err != nil || code != 0 || len(b.Tasks) != 2 || b.Ready[0] != "B2" {
		t.Fatalf("board --json: %v %s", err, out)
	}
}
