package bench

// crashloop.go is synapse bench crashloop: a real `synapse hub --db FILE`
// process under load, SIGKILLed and restarted again and again on the same
// journal, with each restart timed and the file measured (issue 24: restart
// time and file size must stay flat however often a hub crashes).
//
// Who owns what: RunCrashLoop's goroutine owns the hub process, the kill
// schedule and the result. Each agent is one goroutine with its own
// client; what it has acknowledged (its held claim, its call in flight)
// sits in its agentLedger under the ledger's mutex, which the checker reads
// between two hub lives, while every agent waits for the next life.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/internal/hubproc"
)

// CrashLoopConfig is one crash loop (synapse bench crashloop).
type CrashLoopConfig struct {
	HubBin string // the synapse binary whose `hub` is killed (any version: only its flags and banner are used)
	DB     string // the journal file; it is created if missing and kept
	Port   int    // the hub's loopback port, the same across restarts
	// HubArgs are extra flags for every `synapse hub` (e.g. a retention window).
	HubArgs []string
	Kills   int           // SIGKILLs
	Agents  int           // agents cycling claim → update → release, every call keyed
	Life    time.Duration // how long each hub life serves the agents before its SIGKILL
	// Progress, if set, is told of each restart as it is measured.
	Progress func(CrashRestart)
}

// CrashRestart is one start of the hub on the journal.
type CrashRestart struct {
	N      int     `json:"n"`     // 0: the first start; k: after the k-th SIGKILL; Kills+1: after the clean stop
	After  string  `json:"after"` // "start", "sigkill" or "clean stop"
	OpsAck int64   `json:"ops"`   // operations acknowledged before this start, in all
	DBMB   float64 `json:"db_mb"` // the database file at this start, MiB
	// FilesMB is the database, its -wal and -shm and its snapshot folder.
	FilesMB float64 `json:"files_mb"`
	// BannerMS is from exec to the hub's "listening on" banner (it prints
	// it once the journal is replayed); AnswerMS to a client's who answer.
	BannerMS float64 `json:"banner_ms"`
	AnswerMS float64 `json:"answer_ms"`
	// From the hub's "journal: …" banner line: recovery (open + replay) as
	// the hub measured it, the seq, the snapshot it started from and the
	// events it replayed after it.
	ReplayMS    float64 `json:"replay_ms"`
	Seq         int64   `json:"seq"`
	SnapshotSeq int64   `json:"snapshot_seq"`
	Events      int64   `json:"events"`
	Claims      int64   `json:"claims"`
	Journal     string  `json:"journal_line"`
}

// CrashLoopResult is what a crash loop measured and found.
type CrashLoopResult struct {
	Kills    int            `json:"kills"`
	Agents   int            `json:"agents"`
	LifeMS   float64        `json:"life_ms"`
	HubArgs  []string       `json:"hub_args,omitempty"`
	Restarts []CrashRestart `json:"restarts"`
	OpsAck   int64          `json:"ops"`      // operations acknowledged in all
	Refused  int64          `json:"refused"`  // refusals the agents did not expect (counted, not failures)
	Retried  int64          `json:"retried"`  // calls sent again, same key, after a kill
	Problems []string       `json:"problems"` // what the checker found lost (empty: nothing)
}

// CrashLoopSummary gives the restart figures after SIGKILLs only.
type CrashLoopSummary struct {
	FirstMS, MedianMS, MaxMS, LastMS float64
	LastFilesMB, MaxFilesMB          float64
}

// Summary reduces the SIGKILL restarts to their first, median, max and
// last banner times and their file sizes.
func (r *CrashLoopResult) Summary() CrashLoopSummary {
	var ms []float64
	var s CrashLoopSummary
	for _, x := range r.Restarts {
		if x.After != "sigkill" {
			continue
		}
		if len(ms) == 0 {
			s.FirstMS = x.BannerMS
		}
		ms = append(ms, x.BannerMS)
		s.LastMS, s.LastFilesMB = x.BannerMS, x.FilesMB
		s.MaxFilesMB = max(s.MaxFilesMB, x.FilesMB)
	}
	if len(ms) == 0 {
		return s
	}
	slices.Sort(ms)
	s.MedianMS, s.MaxMS = ms[len(ms)/2], ms[len(ms)-1]
	return s
}

