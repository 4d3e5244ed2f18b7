package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/internal/hubproc"
	"github.com/synapse-hub/synapse/internal/testbin"

	_ "modernc.org/sqlite" // the journal's driver, to rewrite a peer's log
)

// synapseBinary builds the binary once for the tests that run processes.
func synapseBinary(t *testing.T) string { return testbin.Synapse(t) }

// fedProc is one `synapse hub` process of a federation.
type fedProc struct {
	id, db string
	port   int
	args   []string
	cmd    *exec.Cmd
}

func (p *fedProc) uri() string { return "ws://127.0.0.1:" + strconv.Itoa(p.port) }

// start runs the hub on its journal and waits for its banner.
func (p *fedProc) start(t *testing.T, bin string) {
	t.Helper()
	p.run(t, bin, append([]string{"hub", "--hub-id", p.id, "--db", p.db, "--port", strconv.Itoa(p.port), "--no-mcp"}, p.args...))
}

// startNoDB runs the hub without a journal of its own (a fleet on etcd).
func (p *fedProc) startNoDB(t *testing.T, bin string) {
	t.Helper()
	p.run(t, bin, append([]string{"hub", "--hub-id", p.id, "--port", strconv.Itoa(p.port), "--no-mcp"}, p.args...))
}

func (p *fedProc) run(t *testing.T, bin string, args []string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SYNAPSE_TOKEN=")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	up := hubproc.Listening(out)
	select {
	case <-up:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("%s did not start: %s", p.id, stderr.String())
	}
	p.cmd = cmd
	t.Cleanup(func() { p.stop() })
}

func (p *fedProc) kill() {
	if p.cmd != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
		p.cmd = nil
	}
}

func (p *fedProc) stop() {
	if p.cmd != nil {
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.cmd.Wait()
		p.cmd = nil
	}
}

// threeHubs configures syn-a (owner of namespace proj), syn-b and syn-c,
// each forwarding to the others and accepting the others' token.
func threeHubs(t *testing.T) map[string]*fedProc {
	dir := t.TempDir()
	procs := map[string]*fedProc{}
	ids := []string{"syn-a", "syn-b", "syn-c"}
	for _, id := range ids {
		procs[id] = &fedProc{id: id, db: filepath.Join(dir, id+".db"), port: freePort(t)}
	}
	for _, id := range ids {
		p := procs[id]
		p.args = []string{"--namespace-owner", "proj=syn-a", "--claim-peer-token", "fed-secret", "--forward-timeout", "2s",
			"--max-claims-per-agent", "100000"} // forwarded claims share one quota per peer (INV-ME-5)
		for _, peer := range ids {
			if peer != id {
				p.args = append(p.args, "--claim-peer", peer+"="+procs[peer].uri(), "--peer-token", peer+"=fed-secret")
			}
		}
	}
	return procs
}

