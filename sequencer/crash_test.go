package sequencer

// Crash tests with real processes (spec §4-§6). TestCrash_… re-executes this
// test binary as a hub child (TestCrashChild, with SYNAPSE_CRASH_CHILD set to
// the journal path) that replays the journal, runs a sequencer on it with
// the real clock, serves commands read as JSON lines from stdin and writes
// one ack line per command to stdout only once Submit returned, that is
// after its batch committed. The parent kills the child with SIGKILL at a
// random moment, checks the file against every ack it ever read, restarts
// the child on the same file, and re-sends idempotent requests of earlier
// lives.
//
// Who owns what: in the child, the stdin loop owns the input and starts a
// goroutine per command (at most crashChildWorkers at once); ack lines are
// written whole under a mutex. In the parent, the test goroutine owns the
// child process and the journal checks; the writer and reader goroutines of
// a cycle share crashRun's command log under crashRun.mu.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

const (
	crashChildEnv     = "SYNAPSE_CRASH_CHILD" // the journal path; set only in a child
	crashSlowEnv      = "SYNAPSE_CRASH_SLOW"  // a child's slow disk: the longest delay before an append
	crashSeedEnv      = "SYNAPSE_CRASH_SEED"  // reruns a failing run's random choices
	crashChildWorkers = 32                    // commands a child submits at once
	crashWindow       = 64                    // commands the parent keeps in flight
	crashRetries      = 8                     // idempotent requests re-sent per restart
	crashBurst        = 8                     // most commands the parent sends in one millisecond
)

// crashCmd is one command line the parent sends a child. Every command but
// a release carries a nonce unique to it (the claim, update or handoff note,
// the checkpoint token), so its journal row can be found; a retry is the
// same line with a new ID.
type crashCmd struct {
	ID       int      `json:"id"`
	Op       string   `json:"op"` // claim, release, task_update, checkpoint, handoff
	Agent    string   `json:"agent"`
	Task     string   `json:"task"`
	Nonce    string   `json:"nonce,omitempty"`
	Worktree string   `json:"worktree,omitempty"`
	Paths    []string `json:"paths,omitempty"`
	To       string   `json:"to,omitempty"`
	Status   string   `json:"status,omitempty"`
	Epoch    int64    `json:"epoch,omitempty"` // 0: no epoch fence
	IdemKey  string   `json:"idem_key,omitempty"`
}

// crashAck is one ack line of a child: what Submit returned, once it did.
type crashAck struct {
	ID       int    `json:"id"`
	OK       bool   `json:"ok,omitempty"`
	Code     string `json:"code,omitempty"` // the refusal
	Err      string `json:"err,omitempty"`  // a Submit error
	Epoch    int64  `json:"epoch,omitempty"`
	Version  int64  `json:"version,omitempty"`
	Seq      int64  `json:"seq,omitempty"`
	Replayed bool   `json:"replayed,omitempty"`
	Ready    bool   `json:"ready,omitempty"` // the first line: replay is done
}

// crashResponse is the response stored for an idempotent request, so that
// a replay can report the epoch the first request got.
type crashResponse struct {
	Epoch   int64 `json:"epoch"`
	Version int64 `json:"version"`
}

func (c crashCmd) request() Request {
	var cmd coord.Command
	switch c.Op {
	case "claim":
		cmd = coord.ClaimRequest{Agent: c.Agent, TaskID: c.Task, Note: c.Nonce, Worktree: c.Worktree, Paths: c.Paths, TTL: 600, HasTTL: true}
	case "release":
		cmd = coord.ReleaseRequest{Agent: c.Agent, TaskID: c.Task, Epoch: c.Epoch, HasEpoch: c.Epoch > 0}
	case "task_update":
		cmd = coord.UpdateRequest{Agent: c.Agent, TaskID: c.Task, Status: c.Status, Note: c.Nonce, Epoch: c.Epoch, HasEpoch: c.Epoch > 0}
	case "checkpoint":
		cmd = coord.CheckpointRequest{Agent: c.Agent, TaskID: c.Task, Checkpoint: c.Nonce, Epoch: c.Epoch, HasEpoch: c.Epoch > 0}
	case "handoff":
		cmd = coord.HandoffRequest{Agent: c.Agent, TaskID: c.Task, To: c.To, ToOnline: true, Note: c.Nonce, Epoch: c.Epoch, HasEpoch: c.Epoch > 0}
	}
	req := Request{Cmd: cmd}
	if c.IdemKey != "" {
		req.Idem = &Idem{Key: idemKey(c.Agent, c.Op, c.IdemKey), Digest: c.digest()}
		req.Render = func(o coord.Outcome) []byte {
			var r crashResponse
			r.Epoch, r.Version = leaseOf(o.Events)
			b, _ := json.Marshal(r)
			return b
		}
	}
	return req
}

