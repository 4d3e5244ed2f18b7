package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster/clustertest"
)

// fleetOfThree starts a real etcd (embedded in the test) and three
// `synapse hub --etcd` processes with a 2 s lease.
func fleetOfThree(t *testing.T) (map[string]*fedProc, []string) {
	bin := synapseBinary(t)
	x := clustertest.Start(t, false)
	dir := t.TempDir()
	ids := []string{"syn-a", "syn-b", "syn-c"}
	procs := map[string]*fedProc{}
	for _, id := range ids {
		p := &fedProc{id: id, db: filepath.Join(dir, id+".db"), port: freePort(t)}
		p.args = []string{"--etcd", x.Endpoint, "--cluster-token", "fleet", "--etcd-lease-ttl", "2s", "--max-claims-per-agent", "100000", "--forward-timeout", "3s"}
		procs[id] = p
	}
	for _, id := range ids {
		procs[id].startNoDB(t, bin)
	}
	return procs, ids
}

func claimMoving(ctx context.Context, c *client.Client, r client.ClaimRequest) (*client.Claim, error) {
	for {
		cl, err := c.Claim(ctx, r)
		var ref *client.Refused
		if !errors.As(err, &ref) || (ref.Code != "NAMESPACE_MOVING" && ref.Code != "OWNER_UNREACHABLE") || ctx.Err() != nil {
			return cl, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Three hub processes on a real etcd. The owner of a namespace is
// SIGKILLed under load: another hub serves it again within about two lease
// TTLs, every acknowledged claim is there (acked ⇒ durable beyond the
// machine, rule 2) and epochs keep rising. The new owner is then SIGSTOPped
// until its lease lapses: a third hub takes over, and after SIGCONT the
// paused hub grants nothing (rules 1, 3, 4), never two hubs granting in one
// namespace at once.
func TestFleet_Processes_KillAndPauseTheOwner_Rules1_2_4(t *testing.T) {
	procs, _ := fleetOfThree(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	first := dialAgent(t, procs["syn-a"].uri(), "proj/seed")
	seed, err := claimMoving(ctx, first, client.ClaimRequest{TaskID: "seed", Paths: []string{"seed"}})
	if err != nil || seed.HubID != "syn-a" {
		t.Fatalf("first use on syn-a: %+v %v", seed, err)
	}
	type grant struct {
		hub   string
		epoch int64
	}
	var mu sync.Mutex
	acked := map[string]grant{"seed": {seed.HubID, seed.Epoch}}
	var maxEpoch int64
	load := func(hubID string, n int, stop <-chan struct{}) *sync.WaitGroup {
		var wg sync.WaitGroup
		for j := 0; j < n; j++ {
			name := fmt.Sprintf("proj/load-%s-%d", hubID, j)
			a := dialAgent(t, procs[hubID].uri(), name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					task := fmt.Sprintf("L-%s-%d", name, k)
					cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
					cl, err := a.Claim(cctx, client.ClaimRequest{TaskID: task, Paths: []string{"load/" + task}, IdemKey: task})
					ccancel()
					if err == nil {
						mu.Lock()
						acked[task] = grant{cl.HubID, cl.Epoch}
						maxEpoch = max(maxEpoch, cl.Epoch)
						mu.Unlock()
					} else {
						time.Sleep(20 * time.Millisecond)
					}
				}
			}()
		}
		return &wg
	}
	stop := make(chan struct{})
	wg := load("syn-b", 2, stop)
	wg2 := load("syn-c", 2, stop)
	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	procs["syn-a"].kill()
	probe := dialAgent(t, procs["syn-b"].uri(), "proj/probe")
	var took time.Duration
	var newOwner string
	for {
		cl, err := probe.Claim(ctx, client.ClaimRequest{TaskID: fmt.Sprintf("P-%d", time.Now().UnixNano()), Paths: []string{"probe"}})
		if err == nil && cl.HubID != "syn-a" {
			took, newOwner = time.Since(killed), cl.HubID
			_, _ = probe.Release(ctx, cl.TaskID, client.ReleaseOptions{})
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the namespace was not served again after its owner's SIGKILL")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("failover: kill → first grant by %s in %v (lease TTL 2s)", newOwner, took)
	if took > 6*time.Second {
		t.Fatalf("failover took %v; want within about 2 TTL", took)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	wg2.Wait()
	auditor := dialAgent(t, procs[newOwner].uri(), "proj/auditor")
	st, err := auditor.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]int64{}
	for _, c := range st.ActiveClaims {
		held[c.TaskID] = c.Epoch
	}
	mu.Lock()
	for task, g := range acked {
		if held[task] != g.epoch {
			t.Fatalf("acknowledged claim %s (epoch %d by %s) is %d on the new owner %s", task, g.epoch, g.hub, held[task], newOwner)
		}
	}
	n, top := len(acked), maxEpoch
	mu.Unlock()
	t.Logf("%d acknowledged claims survived the owner's SIGKILL", n)
	after, err := claimMoving(ctx, probe, client.ClaimRequest{TaskID: "after-kill", Paths: []string{"after"}})
	if err != nil || after.Epoch <= top {
		t.Fatalf("epoch after failover %+v %v; want above %d", after, err, top)
	}

	// Pause the new owner until its lease lapses.
	paused := procs[newOwner]
	other := "syn-b"
	if newOwner == "syn-b" {
		other = "syn-c"
	}
	stale := dialAgent(t, paused.uri(), "proj/stale")
	paused.cmd.Process.Signal(syscall.SIGSTOP)
	otherAgent := dialAgent(t, procs[other].uri(), "proj/other")
	var taken *client.Claim
	for {
		cl, err := otherAgent.Claim(ctx, client.ClaimRequest{TaskID: "during-pause", Paths: []string{"pause"}})
		if err == nil {
			taken = cl
			break
		}
		if ctx.Err() != nil {
			t.Fatal("nobody took the namespace while its owner was paused")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if taken.HubID != other {
		t.Fatalf("grant during the pause by %s; want %s", taken.HubID, other)
	}
	paused.cmd.Process.Signal(syscall.SIGCONT)
	for i := 0; i < 10; i++ {
		cl, err := stale.Claim(ctx, client.ClaimRequest{TaskID: fmt.Sprintf("late-%d", i), Paths: []string{fmt.Sprintf("late%d", i)}})
		if err == nil && cl.HubID == newOwner {
			t.Fatalf("the paused hub %s granted %+v after its lease lapsed", newOwner, cl)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, err := dialAgent(t, procs[other].uri(), "proj/auditor2").State(ctx); err != nil || !hasTask(st, "during-pause") || !hasTask(st, "after-kill") {
		t.Fatalf("the owner after the pause lost claims: %+v %v", st, err)
	}
}

func hasTask(st *client.State, task string) bool {
	for _, c := range st.ActiveClaims {
		if c.TaskID == task {
			return true
		}
	}
	return false
}

// The operator's moves through the real binary: ns move hands the
// namespace over, ns drain empties a hub, ns list shows where it is, and
// the acknowledged claim follows every move (rules 5–8).
func TestFleet_Processes_NSMoveDrainList(t *testing.T) {
	procs, _ := fleetOfThree(t)
	bin := synapseBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := dialAgent(t, procs["syn-a"].uri(), "proj/alice")
	cl, err := claimMoving(ctx, a, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
	if err != nil || cl.HubID != "syn-a" {
		t.Fatalf("first use: %+v %v", cl, err)
	}
	cli := func(args ...string) (int, string) { return runBinary(bin, args...) }
	all := procs["syn-a"].uri() + "," + procs["syn-b"].uri() + "," + procs["syn-c"].uri()
	if code, out := cli("ns", "move", "proj", "--to", "syn-b", "--uri", all, "--json"); code != 0 || !strings.Contains(out, `"proj":"syn-b"`) {
		t.Fatalf("ns move: exit %d\n%s", code, out)
	}
	if code, out := cli("ns", "drain", "syn-b", "--uri", procs["syn-c"].uri()); code != 0 || !strings.Contains(out, "Moved proj to syn-") || strings.Contains(out, "to syn-b") {
		t.Fatalf("ns drain: exit %d\n%s", code, out)
	}
	code, out := cli("ns", "list", "--uri", procs["syn-b"].uri(), "--json")
	var st struct {
		Members    []string `json:"members"`
		Namespaces []struct {
			Namespace string `json:"namespace"`
			Owner     string `json:"owner_hub_id"`
		} `json:"namespaces"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || len(st.Members) != 3 {
		t.Fatalf("ns list --json: exit %d %v\n%s", code, err, out)
	}
	owner := ""
	for _, ns := range st.Namespaces {
		if ns.Namespace == "proj" {
			owner = ns.Owner
		}
	}
	if owner == "" || owner == "syn-b" {
		t.Fatalf("after draining syn-b, proj is owned by %q", owner)
	}
	bob := dialAgent(t, procs[owner].uri(), "proj/bob")
	if _, err := bob.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"src/x"}}); err == nil {
		t.Fatal("T1 did not follow the moves: an overlapping claim was granted")
	}
}

// runBinary runs the synapse binary bin and returns its exit code and its
// output (stdout and stderr together).
func runBinary(bin string, args ...string) (int, string) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return code, string(out)
}

// The default namespace, that of bare names, has a CLI spelling: 'ns move
// --default' moves it, and 'ns list' shows it as (default), the word the
// move takes; the claims in it follow the move (issue 22, INV-MH-1: one
// owner at a time).
func TestFleet_Processes_NSMoveDefaultNamespace_Issue22(t *testing.T) {
	procs, _ := fleetOfThree(t)
	bin := synapseBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	solo := dialAgent(t, procs["syn-a"].uri(), "solo")
	if cl, err := claimMoving(ctx, solo, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil || cl.HubID != "syn-a" {
		t.Fatalf("first use of the default namespace: %+v %v", cl, err)
	}
	code, out := runBinary(bin, "ns", "list", "--uri", procs["syn-b"].uri())
	if code != exitOK || !regexp.MustCompile(`(?m)^\(default\)\s+syn-a\s`).MatchString(out) || !strings.Contains(out, "ns move --default --to HUB_ID") {
		t.Fatalf("ns list: exit %d; want a (default) row owned by syn-a and how to move it\n%s", code, out)
	}
	if code, out := runBinary(bin, "ns", "move", "--default", "proj", "--to", "syn-b", "--uri", procs["syn-a"].uri()); code != exitUsage || !strings.Contains(out, "not both") {
		t.Fatalf("ns move --default with a NAMESPACE: exit %d; want %d\n%s", code, exitUsage, out)
	}
	if code, out := runBinary(bin, "ns", "move", "", "--to", "syn-b", "--uri", procs["syn-a"].uri()); code != exitUsage || !strings.Contains(out, "--default") {
		t.Fatalf("ns move of an empty NAMESPACE: exit %d; want %d and a pointer to --default\n%s", code, exitUsage, out)
	}
	all := procs["syn-a"].uri() + "," + procs["syn-b"].uri() + "," + procs["syn-c"].uri()
	if code, out := runBinary(bin, "ns", "move", "--default", "--to", "syn-b", "--uri", all); code != exitOK || !strings.Contains(out, "Moved (default) to syn-b.") {
		t.Fatalf("ns move --default: exit %d\n%s", code, out)
	}
	code, out = runBinary(bin, "ns", "list", "--uri", procs["syn-c"].uri(), "--json")
	var st struct {
		Namespaces []struct {
			Namespace string `json:"namespace"`
			Owner     string `json:"owner_hub_id"`
		} `json:"namespaces"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != exitOK {
		t.Fatalf("ns list --json: exit %d %v\n%s", code, err, out)
	}
	owner := "none"
	for _, ns := range st.Namespaces {
		if ns.Namespace == "" {
			owner = ns.Owner
		}
	}
	if owner != "syn-b" {
		t.Fatalf("after ns move --default --to syn-b, the default namespace is owned by %q\n%s", owner, out)
	}
	duo := dialAgent(t, procs["syn-c"].uri(), "duo")
	if _, err := claimMoving(ctx, duo, client.ClaimRequest{TaskID: "T2", Paths: []string{"src/x"}}); err == nil {
		t.Fatal("T1 did not follow the move: an overlapping claim by a bare name was granted")
	}
}

// A few-second smoke run of the load benchmark over real sockets, with
// loose bounds: it starts its own hub process, cycles claims, sends
// directed chats, and reads the hub's CPU from /proc; --floor first
// measures a bare echo server process the same way.
func TestBenchLoad_SmokeRunMeasuresTheHub(t *testing.T) {
	bin := synapseBinary(t)
	out, err := exec.Command(bin, "bench", "load", "--floor", "--agents", "2", "--idle", "3", "--duration", "500ms", "--json").Output()
	if err != nil {
		t.Fatalf("bench load: %v\n%s", err, out)
	}
	var res struct {
		Agents  int     `json:"agents"`
		Cycles  int64   `json:"cycles"`
		HubCPU  float64 `json:"hub_cpu_us_per_cycle"`
		HubRSS  int64   `json:"hub_rss_kb"`
		Connect float64 `json:"connect_s"`
		Floor   float64 `json:"floor_us_per_round_trip"`
		Chat    struct {
			Count int64 `json:"count"`
		} `json:"directed_chat"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("bench load --json: %v\n%s", err, out)
	}
	if res.Agents != 2 || res.Cycles < 10 || res.HubCPU <= 0 || res.HubRSS <= 0 || res.Chat.Count < 1 || res.Connect <= 0 || res.Floor <= 0 {
		t.Fatalf("bench load measured %+v", res)
	}
}
