package linz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/journal"
)

// Run lengths. LINZ_DURATION (a Go duration, e.g. 10m) makes a long run;
// LINZ_OUT names the directory a violation is written to.
const (
	defaultDuration = 40 * time.Second
	minCrashes      = 10 // the run goes on until this many SIGKILLs, whatever the duration
	agents          = 6
	// roundLength is how long the agents work one set of task ids before
	// moving to fresh ones. Porcupine's memory grows faster than linearly
	// with a partition's length (a 12-minute history on four tasks took
	// 24 GB), so a long run is many bounded partitions, not four huge ones.
	roundLength  = 30 * time.Second
	callTimeout  = 8 * time.Second
	checkTimeout = 30 * time.Minute // porcupine gives up (result Unknown) after this
)

// history records operations from every worker. Times are the test's
// clock, which is also the hub's (one machine).
type history struct {
	mu  sync.Mutex
	ops []porcupine.Operation
}

func (h *history) add(client int, in Input, out Output) {
	op := porcupine.Operation{ClientId: client, Input: in, Call: in.Call, Output: out, Return: in.Return}
	if out.Outcome == Unknown {
		op.Return = math.MaxInt64 // may have applied at any time after the call
	}
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// worker is one agent issuing claim-family calls on a few tasks,
// redialling after every lost connection. Only its own
// goroutine touches it.
type worker struct {
	id   int
	name string
	uri  string
	// uris, on a fleet, are every hub: each (re)dial picks one, so calls
	// reach the namespace's owner directly or through another hub.
	uris []string
	// peers are the agents of the worker's namespace it hands off to;
	// all are every agent, whom it writes to. nil: the single hub's six.
	peers, all []string
	space      string // whose tasks and worktrees it works: scopedIn's ns ("" = the single hub's)
	c          *client.Client
	held       map[string]*holding // what our acknowledged answers say we hold
	rng        *rand.Rand
	h          *history
	idems      []idemGrant // acknowledged claims and their keys, replayed after recovery (INV-CR-1)
	seq        int
	retries    int // calls resent with their idem key after a lost connection
	began      time.Time

	mu    sync.Mutex
	spans []span // the worker's connections, for checking TARGET_OFFLINE refusals

	mail []sentMail // directed chats the hub acknowledged with a journal seq
}

// sentMail is an acknowledged directed chat: durable once the echo carries
// its journal seq, so the recipient's mailbox must replay it after any
// crash (INV-JA-1, INV-DG-3).
type sentMail struct {
	to, id string
	seq    int64
}

// span is one connection of a worker: from its registration (Dial
// returned) to the moment the client saw it end; end is 0 while open.
type span struct{ start, end int64 }

// layout is the tasks a round works and their file scopes: the tasks of a
// worktree overlap by ancestry (INV-ME-2) and as a whole-worktree claim
// (INV-ME-4); the same path in another worktree never contends (INV-ME-3).
var layout = []struct {
	tree, slot int
	path       string // "" claims the whole worktree
}{
	{0, 0, "a/b"}, // R-T0
	{0, 1, "a"},   // R-T1: the ancestor of T0 and T2
	{0, 2, "a/c"}, // R-T2: T0's sibling, never contends with it
	{1, 0, "a/b"}, // R-T3: T0's path in another worktree
	{1, 1, ""},    // R-T4: the whole of T3's worktree
}

var tasks = len(layout) // worked at once

func taskID(round, i int) string { return fmt.Sprintf("R%d-T%d", round, i) }

// scoped is the Input of a call on task i of round: its worktree, slot and
// path, which the model partitions and checks overlap by.
func scoped(round, i int, in Input) Input { return scopedIn("", round, i, in) }

// scopedIn is scoped in a namespace's own tasks and worktrees (a fleet's
// namespaces share neither; "" is the single hub's): task ids carry the
// namespace, since on a fleet a task id is unique per owner hub, not per
// namespace (docs/scale-out.md, "Left open").
func scopedIn(ns string, round, i int, in Input) Input {
	l := layout[i]
	base, id := "/linz", taskID(round, i)
	if ns != "" {
		base, id = "/linz/"+ns, ns+"."+id
	}
	in.Task, in.Worktree, in.Slot, in.Path = id, fmt.Sprintf("%s/R%d/w%d", base, round, l.tree), l.slot, l.path
	return in
}

// claimRequest is the claim of task in of round, with its declared scope.
func claimRequest(in Input, ttl time.Duration, key string) client.ClaimRequest {
	r := client.ClaimRequest{TaskID: in.Task, Worktree: in.Worktree, TTL: ttl, IdemKey: key}
	if in.Path != "" {
		r.Paths = []string{in.Path}
	}
	return r
}

// holding is a task a worker's acknowledged answers say it holds.
type holding struct{ epoch, version int64 }

type idemGrant struct {
	agent, key string
	in         Input // the task and its scope
	ttl        time.Duration
	epoch      int64
	acked      int64 // when its answer came (unix ns)
}

func (w *worker) dial(ctx context.Context) {
	for ctx.Err() == nil {
		uri := w.uri
		if len(w.uris) > 0 {
			uri = w.uris[w.rng.IntN(len(w.uris))]
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := client.Dial(dctx, client.Options{URI: uri, Name: w.name, NoReconnect: true})
		cancel()
		if err == nil {
			w.c = c
			w.mu.Lock()
			w.spans = append(w.spans, span{start: time.Now().UnixNano()})
			k := len(w.spans) - 1
			w.mu.Unlock()
			// The client closes its subscriptions when its socket ends.
			ended := c.Subscribe(context.Background(), func(client.Frame) bool { return false })
			go func() {
				for range ended {
				}
				w.mu.Lock()
				w.spans[k].end = time.Now().UnixNano()
				w.mu.Unlock()
			}()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// outcome sorts an error: a refusal is the hub's answer; anything else
// (a dropped socket, a timeout, an unreachable hub) leaves the call's
// effect unknown.
func outcome(err error) Outcome {
	var r *client.Refused
	switch {
	case err == nil:
		return Granted
	case errors.As(err, &r) && lostForward(r):
		return Unknown // the owner may or may not have applied it
	case errors.As(err, &r):
		return Denied
	default:
		return Unknown
	}
}

// answer is the Output of a call that returned err.
func answer(err error) Output {
	out := Output{Outcome: outcome(err)}
	var r *client.Refused
	if errors.As(err, &r) {
		out.Code = r.Code
		if out.Code == "" {
			out.Code = r.Message
		}
		out.By = r.Holder
		if undecided(r) {
			out.Outcome = Unavailable
		}
	}
	return out
}

// undecided reports a fleet's refusal that promises nothing was decided:
// the namespace was changing hands (or its store did not answer), or its
// owner could not be reached before the request was sent. A forward lost
// after it was sent says the owner may have applied it: that one is not
// undecided, and outcome's caller records it as unknown (see call).
func undecided(r *client.Refused) bool {
	switch r.Code {
	case "NAMESPACE_MOVING", "NAMESPACE_NOT_OWNED": // the latter: a forward the receiver would not serve
		return true
	case "OWNER_UNREACHABLE":
		return !strings.Contains(r.Message, "may or may not")
	}
	return false
}

// lostForward reports a fleet's refusal that leaves the outcome unknown:
// a request forwarded to its namespace's owner and lost after it was sent,
// or one whose etcd transaction timed out (OUTCOME_UNKNOWN): the owner may
// or may not have applied it.
func lostForward(r *client.Refused) bool {
	return r.Code == "OUTCOME_UNKNOWN" || r.Code == "OWNER_UNREACHABLE" && strings.Contains(r.Message, "may or may not")
}

// errLost is a call whose outcome is unknown though its last attempt was
// refused: an earlier attempt was lost after it was sent.
type errLost struct{ last error }

func (e errLost) Error() string { return "an earlier attempt was lost; then: " + e.last.Error() }

// call runs op with an idem key, retrying on a new connection after a
// lost one with the same key, so the retry applies at most once
// (INV-CR-1). The recorded operation spans every attempt.
// A verb without an idem key (checkpoint) gets one attempt.
func (w *worker) call(ctx context.Context, attempts int, op func(context.Context) error) (start, end int64, err error) {
	start = time.Now().UnixNano()
	lost, waits := false, 0
	for attempt := 0; attempt < attempts; attempt++ {
		if w.c == nil {
			w.dial(ctx)
			if w.c == nil { // the run ended while the hub was down
				if err == nil {
					err = ctx.Err()
				}
				break
			}
		}
		if attempt > 0 {
			w.retries++
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err = op(cctx)
		cancel()
		var r *client.Refused
		if errors.As(err, &r) && undecided(r) && waits < 20 && ctx.Err() == nil {
			// Nothing was decided (a fleet's namespace changing hands):
			// ask again shortly, as a client would, without using up an
			// attempt.
			waits++
			attempt--
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if o := outcome(err); o != Unknown {
			if lost && o == Denied && undecided(r) {
				err = errLost{err}
			}
			return start, time.Now().UnixNano(), err
		}
		lost = true
		w.c.Close()
		w.c = nil
	}
	return start, time.Now().UnixNano(), err
}

// at is the Input of one of the worker's calls on task t.
func (w *worker) at(t Input, v Verb, epoch int64) Input {
	t.Verb, t.Agent, t.Epoch = v, w.name, epoch
	return t
}

func (w *worker) claim(ctx context.Context, t Input) {
	w.seq++
	key := fmt.Sprintf("%s-c%d", w.name, w.seq)
	ttl := 2 * time.Second
	if w.rng.IntN(5) == 0 {
		ttl = 20 * time.Second // outlives pauses: acknowledged grants that must survive crashes
	}
	var cl *client.Claim
	in := w.at(t, VerbClaim, 0)
	var err error
	in.Call, in.Return, err = w.call(ctx, 3, func(cctx context.Context) (e error) {
		cl, e = w.c.Claim(cctx, claimRequest(in, ttl, key))
		return e
	})
	out := answer(err)
	switch out.Outcome {
	case Granted:
		out.Epoch, out.Expires, out.Version, out.Checkpoint, out.Hub = cl.Epoch, int64(cl.LeaseExpiresAt*1e9), cl.Version, cl.Checkpoint, cl.HubID
		w.held[t.Task] = &holding{cl.Epoch, cl.Version}
		w.idems = append(w.idems, idemGrant{w.name, key, t, ttl, cl.Epoch, in.Return})
	case Unknown:
		delete(w.held, t.Task) // we may hold it with an epoch we never saw
	}
	w.h.add(w.id, in, out)
}

func (w *worker) release(ctx context.Context, t Input, epoch int64) {
	w.seq++
	key := fmt.Sprintf("%s-r%d", w.name, w.seq)
	in := w.at(t, VerbRelease, epoch)
	var err error
	in.Call, in.Return, err = w.call(ctx, 3, func(cctx context.Context) error {
		_, e := w.c.Release(cctx, t.Task, client.ReleaseOptions{Epoch: epoch, IdemKey: key})
		return e
	})
	out := answer(err)
	delete(w.held, t.Task)
	w.h.add(w.id, in, out)
}

// update is a fenced task_update, a compare-and-set on the version we last
// saw when cas (INV-EF-3).
func (w *worker) update(ctx context.Context, t Input, hd *holding, cas bool) {
	w.seq++
	key := fmt.Sprintf("%s-u%d", w.name, w.seq)
	in := w.at(t, VerbUpdate, hd.epoch)
	in.Expected = -1
	req := client.UpdateRequest{TaskID: t.Task, Note: key, Epoch: hd.epoch, IdemKey: key}
	if cas {
		v := hd.version
		in.Expected, req.ExpectedVersion = v, &v
	}
	var u *client.TaskUpdated
	var err error
	in.Call, in.Return, err = w.call(ctx, 3, func(cctx context.Context) (e error) {
		u, e = w.c.Update(cctx, req)
		return e
	})
	out := answer(err)
	w.settle(t.Task, out, func() { out.Version = u.Version; hd.version = u.Version })
	w.h.add(w.id, in, out)
}

// checkpoint is a fenced checkpoint. The verb takes no idem key, so a
// lost connection is not retried: its outcome stays unknown.
func (w *worker) checkpoint(ctx context.Context, t Input, hd *holding) {
	w.seq++
	in := w.at(t, VerbCheckpoint, hd.epoch)
	in.Checkpoint = fmt.Sprintf("%s-cp%d", w.name, w.seq)
	var v int64
	var err error
	in.Call, in.Return, err = w.call(ctx, 1, func(cctx context.Context) (e error) {
		v, e = w.c.Checkpoint(cctx, t.Task, in.Checkpoint, hd.epoch)
		return e
	})
	out := answer(err)
	w.settle(t.Task, out, func() { out.Version = v; hd.version = v })
	w.h.add(w.id, in, out)
}

// handoff passes a held task to another agent (INV-CR-2).
func (w *worker) handoff(ctx context.Context, t Input, hd *holding) {
	w.seq++
	key := fmt.Sprintf("%s-h%d", w.name, w.seq)
	to := w.other(w.peers)
	in := w.at(t, VerbHandoff, hd.epoch)
	in.To = to
	var cl *client.Claim
	var err error
	in.Call, in.Return, err = w.call(ctx, 3, func(cctx context.Context) (e error) {
		cl, e = w.c.Handoff(cctx, client.HandoffRequest{TaskID: t.Task, To: to, Epoch: hd.epoch, IdemKey: key})
		return e
	})
	out := answer(err)
	out.Offline = out.Code == "TARGET_OFFLINE"
	if out.Outcome == Granted {
		out.Epoch, out.Expires, out.Checkpoint, out.Hub = cl.Epoch, int64(cl.LeaseExpiresAt*1e9), cl.Checkpoint, cl.HubID
	}
	delete(w.held, t.Task)
	w.h.add(w.id, in, out)
}

// send sends a directed chat to another agent, connected or not. Chat is
// at-least-once and carries no idem key (INV-DG-1), so a lost connection
// is not retried; only an acknowledged chat is recorded.
func (w *worker) send(ctx context.Context) {
	w.seq++
	to := w.other(w.all)
	id := fmt.Sprintf("%s-m%d", w.name, w.seq)
	var sent *client.Sent
	_, _, err := w.call(ctx, 1, func(cctx context.Context) (e error) {
		sent, e = w.c.Send(cctx, to, "linz "+id, client.SendOptions{ClientMsgID: id})
		return e
	})
	if err == nil && sent.Seq > 0 {
		w.mail = append(w.mail, sentMail{to, id, sent.Seq})
	}
}

// other is a random agent of names other than the worker; with names nil,
// one of the single hub's six.
func (w *worker) other(names []string) string {
	if names == nil {
		return fmt.Sprintf("linz/agent%d", (w.id+1+w.rng.IntN(agents-1))%agents)
	}
	for {
		if n := names[w.rng.IntN(len(names))]; n != w.name {
			return n
		}
	}
}

// settle updates what we hold after a fenced call: a grant runs onGrant,
// anything else means we may no longer hold the task as we think.
func (w *worker) settle(task string, out Output, onGrant func()) {
	if out.Outcome == Granted {
		onGrant()
		return
	}
	delete(w.held, task)
}

// run issues random operations until ctx ends: claims of any task; on held
// ones renewals, releases, updates, checkpoints and handoffs with the
// epoch and version last seen and, now and then, a stale epoch or a wrong
// version that must be refused (INV-EF-2, INV-EF-3).
func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		if w.rng.IntN(10) == 0 {
			w.send(ctx)
			continue
		}
		task := scopedIn(w.space, int(time.Since(w.began)/roundLength), w.rng.IntN(tasks), Input{})
		hd, mine := w.held[task.Task]
		switch r := w.rng.IntN(20); {
		case !mine || r < 5:
			w.claim(ctx, task)
		case r < 6:
			w.release(ctx, task, hd.epoch-1)
		case r < 9:
			w.release(ctx, task, hd.epoch)
		case r < 13:
			w.update(ctx, task, hd, r != 12)
		case r < 15:
			w.update(ctx, task, &holding{hd.epoch, hd.version + 1}, true) // a version not reached: refused
		case r < 18:
			w.checkpoint(ctx, task, hd)
		default:
			w.handoff(ctx, task, hd)
		}
	}
	if w.c != nil {
		w.c.Close()
	}
}

// nemesis SIGKILLs and restarts the hub on the same journal and port, and
// pauses it with SIGSTOP/SIGCONT longer than the short leases, until the
// duration has passed and at least minCrashes kills were done.
type nemesis struct {
	crashes, pauses int
	shocks          []int64 // when each kill or pause began
}

func (n *nemesis) run(t *testing.T, hub *hubProc, d time.Duration, minCrashes int, rng *rand.Rand) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) || n.crashes < minCrashes {
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		n.shocks = append(n.shocks, time.Now().UnixNano())
		if rng.IntN(3) == 0 {
			hub.pause(time.Duration(2500+rng.IntN(1500)) * time.Millisecond)
			n.pauses++
			continue
		}
		hub.kill()
		if err := hub.start(); err != nil {
			t.Errorf("restart %d: %v", n.crashes+1, err)
			return
		}
		n.crashes++
	}
}

func runDuration(t *testing.T) time.Duration {
	s := os.Getenv("LINZ_DURATION")
	if s == "" {
		return defaultDuration
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("LINZ_DURATION: %v", err)
	}
	return d
}

// run is one harness run against a hub process.
type run struct {
	duration   time.Duration
	minCrashes int
	noJournal  bool // the hub keeps everything in memory (--no-db): the harness's self-check
	// hubArgs are more `synapse hub` flags (the journal's windows);
	// idemWindow is the --idempotency-window among them (0: the default,
	// longer than any run), which the replay check allows for.
	hubArgs    []string
	idemWindow time.Duration
	db         string // the hub's journal, for checks after the run

	ops             []porcupine.Operation
	crashes, pauses int
	retries         int
	replays         int
	mailSent        int      // acknowledged directed chats, each found in its recipient's mailbox after recovery
	problems        []string // zero-loss accounting outside the model
	result          porcupine.CheckResult
	info            porcupine.LinearizationInfo
	took            time.Duration
}

// execute runs the workers against the hub under the nemesis, then kills
// the hub once more, reads the recovered registry into the history and
// checks it all.
func (r *run) execute(t *testing.T) {
	began := time.Now()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	hub := &hubProc{bin: synapseBinary(t), db: filepath.Join(t.TempDir(), "hub.db"), port: freePort(t), noDB: r.noJournal, args: r.hubArgs}
	r.db = hub.db
	if err := hub.start(); err != nil {
		t.Fatal(err)
	}
	defer hub.kill()

	h := &history{}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	workers := make([]*worker, agents)
	for i := range workers {
		w := &worker{id: i, name: fmt.Sprintf("linz/agent%d", i), uri: hub.uri(), held: map[string]*holding{},
			rng: rand.New(rand.NewPCG(seed, uint64(i))), h: h, began: began}
		workers[i] = w
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
	nem := &nemesis{}
	nem.run(t, hub, r.duration, r.minCrashes, rand.New(rand.NewPCG(seed, 99)))
	stop()
	wg.Wait()

	// Recovery: one more SIGKILL, then read the registry the journal holds.
	hub.kill()
	if err := hub.start(); err != nil {
		t.Fatal(err)
	}
	nem.crashes++
	reader := &worker{id: agents, name: "linz/reader", uri: hub.uri()}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	reader.dial(rctx)
	call := time.Now().UnixNano()
	st, err := reader.c.State(rctx)
	ret := time.Now().UnixNano()
	if err != nil {
		t.Fatalf("state after recovery: %v", err)
	}
	live := map[string]Output{}
	for _, cl := range st.ActiveClaims {
		live[cl.TaskID] = Output{Holder: cl.Owner, Epoch: cl.Epoch, Version: cl.Version, Checkpoint: cl.Checkpoint}
	}
	rounds := int(time.Since(began)/roundLength) + 1
	for round := 0; round < rounds; round++ {
		for i := 0; i < tasks; i++ {
			in := scoped(round, i, Input{Verb: VerbRead, Call: call, Return: ret})
			h.add(agents, in, live[in.Task])
		}
	}
	reader.c.Close()

	r.ops, r.crashes, r.pauses = h.ops, nem.crashes, nem.pauses
	r.problems = checkEpochOrder(h.ops)
	r.problems = append(r.problems, checkOfflineRefusals(h.ops, workers, nem.shocks)...)
	var idemProblems []string
	r.replays, idemProblems = checkIdemReplays(rctx, hub.uri(), workers, r.idemWindow)
	r.problems = append(r.problems, idemProblems...)
	var mailProblems []string
	r.mailSent, mailProblems = checkMailboxes(rctx, hub.uri(), workers)
	r.problems = append(r.problems, mailProblems...)
	for _, w := range workers {
		r.retries += w.retries
	}
	r.result, r.info = porcupine.CheckOperationsVerbose(Model.ToModel(), h.ops, checkTimeout)
	r.took = time.Since(began).Round(time.Second)
	t.Logf("refusals by code: %v; grants carrying another agent's checkpoint (a lapse taken over, INV-CR-3, or a handed-off claim renewed): %d", refusalCodes(r.ops), resumes(r.ops))
	t.Logf("%s: %d operations (%d unknown outcomes, %d resent after a lost connection) on %d tasks (%d rounds), %d crashes, %d pauses, %d idem replays after recovery, %d acknowledged directed chats checked in the recovered mailboxes, %d accounting problems, %s",
		r.result, len(r.ops), countUnknown(r.ops), r.retries, tasks*rounds, rounds, r.crashes, r.pauses, r.replays, r.mailSent, len(r.problems), r.took)
}

// requireClean fails the test on any accounting problem and on a history
// porcupine cannot linearize (dumping it for the visualiser).
func (r *run) requireClean(t *testing.T) {
	t.Helper()
	for _, p := range r.problems {
		t.Error(p)
	}
	if r.result != porcupine.Ok {
		dir := dumpViolation(t, Model.ToModel(), r.info, r.ops)
		t.Fatalf("history is %s (INV-ME-1/INV-EF-*/INV-LL-2): history and visualisation in %s", r.result, dir)
	}
}

// The claim registry of a real hub process stays linearizable while a
// nemesis SIGKILLs, restarts and pauses it: claims, renewals, releases,
// task_update, checkpoint and handoff keep one owner per task (INV-ME-1),
// fresh epochs (INV-EF-1), stale epochs fenced (INV-EF-2), the version
// guard (INV-EF-3), leases lapsing only at their deadline (INV-LL-2),
// handoff without a window (INV-CR-2), retries applied once (INV-CR-1). After
// the run the hub is killed once more and the recovered registry is read
// into the same history, so every acknowledged mutation must be in the
// journal (INV-JA-1); epochs rise in real time across every restart
// (INV-EF-1), and every acknowledged claim's idem key still replays its
// first answer after recovery (INV-CR-1).
func TestLinearizable_ClaimRegistry_UnderCrashesAndPauses_INV_ME_1_INV_EF_1_INV_CR_1(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a hub process for about a minute")
	}
	r := &run{duration: runDuration(t), minCrashes: minCrashes}
	r.execute(t)
	r.requireClean(t)
}

// The same proofs with the journal's windows turned aggressive, so they
// cover snapshots, online compaction, retention and the incremental vacuum
// as they run under SIGKILL and SIGSTOP (issue 24): a snapshot every 200
// records, compaction 4 rows per transaction, chat, receipts and audit
// kept 2 s, idempotency records 5 s. Acknowledged claims and epochs must
// survive (INV-JA-1, INV-EF-1), a retry inside the window replays its first
// answer and one within two windows is refused, never applied again
// (INV-CR-1), and every acknowledged directed chat, never acknowledged by
// its recipient, is still in its mailbox (INV-DG-3).
func TestLinearizable_AggressiveJournalWindows_INV_JA_1_INV_CR_1_INV_DG_3(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a hub process for half a minute")
	}
	const window = 5 * time.Second
	r := &run{duration: runDuration(t) / 2, minCrashes: minCrashes / 2, idemWindow: window,
		hubArgs: []string{"--snapshot-every", "200", "--journal-compact-batch", "4",
			"--retain", "chat=2s,receipts=2s,audit=2s", "--idempotency-window", window.String()}}
	r.execute(t)
	r.requireClean(t)
	st, err := journal.Open(r.db, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k, err := st.Kept()
	snaps, _ := st.Snapshots()
	last, _ := st.LastSeq()
	if err != nil || len(snaps) == 0 || k.ReplayRows > 2*200 || k.Tombstones == 0 {
		t.Fatalf("the windows did not run: %+v, %d snapshots, last seq %d (%v)", k, len(snaps), last, err)
	}
	t.Logf("journal after the run: last seq %d, %d rows to replay, %d idempotency records, %d expired keys, %d chat rows, %d directed waiting",
		last, k.ReplayRows, k.Operations, k.Tombstones, k.Chats, k.DirectedWaiting)
}

// The harness has teeth: against a hub that keeps its registry in memory
// (--no-db), so a SIGKILL forgets every acknowledged claim, the same run
// reports lost mutations or epochs that go backwards (INV-JA-1, INV-EF-1).
func TestLinearizable_CatchesAHubThatForgetsOnCrash_INV_JA_1(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a hub process")
	}
	r := &run{duration: 3 * time.Second, minCrashes: 2, noJournal: true}
	r.execute(t)
	if len(r.problems) == 0 && r.result == porcupine.Ok {
		t.Fatal("a hub without a journal passed every check")
	}
	for _, p := range r.problems[:min(3, len(r.problems))] {
		t.Logf("caught: %s", p)
	}
}

// refusalCodes counts the refusals of a history by the hub's code, so a
// run shows which rules it exercised.
func refusalCodes(ops []porcupine.Operation) map[string]int {
	n := map[string]int{}
	for _, op := range ops {
		if out := op.Output.(Output); out.Outcome == Denied {
			n[out.Code]++
		}
	}
	return n
}

// resumes counts the grants carrying a checkpoint another agent saved: a
// lapsed claim's work taken over (INV-CR-3), or a handed-off claim renewed.
func resumes(ops []porcupine.Operation) int {
	n := 0
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Verb == VerbClaim && out.Outcome == Granted && out.Checkpoint != "" && !strings.HasPrefix(out.Checkpoint, in.Agent+"-") {
			n++
		}
	}
	return n
}

func countUnknown(ops []porcupine.Operation) int {
	n := 0
	for _, op := range ops {
		if op.Output.(Output).Outcome == Unknown {
			n++
		}
	}
	return n
}

// checkEpochOrder: acknowledged grants carry unique epochs, and a grant
// acknowledged before another was asked for has the smaller epoch — across
// every restart (INV-EF-1) and, on a fleet, within each namespace across
// every owner it had (rule 2: epochs strictly increase across owners).
func checkEpochOrder(ops []porcupine.Operation) (problems []string) {
	byNS := map[string][]porcupine.Operation{}
	var order []string
	for _, op := range ops {
		ns := nsOf(op.Input.(Input).Agent)
		if _, ok := byNS[ns]; !ok {
			order = append(order, ns)
		}
		byNS[ns] = append(byNS[ns], op)
	}
	for _, ns := range order {
		problems = append(problems, checkEpochOrderIn(byNS[ns])...)
	}
	return problems
}

// nsOf is an agent's namespace: what precedes its first '/', "" for a
// bare name (a fleet's default namespace).
func nsOf(agent string) string {
	if ns, _, ok := strings.Cut(agent, "/"); ok {
		return ns
	}
	return ""
}

func checkEpochOrderIn(ops []porcupine.Operation) (problems []string) {
	var grants []porcupine.Operation
	seen := map[int64]bool{}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Verb != VerbClaim || out.Outcome != Granted {
			continue
		}
		if seen[out.Epoch] {
			// An idem replay repeats an epoch only for the same retried call,
			// and each call is one operation here.
			problems = append(problems, fmt.Sprintf("INV-EF-1: epoch %d granted twice", out.Epoch))
		}
		seen[out.Epoch] = true
		grants = append(grants, op)
	}
	byReturn := append([]porcupine.Operation(nil), grants...)
	sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
	sort.Slice(grants, func(i, j int) bool { return grants[i].Call < grants[j].Call })
	var maxDone int64
	k := 0
	for _, g := range grants {
		for k < len(byReturn) && byReturn[k].Return < g.Call {
			maxDone = max(maxDone, byReturn[k].Output.(Output).Epoch)
			k++
		}
		if e := g.Output.(Output).Epoch; e <= maxDone {
			problems = append(problems, fmt.Sprintf("INV-EF-1: %s got epoch %d after epoch %d was acknowledged", g.Input.(Input).Agent, e, maxDone))
		}
	}
	return problems
}

