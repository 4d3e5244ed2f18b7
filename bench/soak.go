package bench

// soak.go is synapse bench soak: a mixed fleet against a hub over real
// sockets for minutes, the hub's memory, goroutines, open files and journal
// sampled as it runs, and each curve judged by soakrule.go: growth that does
// not level off fails the run.
//
// Who owns what: each fleet member is one goroutine with its own client;
// they share only the atomic counters of soakCounts. The sampler runs on
// RunSoak's goroutine and owns the sample series.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"github.com/synapse-hub/synapse/client"
)

// SoakConfig is one soak of a hub (synapse bench soak).
type SoakConfig struct {
	URI        string // the hub's ws:// address
	HubPID     int    // the hub's process id: RSS and open files are read from /proc
	MetricsURL string // the hub's /metrics: goroutines and heap
	// JournalPath is the hub's SQLite journal, whose size (with its -wal)
	// is sampled; "" for a hub without one.
	JournalPath string
	Duration    time.Duration
	Sample      time.Duration // how often the hub is sampled
	Teams       int           // namespaces of two working agents each
	Readers     int           // agents asking who, state and board
	Churners    int           // names that connect and disconnect, some by takeover
	// Rate bounds the operations per second of the workers and readers
	// together (each paces itself to its share), so the soak is a steady
	// load rather than a flood on shared cores.
	Rate float64
	// Tolerance is the growth allowed between the middle and the last third
	// of the run, as a fraction of the middle third's median
	// (soakrule.go).
	Tolerance float64
	// Progress, if set, is told of each sample as it is taken.
	Progress func(SoakSample)
}

// Floors of the growth allowance: growth below them is noise whatever the
// tolerance says (a few sockets of churn more or less at the sample).
const (
	soakFloorRSSKB      = 8 << 10 // KiB
	soakFloorHeapBytes  = 4 << 20
	soakFloorGoroutines = 32
	soakFloorFDs        = 32
	// The journal's size may differ by this between the middle and the
	// last third: a snapshot written, a WAL not yet checkpointed back, the
	// free pages kept for reuse (journal/vacuum.go) land in one third and
	// not the other.
	soakFloorJournalBytes = 16 << 20
)

// SoakSample is the hub at one moment of the soak.
type SoakSample struct {
	Seconds         float64 `json:"t_s"`
	RSSKB           int64   `json:"rss_kb"`
	HeapLiveBytes   int64   `json:"heap_live_bytes"`
	HeapObjectBytes int64   `json:"heap_objects_bytes"`
	Goroutines      int64   `json:"goroutines"`
	FDs             int64   `json:"open_fds"`
	Connected       int64   `json:"connected_sockets"`
	JournalBytes    int64   `json:"journal_bytes,omitempty"`
	Ops             int64   `json:"ops"`
	Refusals        int64   `json:"refusals"`
	Errors          int64   `json:"errors"`
	Connects        int64   `json:"churn_connects"`
	Takeovers       int64   `json:"churn_takeovers"`
}

// SoakResult is a soak's series and verdicts.
type SoakResult struct {
	DurationSeconds float64      `json:"duration_s"`
	SampleSeconds   float64      `json:"sample_s"`
	Teams           int          `json:"teams"`
	Workers         int          `json:"workers"`
	Readers         int          `json:"readers"`
	Churners        int          `json:"churners"`
	Journal         bool         `json:"journal"`
	Tolerance       float64      `json:"tolerance"`
	Samples         []SoakSample `json:"samples"`
	Trends          []Trend      `json:"trends"`
	Pass            bool         `json:"pass"`
	// Failures name each resource that grew, and why; also a fleet that
	// stopped making progress.
	Failures   []string `json:"failures,omitempty"`
	FirstError string   `json:"first_error,omitempty"`
}

// soakCounts are the fleet's counters, shared by its goroutines.
type soakCounts struct {
	ops, refusals, errors, connects, takeovers atomic.Int64
	firstErr                                   firstError
}