// digest is the sha256 of the request's canonical JSON: the line without
// its ID, so a retry has the first attempt's digest.
func (c crashCmd) digest() string {
	c.ID = 0
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// leaseOf returns the epoch and version the command's own event left: the
// last claim-family event of the outcome (expirations come first).
func leaseOf(evs []coord.Event) (epoch, version int64) {
	for _, ev := range evs {
		switch e := ev.(type) {
		case coord.ClaimGranted:
			epoch, version = e.Claim.Epoch, e.Claim.Version
		case coord.TaskUpdated:
			epoch, version = e.Claim.Epoch, e.Claim.Version
		case coord.CheckpointSaved:
			epoch, version = e.Claim.Epoch, e.Claim.Version
		case coord.HandedOff:
			epoch, version = e.Claim.Epoch, e.Claim.Version
		case coord.Released:
			epoch, version = e.Epoch, 0
		}
	}
	return epoch, version
}

func (c crashCmd) ack(r Reply, err error) crashAck {
	a := crashAck{ID: c.ID, Seq: r.Seq, Replayed: r.Replayed}
	switch {
	case err != nil:
		a.Err = err.Error()
	case r.Replayed:
		var resp crashResponse
		if err := json.Unmarshal(r.Response, &resp); err != nil {
			a.Err = fmt.Sprintf("stored response %q: %v", r.Response, err)
			break
		}
		a.OK, a.Epoch, a.Version = true, resp.Epoch, resp.Version
	case r.Outcome.Refusal != nil:
		a.Code = string(r.Outcome.Refusal.Code)
	default:
		a.OK = true
		a.Epoch, a.Version = leaseOf(r.Outcome.Events)
	}
	return a
}

// TestCrashChild is the hub process TestCrash_… starts and kills. Run
// without SYNAPSE_CRASH_CHILD it does nothing.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		return
	}
	slow, err := time.ParseDuration(cmp.Or(os.Getenv(crashSlowEnv), "0s"))
	if err == nil {
		err = serveCrashChild(path, slow, os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
}

// serveCrashChild is the child's whole life: replay, then serve stdin until
// it ends (in practice until SIGKILL).
func serveCrashChild(path string, slow time.Duration, in io.Reader, out io.Writer) error {
	st, err := journal.Open(path, journal.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	rec, err := journal.Replay(st, coord.Limits{}, wallClock(), journal.ReplayOptions{Logger: quiet})
	if err != nil {
		return err
	}
	if rec.Degraded() {
		return fmt.Errorf("replay degraded: %d rows quarantined: %+v", rec.QuarantinedCount, rec.Quarantined)
	}
	var j Journal = st
	if slow > 0 {
		j = &slowDisk{Store: st, max: slow, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))}
	}
	// The real clock; snapshots often, so kills also land around them and
	// restarts replay from a snapshot plus the tail.
	s := New(rec.State, j, Options{Logger: quiet, SnapshotEvery: 2000})
	defer s.Close()

	var outMu sync.Mutex
	emit := func(a crashAck) {
		line, _ := json.Marshal(a)
		outMu.Lock()
		defer outMu.Unlock()
		out.Write(append(line, '\n')) // one write: a kill never splits an ack from its id
	}
	emit(crashAck{Ready: true, Seq: rec.LastSeq})
	sem := make(chan struct{}, crashChildWorkers)
	var wg sync.WaitGroup
	defer wg.Wait()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var c crashCmd
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return fmt.Errorf("command %q: %w", sc.Bytes(), err)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := s.Submit(context.Background(), c.request())
			emit(c.ack(r, err)) // only now is the command acknowledged
		}()
	}
	return sc.Err()
}

// slowDisk holds every append for a random while before it reaches SQLite,
// as a slow disk would. A correct sequencer only answers later; one that
// answers before its append returns is then exposed to a kill for
// milliseconds rather than the microseconds until SQLite writes the WAL
// (after that write a SIGKILL loses nothing: the OS has the data).
type slowDisk struct {
	*journal.Store
	max time.Duration
	rng *rand.Rand // only the sequencer loop appends
}

func (d *slowDisk) Append(ctx context.Context, b *journal.Batch) (int64, error) {
	time.Sleep(time.Duration(d.rng.Int64N(int64(d.max) + 1)))
	return d.Store.Append(ctx, b)
}

