package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// sseEvent is one event of a dashboard's /api/events.
type sseEvent struct {
	id   uint64
	typ  string
	data string
}

// openEvents opens h's /api/events; its events come on the channel, which
// is closed when the stream ends.
func openEvents(t *testing.T, h *fleetHub) <-chan sseEvent {
	t.Helper()
	resp, err := http.Get("http" + strings.TrimPrefix(h.uri, "ws") + "/api/events")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/events on %s: %v %v", h.id, resp, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	ch := make(chan sseEvent, 256)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && ev.typ != "":
				ch <- ev
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id, _ = strconv.ParseUint(line[len("id: "):], 10, 64)
			case strings.HasPrefix(line, "event: "):
				ev.typ = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			}
		}
	}()
	return ch
}

// nextEvent is the stream's next claim, release or task event, in a line
// (presence and activity, this hub's own, are skipped); "closed" when the
// stream ended, "" after 10 s without one.
func nextEvent(evs <-chan sseEvent) (string, sseEvent) {
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				return "closed", ev
			}
			var d struct {
				Kind   string `json:"kind"`
				Reason string `json:"reason"`
				From   string `json:"from"`
				By     string `json:"by"`
				TaskID string `json:"task_id"`
				Owner  string `json:"owner"`
				Claim  struct {
					TaskID string `json:"task_id"`
					Owner  string `json:"owner"`
				} `json:"claim"`
				Task struct {
					TaskID string `json:"task_id"`
					Status string `json:"status"`
				} `json:"task"`
			}
			_ = json.Unmarshal([]byte(ev.data), &d)
			switch ev.typ {
			case "claim":
				return fmt.Sprintf("claim %s %s %s from=%s", d.Kind, d.Claim.TaskID, d.Claim.Owner, d.From), ev
			case "release":
				return fmt.Sprintf("release %s %s %s", d.Reason, d.TaskID, d.Owner), ev
			case "task":
				return fmt.Sprintf("task %s %s %s by=%s", d.Kind, d.Task.TaskID, d.Task.Status, d.By), ev
			}
		case <-timeout:
			return "", sseEvent{}
		}
	}
}

// compactAll compacts etcd's history at endpoint up to its current
// revision: a watch resuming from before it gets ErrCompacted.
func compactAll(t *testing.T, ctx context.Context, endpoint string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	now, err := cli.Get(ctx, "compact-me")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, now.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
}

// /api/events on any hub of a fleet streams the fleet's claim and board
// changes, every namespace's, whichever hub decided them, in one order
// (etcd's: the same sequence on both hubs), with the event shapes of one
// hub's stream: a claim granted through hub 2 appears on hub 1's stream,
// and hub 1's own writes appear once. /api/state's event_id then names the
// last of them. A stream whose hub missed changes (its watch's revision
// was compacted) is ended, so its browser reloads (issue 22).
func TestFleet_EventsStreamTheFleetsClaimsAndBoard_Issue22(t *testing.T) {
	x, hubs := fleetOf(t, "syn-a", "syn-b")
	a, b := hubs[0], hubs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	streams := map[string]<-chan sseEvent{"syn-a": openEvents(t, a), "syn-b": openEvents(t, b)}
	for id, evs := range streams {
		if ev := <-evs; ev.typ != "hello" {
			t.Fatalf("%s's stream began with %+v; want hello", id, ev)
		}
	}
	ann := dial(t, a.uri, "alpha/ann") // alpha: syn-a
	bob := dial(t, b.uri, "beta/bob")  // beta: syn-b
	cid := dial(t, b.uri, "beta/cid")
	// A fleet read on each hub waits until its mirror has caught up with
	// etcd: from then on every change is streamed as an event, not found
	// in the mirror's first list (which a page reads through /api/state).
	for _, c := range []*client.Client{ann, bob} {
		if _, err := c.State(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	step := func(line string, f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		want = append(want, line)
	}
	var tb *client.Claim
	step("claim granted TB beta/bob from=", func() (err error) {
		tb, err = bob.Claim(ctx, client.ClaimRequest{TaskID: "TB", Paths: []string{"b"}})
		return err
	})
	step("claim granted TA alpha/ann from=", func() error {
		_, err := ann.Claim(ctx, client.ClaimRequest{TaskID: "TA", Paths: []string{"a"}})
		return err
	})
	step("claim renewed TB beta/bob from=", func() (err error) {
		tb, err = bob.Claim(ctx, client.ClaimRequest{TaskID: "TB", Paths: []string{"b"}})
		return err
	})
	step("claim checkpoint TB beta/bob from=", func() error {
		_, err := bob.Checkpoint(ctx, "TB", "step-1", tb.Epoch)
		return err
	})
	step("claim handoff TB beta/cid from=beta/bob", func() error {
		_, err := bob.Handoff(ctx, client.HandoffRequest{TaskID: "TB", To: "beta/cid"})
		return err
	})
	step("task posted B1 open by=beta/bob", func() error {
		_, err := bob.TaskDeclare(ctx, client.TaskDeclaration{TaskID: "B1", Title: "ship"})
		return err
	})
	done := "done"
	step("task updated B1 done by=", func() error {
		_, err := cid.TaskUpdate(ctx, client.BoardTaskUpdate{TaskID: "B1", Status: &done})
		return err
	})
	step("release release TB beta/cid", func() error {
		_, err := cid.Release(ctx, "TB", client.ReleaseOptions{})
		return err
	})
	step("release release TA alpha/ann", func() error {
		_, err := ann.Release(ctx, "TA", client.ReleaseOptions{})
		return err
	})
	var last sseEvent
	for id, evs := range streams {
		for i, w := range want {
			got, ev := nextEvent(evs)
			if got != w {
				t.Fatalf("%s's stream, event %d: %q; want %q (all: %q)", id, i, got, w, want)
			}
			if id == "syn-a" {
				last = ev
			}
		}
	}
	var st struct {
		EventID uint64 `json:"event_id"`
		Claims  []any  `json:"claims"`
	}
	resp, err := http.Get("http" + strings.TrimPrefix(a.uri, "ws") + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.EventID != last.id || len(st.Claims) != 0 {
		t.Fatalf("/api/state on syn-a: event_id %d, %d claims (%v); want event_id %d, the last event streamed, and no claim", st.EventID, len(st.Claims), err, last.id)
	}

	// syn-a's watch breaks, the revision it would resume from is
	// compacted: it lists every record again, and its stream ends.
	resume := cluster.BreakMirror(a.owners)
	for _, task := range []string{"TC", "TD"} { // two: the watch would resume at the first, below the compaction
		if _, err := bob.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{task}}); err != nil {
			t.Fatal(err)
		}
	}
	compactAll(t, ctx, x.Endpoint)
	resume()
	if got, _ := nextEvent(streams["syn-a"]); got != "closed" {
		t.Fatalf("syn-a's stream after its watch missed two grants: %q; want it ended, so its browser reloads", got)
	}
	for _, task := range []string{"TC", "TD"} {
		if got, _ := nextEvent(streams["syn-b"]); got != "claim granted "+task+" beta/bob from=" {
			t.Fatalf("syn-b's stream: %q; want %s's grant", got, task)
		}
	}
	again := openEvents(t, a)
	<-again // hello
	if _, err := bob.Release(ctx, "TC", client.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := nextEvent(again); got != "release release TC beta/bob" {
		t.Fatalf("syn-a's new stream: %q; want TC's release", got)
	}
}

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
