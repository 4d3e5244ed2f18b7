package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster"
	"github.com/synapse-hub/synapse/cluster/clustertest"
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

// apiGet reads a dashboard route of h into v.
func apiGet(t *testing.T, h *fleetHub, route string, v any) {
	t.Helper()
	resp, err := http.Get("http" + strings.TrimPrefix(h.uri, "ws") + route)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s on %s: %s", route, h.id, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s on %s: %v", route, h.id, err)
	}
}

// The dashboard's /api/state and /api/board are read-your-writes across
// the fleet like state, though each claim's and task's encoding is kept
// between reads: a claim renewed or checkpointed (the same task, a new
// record), released or granted, and a board task updated, through one
// hub, shows as it now is in the very next read through another (issue
// 22: a cache that answered with an earlier encoding fails here).
func TestFleet_APIStateAndBoardThroughAnotherHubSeeEveryAcknowledgedWrite_Issue22(t *testing.T) {
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ann := dial(t, a.uri, "alpha/ann")
	type apiClaim struct {
		TaskID     string  `json:"task_id"`
		Epoch      int64   `json:"epoch"`
		Version    int64   `json:"version"`
		Expires    float64 `json:"lease_expires_at"`
		Checkpoint bool    `json:"has_checkpoint"`
	}
	type apiTask struct {
		TaskID  string `json:"task_id"`
		Status  string `json:"status"`
		Version int64  `json:"version"`
	}
	type apiBoard struct {
		Tasks []apiTask `json:"tasks"`
		Ready []string  `json:"ready"`
	}
	want := map[string]apiClaim{}
	check := func(step string) {
		t.Helper()
		var st struct {
			Claims []apiClaim `json:"claims"`
			Health struct {
				ActiveClaims int `json:"active_claims"`
			} `json:"health"`
		}
		apiGet(t, b, "/api/state", &st)
		got := map[string]apiClaim{}
		for _, c := range st.Claims {
			got[c.TaskID] = c
		}
		if len(got) != len(want) || st.Health.ActiveClaims != len(want) {
			t.Fatalf("after %s through syn-a, /api/state on syn-b: %+v (active_claims %d); want %+v", step, st.Claims, st.Health.ActiveClaims, want)
		}
		for id, w := range want {
			if g := got[id]; g.Epoch != w.Epoch || g.Version != w.Version || g.Checkpoint != w.Checkpoint || g.Expires != w.Expires {
				t.Fatalf("after %s through syn-a, /api/state on syn-b shows %s as %+v; want %+v", step, id, g, w)
			}
		}
	}
	grant := func(cl *client.Claim) {
		want[cl.TaskID] = apiClaim{TaskID: cl.TaskID, Epoch: cl.Epoch, Version: cl.Version, Expires: cl.LeaseExpiresAt, Checkpoint: cl.Checkpoint != ""}
	}
	held := map[string]*client.Claim{}
	for i := range 6 {
		task := fmt.Sprintf("T%d", i)
		cl, err := ann.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{task}})
		if err != nil {
			t.Fatal(err)
		}
		held[task] = cl
		grant(cl)
		check("claim " + task)
	}
	for _, task := range []string{"T0", "T3"} {
		cl, err := ann.Renew(ctx, held[task])
		if err != nil {
			t.Fatal(err)
		}
		held[task] = cl
		grant(cl)
		check("renew " + task)
		v, err := ann.Checkpoint(ctx, task, "resume-"+task, cl.Epoch)
		if err != nil {
			t.Fatal(err)
		}
		w := want[task]
		w.Version, w.Checkpoint = v, true
		want[task] = w
		check("checkpoint " + task)
	}
	for _, task := range []string{"T1", "T3"} {
		if _, err := ann.Release(ctx, task, client.ReleaseOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(want, task)
		check("release " + task)
	}
	if _, err := ann.TaskDeclare(ctx, client.TaskDeclaration{TaskID: "A1", Title: "first"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ann.TaskDeclare(ctx, client.TaskDeclaration{TaskID: "A2", Title: "after A1", DependsOn: []string{"A1"}}); err != nil {
		t.Fatal(err)
	}
	var bd apiBoard
	apiGet(t, b, "/api/board", &bd)
	if len(bd.Tasks) != 2 || bd.Tasks[0].Status != "open" || !slices.Equal(bd.Ready, []string{"A1"}) {
		t.Fatalf("/api/board on syn-b after two declarations: %+v; want A1, A2 open, A1 ready", bd)
	}
	for _, status := range []string{"in_progress", "done"} {
		s := status
		up, err := ann.TaskUpdate(ctx, client.BoardTaskUpdate{TaskID: "A1", Status: &s})
		if err != nil {
			t.Fatal(err)
		}
		for _, route := range []string{"/api/board", "/api/state"} {
			var got apiBoard
			if route == "/api/board" {
				apiGet(t, b, route, &got)
			} else {
				var st struct {
					Board apiBoard `json:"board"`
				}
				apiGet(t, b, route, &st)
				got = st.Board
			}
			if len(got.Tasks) != 2 || got.Tasks[0].Status != status || got.Tasks[0].Version != up.Version {
				t.Fatalf("%s on syn-b after A1 went %s (version %d): %+v", route, status, up.Version, got)
			}
			if wantReady := map[string][]string{"in_progress": {}, "done": {"A2"}}[status]; !slices.Equal(got.Ready, wantReady) {
				t.Fatalf("%s on syn-b after A1 went %s: ready %v; want %v", route, status, got.Ready, wantReady)
			}
		}
	}
}

// awaitMirror waits until h's mirror watches, or (watching false) has
// stopped and does not watch; else it fails with why.
func awaitMirror(t *testing.T, ctx context.Context, h *fleetHub, watching bool, why string) {
	t.Helper()
	if last := poll(ctx, func() string {
		if stops, w := cluster.MirrorRun(h.owners); w != watching || !watching && stops == 0 {
			return fmt.Sprintf("stops %d, watching %v", stops, w)
		}
		return ""
	}); last != "" {
		t.Fatalf("%s: %s", why, last)
	}
}

// A mirror nobody reads from stops watching after mirrorIdle and drops
// its records; the next read starts it again, transparently: it waits for
// the new run's list, so it holds every write acknowledged while the
// mirror was stopped, and is served from the mirror, not a range read.
// Reads spaced around the idle time then race the stop, and each is still
// read-your-writes (issue 22).
func TestFleet_IdleMirrorStopsAndRestartsReadYourWrites_Issue22(t *testing.T) {
	cluster.SetMirrorIdle(t, 150*time.Millisecond) // before the hubs: restored after they stopped
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ann := dial(t, a.uri, "alpha/ann")
	viewer := dial(t, b.uri, "beta/viewer")
	if _, watching := cluster.MirrorRun(b.owners); watching {
		t.Fatal("syn-b's mirror watches before any fleet read")
	}
	if _, err := ann.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"one"}}); err != nil {
		t.Fatal(err)
	}
	if got := activeTasks(t, ctx, viewer); !slices.Equal(got, []string{"T1"}) {
		t.Fatalf("state through syn-b: %v; want T1", got)
	}
	awaitMirror(t, ctx, b, false, "syn-b's mirror never stopped with no reader")
	relists, direct := cluster.MirrorStats(b.owners)
	stops, _ := cluster.MirrorRun(b.owners)
	// Written while syn-b's mirror is stopped.
	if _, err := ann.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"two"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ann.Release(ctx, "T1", client.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	var st struct {
		Claims []struct {
			TaskID string `json:"task_id"`
		} `json:"claims"`
	}
	apiGet(t, b, "/api/state", &st)
	if len(st.Claims) != 1 || st.Claims[0].TaskID != "T2" {
		t.Fatalf("/api/state on syn-b, its mirror restarted: %+v; want T2 alone", st.Claims)
	}
	r, d := cluster.MirrorStats(b.owners)
	if s, watching := cluster.MirrorRun(b.owners); r != relists+1 || d != direct || !watching && s == stops {
		t.Fatalf("after a read of a stopped mirror: relists %d (want %d), range reads %d (want %d), watching %v; want it listed again and served the read", r, relists+1, d, direct, watching)
	}
	want := []string{"T2"}
	for i := range 16 {
		time.Sleep(time.Duration(i%4) * 60 * time.Millisecond) // 0 to 180 ms: before, around and after the stop
		task := fmt.Sprintf("U%02d", i)
		if _, err := ann.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{task}}); err != nil {
			t.Fatal(err)
		}
		want = append(want, task)
		if got := activeTasks(t, ctx, viewer); !slices.Equal(got, want) {
			t.Fatalf("read %d through syn-b (mirror stops so far: %d): %v; want %v", i, func() int { s, _ := cluster.MirrorRun(b.owners); return s }(), got, want)
		}
	}
	if s, _ := cluster.MirrorRun(b.owners); s <= stops {
		t.Fatalf("the mirror never stopped again between reads up to 180 ms apart (idle 150 ms): stops %d", s)
	}
}