func wallClock() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// TestCrash_SIGKILLLosesNothingAcknowledged_INV_JA_1_INV_RR_1_INV_EF_1_INV_CR_1
// kills a real hub process at random moments under concurrent load and
// checks the journal after every kill: every acknowledged mutation is in
// it, nothing refused is, epochs only grow across restarts, idempotent
// retries apply once, the replayed state holds the single-hub invariants
// and replay quarantines nothing.
//
// SIGKILL does not drop what the child wrote to the OS, so this test cannot
// tell synchronous=FULL from NORMAL (an OS crash could); what it catches is
// an acknowledgement sent before the commit, or a commit that is not
// atomic.
func TestCrash_SIGKILLLosesNothingAcknowledged_INV_JA_1_INV_RR_1_INV_EF_1_INV_CR_1(t *testing.T) {
	kills := 24
	if testing.Short() {
		kills = 20
	}
	r := newCrashRun(t, filepath.Join(t.TempDir(), "journal.db"))
	start := time.Now()
	for cycle := range kills {
		r.cycle(cycle)
	}
	r.summary(kills, time.Since(start))
}

// crashRun is the parent's record of one run: every command sent, in ID
// order, and what was acknowledged.
type crashRun struct {
	t    *testing.T
	seed uint64
	path string
	rng  *rand.Rand // the test goroutine's: kill delays, retries

	mu      sync.Mutex
	sent    []*crashSent          // by ID
	byNonce map[string][]int      // nonce → IDs of its attempts, in send order
	holder  map[string]crashLease // task → last acknowledged holder: a guess that makes commands succeed
	// strayAcks are acks for an ID never sent, or a second ack for one.
	strayAcks []crashAck

	// Read and written by the test goroutine only.
	seenAt   map[string]int // nonce → first cycle whose check found its row
	killedIn int            // commands in flight at a kill, over the run
	replays  int            // retries answered from the stored response
}

type crashSent struct {
	crashCmd
	cycle int
	ack   *crashAck // nil: never acknowledged
}

type crashLease struct {
	agent string
	epoch int64
}

var (
	crashAgents    = []string{"ada", "bob", "cy", "dee", "eve", "fay"}
	crashWorktrees = []string{"/w1", "/w2", "/w3"}
	crashPaths     = []string{"src", "src/a", "src/b", "src/a/x", "docs", "docs/api", "lib/c", "lib/d", "cmd", "test/e", "test/f", "web"}
	crashTasks     = 16
)

func newCrashRun(t *testing.T, path string) *crashRun {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", crashSeedEnv, s, err)
		}
		seed = n
	}
	t.Logf("seed %d (rerun with %s=%d; the kill moments and commands repeat, the interleaving does not)", seed, crashSeedEnv, seed)
	return &crashRun{
		t: t, seed: seed, path: path, rng: rand.New(rand.NewPCG(seed, 0)),
		byNonce: make(map[string][]int), holder: make(map[string]crashLease), seenAt: make(map[string]int),
	}
}

func (r *crashRun) fatalf(cycle int, format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("seed %d, after kill %d: "+format, append([]any{r.seed, cycle}, args...)...)
}

// crashChild is one life of the hub process.
type crashChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *bytes.Buffer
}

func (r *crashRun) startChild(cycle int, slow time.Duration) *crashChild {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+r.path, crashSlowEnv+"="+slow.String())
	c := &crashChild{cmd: cmd, stderr: new(bytes.Buffer)}
	cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		r.fatalf(cycle, "stdin: %v", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		r.fatalf(cycle, "stdout: %v", err)
	}
	c.stdout = bufio.NewReader(out)
	if err := cmd.Start(); err != nil {
		r.fatalf(cycle, "start child: %v", err)
	}
	for {
		a, err := readAck(c.stdout)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			r.fatalf(cycle, "child did not come up: %v; stderr:\n%s", err, c.stderr)
		}
		if a.Ready {
			return c
		}
	}
}

// readAck reads the next ack line, skipping anything else the test binary
// prints.
func readAck(rd *bufio.Reader) (crashAck, error) {
	for {
		line, err := rd.ReadBytes('\n')
		if err != nil {
			return crashAck{}, err
		}
		if !bytes.HasPrefix(line, []byte("{")) {
			continue
		}
		var a crashAck
		if err := json.Unmarshal(line, &a); err != nil {
			return crashAck{}, fmt.Errorf("ack %q: %w", line, err)
		}
		return a, nil
	}
}

