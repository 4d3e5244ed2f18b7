package linz

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/internal/testbin"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The fleet harness (issue 22, item 4): three `synapse hub --etcd`
// processes on a three-member etcd (processes too), nine agents in three
// namespaces (alpha, beta and the default one of bare names) spread over
// the hubs, each call sent to whichever hub the agent last dialled, and a
// nemesis that SIGKILLs hubs (the owner of a namespace under load among
// them), SIGSTOPs them past their lease, SIGKILLs the etcd leader, moves
// namespaces and drains hubs under load, and cuts one hub off from etcd
// (a network namespace, its agents still reaching it). The history is
// checked by the same porcupine model as the single hub's, partitioned
// per namespace and worktree, and by accounting outside the model.

const (
	fleetDefaultDuration = 30 * time.Second
	fleetTTL             = 2 * time.Second // the hubs' etcd lease
	perNamespace         = 3
	// ownerLag bounds how late the harness's own etcd watch may see a
	// namespace change owner (an etcd member killed under it included).
	ownerLag = 5 * time.Second
)

var fleetNamespaces = []string{"alpha", "beta", ""}

func fleetAgent(ns string, k int) string {
	if ns == "" {
		return fmt.Sprintf("solo%d", k)
	}
	return fmt.Sprintf("%s/agent%d", ns, k)
}

// fleetSpace is what a namespace's tasks and worktrees are named by
// (scopedIn): the namespace, "solo" for the default one.
func fleetSpace(ns string) string {
	if ns == "" {
		return "solo"
	}
	return ns
}

// fleetHub is one `synapse hub --etcd` process, started again after a kill
// on the same id, address and port. Only the nemesis goroutine (and the
// test after it stops) calls its methods.
type fleetHub struct {
	child
	id, bin string
	host    string
	port    int
	etcd    []string
	ttl     time.Duration
	net     *netPart // non-nil: runs in this network namespace
	log     *os.File
}

func (h *fleetHub) uri() string { return "ws://" + h.host + ":" + strconv.Itoa(h.port) }

func (h *fleetHub) start() error {
	args := []string{"hub", "--hub-id", h.id, "--host", h.host, "--port", strconv.Itoa(h.port), "--advertise", h.uri(),
		"--etcd", strings.Join(h.etcd, ","), "--cluster-token", "linz", "--etcd-lease-ttl", h.ttl.String(),
		"--no-mcp", "--min-ttl", "1", "--max-claims-per-agent", "100000", "--forward-timeout", "3s"}
	if h.host != "127.0.0.1" {
		args = append(args, "--insecure-off-loopback") // a link inside this machine
	}
	cmd := exec.Command(h.bin, args...)
	if h.net != nil {
		cmd = h.net.command(h.bin, args...)
	}
	cmd.Env = append(os.Environ(), "SYNAPSE_TOKEN=")
	cmd.Stderr = h.log
	if err := h.launch(cmd); err != nil {
		b, _ := os.ReadFile(h.log.Name())
		return fmt.Errorf("hub %s did not start (%v); its log ends:\n%s", h.id, err, tail(string(b), 2000))
	}
	return nil
}

// stint is one hub's ownership of a namespace, as the harness's own etcd
// watch saw it: from the owner key naming it to the key naming another
// hub or going (to is MaxInt64 while it lasts).
type stint struct {
	hub      string
	from, to int64
}

// ownerLog follows every namespace's owner key in etcd.
type ownerLog struct {
	mu   sync.Mutex
	byNS map[string][]stint
}

func (l *ownerLog) current(ns string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.byNS[ns]
	if len(s) > 0 && s[len(s)-1].to == math.MaxInt64 {
		return s[len(s)-1].hub
	}
	return ""
}

func (l *ownerLog) stints(ns string) []stint {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]stint(nil), l.byNS[ns]...)
}