// offlineMargin is how long after a handoff's return the recipient's
// connection must still be up for a TARGET_OFFLINE refusal to count as
// wrong: a hub that dropped the recipient before deciding has closed its
// socket by then, and the recipient's client has seen it.
const offlineMargin = 2 * time.Second

// checkOfflineRefusals: a handoff may be refused TARGET_OFFLINE only when
// the recipient may really have been offline. The model cannot know, so it
// is checked here: the refusal is wrong when the recipient had registered
// before the call, its connection stayed up until well after the return,
// and the hub was neither killed nor paused in between (INV-CR-2).
func checkOfflineRefusals(ops []porcupine.Operation, workers []*worker, shocks []int64) (problems []string) {
	windows := make([]span, len(shocks))
	for i, t := range shocks {
		windows[i] = span{t, t}
	}
	return checkOfflineRefusalsIn(ops, workers, windows, 0)
}

// checkOfflineRefusalsIn is checkOfflineRefusals with the nemesis's
// disruptions as windows (a hub down, paused or cut off, a move), and
// settle, how long after registering a connection must have been up
// before the call: on a fleet, the hub that decides learns of an agent on
// another hub from that hub's roster, up to about a second late.
func checkOfflineRefusalsIn(ops []porcupine.Operation, workers []*worker, shocks []span, settle time.Duration) (problems []string) {
	byName := map[string]*worker{}
	for _, w := range workers {
		byName[w.name] = w
	}
	shocked := func(from, to int64) bool {
		for _, s := range shocks {
			if s.start <= to && s.end >= from {
				return true
			}
		}
		return false
	}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Verb != VerbHandoff || !out.Offline {
			continue
		}
		w := byName[in.To]
		w.mu.Lock()
		for _, sp := range w.spans {
			if sp.end == 0 { // open still, or its end not yet seen
				sp.end = math.MaxInt64
			}
			if sp.start+int64(settle) < in.Call && sp.end > in.Return+int64(offlineMargin) && !shocked(sp.start, in.Return+int64(offlineMargin)) {
				problems = append(problems, fmt.Sprintf("INV-CR-2: %s's handoff of %s to %s was refused TARGET_OFFLINE while %s was connected (%.3f s after it registered)",
					in.Agent, in.Task, in.To, in.To, float64(in.Call-sp.start)/1e9))
				break
			}
		}
		w.mu.Unlock()
	}
	return problems
}