// cycle is one life: start the child, stream commands at it while reading
// its acks, SIGKILL it after a random delay, then check the file. Every
// other life on average is killed the moment the first ack after the delay
// arrives: right after an acknowledgement is when an ack sent ahead of its
// commit is still exposed (between the reply and SQLite's write of the WAL
// frames; a kill after that write loses nothing, since the OS keeps it).
func (r *crashRun) cycle(cycle int) {
	delay := time.Duration(20+r.rng.IntN(381)) * time.Millisecond
	onAck := r.rng.IntN(2) == 0
	var slow time.Duration // half the lives run on a slow disk
	if r.rng.IntN(2) == 0 {
		slow = 2 * time.Millisecond
	}
	retries := r.pickRetries()
	child := r.startChild(cycle, slow)

	var armed atomic.Bool // kill on the next ack
	var once sync.Once
	killed := make(chan struct{})
	var killErr error
	kill := func() {
		once.Do(func() {
			killErr = child.cmd.Process.Signal(syscall.SIGKILL)
			close(killed)
		})
	}

	credits := make(chan struct{}, crashWindow)
	for range crashWindow {
		credits <- struct{}{}
	}
	readerDone := make(chan error, 1)
	go func() {
		for {
			a, err := readAck(child.stdout)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				readerDone <- err
				return
			}
			r.record(a)
			if armed.Load() {
				kill()
			}
			credits <- struct{}{} // one per command sent, so never more than the window
		}
	}()
	stop := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		gen := rand.New(rand.NewPCG(r.seed, uint64(cycle)+1))
		send := func(c crashCmd) bool {
			select {
			case <-credits:
			case <-stop:
				return false
			}
			_, err := child.stdin.Write(r.send(c, cycle))
			return err == nil // else the child is dead
		}
		for _, c := range retries {
			if !send(c) {
				return
			}
		}
		// Bursts of 0..crashBurst commands a millisecond: a few thousand
		// a second, so the journal stays small enough to check in full
		// after every kill, with batches of varied sizes.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
			case <-stop:
				return
			}
			for range gen.IntN(crashBurst + 1) {
				if !send(r.generate(gen)) {
					return
				}
			}
		}
	}()

	var readErr error
	select {
	case <-time.After(delay):
	case readErr = <-readerDone:
		child.cmd.Wait()
		r.fatalf(cycle, "child ended before the kill (%v); stderr:\n%s", readErr, child.stderr)
	}
	if onAck {
		armed.Store(true)
		select {
		case <-killed:
		case <-time.After(5 * time.Second): // no ack came: the check below says why
			kill()
		}
	}
	kill()
	if killErr != nil {
		r.fatalf(cycle, "SIGKILL: %v", killErr)
	}
	readErr = <-readerDone // the pipe ends with the process: every ack it wrote is read
	close(stop)
	<-writerDone
	err := child.cmd.Wait()
	ws, ok := child.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		r.fatalf(cycle, "child did not die of SIGKILL: %v; stderr:\n%s", err, child.stderr)
	}
	if readErr != nil {
		r.fatalf(cycle, "reading acks: %v", readErr)
	}
	how := "at a random moment"
	if onAck {
		how = "on the first ack"
	}
	if slow > 0 {
		how += ", slow disk"
	}
	r.check(cycle, fmt.Sprintf("%v, %s", delay, how))
}

// pickRetries chooses idempotent requests of earlier lives to send again,
// with their key and digest: some whose last attempt was acknowledged, some
// whose outcome the parent never learned.
func (r *crashRun) pickRetries() []crashCmd {
	r.mu.Lock()
	defer r.mu.Unlock()
	var acked, unknown []crashCmd
	for _, ids := range r.byNonce {
		last := r.sent[ids[len(ids)-1]]
		if last.IdemKey == "" {
			continue
		}
		if last.ack != nil {
			acked = append(acked, last.crashCmd)
		} else {
			unknown = append(unknown, last.crashCmd)
		}
	}
	// Map order is random; sort by ID so the seed decides.
	byID := func(a, b crashCmd) int { return a.ID - b.ID }
	slices.SortFunc(acked, byID)
	slices.SortFunc(unknown, byID)
	var out []crashCmd
	for _, pool := range [][]crashCmd{unknown, acked} {
		for range crashRetries / 2 {
			if len(pool) == 0 {
				break
			}
			i := r.rng.IntN(len(pool))
			out = append(out, pool[i])
			pool[i] = pool[len(pool)-1]
			pool = pool[:len(pool)-1]
		}
	}
	return out
}