// watchOwners records owner changes under prefix until ctx ends, resuming
// after the watch breaks (an etcd member killed under it).
func watchOwners(ctx context.Context, cli *clientv3.Client, prefix string) *ownerLog {
	l := &ownerLog{byNS: map[string][]stint{}}
	go func() {
		rev := int64(1)
		for ctx.Err() == nil {
			wch := cli.Watch(clientv3.WithRequireLeader(ctx), prefix+"ns/", clientv3.WithPrefix(), clientv3.WithRev(rev))
			for resp := range wch {
				now := time.Now().UnixNano()
				for _, ev := range resp.Events {
					rev = ev.Kv.ModRevision + 1
					k := string(ev.Kv.Key)
					if !strings.HasSuffix(k, "/owner") {
						continue
					}
					ns := strings.TrimSuffix(strings.TrimPrefix(k, prefix+"ns/"), "/owner")
					hub := ""
					if ev.Type == clientv3.EventTypePut {
						var rec struct {
							Hub string `json:"hub_id"`
						}
						_ = json.Unmarshal(ev.Kv.Value, &rec)
						hub = rec.Hub
					}
					l.note(ns, hub, now)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return l
}

func (l *ownerLog) note(ns, hub string, now int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.byNS[ns]
	if n := len(s); n > 0 && s[n-1].to == math.MaxInt64 {
		if s[n-1].hub == hub {
			return // the owner touched its key: the same stint
		}
		s[n-1].to = now
	}
	if hub != "" {
		s = append(s, stint{hub, now, math.MaxInt64})
	}
	l.byNS[ns] = s
}

// fleetNemesis disrupts the fleet: one action at a time, each kind once
// per shuffled cycle, until the duration has passed and a cycle is done.
type fleetNemesis struct {
	t      *testing.T
	hubs   []*fleetHub
	etcd   *etcdCluster
	net    *netPart // the partitionable hub's namespace; nil: no partitions
	netHub string
	owners *ownerLog
	ttl    time.Duration
	rng    *rand.Rand
	only   []string // the actions to run (nil: all)

	began   time.Time
	events  []string // what it did when, for the reader of a failure
	counts  map[string]int
	failed  map[string]int // moves and drains the fleet refused or timed out
	windows []span         // every disruption, for the offline-refusal check
	cuts    []span         // partitions of netHub from etcd
}

var fleetActions = []string{"kill-owner", "kill-hub", "pause-owner", "kill-etcd-leader", "move", "drain", "partition"}

func (n *fleetNemesis) run(ctx context.Context, d time.Duration) {
	n.counts, n.failed = map[string]int{}, map[string]int{}
	deadline := time.Now().Add(d)
	actions := n.only
	if actions == nil {
		actions = fleetActions
	}
	for cycle := 0; cycle == 0 || time.Now().Before(deadline); cycle++ {
		order := slices.Clone(actions)
		n.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, a := range order {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(time.Duration(700+n.rng.IntN(1300)) * time.Millisecond)
			if a == "partition" && n.net == nil {
				continue
			}
			from := time.Now().UnixNano()
			what := n.act(a)
			n.windows = append(n.windows, span{from, time.Now().UnixNano()})
			n.events = append(n.events, fmt.Sprintf("%.1fs %s %s (%.1fs)", time.Duration(from-n.began.UnixNano()).Seconds(), a, what, time.Duration(time.Now().UnixNano()-from).Seconds()))
			n.counts[a]++
		}
	}
}

// owner is the hub owning a random namespace now (a random hub if none).
func (n *fleetNemesis) owner() *fleetHub {
	id := n.owners.current(fleetNamespaces[n.rng.IntN(len(fleetNamespaces))])
	for _, h := range n.hubs {
		if h.id == id {
			return h
		}
	}
	return n.hubs[n.rng.IntN(len(n.hubs))]
}

func (n *fleetNemesis) restart(h *fleetHub) {
	if err := h.start(); err != nil {
		n.t.Errorf("nemesis: %v", err)
	}
}

func (n *fleetNemesis) act(a string) (what string) {
	switch a {
	case "kill-owner", "kill-hub":
		h := n.hubs[n.rng.IntN(len(n.hubs))]
		if a == "kill-owner" {
			h = n.owner()
		}
		h.kill()
		time.Sleep(time.Duration(n.rng.IntN(300)) * time.Millisecond)
		n.restart(h)
		return h.id
	case "pause-owner": // past its lease: another hub takes its namespaces
		h := n.owner()
		h.pause(n.ttl*13/10 + time.Duration(n.rng.Int64N(int64(n.ttl)*7/10)))
		return h.id
	case "kill-etcd-leader":
		i := n.etcd.leader()
		if i < 0 {
			n.failed[a]++
			return "no leader"
		}
		what = n.etcd.members[i].m.Name
		n.etcd.members[i].kill()
		time.Sleep(time.Duration(500+n.rng.IntN(1000)) * time.Millisecond)
		if err := n.etcd.members[i].start(); err != nil {
			n.t.Errorf("nemesis: restart etcd %d: %v", i, err)
			return what
		}
		if err := n.etcd.healthy(i, time.Minute); err != nil {
			n.t.Errorf("nemesis: %v", err)
		}
	case "move", "drain":
		h := n.hubs[n.rng.IntN(len(n.hubs))]
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, client.Options{URI: h.uri(), Name: "ops/nemesis", NoReconnect: true})
		if err != nil {
			n.failed[a]++
			return "dial " + h.id + " failed"
		}
		defer c.Close()
		target := n.hubs[n.rng.IntN(len(n.hubs))].id
		if a == "move" {
			// The default namespace moves like any other on the wire, but
			// ns_move names a namespace: alpha or beta here.
			ns := fleetNamespaces[n.rng.IntN(2)]
			what = ns + " to " + target
			_, err = c.Move(ctx, ns, target)
		} else {
			what = target
			_, err = c.Drain(ctx, target)
		}
		if err != nil {
			n.failed[a]++
			what += " failed: " + err.Error()
		}
	case "partition":
		from := time.Now().UnixNano()
		if err := n.net.partition(); err != nil {
			n.t.Errorf("nemesis: %v", err)
			return
		}
		what = n.netHub
		time.Sleep(n.ttl*12/10 + time.Duration(n.rng.Int64N(int64(n.ttl))))
		if err := n.net.heal(); err != nil {
			n.t.Errorf("nemesis: %v", err)
		}
		n.cuts = append(n.cuts, span{from, time.Now().UnixNano()})
	}
	return what
}

// fleetRun is one harness run against a fleet.
type fleetRun struct {
	kind      etcdKind
	duration  time.Duration
	ttl       time.Duration
	tags      string   // build tags of the hubs' binary (the broken build)
	only      []string // nemesis actions (nil: all)
	partition bool     // put one hub in a network namespace and cut it off

	ops      []porcupine.Operation
	nem      *fleetNemesis
	owners   *ownerLog
	problems []string
	result   porcupine.CheckResult
	info     porcupine.LinearizationInfo
	replays  int
	mailSent int
	retries  int
	took     time.Duration
}

func fleetDuration(t *testing.T, def time.Duration) time.Duration {
	if os.Getenv("LINZ_DURATION") == "" {
		return def
	}
	return runDuration(t)
}

// fleetOnly is the nemesis of a run: $LINZ_FLEET_NEMESIS, a comma list
// of fleetActions, or def.
func fleetOnly(def []string) []string {
	if s := os.Getenv("LINZ_FLEET_NEMESIS"); s != "" {
		return strings.Split(s, ",")
	}
	return def
}

func (r *fleetRun) execute(t *testing.T) {
	setup := time.Now()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %s, lease TTL %v", seed, r.kind, r.ttl)
	rng := rand.New(rand.NewPCG(seed, 99))

	var net *netPart
	host := "127.0.0.1"
	if r.partition {
		var err error
		if net, err = newNetPart(); err != nil {
			if os.Getenv("LINZ_REQUIRE_PARTITIONS") != "" {
				t.Fatalf("the partition nemesis needs network namespaces: %v", err)
			}
			t.Logf("NO PARTITIONS in this run (the rest of the nemesis runs): %v", err)
		} else {
			t.Cleanup(net.close)
			host = net.rootFront
		}
	}
	extra := ""
	if net != nil {
		extra = net.rootEtcdA
	}
	etcd := startEtcd(t, r.kind, extra)
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.endpoints(false), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	wctx, wstop := context.WithCancel(context.Background())
	defer wstop()
	owners := watchOwners(wctx, cli, "/synapse/v1/")
	r.owners = owners

	bin := testbin.SynapseTagged(t, r.tags)
	dir, err := os.MkdirTemp("", "linz-fleet-logs-") // kept when the run fails
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the hubs' logs are in %s", dir)
		} else {
			os.RemoveAll(dir)
		}
	})
	hubs := make([]*fleetHub, 3)
	for i := range hubs {
		h := &fleetHub{id: fmt.Sprintf("syn-%c", 'a'+i), bin: bin, host: host, port: testbin.FreePort(t), etcd: etcd.endpoints(false), ttl: r.ttl}
		if net != nil && i == 2 {
			h.net, h.host, h.etcd = net, net.nsFront, etcd.endpoints(true)
		}
		if h.log, err = os.Create(filepath.Join(dir, h.id+".log")); err != nil {
			t.Fatal(err)
		}
		hubs[i] = h
		if err := h.start(); err != nil {
			t.Fatal(err)
		}
		defer h.kill()
	}
	uris := make([]string, len(hubs))
	for i, h := range hubs {
		uris[i] = h.uri()
	}

	began := time.Now() // rounds and the nemesis's log count from here
	hist := &history{}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var all []string
	for _, ns := range fleetNamespaces {
		for k := 0; k < perNamespace; k++ {
			all = append(all, fleetAgent(ns, k))
		}
	}
	var workers []*worker
	for j, ns := range fleetNamespaces {
		peers := all[j*perNamespace : (j+1)*perNamespace]
		for k := 0; k < perNamespace; k++ {
			id := len(workers)
			w := &worker{id: id, name: fleetAgent(ns, k), uri: uris[id%len(uris)], uris: uris, peers: peers, all: all,
				space: fleetSpace(ns), held: map[string]*holding{}, rng: rand.New(rand.NewPCG(seed, uint64(id))), h: hist, began: began}
			workers = append(workers, w)
		}
	}
	for _, w := range workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
	nem := &fleetNemesis{t: t, hubs: hubs, etcd: etcd, net: net, owners: owners, ttl: r.ttl, rng: rng, only: r.only, began: began}
	if net != nil {
		nem.netHub = hubs[2].id
	}
	nem.run(ctx, r.duration)
	stop()
	wg.Wait()
	r.nem = nem

	t.Logf("workload and nemesis done after %s", time.Since(setup).Round(time.Second))
	// Recovery: every hub SIGKILLed at once and started again; then read
	// the fleet's registry through one hub into the history.
	for _, h := range hubs {
		h.kill()
	}
	for _, h := range hubs {
		if err := h.start(); err != nil {
			t.Fatal(err)
		}
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer rcancel()
	reader := &worker{id: len(workers), name: "ops/reader", uri: hubs[0].uri(), rng: rand.New(rand.NewPCG(seed, 1000))}
	var st *client.State
	var call, ret int64
	for {
		reader.dial(rctx)
		if reader.c == nil {
			t.Fatal("cannot reach a hub after recovery")
		}
		call = time.Now().UnixNano()
		st, err = reader.c.State(rctx)
		ret = time.Now().UnixNano()
		reader.c.Close()
		reader.c = nil
		if err == nil {
			break
		}
		if rctx.Err() != nil {
			t.Fatalf("state after recovery: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	live := map[string]Output{}
	for _, cl := range st.ActiveClaims {
		live[nsOf(cl.Owner)+"\x00"+cl.TaskID] = Output{Holder: cl.Owner, Epoch: cl.Epoch, Version: cl.Version, Checkpoint: cl.Checkpoint}
	}
	rounds := int(time.Since(began)/roundLength) + 1
	for _, ns := range fleetNamespaces {
		for round := 0; round < rounds; round++ {
			for i := 0; i < tasks; i++ {
				in := scopedIn(fleetSpace(ns), round, i, Input{Verb: VerbRead, Call: call, Return: ret})
				hist.add(len(workers), in, live[ns+"\x00"+in.Task])
			}
		}
	}

	r.ops = hist.ops
	r.problems = checkEpochOrder(r.ops)
	r.problems = append(r.problems, checkOfflineRefusalsIn(r.ops, workers, nem.windows, 1500*time.Millisecond)...)
	r.problems = append(r.problems, checkOwnership(r.ops, owners, ownerLag)...)
	r.problems = append(r.problems, checkCutOffGrants(r.ops, nem.netHub, nem.cuts, r.ttl)...)
	var more []string
	r.replays, more = checkIdemReplays(rctx, hubs[0].uri(), workers, 0)
	r.problems = append(r.problems, more...)
	r.mailSent, more = checkMailboxes(rctx, hubs[1].uri(), workers)
	r.problems = append(r.problems, more...)
	for _, w := range workers {
		r.retries += w.retries
	}
	if len(r.problems) > 0 {
		for _, h := range hubs {
			h.dump() // their goroutines, in the kept logs
		}
	}
	t.Logf("recovered and accounted after %s", time.Since(setup).Round(time.Second))
	r.result, r.info = porcupine.CheckOperationsVerbose(Model.ToModel(), r.ops, checkTimeout)
	r.took = time.Since(setup).Round(time.Second)
	byHub := map[string]int{}
	for _, op := range r.ops {
		if out := op.Output.(Output); out.Outcome == Granted && out.Hub != "" {
			byHub[out.Hub]++
		}
	}
	t.Logf("nemesis, from the start: %s", strings.Join(nem.events, "; "))
	t.Logf("refusals by code: %v; grants by hub: %v; nemesis: %v (refused or timed out: %v)", refusalCodes(r.ops), byHub, nem.counts, nem.failed)
	t.Logf("%s: %d operations (%d unknown, %d undecided refusals, %d resent after a lost connection) in %d namespaces × %d tasks × %d rounds, %d idem replays and %d acknowledged directed chats checked after recovery, %d accounting problems, %s",
		r.result, len(r.ops), countUnknown(r.ops), countOutcome(r.ops, Unavailable), r.retries, len(fleetNamespaces), tasks, rounds, r.replays, r.mailSent, len(r.problems), r.took)
}

func countOutcome(ops []porcupine.Operation, o Outcome) int {
	n := 0
	for _, op := range ops {
		if op.Output.(Output).Outcome == o {
			n++
		}
	}
	return n
}

// checkOwnership: every grant (claim or handoff) was made by a hub while
// it owned the grant's namespace (rules 1, 3, 4: no two hubs ever grant in
// one namespace at once). The harness's watch sees a stint end no earlier
// than it ended, so a grant called after the end of every stint of its hub
// is certainly outside them; a stint's start may be seen up to lag late.
func checkOwnership(ops []porcupine.Operation, owners *ownerLog, lag time.Duration) (problems []string) {
	n := 0
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if out.Outcome != Granted || out.Hub == "" || (in.Verb != VerbClaim && in.Verb != VerbHandoff) {
			continue
		}
		ns := nsOf(in.Agent)
		ok := false
		for _, s := range owners.stints(ns) {
			if s.hub == out.Hub && s.from <= in.Return+int64(lag) && s.to >= in.Call {
				ok = true
				break
			}
		}
		if !ok {
			if n < 5 {
				problems = append(problems, fmt.Sprintf("rules 1/4: %s granted %s's %s of %s in namespace %q outside every stint it owned it (%v)",
					out.Hub, in.Agent, verbName(in.Verb), in.Task, ns, describeStints(owners.stints(ns), in.Call)))
			}
			n++
		}
	}
	if n > 5 {
		problems = append(problems, fmt.Sprintf("rules 1/4: %d more grants outside their hub's ownership", n-5))
	}
	return problems
}

func verbName(v Verb) string {
	return [...]string{"claim", "release", "read", "update", "checkpoint", "handoff"}[v]
}

func describeStints(ss []stint, at int64) string {
	var parts []string
	for _, s := range ss {
		to := "now"
		if s.to != math.MaxInt64 {
			to = fmt.Sprintf("%+.3fs", float64(s.to-at)/1e9)
		}
		parts = append(parts, fmt.Sprintf("%s %+.3fs..%s", s.hub, float64(s.from-at)/1e9, to))
	}
	return "stints relative to the call: " + strings.Join(parts, ", ")
}

// checkCutOffGrants: a hub cut off from etcd stops granting before its
// lease can lapse (rules 3, 4). Its last renewal was at most a third of
// the TTL before the cut, so the lease may lapse two thirds of the TTL
// after it: no grant of that hub may be called later and answered before
// the cut healed (a call answered after the heal may have been decided
// after it).
func checkCutOffGrants(ops []porcupine.Operation, hub string, cuts []span, ttl time.Duration) (problems []string) {
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if out.Outcome != Granted || out.Hub != hub || hub == "" {
			continue
		}
		for _, c := range cuts {
			if in.Call > c.start+int64(2*ttl/3) && in.Return < c.end {
				problems = append(problems, fmt.Sprintf("rules 3/4: %s, cut off from etcd %.3f s before, granted %s's %s of %s",
					hub, float64(in.Call-c.start)/1e9, in.Agent, verbName(in.Verb), in.Task))
			}
		}
	}
	return problems
}

func (r *fleetRun) requireClean(t *testing.T) {
	t.Helper()
	for _, p := range r.problems {
		t.Error(p)
	}
	if r.result != porcupine.Ok {
		dir := dumpViolation(t, Model.ToModel(), r.info, r.ops)
		t.Fatalf("the fleet's history is %s (INV-ME-1/INV-EF-*/rules 1–4): history and visualisation in %s\n%s", r.result, dir, explainViolation(r.ops))
	}
}

// requireFleetRun: the bounded fleet runs (30 s of workload each, ~50 s
// with setup and recovery) are in the README's test command; -short
// leaves them out, as the other multi-process runs. LINZ_DURATION makes a
// long run of either (docs/scale-out.md, "The fleet harness").
func requireFleetRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three hubs and three etcd members")
	}
}