// An open /api/events stream reads the mirror's watch: the mirror does not
// stop for want of a read while one is open, stops a while after the last
// closes, and the next stream starts it again and gets the fleet's
// changes, without being ended as if changes had been lost (issue 22).
func TestFleet_IdleMirrorKeepsWatchingWhileAStreamIsOpen_Issue22(t *testing.T) {
	cluster.SetMirrorIdle(t, 150*time.Millisecond) // before the hubs: restored after they stopped
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ann := dial(t, a.uri, "alpha/ann")
	open := func() (<-chan sseEvent, context.CancelFunc) {
		sctx, stop := context.WithCancel(ctx)
		t.Cleanup(stop)
		req, _ := http.NewRequestWithContext(sctx, http.MethodGet, "http"+strings.TrimPrefix(b.uri, "ws")+"/api/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/api/events on syn-b: %v %v", resp, err)
		}
		ch := make(chan sseEvent, 256)
		go func() {
			defer close(ch)
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			var ev sseEvent
			for sc.Scan() {
				switch line := sc.Text(); {
				case line == "" && ev.typ != "":
					ch <- ev
					ev = sseEvent{}
				case strings.HasPrefix(line, "event: "):
					ev.typ = line[len("event: "):]
				case strings.HasPrefix(line, "data: "):
					ev.data = line[len("data: "):]
				}
			}
		}()
		return ch, stop
	}
	granted := func(evs <-chan sseEvent, task string) {
		t.Helper()
		for {
			got, _ := nextEvent(evs)
			if got == "claim granted "+task+" alpha/ann from=" {
				return
			}
			if got == "" || got == "closed" {
				t.Fatalf("the stream on syn-b never showed %s granted through syn-a: %q", task, got)
			}
		}
	}
	evs, closeStream := open()
	awaitMirror(t, ctx, b, true, "an open stream did not start syn-b's mirror")
	time.Sleep(600 * time.Millisecond) // four idle times, no read
	if stops, watching := cluster.MirrorRun(b.owners); stops != 0 || !watching {
		t.Fatalf("syn-b's mirror with a stream open and no read: stops %d, watching %v; want it watching", stops, watching)
	}
	if _, err := ann.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"one"}}); err != nil {
		t.Fatal(err)
	}
	granted(evs, "T1")
	closeStream()
	awaitMirror(t, ctx, b, false, "syn-b's mirror never stopped after its stream closed")
	evs, _ = open()
	awaitMirror(t, ctx, b, true, "a new stream did not start syn-b's stopped mirror again")
	// A fleet read on syn-b waits until its restarted mirror has caught up
	// with etcd: T2 is then streamed as an event, not found in the
	// mirror's first list (which a page reads through /api/state).
	if _, err := dial(t, b.uri, "beta/reader").State(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ann.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"two"}}); err != nil {
		t.Fatal(err)
	}
	granted(evs, "T2")
}