// generate makes a new command from a random agent, aimed mostly at tasks
// the agent holds (as far as the acks tell) so that few are refused.
func (r *crashRun) generate(rng *rand.Rand) crashCmd {
	r.mu.Lock()
	defer r.mu.Unlock()
	nonce := "n" + strconv.Itoa(len(r.sent))
	var held, free []string
	for i := range crashTasks {
		task := "t" + strconv.Itoa(i)
		if _, ok := r.holder[task]; ok {
			held = append(held, task)
		} else {
			free = append(free, task)
		}
	}
	pick := func(prefer []string) string {
		if len(prefer) > 0 && rng.IntN(4) > 0 {
			return prefer[rng.IntN(len(prefer))]
		}
		return "t" + strconv.Itoa(rng.IntN(crashTasks))
	}
	c := crashCmd{Agent: crashAgents[rng.IntN(len(crashAgents))], Nonce: nonce}
	switch p := rng.IntN(100); {
	case p < 40:
		c.Op, c.Task = "claim", pick(free)
		c.Worktree = crashWorktrees[rng.IntN(len(crashWorktrees))]
		if rng.IntN(50) > 0 { // else the whole worktree
			for range 1 + rng.IntN(2) {
				c.Paths = append(c.Paths, crashPaths[rng.IntN(len(crashPaths))])
			}
		}
		if rng.IntN(5) < 2 {
			c.IdemKey = "k" + nonce
		}
		return c
	case p < 55:
		c.Op, c.Nonce = "release", "" // a release row carries only the task
	case p < 70:
		c.Op = "task_update"
		c.Status = []string{"", "working", "input_required"}[rng.IntN(3)]
	case p < 85:
		c.Op = "checkpoint"
	default:
		c.Op = "handoff"
		c.To = crashAgents[rng.IntN(len(crashAgents))]
	}
	c.Task = pick(held)
	if h, ok := r.holder[c.Task]; ok && rng.IntN(5) > 0 {
		c.Agent = h.agent
		switch rng.IntN(4) {
		case 0:
			c.Epoch = h.epoch
		case 1:
			c.Epoch = max(h.epoch-1, 0) // often stale: EPOCH_STALE
		}
	}
	if c.Op != "release" && rng.IntN(5) == 0 {
		c.IdemKey = "k" + nonce
	}
	return c
}

// send logs c under a new ID and returns its line. From here on its outcome
// is unknown until an ack arrives.
func (r *crashRun) send(c crashCmd, cycle int) []byte {
	r.mu.Lock()
	c.ID = len(r.sent)
	r.sent = append(r.sent, &crashSent{crashCmd: c, cycle: cycle})
	if c.Nonce != "" {
		r.byNonce[c.Nonce] = append(r.byNonce[c.Nonce], c.ID)
	}
	r.mu.Unlock()
	line, _ := json.Marshal(c)
	return append(line, '\n')
}

func (r *crashRun) record(a crashAck) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a.ID < 0 || a.ID >= len(r.sent) || r.sent[a.ID].ack != nil {
		r.strayAcks = append(r.strayAcks, a)
		return
	}
	s := r.sent[a.ID]
	s.ack = &a
	if !a.OK {
		return
	}
	switch s.Op {
	case "claim":
		r.holder[s.Task] = crashLease{s.Agent, a.Epoch}
	case "handoff":
		r.holder[s.Task] = crashLease{s.To, a.Epoch}
	case "release":
		delete(r.holder, s.Task)
	}
}

// crashRow is one claim-family row of the journal.
type crashRow struct {
	seq   int64
	kind  string
	task  string
	owner string // the claimant of a claim_denial
	nonce string // claim/task_update/handoff note, checkpoint token
	epoch int64
}

// readCrashJournal reads the whole file: rows by seq and by nonce, and
// checks epochs grow strictly over claim and handoff rows.
func (r *crashRun) readCrashJournal(cycle int, st *journal.Store) (bySeq map[int64]crashRow, byNonce map[string][]crashRow, maxEpoch int64) {
	bySeq, byNonce = make(map[int64]crashRow), make(map[string][]crashRow)
	err := st.Scan(0, func(seq int64, _ float64, kind string, payload []byte) error {
		ev, ok, err := journal.Decode(kind, payload)
		if err != nil {
			return fmt.Errorf("row %d (%s) does not decode: %w", seq, kind, err)
		}
		if !ok {
			return nil
		}
		row := crashRow{seq: seq, kind: kind}
		var c *coord.Claim
		switch e := ev.(type) {
		case coord.ClaimGranted:
			c, row.nonce = e.Claim, e.Claim.Note
		case coord.TaskUpdated:
			c, row.nonce = e.Claim, e.Claim.Note
		case coord.HandedOff:
			c, row.nonce = e.Claim, e.Claim.Note
		case coord.CheckpointSaved:
			c, row.nonce = e.Claim, e.Claim.Checkpoint
		case coord.Released:
			row.task = e.TaskID
		case coord.ClaimDenied:
			row.owner = e.Claimant
		}
		if c != nil {
			row.task, row.owner, row.epoch = c.TaskID, c.Owner, c.Epoch
			byNonce[row.nonce] = append(byNonce[row.nonce], row)
		}
		if kind == journal.KindClaim || kind == journal.KindHandoff {
			if row.epoch <= maxEpoch {
				return fmt.Errorf("INV-EF-1: %s row %d has epoch %d after epoch %d: epochs must grow strictly across restarts", kind, seq, row.epoch, maxEpoch)
			}
			maxEpoch = row.epoch
		}
		bySeq[seq] = row
		return nil
	})
	if err != nil {
		r.fatalf(cycle, "%v", err)
	}
	return bySeq, byNonce, maxEpoch
}

