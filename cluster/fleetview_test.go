package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster"
)

// poll retries f every 50 ms until it returns "" or the deadline passes;
// it returns the last complaint.
func poll(ctx context.Context, f func() string) string {
	for {
		why := f()
		if why == "" || ctx.Err() != nil {
			return why
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// On a fleet a bare name (no PROJECT/) belongs to the default namespace,
// placed like any other: the first hub that serves it owns it, the other
// hub forwards to it, and exclusion holds across hubs (issue 22 item 3,
// INV-ME-2 within the namespace, INV-MH-1: one owner).
func TestFleet_BareNamesShareTheDefaultNamespace_Issue22(t *testing.T) {
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	solo := dial(t, a.uri, "solo")
	g, err := solo.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src/core"}})
	if err != nil {
		t.Fatalf("a bare name is refused on a fleet hub: %v", err)
	}
	if g.HubID != "syn-a" {
		t.Fatalf("granted by %s; want syn-a, the first hub to serve the default namespace", g.HubID)
	}
	duo := dial(t, b.uri, "duo")
	_, err = duo.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"src/core/x.go"}})
	if err == nil {
		t.Fatal("duo (on syn-b) was granted a path inside solo's claim: the default namespace has two authorities")
	}
	var r *client.Refused
	if !errors.As(err, &r) || r.Code == "NAMESPACE_UNGOVERNED" {
		t.Fatalf("duo's refusal: %v; want an overlap refusal forwarded from the owner", err)
	}
	if _, err := duo.Claim(ctx, client.ClaimRequest{TaskID: "T3", Paths: []string{"docs"}}); err != nil {
		t.Fatalf("a disjoint claim by a bare name through syn-b: %v", err)
	}
}

