package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster"
	"github.com/synapse-hub/synapse/cluster/clustertest"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/sequencer"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fleetHub is one in-process hub on etcd.
type fleetHub struct {
	id, uri string
	m       *cluster.Member
	owners  *cluster.Owners
	h       *hub.Hub
	srv     *http.Server
}

// quiet is the tests' logger: silent, or warnings and worse on stderr
// with SYNAPSE_TEST_LOG=1 (to see why a fleet test failed).
func quiet() *slog.Logger {
	if os.Getenv("SYNAPSE_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startFleetHub(t *testing.T, endpoint, id string, ttl time.Duration) *fleetHub {
	t.Helper()
	return startFleetHubEndpoints(t, []string{endpoint}, id, ttl)
}

// startFleetHubB is startFleetHub for benchmarks (lease TTL 9 s).
func startFleetHubB(b *testing.B, endpoint, id string) *fleetHub {
	return startFleetHubEndpoints(b, []string{endpoint}, id, 9*time.Second)
}

func startFleetHubEndpoints(t testing.TB, endpoints []string, id string, ttl time.Duration) *fleetHub {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fh := &fleetHub{id: id, uri: "ws://" + ln.Addr().String()}
	fh.m, err = cluster.Join(context.Background(), cluster.Config{Endpoints: endpoints, HubID: id, Advertise: fh.uri,
		LeaseTTL: ttl, Logger: quiet(), MaxFences: 100, Fence: func(b time.Duration) { fh.owners.Fence(b) }})
	if err != nil {
		t.Fatal(err)
	}
	fh.owners = cluster.NewOwners(fh.m)
	lim := coord.DefaultLimits()
	lim.MaxClaimsPerPrincipal = 1 << 20 // forwarded claims share their hub's quota (INV-ME-5)
	if minTTL > 0 {
		lim.MinTTL = minTTL
	}
	fh.h, err = hub.New(hub.Config{HubID: id, Store: fh.owners, Mail: fh.owners, Fleet: fh.owners, Chats: cluster.NewChats(fh.m), Logger: quiet(), Limits: lim,
		Federation: federation.Config{Authority: fh.owners, PeerURI: fh.owners.PeerURI, SharedPeerToken: "fleet-secret", ForwardTimeout: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	fh.owners.SetHost(fh.h)
	if err := fh.owners.Start(); err != nil {
		t.Fatal(err)
	}
	fh.srv = &http.Server{Handler: fh.h.Handler()}
	go fh.srv.Serve(ln)
	t.Cleanup(fh.stop)
	return fh
}

// stop closes the hub cleanly: it leaves the fleet (revoking its lease).
func (fh *fleetHub) stop() {
	if fh.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fh.owners.Close()
	fh.m.Leave()
	fh.h.Close(ctx)
	fh.srv.Close()
	fh.srv = nil
}

// crash stops the hub without revoking its lease: the fleet learns of it
// only when etcd expires the lease.
func (fh *fleetHub) crash() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fh.m.Abandon()
	fh.owners.Close()
	fh.srv.Close()
	fh.h.Close(ctx)
	fh.srv = nil
}

func dial(t *testing.T, uri, name string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URI: uri, Name: name, NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func refusedCode(err error) string {
	var r *client.Refused
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

// A namespace is taken by the first hub that serves it; the other hub
// forwards to it; when the owner dies, the next request elsewhere takes the
// namespace over within two lease TTLs, warmed from etcd: every
// acknowledged claim is still there and epochs keep rising (rules 1, 2,
// INV-EF-1 across owners).
func TestFleet_FirstUseOwnsFailoverKeepsAcknowledgedClaims_Rules1_2(t *testing.T) {
	ttl := 2 * time.Second
	a, b := twoFleetHubs(t, ttl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	alice := dial(t, b.uri, "proj/alice")
	first, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src/core"}})
	if err != nil || first.HubID != "syn-b" {
		t.Fatalf("first use on syn-b: %+v %v", first, err)
	}
	ns, err := alice.Namespaces(ctx)
	if err != nil || len(ns.Members) != 2 || ns.Route("proj") == nil || ns.Route("proj").Outcome != "local" || ns.Route("proj").Epoch == 0 || ns.LeaseDeadline == 0 {
		t.Fatalf("ns list on the owner: %+v %v", ns, err)
	}
	bob := dial(t, a.uri, "proj/bob")
	_, err = bob.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"src/core/x.go"}})
	if refusedCode(err) != "SCOPE_CONFLICT" {
		t.Fatalf("overlap via syn-a: %v; want SCOPE_CONFLICT decided by the owner syn-b", err)
	}
	second, err := bob.Claim(ctx, client.ClaimRequest{TaskID: "T3", Paths: []string{"docs"}})
	if err != nil || second.HubID != "syn-b" {
		t.Fatalf("forwarded grant: %+v %v", second, err)
	}

	// A board task declared through the non-owner lives with the namespace.
	if _, err := bob.TaskDeclare(ctx, client.TaskDeclaration{TaskID: "plan-1", Title: "write the parser"}); err != nil {
		t.Fatalf("declare via syn-a: %v", err)
	}
	killed := time.Now()
	b.crash()
	var took time.Duration
	for {
		_, err = bob.Claim(ctx, client.ClaimRequest{TaskID: "T4", Paths: []string{"src/core/y.go"}})
		if c := refusedCode(err); c == "SCOPE_CONFLICT" {
			took = time.Since(killed)
			break
		} else if err == nil {
			t.Fatal("after failover a claim overlapping an acknowledged one was granted")
		} else if c != "NAMESPACE_MOVING" && c != "OWNER_UNREACHABLE" {
			t.Fatalf("during failover: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("the namespace was not served again")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if took > 2*ttl+2*time.Second {
		t.Fatalf("served again %v after the kill; want within about 2 TTL (%v)", took, 2*ttl)
	}
	t.Logf("failover: first decision by the new owner %v after the kill (TTL %v)", took, ttl)
	board, err := bob.Board(ctx)
	if err != nil || len(board.Tasks) != 1 || board.Tasks[0].TaskID != "plan-1" {
		t.Fatalf("board on the new owner after failover: %+v %v; want plan-1 warmed from etcd", board, err)
	}
	third, err := bob.Claim(ctx, client.ClaimRequest{TaskID: "T5", Paths: []string{"other"}})
	if err != nil || third.HubID != "syn-a" || third.Epoch <= second.Epoch {
		t.Fatalf("grant by the new owner: %+v %v; want syn-a with an epoch above %d", third, err, second.Epoch)
	}
}

// Planned moves under load: the namespace goes A → B → C and then C is
// drained, while agents on every hub keep claiming. No acknowledged claim
// is lost, and in epoch order the grants switch hub no more often than the
// namespace moved: two hubs never granted in it at once (rules 5–8).
func TestFleet_PlannedMovesUnderLoad_Rules5_8(t *testing.T) {
	x := clustertest.Start(t, true)
	ttl := 3 * time.Second
	hubs := map[string]*fleetHub{}
	for _, id := range []string{"syn-a", "syn-b", "syn-c"} {
		hubs[id] = startFleetHub(t, x.Endpoint, id, ttl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	seed := dial(t, hubs["syn-a"].uri, "proj/seed")
	if cl, err := seed.Claim(ctx, client.ClaimRequest{TaskID: "seed", Paths: []string{"seed"}}); err != nil || cl.HubID != "syn-a" {
		t.Fatalf("first use: %+v %v", cl, err)
	}
	type grant struct {
		task, hub string
		epoch     int64
		at        time.Time
	}
	var mu sync.Mutex
	var grants []grant
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, id := range []string{"syn-a", "syn-b", "syn-c"} {
		name := "proj/load-" + id
		a := dial(t, hubs[id].uri, name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				task := fmt.Sprintf("%s-%d", name, k)
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				cl, err := a.Claim(cctx, client.ClaimRequest{TaskID: task, Paths: []string{task}, IdemKey: task})
				ccancel()
				if err != nil {
					t.Errorf("%s: %v (a move must make a request wait, never fail)", name, err)
					return
				}
				mu.Lock()
				grants = append(grants, grant{task, cl.HubID, cl.Epoch, time.Now()})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	mover := hubs["syn-c"].owners
	for _, to := range []string{"syn-b", "syn-c"} {
		if err := mover.Move(ctx, "proj", to); err != nil {
			t.Fatalf("move to %s: %v", to, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	moved, err := hubs["syn-a"].owners.Drain(ctx, "syn-c")
	if err != nil || moved["proj"] == "" || moved["proj"] == "syn-c" {
		t.Fatalf("drain syn-c: %v %v", moved, err)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	final := moved["proj"]

	mu.Lock()
	defer mu.Unlock()
	sort.Slice(grants, func(i, j int) bool { return grants[i].epoch < grants[j].epoch })
	switches := 0
	for i := 1; i < len(grants); i++ {
		if grants[i].hub != grants[i-1].hub {
			switches++
		}
		if grants[i].epoch == grants[i-1].epoch {
			t.Fatalf("epoch %d granted twice: %+v %+v", grants[i].epoch, grants[i-1], grants[i])
		}
	}
	if switches > 3 {
		t.Fatalf("grants switch hub %d times in epoch order over 3 moves: two hubs granted at once", switches)
	}
	byTime := append([]grant(nil), grants...)
	sort.Slice(byTime, func(i, j int) bool { return byTime[i].at.Before(byTime[j].at) })
	var pause time.Duration
	for i := 1; i < len(byTime); i++ {
		pause = max(pause, byTime[i].at.Sub(byTime[i-1].at))
	}
	t.Logf("%d grants over 3 moves; longest gap between grants %v", len(grants), pause)
	st, err := dial(t, hubs[final].uri, "proj/auditor").State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := heldEpochs(st)
	for _, g := range grants {
		if held[g.task] != g.epoch {
			t.Fatalf("acknowledged %s at epoch %d (by %s) is %d on the final owner %s", g.task, g.epoch, g.hub, held[g.task], final)
		}
	}
}

// A client given every hub of the fleet moves to a live one when its hub
// dies, and its work goes on: the SDK retries while the namespace is
// moving, and the agent's claim survives in etcd (issue: clients keep
// working).
func TestFleet_ClientWithSeveralURIsSurvivesItsHub(t *testing.T) {
	ttl := 2 * time.Second
	a, b := twoFleetHubs(t, ttl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URI: a.uri + "," + b.uri, Name: "proj/roamer", ReconnectMin: 50 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Welcome().HubID != "syn-a" {
		t.Fatalf("connected to %s; want the first URI, syn-a", c.Welcome().HubID)
	}
	cl, err := c.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
	if err != nil || cl.HubID != "syn-a" {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	a.crash()
	var renewed *client.Claim
	for {
		renewed, err = c.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("never renewed after syn-a died: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if renewed.HubID != "syn-b" || renewed.Epoch <= cl.Epoch || c.Welcome().HubID != "syn-b" {
		t.Fatalf("after syn-a died: %+v on %s; want a renewal by syn-b above epoch %d", renewed, c.Welcome().HubID, cl.Epoch)
	}
	other := dial(t, b.uri, "proj/other")
	if _, err := other.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"src/x"}}); refusedCode(err) != "SCOPE_CONFLICT" {
		t.Fatalf("the roamer's claim did not survive its hub: %v", err)
	}
}

// The fleet rides out the loss of etcd's leader on a 3-member cluster:
// keepalives absorb the election (the lease keeps more than a third of its
// TTL in reserve), grants go on afterwards, and no acknowledged claim is
// lost.
func TestFleet_EtcdLeaderLossOnThreeMembers(t *testing.T) {
	c := clustertest.StartCluster(t, 3)
	leaderLoss(t, c.Endpoints(), func() {
		leader := c.Leader()
		if leader < 0 {
			t.Fatal("no etcd leader")
		}
		c.Crash(leader)
	})
}

// leaderLoss runs two hubs on the etcd members at eps, claims, calls kill
// (which takes etcd's leader down) and checks that grants resume, no hub
// fenced, and every acknowledged claim is kept.
func leaderLoss(t *testing.T, eps []string, kill func()) {
	t.Helper()
	ttl := 6 * time.Second
	var hubs []*fleetHub
	for _, id := range []string{"syn-a", "syn-b"} {
		hubs = append(hubs, startFleetHubEndpoints(t, eps, id, ttl))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := dial(t, hubs[1].uri, "proj/a")
	var acked []*client.Claim
	claim := func(i int) error {
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		defer ccancel()
		cl, err := a.Claim(cctx, client.ClaimRequest{TaskID: fmt.Sprintf("T%d", i), Paths: []string{fmt.Sprintf("p%d", i)}})
		if err == nil {
			acked = append(acked, cl)
		}
		return err
	}
	for i := 0; i < 10; i++ {
		if err := claim(i); err != nil {
			t.Fatal(err)
		}
	}
	lost := time.Now()
	kill()
	var first time.Duration
	for i := 10; len(acked) < 20; i++ {
		if err := claim(i); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("no grant after etcd's leader was lost: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if first == 0 {
			first = time.Since(lost)
		}
	}
	t.Logf("first grant %v after etcd's leader was lost (TTL %v)", first, ttl)
	for _, h := range hubs {
		if !h.m.Serving() {
			t.Fatalf("%s fenced itself during the election", h.id)
		}
	}
	for _, h := range hubs {
		if h.id != acked[0].HubID {
			continue
		}
		st, err := dial(t, h.uri, "proj/auditor").State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held := heldEpochs(st)
		for _, cl := range acked {
			if held[cl.TaskID] != cl.Epoch {
				t.Fatalf("claim %s at epoch %d lost across the election", cl.TaskID, cl.Epoch)
			}
		}
	}
}

// Residual (rule 10) kept from widening: a hub that no longer owns a
// namespace — a zombie whose owner key was taken over while it still
// believes it serves — cannot write it. Its batch is refused by the
// owner-key guard (sequencer.ErrRetry) and etcd keeps nothing of it: the
// double-zombie write loss of the seed is closed by the fenced store.
func TestFleet_ZombieWriteIsRefusedByTheOwnerKeyGuard_Rule10(t *testing.T) {
	x := clustertest.Start(t, true)
	a := startFleetHub(t, x.Endpoint, "syn-a", 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dial(t, a.uri, "proj/alice")
	if _, err := c.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil {
		t.Fatal(err)
	}
	cli := a.m.Client()
	owner := cluster.DefaultPrefix + "ns/proj/owner"
	putForeignOwner(ctx, t, cli, owner)
	rec := journal.Record{Kind: journal.KindClaim, Durable: true,
		Payload: []byte(`{"task_id":"Z1","owner":"proj/zombie","note":"","claimed_at":1.0,"lease_expires_at":9999999999.0,"status":"claimed","data_ref":"","worktree":"","paths":["z"],"epoch":99,"version":0,"checkpoint":"","git":null,"quota_principal":"p"}`)}
	_, err := a.owners.Append(ctx, &journal.Batch{TS: 1, Records: []journal.Record{rec}})
	if !errors.Is(err, sequencer.ErrRetry) {
		t.Fatalf("a write after the owner key moved: %v; want sequencer.ErrRetry", err)
	}
	r, err := cli.Get(ctx, cluster.DefaultPrefix+"ns/proj/claims/Z1")
	if err != nil || len(r.Kvs) != 0 {
		t.Fatalf("the zombie's claim reached etcd: %v %v", r, err)
	}
	// And the hub itself stops granting there.
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second) // the SDK retries NAMESPACE_MOVING until then
		_, err := c.Claim(cctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"docs"}})
		ccancel()
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the zombie kept granting after its owner key was taken")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The fleet on the etcd people already run: Debian's etcd-server (3.4),
// started from its binary. First use, forwarding, and a failover that keeps
// every acknowledged claim, as on the embedded 3.7.
func TestFleet_OnDebianEtcd34_FailoverKeepsClaims(t *testing.T) {
	bin := clustertest.EtcdBinary(t)
	x := clustertest.StartBinary(t, bin)
	ttl := 2 * time.Second
	a := startFleetHub(t, x.Endpoint, "syn-a", ttl)
	b := startFleetHub(t, x.Endpoint, "syn-b", ttl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := dial(t, a.uri, "proj/alice")
	first, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
	if err != nil || first.HubID != "syn-a" {
		t.Fatalf("first use on etcd 3.4: %+v %v", first, err)
	}
	bob := dial(t, b.uri, "proj/bob")
	if _, err := bob.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"src/x"}}); refusedCode(err) != "SCOPE_CONFLICT" {
		t.Fatalf("forwarded overlap: %v", err)
	}
	a.crash()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := bob.Claim(cctx, client.ClaimRequest{TaskID: "T3", Paths: []string{"src/y"}})
		ccancel()
		if refusedCode(err) == "SCOPE_CONFLICT" {
			break // the new owner warmed T1 from etcd 3.4
		}
		if err == nil {
			t.Fatal("after failover on etcd 3.4 an overlapping claim was granted")
		}
		if ctx.Err() != nil {
			t.Fatalf("never served again: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// heldEpochs maps each live claim of a state snapshot to its epoch.
func heldEpochs(st *client.State) map[string]int64 {
	held := map[string]int64{}
	for _, c := range st.ActiveClaims {
		held[c.TaskID] = c.Epoch
	}
	return held
}

// The same on three real etcd processes (Debian's etcd-server 3.4): the
// leader is SIGKILLed, the fleet does not fence, grants resume once a new
// leader is elected, and nothing acknowledged is lost.
func TestFleet_EtcdLeaderSIGKILLedOnThreeProcesses(t *testing.T) {
	bin := clustertest.EtcdBinary(t)
	c := clustertest.StartBinaryCluster(t, bin, 3)
	eps := c.Endpoints()
	leaderLoss(t, eps, func() {
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		for i, ep := range eps {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := cli.Status(ctx, ep)
			cancel()
			if err == nil && st.Leader == st.Header.MemberId {
				c.Kill(i)
				return
			}
		}
		t.Fatal("no etcd leader found")
	})
}

// Idempotency records in etcd are bounded: each lives under a lease of
// IdemRetention plus at most an hour, not forever, and a retry within the
// window is answered from the stored response, even at another owner
// (INV-CR-1 across a failover).
func TestFleet_IdempotencyRecordsExpireAfterTheWindow_INV_CR_1(t *testing.T) {
	x := clustertest.Start(t, true)
	a := startFleetHub(t, x.Endpoint, "syn-a", 2*time.Second)
	b := startFleetHub(t, x.Endpoint, "syn-b", 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dial(t, a.uri, "proj/alice")
	first, err := c.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}, IdemKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.m.Client().Get(ctx, cluster.DefaultPrefix+"ns/proj/idem/", clientv3.WithPrefix())
	if err != nil || len(r.Kvs) != 1 || r.Kvs[0].Lease == 0 {
		t.Fatalf("idempotency record %v %v; want one, under a lease", r, err)
	}
	ttl, err := a.m.Client().TimeToLive(ctx, clientv3.LeaseID(r.Kvs[0].Lease))
	if err != nil || time.Duration(ttl.GrantedTTL)*time.Second < cluster.IdemRetention || time.Duration(ttl.GrantedTTL)*time.Second > cluster.IdemRetention+time.Hour {
		t.Fatalf("record lease %+v %v; want between 24 and 25 hours", ttl, err)
	}
	a.crash()
	d := dial(t, b.uri, "proj/alice")
	for {
		again, err := d.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}, IdemKey: "k1"})
		if err == nil {
			if again.Epoch != first.Epoch {
				t.Fatalf("retry after failover got epoch %d; want the stored grant at %d", again.Epoch, first.Epoch)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("retry never answered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A hub that lost etcd fences itself and says so on /health
// ("fenced"), while it refuses to decide anything (rule 4).
func TestFleet_FencedHubSaysSoOnHealth_Rule4(t *testing.T) {
	x := clustertest.Start(t, true)
	a := startFleetHub(t, x.Endpoint, "syn-a", 2*time.Second)
	srv := httptest.NewServer(a.h.Handler())
	defer srv.Close()
	status := func() string {
		resp, err := http.Get(srv.URL + "/health")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		var h struct {
			Status  string `json:"status"`
			Journal string `json:"journal"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&h)
		return h.Status + "/" + h.Journal
	}
	if s := status(); s != "ok/etcd" {
		t.Fatalf("/health before: %q", s)
	}
	x.Close()
	deadline := time.Now().Add(10 * time.Second)
	for status() != "fenced/etcd" {
		if time.Now().After(deadline) {
			t.Fatalf("/health after losing etcd: %q; want fenced", status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c := dial(t, a.uri, "proj/alice")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.Claim(ctx, client.ClaimRequest{TaskID: "T1"}); err == nil {
		t.Fatal("a fenced hub granted a claim")
	}
}

// Directed mail on a fleet: a chat from an agent of one hub reaches an
// agent of another hub live; what it has not acknowledged waits in etcd
// for its next Inbox; its watermark lives in etcd, so after the owner of
// its namespace is killed the new owner replays only what is unacked
// (INV-DG-3 beyond one machine).
func TestFleet_DirectedMailAcrossHubsSurvivesFailover_INV_DG_3(t *testing.T) {
	ttl := 2 * time.Second
	a, b := twoFleetHubs(t, ttl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := dial(t, a.uri, "proj/alice")
	bob := dial(t, b.uri, "team/bob")
	live := bob.Subscribe(ctx, func(f client.Frame) bool { return f.Type == "chat" && f.Sender == "proj/alice" })
	sent, err := alice.Send(ctx, "team/bob", "hello across hubs", client.SendOptions{})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	var got client.Frame
	select {
	case got = <-live:
	case <-ctx.Done():
		t.Fatal("the letter never reached team/bob on the other hub")
	}
	if got.Payload != "hello across hubs" || got.Seq() <= 0 || got.Seq() != sent.Seq {
		t.Fatalf("letter %s (seq %d); the sender's echo had seq %d", got.Raw, got.Seq(), sent.Seq)
	}
	if err := bob.Ack(ctx, got.Seq()); err != nil {
		t.Fatal(err)
	}
	bob.Close()
	for _, text := range []string{"second", "third"} {
		if _, err := alice.Send(ctx, "team/bob", text, client.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	inbox := func(uri string) []string {
		c := dial(t, uri, "team/bob")
		defer c.Close()
		var texts []string
		deadline := time.Now().Add(5 * time.Second)
		for {
			frames, err := c.Inbox(ctx)
			if err != nil {
				t.Fatal(err)
			}
			texts = texts[:0]
			for _, f := range frames {
				texts = append(texts, f.Payload)
				if err := c.Ack(ctx, f.Seq()); err != nil {
					t.Fatal(err)
				}
			}
			if len(texts) > 0 || time.Now().After(deadline) {
				return texts
			}
			time.Sleep(100 * time.Millisecond) // the first ack may still be on its way to the owner
		}
	}
	if got := inbox(b.uri); !slices.Equal(got, []string{"second", "third"}) {
		t.Fatalf("inbox after one ack: %v; want the two unacked letters", got)
	}
	// The owner of team (syn-a, where the first letter was posted) dies.
	a.crash()
	time.Sleep(300 * time.Millisecond)
	for {
		c := dial(t, b.uri, "team/bob")
		frames, err := c.Inbox(ctx)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(frames) == 0 {
			break // every letter acked, as the watermark in etcd says
		}
		if ctx.Err() != nil {
			t.Fatalf("after failover the inbox still holds %d acked letters", len(frames))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The next letter is posted by the namespace's new owner.
	carol := dial(t, b.uri, "proj/carol")
	for {
		sctx, scancel := context.WithTimeout(ctx, 4*time.Second)
		_, err := carol.Send(sctx, "team/bob", "after failover", client.SendOptions{})
		scancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no letter could be posted after the failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := inbox(b.uri); !slices.Equal(got, []string{"after failover"}) {
		t.Fatalf("inbox after the failover: %v; want only the new letter", got)
	}
}

// twoFleetHubs starts an embedded etcd and hubs syn-a and syn-b on it.
func twoFleetHubs(t *testing.T, ttl time.Duration) (*fleetHub, *fleetHub) {
	t.Helper()
	x := clustertest.Start(t, true)
	return startFleetHub(t, x.Endpoint, "syn-a", ttl), startFleetHub(t, x.Endpoint, "syn-b", ttl)
}

// A new owner never issues an epoch its namespace already had, even when
// the last batch the old owner wrote only updated an older claim: a
// task_update carries its claim's epoch, and must not lower the stored
// epoch floor, once the claim of the highest epoch is gone (INV-EF-1;
// found by the fleet harness, linz/fleet_test.go).
func TestFleet_UpdateOfAnOlderClaimKeepsTheEpochFloor_INV_EF_1(t *testing.T) {
	ttl := 2 * time.Second
	a, b := twoFleetHubs(t, ttl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice, first := claimOnA(ctx, t, a, "proj/alice", client.ClaimRequest{TaskID: "T1", Paths: []string{"one"}, TTL: time.Minute})
	second, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"two"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Release(ctx, "T2", client.ReleaseOptions{Epoch: second.Epoch}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Update(ctx, client.UpdateRequest{TaskID: "T1", Note: "older claim", Epoch: first.Epoch}); err != nil {
		t.Fatal(err)
	}
	a.crash()
	bob := dial(t, b.uri, "proj/bob")
	third, err := claimMovingTest(ctx, bob, client.ClaimRequest{TaskID: "T3", Paths: []string{"three"}})
	if err != nil || third.HubID != "syn-b" || third.Epoch <= second.Epoch {
		t.Fatalf("the new owner granted %+v (%v); want syn-b with an epoch above %d (T2's)", third, err, second.Epoch)
	}
}

// minTTL, when set, is the shortest lease the next hubs started grant
// (seconds), for tests whose leases lapse.
var minTTL float64

// A lapsed claim's checkpoint is resumed by the task's next claimant on
// whichever hub owns the namespace by then (INV-CR-3 on a fleet): whether
// the old owner swept the lapse before it died (the checkpoint waits in
// etcd) or died first (the new owner finds the lapsed claim itself).
// Found by the fleet harness (linz/fleet_test.go).
func TestFleet_LapsedCheckpointSurvivesFailover_INV_CR_3(t *testing.T) {
	for _, sweptFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("swept=%v", sweptFirst), func(t *testing.T) {
			minTTL = 1
			defer func() { minTTL = 0 }()
			ttl := 2 * time.Second
			a, b := twoFleetHubs(t, ttl)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			alice, cl := claimOnA(ctx, t, a, "proj/alice", client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}, TTL: time.Second})
			if _, err := alice.Checkpoint(ctx, "T1", "step-3-of-5", cl.Epoch); err != nil {
				t.Fatal(err)
			}
			if sweptFirst {
				// Another claim after the lapse makes syn-a sweep it (and
				// write the lapse) before it dies.
				time.Sleep(1500 * time.Millisecond)
				if _, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T9", Paths: []string{"other"}}); err != nil {
					t.Fatal(err)
				}
			}
			a.crash()
			time.Sleep(1500 * time.Millisecond) // lapsed either way
			bob := dial(t, b.uri, "proj/bob")
			got, err := claimMovingTest(ctx, bob, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
			if err != nil || got.HubID != "syn-b" || got.Checkpoint != "step-3-of-5" {
				t.Fatalf("the next claimant got %+v (%v); want syn-b resuming checkpoint step-3-of-5", got, err)
			}
		})
	}
}

// A release in the default namespace (of bare names, spelled "") reaches
// etcd like any other: after its owner dies, the next owner does not bring
// the released claim back (INV-JA-1, rule 2; found by the fleet harness,
// linz/fleet_test.go, where "" had been read as "no namespace known").
func TestFleet_ReleaseInTheDefaultNamespaceSurvivesFailover_Issue22(t *testing.T) {
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	solo, cl := claimOnA(ctx, t, a, "solo", client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}, TTL: time.Minute})
	if _, err := solo.Release(ctx, "T1", client.ReleaseOptions{Epoch: cl.Epoch}); err != nil {
		t.Fatal(err)
	}
	a.crash()
	other := dial(t, b.uri, "other")
	got, err := claimMovingTest(ctx, other, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
	if err != nil || got.HubID != "syn-b" {
		t.Fatalf("after the owner's crash, a claim of the released task: %+v %v; want granted by syn-b", got, err)
	}
}

// A move asked at an epoch the owner no longer holds — it re-read the
// namespace after an ambiguous write, touching its owner key, before it
// froze — is still carried out from the owner's new epoch, claims and
// all, instead of holding every later move off (rules 5–8; found by the
// fleet harness, linz/fleet_test.go, as a drain that never returned).
func TestFleet_MoveAskedAtAnOlderEpochOfTheOwnerCompletes_Rules5_8(t *testing.T) {
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	claimOnA(ctx, t, a, "proj/alice", client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}, TTL: time.Minute})
	cli := a.m.Client()
	owner, err := cli.Get(ctx, cluster.DefaultPrefix+"ns/proj/owner")
	if err != nil || len(owner.Kvs) != 1 {
		t.Fatal(owner, err)
	}
	stale := owner.Kvs[0].ModRevision - 1 // the owner key has moved on since
	rec := fmt.Sprintf(`{"from":"syn-a","to":"syn-b","phase":"freezing","from_epoch":%d}`, stale)
	if _, err := cli.Put(ctx, cluster.DefaultPrefix+"ns/proj/handoff", rec); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := cli.Get(ctx, cluster.DefaultPrefix+"ns/proj/owner")
		if err == nil && len(r.Kvs) == 1 && strings.Contains(string(r.Kvs[0].Value), `"syn-b"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the move never completed: owner %v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	bob := dial(t, b.uri, "proj/bob")
	_, err = bob.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"src/x"}})
	if refusedCode(err) != "SCOPE_CONFLICT" {
		t.Fatalf("after the move, a claim overlapping T1: %v; want SCOPE_CONFLICT (T1 moved with the namespace)", err)
	}
}

// A lapse swept from a namespace the hub no longer serves — its claims
// linger in memory until the Disown is applied — does not refuse the
// batch it is in: else every batch of the hub, the Disown and the warm of
// any other namespace among them, is refused while the claim lingers
// (found by the fleet harness, linz/fleet_test.go, as a namespace that
// could never be taken again).
func TestFleet_ALapseInANamespaceNoLongerServedDoesNotRefuseTheBatch_Issue22(t *testing.T) {
	x := clustertest.Start(t, true)
	a := startFleetHub(t, x.Endpoint, "syn-a", 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dial(t, a.uri, "beta/bob")
	cl, err := c.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
	if err != nil {
		t.Fatal(err)
	}
	cli := a.m.Client()
	putForeignOwner(ctx, t, cli, cluster.DefaultPrefix+"ns/beta/owner")
	for a.owners.Resolve("beta").Outcome == federation.Local {
		if ctx.Err() != nil {
			t.Fatal("syn-a never saw beta go")
		}
		time.Sleep(10 * time.Millisecond)
	}
	rec := journal.Record{Kind: journal.KindClaimExpired, Payload: []byte(fmt.Sprintf(`{"task_id":"T1","epoch":%d,"checkpoint":"cp"}`, cl.Epoch))}
	if _, err := a.owners.Append(ctx, &journal.Batch{TS: 1, Records: []journal.Record{rec}}); err != nil {
		t.Fatalf("a batch sweeping a lapse of a namespace no longer served: %v; want it written without that record", err)
	}
	if r, err := cli.Get(ctx, cluster.DefaultPrefix+"ns/beta/retained/T1"); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("the lapse reached the namespace's keys in etcd: %v %v", r, err)
	}
}

// A hub forgets the checkpoints it retained for a namespace when the
// namespace leaves it: after the task was resumed and released elsewhere,
// and the namespace came back, the next claimant does not resume a stale
// checkpoint (INV-CR-3; found by the fleet harness, linz/fleet_test.go).
func TestFleet_RetainedCheckpointsLeaveWithTheirNamespace_INV_CR_3(t *testing.T) {
	minTTL = 1
	defer func() { minTTL = 0 }()
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice, cl := claimOnA(ctx, t, a, "proj/alice", client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}, TTL: time.Second})
	if _, err := alice.Checkpoint(ctx, "T1", "cp-old", cl.Epoch); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T9", Paths: []string{"other"}}); err != nil { // syn-a sweeps the lapse
		t.Fatal(err)
	}
	if err := a.owners.Move(ctx, "proj", "syn-b"); err != nil {
		t.Fatal(err)
	}
	bob := dial(t, b.uri, "proj/bob")
	got, err := claimMovingTest(ctx, bob, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
	if err != nil || got.HubID != "syn-b" || got.Checkpoint != "cp-old" {
		t.Fatalf("on syn-b: %+v %v; want the retained cp-old", got, err)
	}
	if _, err := bob.Release(ctx, "T1", client.ReleaseOptions{Epoch: got.Epoch}); err != nil {
		t.Fatal(err)
	}
	if err := b.owners.Move(ctx, "proj", "syn-a"); err != nil {
		t.Fatal(err)
	}
	carol := dial(t, a.uri, "proj/carol")
	again, err := claimMovingTest(ctx, carol, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
	if err != nil || again.HubID != "syn-a" || again.Checkpoint != "" {
		t.Fatalf("back on syn-a after a release: %+v %v; want no checkpoint", again, err)
	}
}

// claimMovingTest claims, asking again while the namespace changes hands.
func claimMovingTest(ctx context.Context, c *client.Client, r client.ClaimRequest) (*client.Claim, error) {
	for {
		cl, err := c.Claim(ctx, r)
		if code := refusedCode(err); code != "NAMESPACE_MOVING" && code != "OWNER_UNREACHABLE" || ctx.Err() != nil {
			return cl, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// watchStreams counts this process's etcd client watches (one goroutine
// each).
func watchStreams() int {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return strings.Count(b.String(), "(*watchGRPCStream).serveSubstream(")
}

// A hub's follow of the fleet relists every lease TTL and watches again
// from there; the watch it leaves is ended, not left open taking every
// event of the fleet unread, one more each TTL.
func TestFleet_FollowEndsItsWatchAtEachRelist(t *testing.T) {
	x := clustertest.Start(t, true)
	startFleetHub(t, x.Endpoint, "syn-a", 2*time.Second)
	time.Sleep(500 * time.Millisecond) // the hub's watches are up
	before := watchStreams()
	time.Sleep(5 * time.Second) // two relists
	if after := watchStreams(); after > before {
		t.Fatalf("watches: %d before two relists, %d after; want no more", before, after)
	}
}

// claimOnA claims r as name through a, which must grant it: first use
// places the namespace on the hub it is asked of.
func claimOnA(ctx context.Context, t *testing.T, a *fleetHub, name string, r client.ClaimRequest) (*client.Client, *client.Claim) {
	t.Helper()
	c := dial(t, a.uri, name)
	cl, err := c.Claim(ctx, r)
	if err != nil || cl.HubID != "syn-a" {
		t.Fatalf("first use on syn-a: %+v %v", cl, err)
	}
	return c, cl
}

// A move record left at Complete by a new owner that lost the namespace
// before clearing it (it died) does not hold the namespace off: first use
// takes it again (rules 5–8; found by the fleet harness's long run).
func TestFleet_ACompletedMoveWhoseOwnerDiedDoesNotBlockTheNamespace_Rules5_8(t *testing.T) {
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	claimOnA(ctx, t, a, "proj/alice", client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
	cli := a.m.Client()
	// The record as a new owner syn-c leaves it when it dies at once: no
	// owner key, the record at Complete.
	if _, err := cli.Delete(ctx, cluster.DefaultPrefix+"ns/proj/owner"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, cluster.DefaultPrefix+"ns/proj/handoff", `{"from":"syn-a","to":"syn-b","phase":"complete","from_epoch":1}`); err != nil {
		t.Fatal(err)
	}
	bob := dial(t, b.uri, "proj/bob")
	cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
	defer ccancel()
	if got, err := claimMovingTest(cctx, bob, client.ClaimRequest{TaskID: "T2", Paths: []string{"docs"}}); err != nil {
		t.Fatalf("the namespace was not served again: %+v %v", got, err)
	}
}

// A transaction etcd did not confirm (here: its deadline passed) may
// have committed: Append says so with sequencer.ErrUncertain beside
// ErrRetry, which the hub answers OUTCOME_UNKNOWN, never "nothing was
// decided" (found by the fleet harness, linz/fleet_test.go).
func TestFleet_AnUnconfirmedWriteIsUncertainNotRefused_Issue22(t *testing.T) {
	a, _ := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cl := claimOnA(ctx, t, a, "proj/alice", client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
	rec := journal.Record{Kind: journal.KindCheckpoint, Durable: true,
		Payload: []byte(fmt.Sprintf(`{"task_id":"T1","owner":"proj/alice","note":"","claimed_at":1.0,"lease_expires_at":9999999999.0,"status":"claimed","data_ref":"","worktree":"","paths":["src"],"epoch":%d,"version":1,"checkpoint":"cp","git":null,"quota_principal":"p"}`, cl.Epoch))}
	dead, stop := context.WithTimeout(ctx, time.Nanosecond)
	defer stop()
	time.Sleep(time.Millisecond)
	_, err := a.owners.Append(dead, &journal.Batch{TS: 1, Records: []journal.Record{rec}})
	if !errors.Is(err, sequencer.ErrRetry) || !errors.Is(err, sequencer.ErrUncertain) {
		t.Fatalf("an unconfirmed write: %v; want sequencer.ErrRetry with sequencer.ErrUncertain", err)
	}
	// A write the guard refused is certain: nothing was kept.
	putForeignOwner(ctx, t, a.m.Client(), cluster.DefaultPrefix+"ns/proj/owner")
	_, err = a.owners.Append(ctx, &journal.Batch{TS: 2, Records: []journal.Record{rec}})
	if !errors.Is(err, sequencer.ErrRetry) || errors.Is(err, sequencer.ErrUncertain) {
		t.Fatalf("a write refused by the owner-key guard: %v; want sequencer.ErrRetry alone", err)
	}
}

// An owner key always lives under its hub's lease (rule 1): a re-read
// after an ambiguous write (rewarm) made while the hub holds no lease (it
// fenced, and has not registered again) must not write one without a
// lease, which would name the hub as owner for ever, its namespace never
// served again once it dies. Found by the fleet harness's long runs: a
// namespace answered NAMESPACE_MOVING for minutes after every hub was
// restarted.
func TestFleet_AnOwnerKeyIsNeverWrittenWithoutALease_Rule1(t *testing.T) {
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	claimOnA(ctx, t, a, "proj/alice", client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
	cluster.RewarmFenced(a.owners, "proj")
	cli := b.m.Client()
	r, err := cli.Get(ctx, "/synapse/v1/ns/proj/owner")
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("owner key: %v %v", r, err)
	}
	if r.Kvs[0].Lease == 0 {
		t.Fatalf("the owner key of proj was written without a lease (value %s): it would outlive its hub", r.Kvs[0].Value)
	}
	a.crash()
	bob := dial(t, b.uri, "proj/bob")
	cl, err := claimMovingTest(ctx, bob, client.ClaimRequest{TaskID: "T2", Paths: []string{"other"}})
	if err != nil || cl.HubID != "syn-b" {
		t.Fatalf("proj was not served again after its owner died: %+v %v", cl, err)
	}
}

// An owner key without a lease, as an older synapse could leave one, is
// deleted by the first hub that reconciles its namespace, and the
// namespace is served again (rule 1).
func TestFleet_AnOwnerKeyWithoutALeaseIsDeleted_Rule1(t *testing.T) {
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli := b.m.Client()
	if _, err := cli.Put(ctx, "/synapse/v1/ns/old/owner", `{"hub_id":"syn-gone","addr":"ws://127.0.0.1:1"}`); err != nil {
		t.Fatal(err)
	}
	carol := dial(t, a.uri, "old/carol")
	cl, err := claimMovingTest(ctx, carol, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
	if err != nil || (cl.HubID != "syn-a" && cl.HubID != "syn-b") {
		t.Fatalf("a namespace whose owner key had no lease was not served: %+v %v", cl, err)
	}
}

// putForeignOwner writes key as the owner key of a hub syn-z that is not
// running, under a lease of its own, as a hub that took the namespace
// would (an owner key without a lease is deleted on sight, rule 1).
func putForeignOwner(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) {
	t.Helper()
	l, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, key, `{"hub_id":"syn-z","addr":"ws://127.0.0.1:1"}`, clientv3.WithLease(l.ID)); err != nil {
		t.Fatal(err)
	}
}

// A hub keys claims by task id, as one hub does. When a namespace's owner
// dies and the hub that would take it over already serves a live claim of
// that task id in another namespace, it does not take the namespace:
// adopting it would replace the other's acknowledged grant in memory, and
// the task could then be granted twice (INV-ME-1). The namespace fails
// closed (NAMESPACE_MOVING, as a contested one does, INV-CR-4) until the
// other claim ends; then it is taken with every claim it had.
func TestFleet_ATaskIDLiveInAnotherNamespaceHoldsTheAdoptOff_INV_ME_1(t *testing.T) {
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	x, held := claimOnA(ctx, t, a, "alpha/x", client.ClaimRequest{TaskID: "T1", Paths: []string{"a"}, TTL: time.Minute})
	y := dial(t, b.uri, "beta/y")
	theirs, err := y.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"b"}, TTL: time.Minute})
	if err != nil || theirs.HubID != "syn-b" {
		t.Fatalf("first use of beta on syn-b: %+v %v", theirs, err)
	}
	b.crash()
	z := dial(t, a.uri, "beta/z")
	// Each try to take beta writes its owner key; after a refused adopt
	// the hub leaves beta alone for a second (unadoptableWait), however
	// often its agents ask.
	owner := cluster.DefaultPrefix + "ns/beta/owner"
	puts := watchPuts(ctx, t, a.m.Client(), owner)
	wait, cancelWait := context.WithTimeout(ctx, 6*time.Second) // 3 TTLs: syn-b's lease has lapsed
	got, err := claimMovingTest(wait, z, client.ClaimRequest{TaskID: "T2", Paths: []string{"c"}})
	cancelWait()
	if err == nil {
		t.Fatalf("syn-a took beta over while alpha/x holds T1 there, and granted %+v", got)
	}
	if puts := len(puts()); puts == 0 || puts > 8 {
		t.Fatalf("syn-a took beta %d times in 6 s of its agent asking every 50 ms; want a few (at most one a second)", puts)
	}
	renewed, err := x.Renew(ctx, held)
	if err != nil || renewed.Epoch <= held.Epoch || renewed.Owner != "alpha/x" {
		t.Fatalf("alpha/x's renewal of its T1: %+v %v; want its grant kept (a fresh epoch, INV-LL-4)", renewed, err)
	}
	if _, err := dial(t, a.uri, "alpha/w").Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"a2"}}); refusedCode(err) != "LEASE_LIVE" {
		t.Fatalf("a second claim of alpha's T1: %v; want LEASE_LIVE", err)
	}
	if _, err := x.Release(ctx, "T1", client.ReleaseOptions{Epoch: renewed.Epoch}); err != nil {
		t.Fatal(err)
	}
	got, err = claimMovingTest(ctx, z, client.ClaimRequest{TaskID: "T2", Paths: []string{"c"}})
	if err != nil || got.HubID != "syn-a" || got.Epoch <= theirs.Epoch {
		t.Fatalf("beta after alpha's T1 ended: %+v %v; want syn-a, an epoch above %d", got, err, theirs.Epoch)
	}
	st, err := z.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e := heldEpochs(st); e["T1"] != theirs.Epoch {
		t.Fatalf("beta/y's T1 after the takeover: epochs %v; want %d", e, theirs.Epoch)
	}
}

// watchPuts watches key from now on; puts returns the values put since,
// read until the watch has been quiet for 300 ms.
func watchPuts(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) (puts func() []string) {
	t.Helper()
	now, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	watch := cli.Watch(ctx, key, clientv3.WithRev(now.Header.Revision+1))
	return func() []string {
		var vs []string
		for {
			select {
			case wr := <-watch:
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypePut {
						vs = append(vs, string(ev.Kv.Value))
					}
				}
			case <-time.After(300 * time.Millisecond):
				return vs
			}
		}
	}
}

// A planned move to a hub that serves a live claim of one of the
// namespace's task ids in another namespace is called off, not carried
// out (the target could not hold both: INV-ME-1): Move says so
// (ErrMoveAborted), and the namespace is served again by first use with
// its claims as they were.
func TestFleet_AMoveOntoATaskIDLiveThereIsCalledOff_INV_ME_1(t *testing.T) {
	a, b := twoFleetHubs(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	claimOnA(ctx, t, a, "alpha/x", client.ClaimRequest{TaskID: "T1", Paths: []string{"a"}, TTL: time.Minute})
	y := dial(t, b.uri, "beta/y")
	theirs, err := y.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"b"}, TTL: time.Minute})
	if err != nil || theirs.HubID != "syn-b" {
		t.Fatalf("first use of beta on syn-b: %+v %v", theirs, err)
	}
	// The target finds it out before it takes the namespace: it never
	// writes beta's owner key (a take and a let-go would move the
	// namespace's epoch, and could show a finished move to Move's poll).
	owner := cluster.DefaultPrefix + "ns/beta/owner"
	puts := watchPuts(ctx, t, a.m.Client(), owner)
	if err := b.owners.Move(ctx, "beta", "syn-a"); !errors.Is(err, cluster.ErrMoveAborted) {
		t.Fatalf("move of beta onto syn-a, where alpha/x holds T1: %v; want ErrMoveAborted", err)
	}
	for _, v := range puts() {
		if strings.Contains(v, `"syn-a"`) {
			t.Fatalf("syn-a wrote beta's owner key during the called-off move: %s", v)
		}
	}
	var renewed *client.Claim
	for renewed == nil {
		renewed, err = y.Renew(ctx, theirs)
		if code := refusedCode(err); code != "NAMESPACE_MOVING" && code != "OWNER_UNREACHABLE" || ctx.Err() != nil {
			break
		}
		renewed = nil
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || renewed.Owner != "beta/y" || renewed.Epoch <= theirs.Epoch {
		t.Fatalf("beta/y's renewal after the move was called off: %+v %v; want its T1 kept", renewed, err)
	}
}
