package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
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