// etcdWatchers reads the number of watchers an embedded etcd serves (its
// mvcc gauge; the process's embedded members share it).
func etcdWatchers(t *testing.T, endpoint string) int {
	t.Helper()
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "etcd_debugging_mvcc_watcher_total "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	t.Fatalf("no etcd_debugging_mvcc_watcher_total in %s/metrics", endpoint)
	return 0
}

// The mirror that serves the fleet's reads and the dashboards' live feed
// takes the fleet's events from the hub's one watch, the one that follows
// the owners (rule 7): opening a dashboard adds no watch on etcd, so etcd
// sends each event to each hub once (issue 22: a dashboard open costs the
// grant path as little as it can). The mirror's reads stay read-your-writes
// across the join of its list and that watch.
func TestFleet_TheMirrorTakesTheHubsOneWatch_Issue22(t *testing.T) {
	x := clustertest.Start(t, true)
	a, b := startFleetHub(t, x.Endpoint, "syn-a", 2*time.Second), startFleetHub(t, x.Endpoint, "syn-b", 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ann := dial(t, a.uri, "alpha/ann")
	viewer := dial(t, b.uri, "beta/viewer")
	if _, watching := cluster.MirrorRun(b.owners); watching {
		t.Fatal("syn-b's mirror runs before any fleet read")
	}
	before := etcdWatchers(t, x.Endpoint)
	// Claims go on while syn-b's mirror lists and joins the watch.
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 40; i++ {
			task := fmt.Sprintf("T%02d", i)
			if _, err := ann.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{task}}); err != nil {
				t.Error(err)
				return
			}
			n.Add(1)
		}
	}()
	for {
		acked := n.Load()
		got := activeTasks(t, ctx, viewer)
		if int64(len(got)) < acked {
			t.Fatalf("a read through syn-b saw %d claims after %d were acknowledged", len(got), acked)
		}
		select {
		case <-done:
		default:
			continue
		}
		break
	}
	if got := activeTasks(t, ctx, viewer); len(got) != 40 {
		t.Fatalf("state through syn-b: %d claims; want 40", len(got))
	}
	if _, watching := cluster.MirrorRun(b.owners); !watching {
		t.Fatal("syn-b's mirror does not run after fleet reads")
	}
	if after := etcdWatchers(t, x.Endpoint); after != before {
		t.Fatalf("etcd serves %d watchers with syn-b's mirror running, %d before: the mirror opened its own", after, before)
	}
}
