package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"github.com/synapse-hub/synapse/pyjson"
)

// LoadConfig is one run of the load benchmark against a hub over real
// sockets (synapse bench load).
type LoadConfig struct {
	URI      string        // the hub's ws:// address
	HubPID   int           // the hub's process id, to read its CPU and memory from /proc (0: not read)
	Agents   int           // agents cycling claim → grant → release → grant
	Idle     int           // agents connected and idle (most of a real fleet)
	Scoped   bool          // scoped fan-out (--fanout scoped), each agent in a namespace of its own
	Duration time.Duration // how long the cycling phase runs
	// Conflict is the share of an agent's claims aimed at one contended
	// scope instead of its own files (0..1).
	Conflict float64
	// Hostile is how many hostile sockets attack the hub (hostile.go):
	// after the cycling phase (then the quiet baseline), one more cycling
	// phase of Duration per element of HostileKinds, beside that many
	// sockets of its kinds (default: malformed).
	Hostile      int
	HostileKinds [][]string
	// Attackers, if set, starts the attackers of a hostile phase apart
	// (synapse bench load runs them as a child process, 'synapse bench
	// attack') and returns how to stop them and collect what they did;
	// nil runs them in this process.
	Attackers func(kinds []string, maxMsg int) (stop func() (AttackStats, error), err error)
	// Token is the hub's connect token, sent by every agent ("" = open).
	Token string
	// MaxMsgBytes is the hub's frame limit, which oversized frames pass
	// (0 = the default 1 MiB).
	MaxMsgBytes int
	// CycleRate, if positive, is the most cycles per second each agent
	// runs (a fleet of agents that think between claims); 0 = as fast as
	// the hub answers.
	CycleRate float64
	// Import, if positive, adds a board import after the cycling phases
	// (boardImport): the first agent declares this many tasks on the
	// board, once waiting for each answer and once pipelined.
	Import int
	// Progress, if set, gets a line now and then while it runs.
	Progress func(string)
}

// Latency summarises one operation's round trips, in microseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_us"`
	P99   float64 `json:"p99_us"`
	Max   float64 `json:"max_us"`
}

// LoadResult is what one run measured.
type LoadResult struct {
	Agents          int     `json:"agents"`
	Idle            int     `json:"idle"`
	Fanout          string  `json:"fanout"`
	ConnectSeconds  float64 `json:"connect_s"`
	Cycles          int64   `json:"cycles"`
	CyclesPerSecond float64 `json:"cycles_per_s"`
	Claim           Latency `json:"claim"`
	Release         Latency `json:"release"`
	Conflicts       int64   `json:"conflicts_refused"` // refused claims: conflicts, and errors such as a rate limit
	// Hostile are the hostile phases (--hostile), each against the
	// cycling phase above as the quiet baseline.
	Hostile []HostileResult `json:"hostile,omitempty"`
	Chat    Latency         `json:"directed_chat"`
	// Import is the board import (--import), if run.
	Import *ImportResult `json:"board_import,omitempty"`
	// HubCPUPerCycle and ClientCPUPerCycle are CPU µs per claim+release
	// cycle, read from /proc, and the ...PerChat ones per directed chat:
	// the hub's are the figures that matter on two shared cores, where the
	// client's CPU takes from the hub's.
	HubCPUPerCycle    float64 `json:"hub_cpu_us_per_cycle,omitempty"`
	ClientCPUPerCycle float64 `json:"client_cpu_us_per_cycle"`
	HubCPUPerChat     float64 `json:"hub_cpu_us_per_chat,omitempty"`
	ClientCPUPerChat  float64 `json:"client_cpu_us_per_chat,omitempty"`
	HubRSSKB          int64   `json:"hub_rss_kb,omitempty"`
	// FloorUSPerRoundTrip is a bare WebSocket echo's server CPU per round
	// trip on this machine (--floor): the least any hub could cost.
	FloorUSPerRoundTrip float64 `json:"floor_us_per_round_trip,omitempty"`
}