func dialAgent(t *testing.T, uri, name string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URI: uri, Name: name, NoReconnect: true})
	if err != nil {
		t.Fatalf("dial %s as %s: %v", uri, name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Three real hub processes with journals. Twelve agents spread over all
// three race for six overlapping scopes of one namespace: exactly one grant
// per scope, every one decided by the owner (INV-MH-1, INV-ME-2 across
// hubs). Then the owner is SIGKILLed under load: the non-owners refuse
// every forward and grant nothing themselves (INV-MH-3, INV-CR-4 fail
// closed); after the owner restarts on its journal every acknowledged
// claim is there and epochs keep rising (INV-RR-1, INV-EF-1).
func TestFederation_ThreeHubProcesses_OwnerDecides_SurvivesOwnerKill_INV_MH_1(t *testing.T) {
	bin := synapseBinary(t)
	procs := threeHubs(t)
	for _, id := range []string{"syn-a", "syn-b", "syn-c"} {
		procs[id].start(t, bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// Phase 1: the race for six scopes.
	type grant struct {
		agent, task, hub string
		epoch            int64
	}
	var mu sync.Mutex
	var grants []grant
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		hubID := []string{"syn-a", "syn-b", "syn-c"}[i%3]
		name := fmt.Sprintf("proj/agent%02d", i)
		a := dialAgent(t, procs[hubID].uri(), name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 6; k++ {
				scope := (k + i) % 6
				cl, err := a.Claim(ctx, client.ClaimRequest{TaskID: fmt.Sprintf("T-%s-%d", name, scope), Paths: []string{fmt.Sprintf("src/m%d", scope)}})
				if err != nil {
					var r *client.Refused
					if !errors.As(err, &r) || (r.Code != "SCOPE_CONFLICT" && r.Code != "LEASE_LIVE") {
						t.Errorf("%s via %s: %v; want a grant or SCOPE_CONFLICT", name, hubID, err)
					}
					continue
				}
				mu.Lock()
				grants = append(grants, grant{name, cl.TaskID, cl.HubID, cl.Epoch})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(grants) != 6 {
		t.Fatalf("%d grants for 6 overlapping scopes; want exactly one each: %+v", len(grants), grants)
	}
	scopes := map[string]bool{}
	for _, g := range grants {
		if g.hub != "syn-a" {
			t.Fatalf("grant %+v decided by %q; want the owner syn-a", g, g.hub)
		}
		scope := g.task[strings.LastIndexByte(g.task, '-')+1:]
		if scopes[scope] {
			t.Fatalf("scope %s granted twice: %+v", scope, grants)
		}
		scopes[scope] = true
	}
	for _, id := range []string{"syn-b", "syn-c"} {
		st, err := dialAgent(t, procs[id].uri(), "proj/observer-"+id).State(ctx)
		if err != nil || len(st.ActiveClaims) != 0 {
			t.Fatalf("non-owner %s holds claims of its own: %+v %v", id, st, err)
		}
	}

	// Phase 2: load through the non-owners, then SIGKILL the owner.
	acked := map[string]int64{}
	for _, g := range grants {
		acked[g.task] = g.epoch
	}
	var stop sync.WaitGroup
	killed := make(chan struct{})
	var afterKill []string // grants acknowledged after the kill was seen
	for _, id := range []string{"syn-b", "syn-c"} {
		for j := 0; j < 2; j++ {
			name := fmt.Sprintf("proj/load-%s-%d", id, j)
			a := dialAgent(t, procs[id].uri(), name)
			stop.Add(1)
			go func() {
				defer stop.Done()
				sawKill := false
				for n := 0; n < 400; n++ {
					select {
					case <-killed:
						sawKill = true
					default:
					}
					task := fmt.Sprintf("L-%s-%d", name, n)
					cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
					cl, err := a.Claim(cctx, client.ClaimRequest{TaskID: task, Paths: []string{"load/" + task}, IdemKey: task})
					ccancel()
					if err == nil {
						mu.Lock()
						acked[task] = cl.Epoch
						if sawKill {
							afterKill = append(afterKill, task)
						}
						mu.Unlock()
						continue
					}
					var r *client.Refused
					if !errors.As(err, &r) || r.Code != "OWNER_UNREACHABLE" {
						t.Errorf("%s: %v; want a grant or OWNER_UNREACHABLE", name, err)
						return
					}
					if sawKill && n > 0 {
						return // refused once the owner is gone: what we wanted to see
					}
				}
			}()
		}
	}
	time.Sleep(300 * time.Millisecond)
	procs["syn-a"].kill()
	close(killed)
	stop.Wait()
	if len(afterKill) > 0 {
		t.Fatalf("grants acknowledged after the owner was killed: %v", afterKill)
	}
	for _, id := range []string{"syn-b", "syn-c"} {
		a := dialAgent(t, procs[id].uri(), "proj/probe-"+id)
		_, err := a.Claim(ctx, client.ClaimRequest{TaskID: "P-" + id})
		var r *client.Refused
		if !errors.As(err, &r) || r.Code != "OWNER_UNREACHABLE" || r.OwnerHubID != "syn-a" {
			t.Fatalf("claim via %s with the owner dead: %v; want OWNER_UNREACHABLE naming syn-a", id, err)
		}
		if st, err := a.State(ctx); err != nil || len(st.ActiveClaims) != 0 {
			t.Fatalf("%s granted locally while the owner was dead: %+v %v", id, st, err)
		}
	}

	// Phase 3: the owner restarts on its journal.
	procs["syn-a"].start(t, bin)
	owner := dialAgent(t, procs["syn-a"].uri(), "proj/auditor")
	st, err := owner.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]int64{}
	var maxEpoch int64
	for _, c := range st.ActiveClaims {
		held[c.TaskID] = c.Epoch
		maxEpoch = max(maxEpoch, c.Epoch)
	}
	for task, epoch := range acked {
		if held[task] != epoch {
			t.Fatalf("acknowledged claim %s at epoch %d came back as %d after the owner's restart", task, epoch, held[task])
		}
	}
	t.Logf("%d acknowledged claims survived the owner's SIGKILL", len(acked))
	// Forwarding resumes, and epochs keep rising.
	b := dialAgent(t, procs["syn-b"].uri(), "proj/after")
	var cl *client.Claim
	for try := 0; try < 100; try++ {
		if cl, err = b.Claim(ctx, client.ClaimRequest{TaskID: "after-restart", Paths: []string{"after"}}); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || cl.Epoch <= maxEpoch || cl.HubID != "syn-a" {
		t.Fatalf("claim after the restart: %+v %v; want a grant by syn-a above epoch %d", cl, err, maxEpoch)
	}
}

// metricUp reads a hub's /metrics and reports whether its link to peer is up.
func metricUp(p *fedProc, peer string) bool {
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(p.port) + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), `synapse_federation_peer_up{peer="`+peer+`"} 1`)
}

// nsSnapshot asks a hub for its federation view (ns_request) over a raw socket.
var nsProbes atomic.Int64

func nsSnapshot(t *testing.T, uri string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, uri, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(16 << 20)
	// A name of its own per probe: the previous probe's socket may not
	// have been noticed gone yet, and its name would conflict (4009).
	probe := fmt.Sprintf("proj/ns-probe-%d", nsProbes.Add(1))
	req, _ := json.Marshal(map[string]any{"sender": probe, "type": "ns_request"})
	if err := c.Write(ctx, websocket.MessageText, req); err != nil {
		t.Fatal(err)
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var f map[string]any
		if json.Unmarshal(data, &f) == nil && f["type"] == "ns_snapshot" {
			fed, _ := f["federation"].(map[string]any)
			return fed
		}
	}
}

// Real processes: two hubs whose maps both claim namespace team contest
// it once linked and refuse every grant there (INV-CR-4); a third hub
// watching one of them quarantines it when a logged event is rewritten in
// its journal, and keeps the quarantine across its own restart.
func TestFederation_Processes_ContestedMapAndEquivocation_INV_CR_4(t *testing.T) {
	bin := synapseBinary(t)
	dir := t.TempDir()
	x := &fedProc{id: "syn-x", db: filepath.Join(dir, "x.db"), port: freePort(t)}
	y := &fedProc{id: "syn-y", db: filepath.Join(dir, "y.db"), port: freePort(t)}
	w := &fedProc{id: "syn-w", db: filepath.Join(dir, "w.db"), port: freePort(t)}
	common := []string{"--claim-peer-token", "s", "--namespace-owner", "solo=syn-x"}
	x.args = append([]string{"--namespace-owner", "team=syn-x", "--claim-peer", "syn-y=" + y.uri(), "--peer-token", "syn-y=s", "--peer-token", "syn-w=s"}, common...)
	y.args = append([]string{"--namespace-owner", "team=syn-y", "--claim-peer", "syn-x=" + x.uri(), "--peer-token", "syn-x=s"}, common...)
	w.args = []string{"--claim-peer-token", "s", "--multihub-watch", "syn-x=" + x.uri(), "--multihub-watch-interval", "200ms"}
	x.start(t, bin)
	y.start(t, bin)
	deadline := time.Now().Add(20 * time.Second)
	for !metricUp(x, "syn-y") || !metricUp(y, "syn-x") {
		if time.Now().After(deadline) {
			t.Fatal("the links between syn-x and syn-y did not come up")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, p := range []*fedProc{x, y} {
		a := dialAgent(t, p.uri(), "team/a-"+p.id)
		var err error
		for try := 0; try < 50; try++ { // the map exchange lands just after the link is up
			_, err = a.Claim(ctx, client.ClaimRequest{TaskID: fmt.Sprintf("T%d", try), Paths: []string{fmt.Sprintf("p%d", try)}})
			var r *client.Refused
			if errors.As(err, &r) && r.Code == "NAMESPACE_PARTITIONED" {
				break
			}
			if err == nil {
				t.Fatalf("%s granted in a namespace two hubs assert", p.id)
			}
			time.Sleep(100 * time.Millisecond)
		}
		var r *client.Refused
		if !errors.As(err, &r) || r.Code != "NAMESPACE_PARTITIONED" {
			t.Fatalf("%s: %v; want NAMESPACE_PARTITIONED", p.id, err)
		}
	}

	// syn-x grants in its own namespace; syn-w watches its log.
	solo := dialAgent(t, x.uri(), "solo/alice")
	if _, err := solo.Claim(ctx, client.ClaimRequest{TaskID: "S1", Paths: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	w.start(t, bin)
	observed := func() []any {
		oc, _ := nsSnapshot(t, w.uri())["observed_claims"].([]any)
		return oc
	}
	deadline = time.Now().Add(20 * time.Second)
	for len(observed()) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("syn-w never observed S1")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Rewrite the logged claim in syn-x's journal while it runs.
	db, err := sql.Open("sqlite", x.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`PRAGMA busy_timeout=5000`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE events SET payload = replace(payload, 'solo/alice', 'solo/mallory') WHERE kind = 'claim'`); err != nil {
		t.Fatal(err)
	}
	quarantined := func() bool {
		q, _ := nsSnapshot(t, w.uri())["quarantined_peers"].(map[string]any)
		return q["syn-x"] != nil
	}
	deadline = time.Now().Add(20 * time.Second)
	for !quarantined() {
		if time.Now().After(deadline) {
			t.Fatal("syn-w did not quarantine syn-x after its log changed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(observed()); n != 0 {
		t.Fatalf("a quarantined peer is still observed: %d claims", n)
	}
	w.stop()
	w.start(t, bin)
	if !quarantined() {
		t.Fatal("the quarantine did not survive syn-w's restart")
	}
}