// journalLine reads the hub's "journal: PATH (seq N; C claims restored from
// snapshot S + E events in D)" banner line (cmd/synapse hub.go).
var journalLine = regexp.MustCompile(`seq (\d+); (\d+) claims restored from snapshot (\d+) \+ (\d+) events in ([^);]+)\)`)

// RunCrashLoop starts the hub on cfg.DB, lets the agents work for
// cfg.Life, SIGKILLs it, checks that every acknowledged claim is still
// held, and again, cfg.Kills times; then it stops the hub cleanly and
// starts it once more. Agents keep their idempotency key across a kill, so
// a call that may have committed is answered from its stored response.
func RunCrashLoop(ctx context.Context, cfg CrashLoopConfig) (CrashLoopResult, error) {
	res := CrashLoopResult{Kills: cfg.Kills, Agents: cfg.Agents, LifeMS: ms(cfg.Life), HubArgs: cfg.HubArgs, Problems: []string{}}
	uri := "ws://127.0.0.1:" + strconv.Itoa(cfg.Port)
	ledgers := make([]*agentLedger, cfg.Agents)
	for i := range ledgers {
		ledgers[i] = &agentLedger{name: fmt.Sprintf("crash/a%d", i)}
	}
	life := newGeneration()
	actx, stopAgents := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var ops, refused, retried atomic.Int64
	defer func() { stopAgents(); life.close(); wg.Wait() }()
	for _, l := range ledgers {
		wg.Add(1)
		go func() { defer wg.Done(); crashAgent(actx, uri, l, life, &ops, &refused, &retried) }()
	}
	var h *crashHub
	start := func(n int, after string) error {
		x := CrashRestart{N: n, After: after, OpsAck: ops.Load()}
		x.DBMB, x.FilesMB = journalFilesMB(cfg.DB)
		var err error
		if h, err = startCrashHub(ctx, cfg, uri, &x); err != nil {
			return err
		}
		for _, p := range checkHeld(ctx, uri, ledgers) {
			res.Problems = append(res.Problems, fmt.Sprintf("restart %d: %s", n, p))
		}
		res.Restarts = append(res.Restarts, x)
		if cfg.Progress != nil {
			cfg.Progress(x)
		}
		life.next() // the agents may go on
		return nil
	}
	finish := func() CrashLoopResult {
		res.OpsAck, res.Refused, res.Retried = ops.Load(), refused.Load(), retried.Load()
		return res
	}
	if err := start(0, "start"); err != nil {
		return finish(), err
	}
	for k := 1; k <= cfg.Kills; k++ {
		select {
		case <-time.After(cfg.Life):
		case <-ctx.Done():
			h.kill()
			return finish(), ctx.Err()
		}
		life.hold() // agents that fail from now on wait for the next life
		h.kill()
		if err := start(k, "sigkill"); err != nil {
			return finish(), err
		}
	}
	time.Sleep(cfg.Life)
	life.hold()
	if err := h.stop(); err != nil {
		return finish(), err
	}
	if err := start(cfg.Kills+1, "clean stop"); err != nil {
		return finish(), err
	}
	stopAgents()
	life.close()
	wg.Wait()
	err := h.stop()
	return finish(), err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// journalFilesMB is the size of the database alone and of everything the
// journal keeps on disk: -wal, -shm and the snapshot folder.
func journalFilesMB(db string) (dbMB, allMB float64) {
	size := func(p string) int64 {
		if fi, err := os.Stat(p); err == nil {
			return fi.Size()
		}
		return 0
	}
	d := size(db)
	all := d + size(db+"-wal") + size(db+"-shm")
	if entries, err := os.ReadDir(db + ".snapshots"); err == nil {
		for _, e := range entries {
			all += size(filepath.Join(db+".snapshots", e.Name()))
		}
	}
	return float64(d) / (1 << 20), float64(all) / (1 << 20)
}

// crashHub is one life of the hub process.
type crashHub struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	errb *strings.Builder
}