// checkIdemReplays resends, after recovery, up to 20 acknowledged claims
// with their idem keys: each must replay its first grant, epoch and all,
// not act again (INV-CR-1: at most once across a restart).
func checkIdemReplays(ctx context.Context, uri string, workers []*worker, window time.Duration) (n int, problems []string) {
	for _, w := range workers {
		if len(w.idems) == 0 {
			continue
		}
		c, err := client.Dial(ctx, client.Options{URI: uri, Name: w.name, NoReconnect: true})
		if err != nil {
			problems = append(problems, fmt.Sprintf("redial %s: %v", w.name, err))
			continue
		}
		for _, g := range w.idems[max(0, len(w.idems)-4):] {
			// Inside the window the first answer is promised; within two
			// windows that, or idempotency_expired (never a second
			// application); past two windows the key is new.
			age := time.Duration(time.Now().UnixNano() - g.acked)
			if window > 0 && age >= 2*window {
				continue
			}
			cl, err := c.Claim(ctx, claimRequest(g.in, g.ttl, g.key))
			n++
			var ref *client.Refused
			switch {
			case window > 0 && age >= window && errors.As(err, &ref) && ref.Code == "idempotency_expired":
			case err != nil:
				problems = append(problems, fmt.Sprintf("INV-CR-1: replay of %s's claim %s (epoch %d, %s old) after recovery: %v", g.agent, g.key, g.epoch, age.Round(time.Millisecond), err))
			case cl.Epoch != g.epoch:
				problems = append(problems, fmt.Sprintf("INV-CR-1: replay of %s's claim %s acted again: epoch %d, first answer %d", g.agent, g.key, cl.Epoch, g.epoch))
			}
		}
		c.Close()
	}
	return n, problems
}