// loadAgent is one connected agent: its socket and name, and the buffer
// its requests are built in (one goroutine sends at a time).
type loadAgent struct {
	name string
	c    *wsConn
	req  []byte
}

// dialAgent connects an agent and registers it, and returns once the hub
// has read the registration (its answer to a who_request sent after it has
// come back: frames of one socket are handled in order).
func dialAgent(ctx context.Context, uri, name, token string, scoped bool) (*loadAgent, error) {
	c, err := dialWS(ctx, ws.Dialer{}, uri)
	if err != nil {
		return nil, err
	}
	a := &loadAgent{name: name, c: c}
	if err := a.register(ctx, token, scoped, false); err != nil {
		c.close()
		return nil, err
	}
	return a, nil
}

// register sends the agent's first frame (with takeover, evicting a live
// socket of the same name) and waits until the hub has read it.
func (a *loadAgent) register(ctx context.Context, token string, scoped, takeover bool) error {
	b := appendField(a.request("heartbeat", "System"), "payload", "online")
	if token != "" {
		b = appendField(b, "token", token)
	}
	if scoped {
		b = appendField(b, "fanout", "scoped")
	}
	if takeover {
		b = append(pyjson.AppendKey(b, "takeover"), "true"...)
	}
	if err := a.send(b); err != nil {
		return fmt.Errorf("register %s: %w", a.name, err)
	}
	if err := a.call(ctx, a.request("who_request", "System"), func(b []byte) bool { return has(b, `"type":"who_snapshot"`) }); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	return nil
}

// request starts a request's JSON in the agent's buffer: sender, target
// and type first, as in the hub's frames. Add fields with appendField;
// send closes the object.
func (a *loadAgent) request(typ, target string) []byte {
	b := append(a.req[:0], '{')
	b = pyjson.AppendString(pyjson.AppendKey(b, "sender"), a.name)
	b = pyjson.AppendString(pyjson.AppendKey(b, "target"), target)
	return pyjson.AppendString(pyjson.AppendKey(b, "type"), typ)
}

func appendField(b []byte, k, v string) []byte {
	return pyjson.AppendString(pyjson.AppendKey(b, k), v)
}

// send closes the request b (from request) and sends it.
func (a *loadAgent) send(b []byte) error {
	b = append(b, '}')
	a.req = b
	return a.c.sendText(b)
}

// call sends the request b and waits for the first frame match accepts.
func (a *loadAgent) call(ctx context.Context, b []byte, match func([]byte) bool) error {
	w := newWaiter(match)
	a.c.await(w)
	if err := a.send(b); err != nil {
		return fmt.Errorf("%s: %w", a.name, err)
	}
	if err := a.c.wait(ctx, w); err != nil {
		return fmt.Errorf("%s: %w", a.name, err)
	}
	return nil
}

// close says goodbye and closes the socket.
func (a *loadAgent) close() {
	_ = a.send(a.request("leave", "System"))
	a.c.close()
}

func has(b []byte, parts ...string) bool {
	for _, p := range parts {
		if !bytes.Contains(b, []byte(p)) {
			return false
		}
	}
	return true
}

// dialsInFlight bounds the connect storm's dials (each with its
// registration round trip): enough to keep the hub busy, few enough that a
// thousand goroutines do not all wait on it at once.
const dialsInFlight = 64

