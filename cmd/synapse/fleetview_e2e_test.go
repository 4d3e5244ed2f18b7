package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
)

// Three hub processes on a real etcd, driven through the real CLI as a new
// user would (issue 22): a message sent through one hub to an agent on
// another is reported delivered and `send` exits 0; one to nobody exits 1
// and dead-letters once in the fleet; a bare name claims; and state and
// board through any hub show what was written through another.
func TestFleet_Processes_SendAcrossHubsBareNamesFleetReads_Issue22(t *testing.T) {
	procs, _ := fleetOfThree(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cli := func(args ...string) (int, string) { return runSynapse(t, args...) }
	a, b, c := procs["syn-a"].uri(), procs["syn-b"].uri(), procs["syn-c"].uri()
	bob := dialAgent(t, b, "beta/bob")
	if _, err := claimMoving(ctx, bob, client.ClaimRequest{TaskID: "TB", Paths: []string{"b"}}); err != nil {
		t.Fatal(err) // syn-b now owns beta: a letter to beta/bob from syn-a is forwarded
	}
	probe := dialAgent(t, a, "alpha/probe")
	for { // until syn-a knows bob from syn-b's roster
		w, err := probe.Who(ctx)
		if err == nil && w.AgentHubs["beta/bob"] == "syn-b" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("syn-a never saw beta/bob: %+v %v", w, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, out := cli("send", "beta/bob", "hello", "across", "--name", "alpha/ann", "--uri", a, "--json")
	if code != 0 || !strings.Contains(out, `"delivered":true`) {
		t.Fatalf("send to an agent on another hub: exit %d\n%s", code, out)
	}
	code, out = cli("send", "beta/nobody", "hello?", "--name", "alpha/ann", "--uri", a)
	if code != 1 || !strings.Contains(out, "nobody online received it") {
		t.Fatalf("send to nobody: exit %d (want 1)\n%s", code, out)
	}
	dead := 0
	for i, u := range []string{a, b, c} {
		st, err := dialAgent(t, u, "ops/viewer"+string(rune('0'+i))).State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range st.DeadLetters {
			if d.Target == "beta/nobody" {
				dead += int(d.Count)
			}
		}
	}
	if dead != 1 {
		t.Fatalf("the undeliverable letter dead-lettered %d times in the fleet; want once", dead)
	}
	if code, out := cli("claim", "T9", "--paths", "solo-dir", "--name", "solo", "--uri", c); code != 0 {
		t.Fatalf("a bare name on a fleet hub: exit %d\n%s", code, out)
	}
	if code, out := cli("task", "declare", "A1", "--title", "alpha's", "--name", "alpha/ann", "--uri", a); code != 0 {
		t.Fatalf("task declare: exit %d\n%s", code, out)
	}
	code, out = cli("state", "--uri", b, "--json")
	var st struct {
		ActiveClaims []struct {
			TaskID string `json:"task_id"`
		} `json:"active_claims"`
	}
	_ = json.Unmarshal([]byte(out), &st)
	var tasks []string
	for _, cl := range st.ActiveClaims {
		tasks = append(tasks, cl.TaskID)
	}
	if code != 0 || strings.Join(tasks, ",") != "T9,TB" {
		t.Fatalf("state through syn-b: exit %d claims %v\n%s", code, tasks, out)
	}
	if code, out := cli("board", "--uri", b); code != 0 || !strings.Contains(out, "A1") {
		t.Fatalf("board through syn-b: exit %d\n%s", code, out)
	}
}