// firstError keeps the first error set, of whatever type (an atomic.Value
// would panic on a second error of another concrete type).
type firstError struct{ p atomic.Pointer[error] }

func (f *firstError) set(err error) { f.p.CompareAndSwap(nil, &err) }

func (f *firstError) get() error {
	if p := f.p.Load(); p != nil {
		return *p
	}
	return nil
}

// note counts one finished request: answered (granted or refused) or failed.
func (n *soakCounts) note(err error) {
	var ref *client.Refused
	switch {
	case err == nil:
		n.ops.Add(1)
	case errors.As(err, &ref):
		n.ops.Add(1)
		n.refusals.Add(1)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrClosed):
		// the soak ending under a call in flight
	default:
		n.fail(err)
	}
}

func (n *soakCounts) fail(err error) {
	n.errors.Add(1)
	n.firstErr.set(err)
}

// RunSoak runs the fleet against cfg.URI for cfg.Duration, sampling the hub
// every cfg.Sample, and judges the curves.
func RunSoak(ctx context.Context, cfg SoakConfig) (SoakResult, error) {
	res := SoakResult{DurationSeconds: cfg.Duration.Seconds(), SampleSeconds: cfg.Sample.Seconds(), Teams: cfg.Teams,
		Workers: 2 * cfg.Teams, Readers: cfg.Readers, Churners: cfg.Churners, Journal: cfg.JournalPath != "", Tolerance: cfg.Tolerance}
	var counts soakCounts
	fleetCtx, stopFleet := context.WithCancel(ctx)
	defer stopFleet()
	members := 2*cfg.Teams + cfg.Readers
	interval := time.Duration(0)
	if cfg.Rate > 0 && members > 0 {
		interval = time.Duration(float64(members) / cfg.Rate * float64(time.Second))
	}

	var ready, done sync.WaitGroup
	var dialErr firstError
	start := func(f func(context.Context, *soakCounts, func()) error) {
		ready.Add(1)
		done.Go(func() {
			var once sync.Once
			up := func() { once.Do(ready.Done) }
			defer up()
			if err := f(fleetCtx, &counts, up); err != nil && fleetCtx.Err() == nil {
				dialErr.set(err)
				stopFleet()
			}
		})
	}
	for k := range cfg.Teams {
		for i := range 2 {
			start(func(ctx context.Context, n *soakCounts, up func()) error {
				return soakWorker(ctx, cfg.URI, k, i, interval, n, up)
			})
		}
	}
	for r := range cfg.Readers {
		start(func(ctx context.Context, n *soakCounts, up func()) error {
			return soakReader(ctx, cfg.URI, r, interval, n, up)
		})
	}
	for c := range cfg.Churners {
		start(func(ctx context.Context, n *soakCounts, up func()) error {
			up() // churners come and go: the fleet does not wait for them
			soakChurner(ctx, cfg.URI, c, n)
			return nil
		})
	}
	ready.Wait()
	if err := dialErr.get(); err != nil {
		stopFleet()
		done.Wait()
		return res, fmt.Errorf("bench: soak: %w", err)
	}

	t0 := time.Now()
	sampler := newSoakSampler(cfg)
	take := func() {
		s := sampler.sample()
		s.Seconds = time.Since(t0).Seconds()
		s.Ops, s.Refusals, s.Errors = counts.ops.Load(), counts.refusals.Load(), counts.errors.Load()
		s.Connects, s.Takeovers = counts.connects.Load(), counts.takeovers.Load()
		res.Samples = append(res.Samples, s)
		if cfg.Progress != nil {
			cfg.Progress(s)
		}
	}
	take()
	tick := time.NewTicker(cfg.Sample)
	end := time.NewTimer(cfg.Duration)
	defer tick.Stop()
	defer end.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-end.C:
			take()
			break loop
		case <-tick.C:
			if time.Since(t0) < cfg.Duration-cfg.Sample/2 { // the end's own sample is near
				take()
			}
		}
	}
	stopFleet()
	done.Wait()
	if err := counts.firstErr.get(); err != nil {
		res.FirstError = err.Error()
	}
	if err := dialErr.get(); err != nil && res.FirstError == "" {
		res.FirstError = err.Error()
	}
	res.judge()
	return res, ctx.Err()
}