// The fleet on Debian's etcd 3.4 (three member processes) stays
// linearizable per task while the nemesis kills and pauses hubs (the
// owner of a namespace under load among them), kills the etcd leader,
// moves namespaces, drains hubs and cuts a hub off from etcd: one owner
// per task (INV-ME-1), fresh epochs rising across owners (INV-EF-1, rule
// 2), fences (INV-EF-2, INV-EF-3), every acknowledged claim, update,
// checkpoint and directed message there after every hub is SIGKILLed at
// once (INV-JA-1, INV-DG-3, rule 2), grants only by a namespace's owner
// (rules 1, 4), and none by a cut-off hub once its lease could lapse
// (rule 3).
func TestFleetLinearizable_Etcd34_UnderKillsPausesMovesAndPartitions_INV_ME_1_Rules_1_to_4(t *testing.T) {
	requireFleetRun(t)
	r := &fleetRun{kind: etcdDebian, duration: fleetDuration(t, fleetDefaultDuration), ttl: fleetTTL, partition: true, only: fleetOnly(nil)}
	r.execute(t)
	r.requireClean(t)
}

// The same on etcd 3.7, embedded in member processes of this test binary.
func TestFleetLinearizable_Etcd37_UnderKillsPausesMovesAndPartitions_INV_ME_1_Rules_1_to_4(t *testing.T) {
	requireFleetRun(t)
	r := &fleetRun{kind: etcdEmbedded, duration: fleetDuration(t, fleetDefaultDuration), ttl: fleetTTL, partition: true, only: fleetOnly(nil)}
	r.execute(t)
	r.requireClean(t)
}

// The fleet harness has teeth: hubs built with the deliberately broken
// tag synapse_unsafe_keep_serving never fence, keep a namespace another
// hub took, and write without the owner-key guard. Paused past their
// lease, they come back granting beside the new owner; the run must
// report it (rules 1, 4; INV-ME-1).
func TestFleetLinearizable_CatchesAHubServingPastItsLease_Rules_1_4(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three hubs and three etcd members")
	}
	r := &fleetRun{kind: etcdEmbedded, duration: 12 * time.Second, ttl: fleetTTL, tags: "synapse_unsafe_keep_serving", only: []string{"pause-owner"}}
	r.execute(t)
	if len(r.problems) == 0 && r.result == porcupine.Ok {
		t.Fatal("a fleet whose hubs serve past their lease passed every check")
	}
	for _, p := range r.problems[:min(3, len(r.problems))] {
		t.Logf("caught: %s", p)
	}
	t.Logf("porcupine: %s", r.result)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