// firstKind is the kind of the first row an applied command writes.
var firstKind = map[string]string{
	"claim": journal.KindClaim, "release": journal.KindRelease, "task_update": journal.KindTaskUpdate,
	"checkpoint": journal.KindCheckpoint, "handoff": journal.KindLedgerProgress, // the handoff note comes first
}

// check opens the dead child's file as a restarting hub would and holds it
// against every ack read so far.
func (r *crashRun) check(cycle int, when string) {
	st, err := journal.Open(r.path, journal.Options{})
	if err != nil {
		r.fatalf(cycle, "reopen: %v", err)
	}
	defer st.Close()
	rec, err := journal.Replay(st, coord.Limits{}, wallClock(), journal.ReplayOptions{Logger: quiet})
	if err != nil {
		r.fatalf(cycle, "replay: %v", err)
	}
	if rec.Degraded() {
		r.fatalf(cycle, "INV-RR-1: replay after SIGKILL quarantined %d rows (a torn write reached the journal): %+v", rec.QuarantinedCount, rec.Quarantined)
	}
	if len(rec.Warnings) > 0 {
		r.fatalf(cycle, "INV-RR-1: replay after SIGKILL skipped a snapshot (a torn snapshot reached the journal): %v", rec.Warnings)
	}
	bySeq, byNonce, maxEpoch := r.readCrashJournal(cycle, st)
	if e := rec.State.Epoch(); e < maxEpoch {
		r.fatalf(cycle, "INV-EF-1: replayed epoch counter %d is behind journalled epoch %d: the next grant would reuse it", e, maxEpoch)
	}
	kindOf := func(op string) string {
		if op == "handoff" {
			return journal.KindHandoff
		}
		return firstKind[op]
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.strayAcks) > 0 {
		r.fatalf(cycle, "acks for commands never sent, or acked twice: %+v", r.strayAcks)
	}
	inFlight := 0
	for id, s := range r.sent {
		var rows []crashRow
		if s.Nonce != "" {
			for _, row := range byNonce[s.Nonce] {
				if row.kind == kindOf(s.Op) {
					rows = append(rows, row)
				}
			}
			if len(rows) > 1 {
				r.fatalf(cycle, "INV-CR-1: %s %d (nonce %s, idem key %q) applied %d times: rows %+v", s.Op, id, s.Nonce, s.IdemKey, len(rows), rows)
			}
			seenAt, seen := r.seenAt[s.Nonce]
			switch {
			case seen && len(rows) == 0:
				r.fatalf(cycle, "INV-RR-1: the row of %s %d (nonce %s), in the journal after kill %d, is gone", s.Op, id, s.Nonce, seenAt)
			case !seen && len(rows) == 1:
				r.seenAt[s.Nonce] = cycle
			}
		}
		a := s.ack
		if a == nil {
			if s.cycle == cycle {
				inFlight++
			}
			continue
		}
		if a.Err != "" {
			r.fatalf(cycle, "%s %d failed: %s", s.Op, id, a.Err)
		}
		if seenAt, ok := r.seenAt[s.Nonce]; ok && s.IdemKey != "" && s.cycle > seenAt {
			// The row was committed in an earlier life: this retry must be
			// answered from the stored response, not decided again.
			if !a.OK || !a.Replayed || a.Epoch != rows[0].epoch {
				r.fatalf(cycle, "INV-CR-1: retry %d of %s %s (key %q) after a restart got %+v, want a replay with epoch %d", id, s.Op, s.Nonce, s.IdemKey, *a, rows[0].epoch)
			}
			if s.cycle == cycle {
				r.replays++
			}
		}
		switch {
		case a.OK && s.Nonce != "":
			if len(rows) == 0 {
				r.fatalf(cycle, "INV-JA-1/INV-RR-1: acknowledged %s %d (nonce %s, %+v) is not in the journal: an acknowledged mutation was lost", s.Op, id, s.Nonce, *a)
			}
			if rows[0].task != s.Task || rows[0].epoch != a.Epoch {
				r.fatalf(cycle, "INV-JA-1/INV-RR-1: acknowledged %s %d on %s at epoch %d, journal row %+v", s.Op, id, s.Task, a.Epoch, rows[0])
			}
		case !a.OK && len(rows) > 0 && !r.otherAttemptMayHaveApplied(s):
			r.fatalf(cycle, "INV-JA-2: %s %d (nonce %s) was refused %s but the journal has it: %+v", s.Op, id, s.Nonce, a.Code, rows)
		}
		if a.Replayed {
			continue
		}
		row, ok := bySeq[a.Seq]
		switch {
		case a.OK && (!ok || row.kind != firstKind[s.Op] || (s.Op != "handoff" && row.task != s.Task)):
			r.fatalf(cycle, "INV-JA-1/INV-RR-1: acknowledged %s %d on %s at seq %d, journal has %+v (present %v)", s.Op, id, s.Task, a.Seq, row, ok)
		case !a.OK && s.Op == "claim" && (!ok || row.kind != journal.KindClaimDenial || row.owner != s.Agent):
			r.fatalf(cycle, "INV-JA-1: refused claim %d (%s) acknowledged at seq %d, journal has %+v, want its claim_denial audit row (durable evidence)", id, a.Code, a.Seq, row)
		case !a.OK && s.Op != "claim" && a.Seq != 0:
			r.fatalf(cycle, "refused %s %d reported seq %d, want none", s.Op, id, a.Seq)
		}
	}
	r.killedIn += inFlight

	// INV-ME-1/2: the replayed authority has one owner per task (a map) and
	// no two owners holding overlapping live scopes.
	now := wallClock()
	claims := rec.State.Claims()
	for i, a := range claims {
		if !a.Live(now) {
			r.fatalf(cycle, "INV-RR-1: replayed claim %v is not live", a)
		}
		for _, b := range claims[i+1:] {
			if a.Owner != b.Owner && coord.ScopesConflict(a.Worktree, a.Paths, b.Worktree, b.Paths) {
				r.fatalf(cycle, "INV-ME-2: replayed state holds conflicting live scopes of two owners: %v and %v", a, b)
			}
		}
	}
	r.t.Logf("kill %d after %s: %d commands sent, %d in flight at the kill, journal at seq %d, %d live claims",
		cycle, when, len(r.sent), inFlight, rec.LastSeq, len(claims))
}