// judge applies the growth rule to every sampled resource.
func (r *SoakResult) judge() {
	n := len(r.Samples)
	t := make([]float64, n)
	col := func(f func(SoakSample) int64) []float64 {
		v := make([]float64, n)
		for i, s := range r.Samples {
			v[i] = float64(f(s))
		}
		return v
	}
	for i, s := range r.Samples {
		t[i] = s.Seconds
	}
	tol := r.Tolerance
	r.Trends = []Trend{
		JudgeGrowth("rss_kb", t, col(func(s SoakSample) int64 { return s.RSSKB }), tol, soakFloorRSSKB),
		JudgeGrowth("heap_live_bytes", t, col(func(s SoakSample) int64 { return s.HeapLiveBytes }), tol, soakFloorHeapBytes),
		JudgeGrowth("goroutines", t, col(func(s SoakSample) int64 { return s.Goroutines }), tol, soakFloorGoroutines),
		JudgeGrowth("open_fds", t, col(func(s SoakSample) int64 { return s.FDs }), tol, soakFloorFDs),
	}
	if r.Journal {
		r.Trends = append(r.Trends, JudgeGrowth("journal_bytes", t, col(func(s SoakSample) int64 { return s.JournalBytes }), tol, soakFloorJournalBytes))
	}
	r.Pass = true
	for _, tr := range r.Trends {
		if tr.Verdict == Grew {
			r.Pass = false
			r.Failures = append(r.Failures, tr.Resource+": "+tr.Reason)
		}
	}
	if n == 0 {
		return
	}
	if mid, last := thirds(t); last < n && mid < last && r.Samples[n-1].Ops == r.Samples[last].Ops {
		r.Pass = false
		r.Failures = append(r.Failures, fmt.Sprintf("fleet: no operation completed in the last third (%d ops in all)", r.Samples[n-1].Ops))
	}
	if e := r.Samples[n-1].Errors; e > 0 { // refusals are answers; these got none
		r.Pass = false
		r.Failures = append(r.Failures, fmt.Sprintf("fleet: %d requests or connections failed, the first: %s", e, r.FirstError))
	}
}

// soakSampler reads the hub's footprint.
type soakSampler struct {
	cfg  SoakConfig
	http *http.Client
}

func newSoakSampler(cfg SoakConfig) *soakSampler {
	return &soakSampler{cfg: cfg, http: &http.Client{Timeout: 5 * time.Second}}
}

// sample reads RSS and open files from /proc, goroutines, heap and
// sockets from /metrics, and the journal's size from its files.
func (s *soakSampler) sample() SoakSample {
	var out SoakSample
	out.RSSKB = procRSS(s.cfg.HubPID)
	out.FDs = procFDs(s.cfg.HubPID)
	if s.cfg.MetricsURL != "" {
		if m, err := s.metrics(); err == nil {
			out.Goroutines = int64(m["synapse_go_goroutines"])
			out.HeapLiveBytes = int64(m["synapse_go_heap_live_bytes"])
			out.HeapObjectBytes = int64(m["synapse_go_heap_objects_bytes"])
			out.Connected = int64(m["synapse_connected_clients"])
		}
	}
	if p := s.cfg.JournalPath; p != "" {
		for _, f := range []string{p, p + "-wal"} {
			if st, err := os.Stat(f); err == nil {
				out.JournalBytes += st.Size()
			}
		}
	}
	return out
}

// metrics scrapes the hub's unlabelled series.
func (s *soakSampler) metrics() (map[string]float64, error) {
	resp, err := s.http.Get(s.cfg.MetricsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: soak: %s: %s", s.cfg.MetricsURL, resp.Status)
	}
	return parseMetrics(bufio.NewScanner(resp.Body))
}

// parseMetrics reads the unlabelled samples of a Prometheus text page.
func parseMetrics(sc *bufio.Scanner) (map[string]float64, error) {
	m := make(map[string]float64)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			m[name] = f
		}
	}
	return m, sc.Err()
}