// startCrashHub runs the hub and fills in x's timings once it answers.
func startCrashHub(ctx context.Context, cfg CrashLoopConfig, uri string, x *CrashRestart) (*crashHub, error) {
	args := append([]string{"hub", "--db", cfg.DB, "--port", strconv.Itoa(cfg.Port), "--no-mcp",
		"--max-clients", strconv.Itoa(cfg.Agents + 64), "--max-connections-per-host", "0",
		"--max-claims-per-agent", "1000000", "--frames-per-socket", "0"}, cfg.HubArgs...)
	cmd := exec.Command(cfg.HubBin, args...)
	cmd.Env = append(os.Environ(), "SYNAPSE_TOKEN=")
	hubproc.DieWithParent(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h := &crashHub{cmd: cmd, done: make(chan struct{}), errb: &strings.Builder{}}
	cmd.Stderr = &limitedWriter{b: h.errb, max: 8 << 10}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads after the banner
			}
		}
		close(lines)
	}()
	go func() { cmd.Wait(); close(h.done) }()
	timeout := time.After(5 * time.Minute)
	for banner := false; !banner; {
		select {
		case l, ok := <-lines:
			if !ok {
				<-h.done
				return nil, fmt.Errorf("the hub exited before listening: %s", h.errb.String())
			}
			if strings.Contains(l, "listening on") {
				x.BannerMS = ms(time.Since(began))
			}
			if strings.HasPrefix(l, "journal: ") {
				x.Journal = l
				parseJournalLine(l, x)
				banner = x.BannerMS > 0
			}
		case <-timeout:
			h.kill()
			return nil, errors.New("the hub did not start within 5 minutes")
		case <-ctx.Done():
			h.kill()
			return nil, ctx.Err()
		}
	}
	for {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := client.Dial(dctx, client.Options{URI: uri, Name: "crash/probe", NoReconnect: true})
		cancel()
		if err == nil {
			x.AnswerMS = ms(time.Since(began))
			c.Close()
			return h, nil
		}
		if ctx.Err() != nil || time.Since(began) > 5*time.Minute {
			h.kill()
			return nil, fmt.Errorf("the hub printed its banner but does not answer: %w", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func parseJournalLine(l string, x *CrashRestart) {
	m := journalLine.FindStringSubmatch(l)
	if m == nil {
		return
	}
	x.Seq, _ = strconv.ParseInt(m[1], 10, 64)
	x.Claims, _ = strconv.ParseInt(m[2], 10, 64)
	x.SnapshotSeq, _ = strconv.ParseInt(m[3], 10, 64)
	x.Events, _ = strconv.ParseInt(m[4], 10, 64)
	if d, err := time.ParseDuration(strings.TrimSpace(m[5])); err == nil {
		x.ReplayMS = ms(d)
	}
}

// kill SIGKILLs the hub: only what it committed survives.
func (h *crashHub) kill() {
	h.cmd.Process.Signal(syscall.SIGKILL)
	<-h.done
}

// stop interrupts the hub, as an operator's Ctrl-C, and waits for it.
func (h *crashHub) stop() error {
	h.cmd.Process.Signal(os.Interrupt)
	select {
	case <-h.done:
		return nil
	case <-time.After(30 * time.Second):
		h.kill()
		return errors.New("the hub did not stop within 30 s of SIGINT")
	}
}

type limitedWriter struct {
	mu  sync.Mutex
	b   *strings.Builder
	max int
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.max - w.b.Len(); room > 0 {
		w.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// generation lets agents wait, after a failed call, for the next hub life.
type generation struct {
	mu     sync.Mutex
	up     chan struct{} // closed while a life serves
	closed bool
}

func newGeneration() *generation { return &generation{up: make(chan struct{})} }

// hold makes wait block until next.
func (g *generation) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		select {
		case <-g.up:
			g.up = make(chan struct{})
		default:
		}
	}
}

func (g *generation) next() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.up:
	default:
		close(g.up)
	}
}

func (g *generation) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.next()
}

func (g *generation) wait(ctx context.Context) {
	g.mu.Lock()
	up := g.up
	g.mu.Unlock()
	select {
	case <-up:
	case <-ctx.Done():
	}
}

// agentLedger is what one agent has been told: the claim it holds, and the
// call it has sent and not been answered.
type agentLedger struct {
	name string

	mu       sync.Mutex
	held     string // task it holds ("" none), at heldEpoch
	epoch    int64
	inflight string // "claim", "update", "release" or ""
	task     string // the task of inflight
}

func (l *agentLedger) send(kind, task string) {
	l.mu.Lock()
	l.inflight, l.task = kind, task
	l.mu.Unlock()
}