// otherAttemptMayHaveApplied reports whether another attempt of s's request
// was acknowledged as applied or never acknowledged.
func (r *crashRun) otherAttemptMayHaveApplied(s *crashSent) bool {
	for _, id := range r.byNonce[s.Nonce] {
		if o := r.sent[id]; id != s.ID && (o.ack == nil || o.ack.OK) {
			return true
		}
	}
	return false
}

func (r *crashRun) summary(kills int, took time.Duration) {
	var ok, refused, retries int
	codes := map[string]int{}
	for _, s := range r.sent {
		switch {
		case s.ack == nil:
		case s.ack.OK:
			ok++
		default:
			refused++
			codes[s.Op+":"+s.ack.Code]++
		}
		if len(r.byNonce[s.Nonce]) > 1 && r.byNonce[s.Nonce][0] != s.ID {
			retries++
		}
	}
	r.t.Logf("%d kills in %v: %d commands sent, %d applied, %d refused %v, %d in flight at a kill; %d retries, %d answered by replay",
		kills, took.Round(time.Millisecond), len(r.sent), ok, refused, codes, r.killedIn, retries, r.replays)
	// The run must have exercised what it checks.
	if ok == 0 || refused == 0 || r.killedIn == 0 || r.replays == 0 {
		r.t.Fatalf("seed %d: the run did not exercise the checks: %d applied, %d refused, %d in flight at a kill, %d replays",
			r.seed, ok, refused, r.killedIn, r.replays)
	}
}