// RunLoad connects the agents (a connect storm: all at once), runs the
// cycling phase for Duration, then a directed chat phase, and reports.
func RunLoad(ctx context.Context, cfg LoadConfig) (LoadResult, error) {
	res := LoadResult{Agents: cfg.Agents, Idle: cfg.Idle, Fanout: "full"}
	if cfg.Scoped {
		res.Fanout = "scoped"
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			cfg.Progress(fmt.Sprintf(format, args...))
		}
	}
	total := cfg.Agents + cfg.Idle
	agents := make([]*loadAgent, total)
	errs := make([]error, total)
	t0 := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, dialsInFlight)
	for i := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			name := fmt.Sprintf("load/a%d", i)
			if cfg.Scoped {
				name = fmt.Sprintf("load%d/agent", i)
			}
			dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			agents[i], errs[i] = dialAgent(dctx, cfg.URI, name, cfg.Token, cfg.Scoped)
		}()
	}
	wg.Wait()
	defer closeAll(agents)
	for _, err := range errs {
		if err != nil {
			return res, fmt.Errorf("bench: connect: %w", err)
		}
	}
	res.ConnectSeconds = time.Since(t0).Seconds()
	progress("%d agents connected in %.2fs", total, res.ConnectSeconds)

	workers := agents[:cfg.Agents]
	hub0, cli0 := procCPU(cfg.HubPID), procCPU(os.Getpid())
	ph, err := cycle(ctx, cfg, workers, func(n int64, since time.Duration) {
		progress("%d cycles, %.0f/s", n, float64(n)/since.Seconds())
	})
	if err != nil {
		return res, err
	}
	hub1, cli1 := procCPU(cfg.HubPID), procCPU(os.Getpid())
	res.Cycles, res.Conflicts = ph.cycles, ph.conflicts
	res.CyclesPerSecond = float64(res.Cycles) / ph.elapsed.Seconds()
	res.Claim, res.Release = ph.claim, ph.release
	if res.Cycles > 0 {
		res.ClientCPUPerCycle = (cli1 - cli0) / float64(res.Cycles) * 1e6
		if cfg.HubPID > 0 {
			res.HubCPUPerCycle = (hub1 - hub0) / float64(res.Cycles) * 1e6
		}
	}
	if cfg.Hostile > 0 {
		kinds := cfg.HostileKinds
		if len(kinds) == 0 {
			kinds = [][]string{{"malformed"}}
		}
		for _, k := range kinds {
			hr, err := hostilePhase(ctx, cfg, workers, k, res.Claim, progress)
			if err != nil {
				return res, err
			}
			res.Hostile = append(res.Hostile, hr)
		}
	}

	if cfg.Import > 0 {
		progress("board import: %d tasks", cfg.Import)
		if res.Import, err = boardImport(ctx, cfg, agents[0]); err != nil {
			return res, err
		}
	}
	if len(agents) >= 2 {
		if err := directedChat(ctx, cfg, agents[0], agents[1], &res); err != nil {
			return res, err
		}
	}
	res.HubRSSKB = procRSS(cfg.HubPID)
	return res, nil
}

// phase is what one cycling phase measured.
type phase struct {
	cycles, conflicts int64
	claim, release    Latency
	elapsed           time.Duration
}

// cycle runs one cycling phase of cfg.Duration: each worker cycles claim →
// grant → release → grant on its own files (a cfg.Conflict share of its
// claims aimed at one contended scope). tick, if set, is told the cycles
// so far every second.
func cycle(ctx context.Context, cfg LoadConfig, workers []*loadAgent, tick func(cycles int64, since time.Duration)) (phase, error) {
	claimLat := make([][]time.Duration, len(workers))
	releaseLat := make([][]time.Duration, len(workers))
	var cycles, conflicts atomic.Int64
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	stopTick := make(chan struct{})
	if tick != nil {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stopTick:
					return
				case <-t.C:
					tick(cycles.Load(), time.Since(start))
				}
			}
		}()
	}
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i, a := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var denied bool
			own, ownPaths := a.name+"/T", []string{a.name}
			claimOwn, releaseOwn := claimAnswer(a.name, own, &denied), releaseAnswer(a.name, own)
			for k := 0; time.Now().Before(deadline) && ctx.Err() == nil; k++ {
				if cfg.CycleRate > 0 {
					if d := time.Until(start.Add(time.Duration(float64(k) / cfg.CycleRate * float64(time.Second)))); d > 0 {
						time.Sleep(d)
					}
				}
				task, paths, claimed, released := own, ownPaths, claimOwn, releaseOwn
				if cfg.Conflict > 0 && float64(k%100) < cfg.Conflict*100 {
					task, paths = fmt.Sprintf("%s/C%d", a.name, k), []string{"contended"}
					claimed, released = claimAnswer(a.name, task, &denied), releaseAnswer(a.name, task)
				}
				denied = false
				s := time.Now()
				b := pyjson.AppendStrings(pyjson.AppendKey(appendField(a.request("claim", "System"), "task_id", task), "paths"), paths)
				if err := a.call(ctx, b, claimed); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				claimLat[i] = append(claimLat[i], time.Since(s))
				if denied {
					conflicts.Add(1)
					continue
				}
				s = time.Now()
				if err := a.call(ctx, appendField(a.request("release", "System"), "task_id", task), released); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				releaseLat[i] = append(releaseLat[i], time.Since(s))
				cycles.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stopTick)
	ph := phase{elapsed: time.Since(start), cycles: cycles.Load(), conflicts: conflicts.Load(),
		claim: summarize(claimLat), release: summarize(releaseLat)}
	if err, _ := firstErr.Load().(error); err != nil {
		return ph, fmt.Errorf("bench: cycle: %w", err)
	}
	return ph, nil
}

