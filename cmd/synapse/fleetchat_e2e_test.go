package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
)

// Three hub processes on a real etcd, through the real CLI (issue 22 item
// 2): `send all` through syn-a reaches agents on syn-b and syn-c; `send`
// to a role held on syn-c is delivered and exits 0; to a role nobody
// holds it exits 1; and after syn-a is SIGKILLed, history on syn-b still
// shows what was sent through syn-a.
func TestFleet_Processes_BroadcastRoleAndHistoryAcrossHubs_Issue22(t *testing.T) {
	procs, _ := fleetOfThree(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cli := func(args ...string) (int, string) { return runSynapse(t, args...) }
	a, b, c := procs["syn-a"].uri(), procs["syn-b"].uri(), procs["syn-c"].uri()
	bob := dialAgent(t, b, "beta/bob")
	carol, err := client.Dial(ctx, client.Options{URI: c, Name: "gamma/carol", Roles: []string{"ops/oncall"}, NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer carol.Close()
	fromAnn := func(f client.Frame) bool { return f.Type == "chat" && f.Sender == "alpha/ann" }
	atBob, atCarol := bob.Subscribe(ctx, fromAnn), carol.Subscribe(ctx, fromAnn)
	probe := dialAgent(t, a, "alpha/probe")
	for { // until syn-a knows bob and carol from their hubs' rosters
		w, err := probe.Who(ctx)
		if err == nil && w.AgentHubs["beta/bob"] == "syn-b" && w.AgentHubs["gamma/carol"] == "syn-c" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("syn-a never saw bob and carol: %+v %v", w, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, out := cli("send", "all", "hello", "fleet", "--name", "alpha/ann", "--uri", a); code != 0 {
		t.Fatalf("send all: exit %d\n%s", code, out)
	}
	code, out := cli("send", "ops/oncall", "page", "--name", "alpha/ann", "--uri", a, "--json")
	if code != 0 || !strings.Contains(out, `"delivered":true`) {
		t.Fatalf("send to a role held on syn-c: exit %d\n%s", code, out)
	}
	code, out = cli("send", "ops/nobody-holds-this", "page?", "--name", "alpha/ann", "--uri", a)
	if code != 1 || !strings.Contains(out, "nobody online received it") {
		t.Fatalf("send to a role nobody holds: exit %d (want 1)\n%s", code, out)
	}
	next := func(ch <-chan client.Frame) string {
		select {
		case f := <-ch:
			return f.Payload
		case <-time.After(10 * time.Second):
			return "(nothing)"
		}
	}
	if got := next(atBob); got != "hello fleet" {
		t.Fatalf("beta/bob on syn-b got %q; want the broadcast", got)
	}
	if got := []string{next(atCarol), next(atCarol)}; !slices.Equal(got, []string{"hello fleet", "page"}) {
		t.Fatalf("gamma/carol on syn-c got %v; want the broadcast, then the page", got)
	}
	procs["syn-a"].kill()
	f, err := bob.Admin(ctx, "history_request", map[string]any{"limit": 20}, "history_snapshot")
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		History []struct {
			Sender, Payload string
		} `json:"history"`
	}
	_ = json.Unmarshal(f.Raw, &snap)
	var got []string
	for _, e := range snap.History {
		if e.Sender == "alpha/ann" {
			got = append(got, e.Payload)
		}
	}
	if !slices.Contains(got, "hello fleet") {
		t.Fatalf("history on syn-b after syn-a was killed: %v; want the broadcast sent through syn-a", got)
	}
}