// state, board and who through any hub answer for the whole fleet: every
// namespace's claims and board tasks (read from etcd at one revision, so
// a write acknowledged anywhere is seen at once), every hub's agents with
// the hub each is on, and board dependencies across namespaces (issue 22
// item 1).
func TestFleet_StateBoardWhoAreTheFleets_Issue22(t *testing.T) {
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ann := dial(t, a.uri, "alpha/ann")
	bob := dial(t, b.uri, "beta/bob")
	if _, err := ann.Claim(ctx, client.ClaimRequest{TaskID: "TA", Paths: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Claim(ctx, client.ClaimRequest{TaskID: "TB", Paths: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ann.TaskDeclare(ctx, client.TaskDeclaration{TaskID: "A1", Title: "alpha's"}); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.TaskDeclare(ctx, client.TaskDeclaration{TaskID: "B1", Title: "beta's, after alpha's", DependsOn: []string{"A1"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client.Client{ann, bob} {
		// Claims and board are read-your-writes on every hub: no polling.
		st, err := c.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var tasks []string
		for _, cl := range st.ActiveClaims {
			tasks = append(tasks, cl.TaskID)
		}
		if !slices.Equal(tasks, []string{"TA", "TB"}) {
			t.Fatalf("state through %s: claims %v; want TA and TB from both hubs", c.Name(), tasks)
		}
		bd, err := c.Board(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, tk := range bd.Tasks {
			ids = append(ids, tk.TaskID)
		}
		if !slices.Equal(ids, []string{"A1", "B1"}) || !slices.Equal(bd.Ready, []string{"A1"}) {
			t.Fatalf("board through %s: tasks %v ready %v; want A1, B1 with only A1 ready (B1 waits on another namespace's task)", c.Name(), ids, bd.Ready)
		}
	}
	// Agents lag by at most a roster publication.
	for _, c := range []*client.Client{ann, bob} {
		if why := poll(ctx, func() string {
			w, err := c.Who(ctx)
			if err != nil {
				return err.Error()
			}
			if !slices.Contains(w.OnlineAgents, "alpha/ann") || !slices.Contains(w.OnlineAgents, "beta/bob") ||
				w.AgentHubs["alpha/ann"] != "syn-a" || w.AgentHubs["beta/bob"] != "syn-b" {
				return "who: " + strings.Join(w.OnlineAgents, ",") + " hubs " + jsonOf(w.AgentHubs)
			}
			st, err := c.State(ctx)
			if err != nil {
				return err.Error()
			}
			hubs := map[string]string{}
			for _, ag := range st.Agents {
				hubs[ag.Agent] = ag.HubID
			}
			if hubs["alpha/ann"] != "syn-a" || hubs["beta/bob"] != "syn-b" {
				return "state agents: " + jsonOf(st.Agents)
			}
			return ""
		}); why != "" {
			t.Fatalf("through %s, every hub's agents never showed: %s", c.Name(), why)
		}
	}
	// The dashboard's JSON on either hub: every claim, every hub's agents.
	for _, h := range []*fleetHub{a, b} {
		var st struct {
			Claims []struct {
				TaskID string `json:"task_id"`
			} `json:"claims"`
			Agents []struct {
				Name string `json:"name"`
				Hub  string `json:"hub_id"`
			} `json:"agents"`
			Board struct {
				Tasks []json.RawMessage `json:"tasks"`
			} `json:"board"`
		}
		resp, err := http.Get("http" + strings.TrimPrefix(h.uri, "ws") + "/api/state")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil || len(st.Claims) != 2 || len(st.Board.Tasks) != 2 || len(st.Agents) != 2 {
			t.Fatalf("/api/state on %s: %+v %v; want 2 claims, 2 tasks, 2 agents", h.id, st, err)
		}
	}
	// A hub that leaves takes its agents with it (its roster dies with its lease).
	b.stop()
	if why := poll(ctx, func() string {
		w, err := ann.Who(ctx)
		if err != nil {
			return err.Error()
		}
		if slices.Contains(w.OnlineAgents, "beta/bob") {
			return "beta/bob still shown after syn-b left"
		}
		return ""
	}); why != "" {
		t.Fatal(why)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// activeTasks is the task ids of c's state, in its order.
func activeTasks(t *testing.T, ctx context.Context, c *client.Client) []string {
	t.Helper()
	st, err := c.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var tasks []string
	for _, cl := range st.ActiveClaims {
		tasks = append(tasks, cl.TaskID)
	}
	return tasks
}

// A fleet read is read-your-writes across hubs: a claim granted, or a
// release acknowledged, through one hub (its owner's etcd transaction
// committed before the reply) is in the very next read through another
// hub, though that hub serves reads from its watch-fed mirror (issue 22).
func TestFleet_ReadThroughAnotherHubSeesEveryAcknowledgedWrite_Issue22(t *testing.T) {
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ann := dial(t, a.uri, "alpha/ann")
	viewer := dial(t, b.uri, "beta/viewer")
	var want []string
	for i := range 40 {
		task := fmt.Sprintf("T%02d", i)
		if _, err := ann.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{task}}); err != nil {
			t.Fatal(err)
		}
		want = append(want, task)
		if i%4 == 3 { // and a release, acknowledged, is gone at once
			if _, err := ann.Release(ctx, want[0], client.ReleaseOptions{}); err != nil {
				t.Fatal(err)
			}
			want = want[1:]
		}
		if got := activeTasks(t, ctx, viewer); !slices.Equal(got, want) {
			t.Fatalf("after write %d through syn-a, state through syn-b: %v; want %v", i, got, want)
		}
	}
}

// The mirror survives its watch breaking and the revision it would resume
// from being compacted: it lists every record again and serves reads from
// the list; while it is behind, a read range-reads etcd rather than wait
// or answer stale (issue 22).
func TestFleet_MirrorRelistsAfterABrokenWatchAndACompaction_Issue22(t *testing.T) {
	x, hubs := fleetOf(t, "syn-a", "syn-b")
	a, b := hubs[0], hubs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ann := dial(t, a.uri, "alpha/ann")
	viewer := dial(t, b.uri, "beta/viewer")
	if _, err := ann.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"one"}}); err != nil {
		t.Fatal(err)
	}
	if got := activeTasks(t, ctx, viewer); !slices.Equal(got, []string{"T1"}) {
		t.Fatalf("state through syn-b: %v; want T1", got)
	}
	relists, direct := cluster.MirrorStats(b.owners)
	resume := cluster.BreakMirror(b.owners)
	if _, err := ann.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"two"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ann.Release(ctx, "T1", client.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	// The mirror is stopped: the read is still read-your-writes.
	if got := activeTasks(t, ctx, viewer); !slices.Equal(got, []string{"T2"}) {
		t.Fatalf("state through syn-b, its mirror's watch broken: %v; want T2", got)
	}
	if _, d := cluster.MirrorStats(b.owners); d != direct+1 {
		t.Fatalf("reads that range-read etcd: %d; want %d (the mirror could not reach etcd's revision)", d, direct+1)
	}
	compactAll(t, ctx, x.Endpoint)
	resume()
	if why := poll(ctx, func() string {
		if r, _ := cluster.MirrorStats(b.owners); r <= relists {
			return fmt.Sprintf("relists: %d; want more than %d", r, relists)
		}
		return ""
	}); why != "" {
		t.Fatalf("the mirror never listed again after its revision was compacted: %s", why)
	}
	if _, err := ann.Claim(ctx, client.ClaimRequest{TaskID: "T3", Paths: []string{"three"}}); err != nil {
		t.Fatal(err)
	}
	if got := activeTasks(t, ctx, viewer); !slices.Equal(got, []string{"T2", "T3"}) {
		t.Fatalf("state through syn-b after the relist: %v; want T2, T3", got)
	}
}