// claimAnswer matches the hub's answer to owner's claim of task: the grant
// (a broadcast, so its owner is checked too), or the refusal or an error
// to owner (a rate limit), which it records in denied.
func claimAnswer(owner, task string, denied *bool) func([]byte) bool {
	taskID := `"task_id":"` + task + `"`
	granted := []string{`"type":"claim_granted"`, `"owner":"` + owner + `"`, taskID}
	refused := []string{`"type":"claim_denied"`, taskID}
	errored := []string{`"type":"error"`, `"target":"` + owner + `"`}
	return func(b []byte) bool {
		if has(b, granted...) {
			return true
		}
		*denied = has(b, refused...) || has(b, errored...)
		return *denied
	}
}

// releaseAnswer matches the hub's answer to owner's release of task, an
// error to owner included.
func releaseAnswer(owner, task string) func([]byte) bool {
	granted := []string{`"type":"release_granted"`, `"task_id":"` + task + `"`}
	errored := []string{`"type":"error"`, `"target":"` + owner + `"`}
	return func(b []byte) bool {
		return has(b, granted...) || has(b, `"type":"release_denied"`) || has(b, errored...)
	}
}

// ImportResult is a board import: one agent declaring Tasks tasks
// (ledger_task), each answered by its ledger_task_posted broadcast.
type ImportResult struct {
	Tasks int `json:"tasks"`
	// SequentialSeconds is the import sent as a script through the SDK
	// does it: each declaration waits for its answer.
	SequentialSeconds float64 `json:"sequential_s"`
	// PipelinedSeconds is the import sent at once: every declaration
	// written before any answer is read, until the last one's answer.
	PipelinedSeconds float64 `json:"pipelined_s"`
}

// boardImport declares cfg.Import tasks from a, twice (distinct task ids):
// waiting for each answer, then pipelined. A refusal (an error to a) ends
// either with an error, so a rate limit cannot pass for speed.
func boardImport(ctx context.Context, cfg LoadConfig, a *loadAgent) (*ImportResult, error) {
	res := &ImportResult{Tasks: cfg.Import}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	declare := func(id string) []byte {
		return appendField(appendField(a.request("ledger_task", "System"), "task_id", id), "title", "imported "+id)
	}
	var refused bool
	answer := func(id string) func([]byte) bool {
		posted := []string{`"type":"ledger_task_posted"`, `"task_id":"` + id + `"`}
		errored := []string{`"type":"error"`, `"target":"` + a.name + `"`}
		return func(b []byte) bool {
			if has(b, posted...) {
				return true
			}
			refused = has(b, errored...)
			return refused
		}
	}
	start := time.Now()
	for k := range cfg.Import {
		id := a.name + "/import/s" + strconv.Itoa(k)
		if err := a.call(ictx, declare(id), answer(id)); err != nil {
			return nil, fmt.Errorf("bench: board import: %w", err)
		}
		if refused {
			return nil, fmt.Errorf("bench: board import: task %d refused", k)
		}
	}
	res.SequentialSeconds = time.Since(start).Seconds()

	last := a.name + "/import/p" + strconv.Itoa(cfg.Import-1)
	w := newWaiter(answer(last))
	a.c.await(w)
	start = time.Now()
	for k := range cfg.Import {
		if err := a.send(declare(a.name + "/import/p" + strconv.Itoa(k))); err != nil {
			return nil, fmt.Errorf("bench: board import: %w", err)
		}
	}
	if err := a.c.wait(ictx, w); err != nil {
		return nil, fmt.Errorf("bench: board import: the last task's answer: %w", err)
	}
	if refused {
		return nil, errors.New("bench: board import: a pipelined declaration was refused")
	}
	res.PipelinedSeconds = time.Since(start).Seconds()
	return res, nil
}