// TestDiskFull_FailedBatchPublishesNothingAndDegrades_INV_JA_2 makes SQLite
// really fail with SQLITE_FULL (the writer connection's max_page_count) in
// the middle of a run: the batch that hits it fails whole, nothing of it is
// visible, the sequencer refuses mutations from then on, and after space is
// freed a restart replays exactly what was acknowledged.
func TestDiskFull_FailedBatchPublishesNothingAndDegrades_INV_JA_2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	openJournal(t, path, journal.Options{}).Close() // the schema
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	const pageSize = 4096 // SQLite's default
	st := openJournal(t, path, journal.Options{MaxPageCount: int(fi.Size()/pageSize) + 24})
	t.Cleanup(func() { st.Close() })
	s := start(t, coord.New(coord.Limits{}), st, Options{})

	const perBatch = 12
	padding := strings.Repeat("x", 700) // so the cap is reached in a few batches
	type sentReq struct {
		req  Request
		task string
		note string
	}
	newBatch := func(round int) []sentReq {
		var out []sentReq
		for i := range perBatch {
			task := fmt.Sprintf("d%d-%d", round, i)
			cmd := coord.ClaimRequest{Agent: agentName(i % 3), TaskID: task, Note: task + " " + padding,
				Worktree: "/d", Paths: []string{task}, TTL: 600, HasTTL: true}
			req := Request{Cmd: cmd}
			if i%2 == 0 {
				req = keyed(cmd, idemKey(cmd.Agent, "claim", task), "digest-"+task)
			}
			out = append(out, sentReq{req, task, cmd.Note})
		}
		return out
	}

	acked := map[string]int64{} // task → epoch of every acknowledged claim
	var keys []Request          // acknowledged keyed requests
	var failed []sentReq
	var before coord.Image
	for round := 0; failed == nil; round++ {
		if round == 100 {
			t.Fatal("the journal never filled up: is max_page_count applied to the writer?")
		}
		before = image(t, s)
		// Park the loop in a query so the whole round queues up and is
		// decided and appended as one batch.
		parked, unpark := make(chan struct{}), make(chan struct{})
		go s.Query(context.Background(), func(*coord.State) any { close(parked); <-unpark; return nil })
		<-parked
		batch := newBatch(round)
		results := make([]<-chan result, len(batch))
		for i, b := range batch {
			results[i] = async(s, context.Background(), b.req)
		}
		waitQueued(t, s, len(batch))
		close(unpark)

		var okN int
		var errs []error
		for i, ch := range results {
			res := recv(t, ch)
			if res.err != nil {
				errs = append(errs, res.err)
				continue
			}
			okN++
			acked[batch[i].task] = res.reply.Outcome.Events[len(res.reply.Outcome.Events)-1].(coord.ClaimGranted).Claim.Epoch
			if batch[i].req.Idem != nil {
				keys = append(keys, batch[i].req)
			}
		}
		switch {
		case len(errs) == 0:
			continue
		case okN > 0:
			t.Fatalf("INV-JA-2: round %d was one batch, yet %d commands committed and %d failed: %v", round, okN, len(errs), errs)
		case round == 0:
			t.Fatal("the first batch already failed: raise the page cap so the test sees commits before the fault")
		}
		for _, err := range errs {
			if !errors.Is(err, ErrJournal) {
				t.Fatalf("INV-JA-2: a command of the failing batch got %v, want ErrJournal", err)
			}
		}
		var se *sqlite.Error
		if !errors.As(errs[0], &se) || se.Code()&0xff != sqlite3.SQLITE_FULL {
			t.Fatalf("the append failed with %v, want SQLITE_FULL", errs[0])
		}
		t.Logf("round %d: a batch of %d failed with %v", round, perBatch, errs[0])
		failed = batch
	}

	if got := image(t, s); !reflect.DeepEqual(got, before) {
		t.Fatalf("INV-JA-2: the failed batch is visible:\n got %+v\nwant %+v", got, before)
	}
	if s.Err() == nil || !errors.Is(s.Err(), ErrJournal) {
		t.Fatalf("INV-JA-2: not degraded after the failed append: Err() = %v", s.Err())
	}
	if _, err := s.Submit(context.Background(), Request{Cmd: claim("late", "late")}); !errors.Is(err, ErrJournal) {
		t.Fatalf("INV-JA-2: a claim after the fault got %v, want ErrJournal (fail closed)", err)
	}
	if _, err := s.Submit(context.Background(), keys[0]); !errors.Is(err, ErrJournal) {
		t.Fatalf("INV-JA-2: an idempotent replay after the fault got %v, want ErrJournal (fail closed)", err)
	}

	// Free space: the hub restarts without the cap and replays.
	s.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openJournal(t, path, journal.Options{})
	rec, err := journal.Replay(st, coord.Limits{}, t0+1, journal.ReplayOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Degraded() {
		t.Fatalf("replay after SQLITE_FULL quarantined rows: %+v", rec.Quarantined)
	}
	got := map[string]int64{}
	for _, c := range rec.State.Claims() {
		got[c.TaskID] = c.Epoch
	}
	if !reflect.DeepEqual(got, acked) {
		t.Fatalf("INV-JA-2: replay after the fault holds claims %v, want exactly the acknowledged %v", got, acked)
	}
	if img := rec.State.Image(); !reflect.DeepEqual(img, before) {
		t.Fatalf("INV-JA-2: replayed image differs from the last committed one:\n got %+v\nwant %+v", img, before)
	}
	for _, b := range failed {
		if id := b.req.Idem; id != nil {
			if _, ok, err := st.Operation(id.Key); ok || err != nil {
				t.Fatalf("INV-JA-2: the failed batch's idempotency record %q was stored (%v)", id.Key, err)
			}
		}
	}

	// With space back, the hub serves again: earlier keys replay, the
	// failed batch's requests apply now.
	s = start(t, rec.State, st, Options{Clock: (&fixedClock{t: t0 + 1}).now})
	if r := submit(t, s, keys[0]); !r.Replayed {
		t.Fatalf("INV-CR-1: an acknowledged keyed claim after the restart: %+v, want a replay", r)
	}
	for _, b := range failed {
		if r := submit(t, s, b.req); r.Replayed || r.Outcome.Refusal != nil {
			t.Fatalf("the failed batch's claim on %s after the restart: %+v, want it applied", b.task, r)
		}
	}
}