// procFDs counts a process's open file descriptors (0 when it cannot).
func procFDs(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	es, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0
	}
	return int64(len(es))
}

// pacer spaces a fleet member's requests interval apart (none when 0),
// starting at a random offset so the fleet does not move in lockstep.
type pacer struct {
	interval time.Duration
	next     time.Time
}

func newPacer(interval time.Duration) *pacer {
	return &pacer{interval: interval, next: time.Now().Add(rand.N(interval + 1))}
}

func (p *pacer) wait(ctx context.Context) bool {
	if p.interval <= 0 {
		return ctx.Err() == nil
	}
	d := time.Until(p.next)
	p.next = p.next.Add(p.interval)
	if d < -p.interval { // fell behind: do not burst to catch up
		p.next = time.Now().Add(p.interval)
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return ctx.Err() == nil
}

// soakWorker is one of a team's two working agents: each cycle it releases
// what its teammate handed it, claims a task of its own, checkpoints and
// updates it under its epoch, renews it, then releases it (with evidence)
// or hands it to its teammate; it moves a board task, sends its teammate a
// directed chat and, now and then, posts progress and broadcasts.
func soakWorker(ctx context.Context, uri string, team, idx int, interval time.Duration, n *soakCounts, up func()) error {
	name := fmt.Sprintf("soak%d/w%d", team, idx)
	mate := fmt.Sprintf("soak%d/w%d", team, 1-idx)
	c, err := client.Dial(ctx, client.Options{URI: uri, Name: name})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer c.Close()
	handed := c.Subscribe(ctx, func(f client.Frame) bool {
		return f.Type == "handoff_granted" && f.String("owner") == name
	})
	board := fmt.Sprintf("soak%d/b%d", team, idx)
	if _, err := c.TaskDeclare(ctx, client.TaskDeclaration{TaskID: board, Title: "soak board task"}); err != nil {
		var ref *client.Refused
		if !errors.As(err, &ref) { // declared by an earlier run: fine
			return fmt.Errorf("%s: declare %s: %w", name, board, err)
		}
	}
	up()
	p := newPacer(interval)
	statuses := []string{"in_progress", "blocked", "in_progress", "done", "open"}
	for k := 0; ; k++ {
		for drained := false; !drained; {
			select {
			case f := <-handed:
				if !p.wait(ctx) {
					return nil
				}
				_, err := c.Release(ctx, f.String("task_id"), client.ReleaseOptions{Epoch: f.Int("epoch")})
				n.note(err)
			default:
				drained = true
			}
		}
		task := fmt.Sprintf("%s/t%d", name, k%4)
		paths := []string{fmt.Sprintf("src/%s/f%d.go", name, k%4)}
		if !p.wait(ctx) {
			return nil
		}
		cl, err := c.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: paths, TTL: 2 * time.Minute, Note: "soak"})
		n.note(err)
		var steps []func() error // what follows the claim, each paced
		if err == nil {
			steps = []func() error{
				func() error {
					_, err := c.Checkpoint(ctx, task, "step "+strconv.Itoa(k), cl.Epoch)
					return err
				},
				func() error {
					_, err := c.Update(ctx, client.UpdateRequest{TaskID: task, Status: "working", Note: "soaking", Epoch: cl.Epoch})
					return err
				},
				func() error {
					r, err := c.Renew(ctx, cl)
					if err == nil {
						cl = r
					}
					return err
				},
				func() error {
					if k%3 == 2 {
						_, err := c.Handoff(ctx, client.HandoffRequest{TaskID: task, To: mate, Epoch: cl.Epoch})
						return err
					}
					_, err := c.Release(ctx, task, client.ReleaseOptions{Epoch: cl.Epoch, Evidence: []string{"soak cycle " + strconv.Itoa(k)},
						IdemKey: fmt.Sprintf("%s-%d-%d", name, k, rand.Uint64())})
					return err
				},
			}
		}
		st := statuses[k%len(statuses)]
		steps = append(steps,
			func() error {
				_, err := c.TaskUpdate(ctx, client.BoardTaskUpdate{TaskID: board, Status: &st})
				return err
			},
			func() error {
				_, err := c.Send(ctx, mate, "cycle "+strconv.Itoa(k), client.SendOptions{})
				return err
			},
		)
		if k%4 == 0 {
			steps = append(steps, func() error {
				_, err := c.TaskProgress(ctx, board, "cycle "+strconv.Itoa(k), "note")
				return err
			})
		}
		if k%8 == 0 {
			steps = append(steps, func() error {
				_, err := c.Send(ctx, "all", name+" at cycle "+strconv.Itoa(k), client.SendOptions{})
				return err
			})
		}
		for _, step := range steps {
			if !p.wait(ctx) {
				return nil
			}
			n.note(step())
		}
	}
}