// directedChat runs the directed chat phase: from writes to to, which must
// receive each message before the next is sent (the hub's echo to the
// sender comes first).
func directedChat(ctx context.Context, cfg LoadConfig, from, to *loadAgent, res *LoadResult) error {
	var lat []time.Duration
	h0, c0 := procCPU(cfg.HubPID), procCPU(os.Getpid())
	end := time.Now().Add(min(cfg.Duration, 2*time.Second))
	// One deadline for the phase, not a timer per message.
	cctx, cancel := context.WithDeadline(ctx, end.Add(5*time.Second))
	defer cancel()
	start := time.Now()
	for k := 0; time.Now().Before(end); k++ {
		if cfg.CycleRate > 0 { // as paced as the cycles: a rate limit would refuse the rest
			if d := time.Until(start.Add(time.Duration(float64(k) / cfg.CycleRate * float64(time.Second)))); d > 0 {
				time.Sleep(d)
			}
		}
		id := "m" + strconv.Itoa(k)
		msgID := `"client_msg_id":"` + id + `"`
		w := newWaiter(func(b []byte) bool { return has(b, `"type":"chat"`, msgID) })
		to.c.await(w)
		s := time.Now()
		if err := from.send(appendField(appendField(from.request("chat", to.name), "payload", "hello"), "client_msg_id", id)); err != nil {
			return fmt.Errorf("bench: directed chat: %w", err)
		}
		if err := to.c.wait(cctx, w); err != nil {
			return fmt.Errorf("bench: directed chat %s never arrived: %w", id, err)
		}
		lat = append(lat, time.Since(s))
	}
	res.Chat = summarize([][]time.Duration{lat})
	if len(lat) > 0 {
		res.ClientCPUPerChat = (procCPU(os.Getpid()) - c0) / float64(len(lat)) * 1e6
		if cfg.HubPID > 0 {
			res.HubCPUPerChat = (procCPU(cfg.HubPID) - h0) / float64(len(lat)) * 1e6
		}
	}
	return nil
}

// closeAll says goodbye on every socket at once: one by one, a thousand
// closing handshakes would take longer than the run.
func closeAll(agents []*loadAgent) {
	var wg sync.WaitGroup
	for _, a := range agents {
		if a != nil {
			wg.Go(a.close)
		}
	}
	wg.Wait()
}

func summarize(per [][]time.Duration) Latency {
	var all []time.Duration
	for _, l := range per {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return Latency{}
	}
	slices.Sort(all)
	q := func(f float64) float64 { return float64(all[min(len(all)-1, int(f*float64(len(all))))].Microseconds()) }
	return Latency{Count: int64(len(all)), P50: q(0.5), P99: q(0.99), Max: float64(all[len(all)-1].Microseconds())}
}

// procCPU reads a process's user+system CPU seconds from /proc (0 when it
// cannot: pid 0, another OS).
func procCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100 // USER_HZ
}

// procRSS reads a process's resident set in KiB from /proc.
func procRSS(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