// checkMailboxes reads, after recovery, each agent's whole mailbox (no
// agent ever acks, so its replay starts at the beginning): every directed
// chat the hub acknowledged with a journal seq must be in its recipient's
// replay, with that seq (INV-JA-1, INV-DG-3).
func checkMailboxes(ctx context.Context, uri string, workers []*worker) (n int, problems []string) {
	want := map[string][]sentMail{}
	for _, w := range workers {
		for _, m := range w.mail {
			want[m.to] = append(want[m.to], m)
			n++
		}
	}
	for _, w := range workers {
		c, err := client.Dial(ctx, client.Options{URI: uri, Name: w.name, NoReconnect: true})
		if err != nil {
			problems = append(problems, fmt.Sprintf("redial %s for its mailbox: %v", w.name, err))
			continue
		}
		frames, err := c.Inbox(ctx)
		c.Close()
		if err != nil {
			problems = append(problems, fmt.Sprintf("mailbox of %s: %v", w.name, err))
			continue
		}
		got := map[string]int64{}
		for _, f := range frames {
			got[f.String("client_msg_id")] = f.Seq()
		}
		lost := 0
		for _, m := range want[w.name] {
			if seq, ok := got[m.id]; !ok || seq != m.seq {
				if lost < 3 {
					problems = append(problems, fmt.Sprintf("INV-JA-1/INV-DG-3: directed chat %s to %s (seq %d) acknowledged, not in its mailbox after recovery (found seq %d)", m.id, w.name, m.seq, seq))
				}
				lost++
			}
		}
		if lost > 3 {
			problems = append(problems, fmt.Sprintf("INV-JA-1/INV-DG-3: %d more acknowledged directed chats to %s lost", lost-3, w.name))
		}
	}
	return n, problems
}