// soakReader asks who is online, the state and the board, in turn, with
// the full fan-out (every broadcast reaches it), as a dashboard would.
func soakReader(ctx context.Context, uri string, idx int, interval time.Duration, n *soakCounts, up func()) error {
	name := fmt.Sprintf("soakr/r%d", idx)
	c, err := client.Dial(ctx, client.Options{URI: uri, Name: name})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer c.Close()
	up()
	p := newPacer(interval)
	for k := 0; p.wait(ctx); k++ {
		switch k % 3 {
		case 0:
			_, err = c.Who(ctx)
		case 1:
			_, err = c.State(ctx)
		default:
			_, err = c.Board(ctx)
		}
		n.note(err)
	}
	return nil
}

// soakChurner is a name that keeps coming and going: it connects, stays two
// to four seconds, and leaves, in turn: by saying goodbye; by dropping its
// socket without a word; by saying goodbye again; and by a takeover (a
// second socket binds the name while the first still holds it, and the hub
// evicts the first). One takeover every four holds, at least 8 s, keeps a
// name under the hub's takeover quarantine (the fifth within 30 s).
func soakChurner(ctx context.Context, uri string, idx int, n *soakCounts) {
	name := fmt.Sprintf("soakc/c%d", idx)
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	hold := func() bool { return sleep(2*time.Second + rand.N(2*time.Second)) }
	dial := func(takeover bool) *loadAgent {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for {
			c, err := dialWS(dctx, ws.Dialer{}, uri)
			if err != nil {
				if ctx.Err() == nil {
					n.fail(fmt.Errorf("%s: dial: %w", name, err))
				}
				return nil
			}
			a := &loadAgent{name: name, c: c}
			err = a.register(dctx, registration{leave: true}, takeover) // our hub: it has the leave verb
			if err == nil {
				n.connects.Add(1)
				if takeover {
					n.takeovers.Add(1)
				}
				return a
			}
			c.nc.Close()
			// After a dropped socket the name stays bound until the hub
			// has read the socket's end: try again shortly.
			if errors.Is(err, errClosed) && strings.Contains(err.Error(), " 4009 ") && sleep(50*time.Millisecond) && dctx.Err() == nil {
				continue
			}
			if ctx.Err() == nil {
				n.fail(fmt.Errorf("%s: %w", name, err))
			}
			return nil
		}
	}
	var a *loadAgent
	for k := 0; ctx.Err() == nil; k++ {
		if a == nil {
			if a = dial(false); a == nil {
				if !hold() {
					return
				}
				continue
			}
		}
		if !hold() {
			break
		}
		switch k % 4 {
		case 0, 2:
			a.close()
			a = nil
		case 1:
			a.c.nc.Close() // gone without a close frame
			<-a.c.done
			a = nil
		default:
			next := dial(true)
			select { // the hub closes the superseded socket (4010)
			case <-a.c.done:
			case <-time.After(5 * time.Second):
				if ctx.Err() == nil {
					n.fail(fmt.Errorf("%s: the superseded socket was not closed within 5 s", name))
				}
			}
			a.c.nc.Close()
			a = next
		}
	}
	if a != nil {
		a.close()
	}
}