func (l *agentLedger) acked(held string, epoch int64) {
	l.mu.Lock()
	l.held, l.epoch, l.inflight, l.task = held, epoch, "", ""
	l.mu.Unlock()
}

// crashAgent cycles claim → update → release on its own tasks and files,
// each call with its own idempotency key, sending a call again under the
// same key when the hub died under it.
func crashAgent(ctx context.Context, uri string, l *agentLedger, life *generation, ops, refused, retried *atomic.Int64) {
	var c *client.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	// call runs one keyed call until the hub answers it, redialing after a
	// kill; it reports false once ctx ends.
	call := func(f func(context.Context, *client.Client) error) bool {
		for try := 0; ; try++ {
			if ctx.Err() != nil {
				return false
			}
			if c == nil {
				life.wait(ctx)
				dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				var err error
				c, err = client.Dial(dctx, client.Options{URI: uri, Name: l.name, NoReconnect: true})
				cancel()
				if err != nil {
					c = nil
					time.Sleep(20 * time.Millisecond)
					continue
				}
			}
			if try > 0 {
				retried.Add(1)
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := f(cctx, c)
			cancel()
			var ref *client.Refused
			switch {
			case err == nil:
				ops.Add(1)
				return true
			case errors.As(err, &ref):
				refused.Add(1)
				return true
			default: // the hub went away: wait for the next life, same key
				c.Close()
				c = nil
			}
		}
	}
	for k := 0; ctx.Err() == nil; k++ {
		task := fmt.Sprintf("%s/t%d", l.name, k)
		key := fmt.Sprintf("%s-%d", l.name, k)
		var cl *client.Claim
		l.send("claim", task)
		if !call(func(ctx context.Context, c *client.Client) (err error) {
			cl, err = c.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{fmt.Sprintf("src/%s/f%d.go", l.name, k%8)},
				TTL: time.Hour, Note: "crash loop", IdemKey: key + "-claim"})
			return err
		}) {
			return
		}
		if cl == nil {
			l.acked("", 0)
			continue
		}
		l.acked(task, cl.Epoch)
		l.send("update", task)
		if !call(func(ctx context.Context, c *client.Client) error {
			_, err := c.Update(ctx, client.UpdateRequest{TaskID: task, Status: "working", Note: "step", Epoch: cl.Epoch, IdemKey: key + "-update"})
			return err
		}) {
			return
		}
		l.acked(task, cl.Epoch)
		l.send("release", task)
		if !call(func(ctx context.Context, c *client.Client) error {
			_, err := c.Release(ctx, task, client.ReleaseOptions{Epoch: cl.Epoch, Evidence: []string{"cycle " + strconv.Itoa(k)}, IdemKey: key + "-release"})
			return err
		}) {
			return
		}
		l.acked("", 0)
	}
}

// checkHeld reads the state of a freshly started hub, before any agent
// acts again, and lists each acknowledged claim it no longer holds at its
// acknowledged epoch (a release in flight when the hub died may or may
// not have committed, so its claim may be gone).
func checkHeld(ctx context.Context, uri string, ledgers []*agentLedger) []string {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.Dial(dctx, client.Options{URI: uri, Name: "crash/checker", NoReconnect: true})
	if err != nil {
		return []string{"checker could not connect: " + err.Error()}
	}
	defer c.Close()
	st, err := c.State(dctx)
	if err != nil {
		return []string{"checker could not read the state: " + err.Error()}
	}
	have := make(map[string]client.Claim, len(st.ActiveClaims))
	for _, cl := range st.ActiveClaims {
		have[cl.TaskID] = cl
	}
	var problems []string
	for _, l := range ledgers {
		l.mu.Lock()
		held, epoch, inflight, task := l.held, l.epoch, l.inflight, l.task
		l.mu.Unlock()
		if held == "" || inflight == "release" && task == held {
			continue
		}
		cl, ok := have[held]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s's acknowledged claim of %s (epoch %d) is gone", l.name, held, epoch))
		case cl.Owner != l.name || cl.Epoch != epoch:
			problems = append(problems, fmt.Sprintf("%s's acknowledged claim of %s (epoch %d) is held by %s at epoch %d", l.name, held, epoch, cl.Owner, cl.Epoch))
		}
	}
	return problems
}