// dumpViolation writes the history (JSON) and porcupine's visualisation
// (HTML) to LINZ_OUT or a fresh temporary directory that outlives the test.
func dumpViolation(t *testing.T, m porcupine.Model, info porcupine.LinearizationInfo, ops []porcupine.Operation) string {
	t.Helper()
	dir := os.Getenv("LINZ_OUT")
	var err error
	if dir == "" {
		dir, err = os.MkdirTemp("", "linz-violation-")
	} else {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		t.Errorf("violation dir: %v", err)
		return ""
	}
	if err := porcupine.VisualizePath(m, info, filepath.Join(dir, "linearizability.html")); err != nil {
		t.Errorf("visualise: %v", err)
	}
	b, _ := json.MarshalIndent(ops, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644); err != nil {
		t.Errorf("write history: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "explanation.txt"), []byte(explainViolation(ops)), 0o644); err != nil {
		t.Errorf("write explanation: %v", err)
	}
	return dir
}

// explainViolation finds the first partition porcupine cannot linearize
// and the shortest prefix of it (in call order) that is already illegal,
// and describes that prefix's last operations: where to start reading a
// violation.
func explainViolation(ops []porcupine.Operation) string {
	m := Model.ToModel()
	for _, part := range Model.Partition(ops) {
		if porcupine.CheckOperations(m, part) {
			continue
		}
		sorted := slices.Clone(part)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
		lo, hi := 1, len(sorted) // the shortest illegal prefix is sorted[:hi]
		for lo < hi {
			mid := (lo + hi) / 2
			if porcupine.CheckOperations(m, sorted[:mid]) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		t0 := sorted[0].Call
		var b strings.Builder
		fmt.Fprintf(&b, "worktree %s: illegal once its first %d operations (of %d) are in; the last of them, by call time (s from the partition's first call):\n",
			sorted[0].Input.(Input).Worktree, hi, len(sorted))
		for _, op := range sorted[max(0, hi-25):hi] {
			ret := "∞"
			if op.Return != math.MaxInt64 {
				ret = fmt.Sprintf("%.3f", float64(op.Return-t0)/1e9)
			}
			hub := ""
			if h := op.Output.(Output).Hub; h != "" {
				hub = " @" + h
			}
			if by := op.Output.(Output).By; by != "" {
				hub = " (held by " + by + ")"
			}
			fmt.Fprintf(&b, "  [%.3f, %s] c%d %s%s\n", float64(op.Call-t0)/1e9, ret, op.ClientId, m.DescribeOperation(op.Input, op.Output), hub)
		}
		return b.String()
	}
	return "every partition is linearizable on its own"
}
