package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

// LoadConfig is one run of the load benchmark against a hub over real
// sockets (synapse bench load).
type LoadConfig struct {
	URI    string // the hub's ws:// address
	HubPID int    // the hub's process id, to read its CPU and memory from /proc (0: not read)
	Agents int    // agents cycling claim → grant → release → grant
	Idle   int    // agents connected and idle (most of a real fleet)
	// Fanout is the fan-out the agents ask for (--fanout): "full" (or ""),
	// the reference's; "scoped", scoped fan-out where the hub announces it
	// (feature scoped_fanout), each agent in a namespace of its own; "own",
	// as the Go SDK registers where the hub announces it (own_fanout): only
	// what names the agent, no presence, the registration acked by a ping.
	Fanout string
	// SDK makes every agent a Go SDK client (client.Dial with the SDK's
	// defaults: its own fan-out, no presence) cycling through its Claim
	// and Release calls, instead of the load client's lean agent: what a
	// fleet of our own agents costs the hub. No hostile or chat phase.
	SDK      bool
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
	// TLS is what agents dial a wss:// hub with (synapse bench load --ca;
	// nil: the system's roots). Hostile sockets dial ws:// only.
	TLS *tls.Config
	// MaxMsgBytes is the hub's frame limit, which oversized frames pass
	// (0 = the default 1 MiB).
	MaxMsgBytes int
	// Rate, if positive, is the cycles per second each agent offers (a
	// fleet of agents that think between claims; see cycleDue): two hubs
	// run at one Rate get the same offered load. 0 = each agent claims
	// again as soon as its release is granted (saturation).
	Rate float64
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
	// Label names the hub in a side-by-side run (synapse bench load --vs).
	Label string `json:"label,omitempty"`
	// Hub is what the hub's welcome said: its id, protocol version and
	// announced features (the reference announces none).
	Hub    HubInfo `json:"hub"`
	Agents int     `json:"agents"`
	Idle   int     `json:"idle"`
	// Fanout is the fan-out that ran: "scoped" or "own" only when it was
	// asked for and the hub announced it (scoped_fanout; own_fanout and
	// ping), else "full" ("scoped" for own on a hub with scoped fan-out
	// only); FanoutAsked is what --fanout asked for.
	Fanout      string `json:"fanout"`
	FanoutAsked string `json:"fanout_asked"`
	// ConnectSeconds is the connect storm: from the first dial until every
	// agent, idle ones included, is registered (its presence_update seen).
	// HubCPUConnectSeconds and ClientCPUConnectSeconds are the hub's and
	// this process's CPU through it, HubRSSConnectKB the hub's resident
	// memory right after it.
	ConnectSeconds          float64 `json:"connect_s"`
	HubCPUConnectSeconds    float64 `json:"hub_cpu_connect_s,omitempty"`
	ClientCPUConnectSeconds float64 `json:"client_cpu_connect_s"`
	HubRSSConnectKB         int64   `json:"hub_rss_connect_kb,omitempty"`
	// Rate is each agent's offered cycles per second (0 = saturation),
	// OfferedPerSecond all agents' together.
	Rate             float64 `json:"rate_per_agent"`
	OfferedPerSecond float64 `json:"offered_cycles_per_s,omitempty"`
	Cycles           int64   `json:"cycles"`
	CyclesPerSecond  float64 `json:"cycles_per_s"`
	// HubCores is the hub's CPU through the cycling phase, in cores.
	HubCores  float64 `json:"hub_cores,omitempty"`
	Claim     Latency `json:"claim"`
	Release   Latency `json:"release"`
	Conflicts int64   `json:"conflicts_refused"` // refused claims: conflicts, and errors such as a rate limit
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
	HubRSSKB          int64   `json:"hub_rss_kb,omitempty"` // at the end of the run
	// FloorUSPerRoundTrip is a bare WebSocket echo's server CPU per round
	// trip on this machine (--floor): the least any hub could cost.
	FloorUSPerRoundTrip float64 `json:"floor_us_per_round_trip,omitempty"`
}

// loadAgent is one connected agent: its socket and name, and the buffer
// its requests are built in (one goroutine sends at a time).
type loadAgent struct {
	name  string
	c     *wsConn
	req   []byte
	leave bool // the hub announced the leave verb: say it before closing
}

// dialAgent connects an agent and registers it (handshake.go), and returns
// once the hub has read the registration. readBuf is its socket's read
// buffer (0: readBufSize).
func dialAgent(ctx context.Context, uri, name string, r registration, readBuf int) (*loadAgent, error) {
	d := ws.Dialer{ReadBufferSize: readBuf, TLSConfig: r.tls}
	if r.presence != "" {
		d.Header = ws.HandshakeHeaderHTTP(http.Header{wire.PresenceHeader: {r.presence}})
	}
	c, err := dialWS(ctx, d, uri)
	if err != nil {
		return nil, err
	}
	a := &loadAgent{name: name, c: c}
	if err := a.register(ctx, r, false); err != nil {
		c.close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return a, nil
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

// close says goodbye (where the hub has the leave verb) and closes the
// socket.
func (a *loadAgent) close() {
	if a.leave {
		_ = a.send(a.request("leave", "System"))
	}
	a.c.close()
}

// probeTimeout bounds the probe of the hub's welcome.
const probeTimeout = 10 * time.Second

// dialsInFlight bounds the connect storm's dials (each with its
// registration round trip): enough to keep the hub busy, few enough that a
// thousand goroutines do not all wait on it at once.
const dialsInFlight = 64

// RunLoad connects the agents (a connect storm: all at once), runs the
// cycling phase for Duration, then a directed chat phase, and reports.
func RunLoad(ctx context.Context, cfg LoadConfig) (LoadResult, error) {
	res := LoadResult{Agents: cfg.Agents, Idle: cfg.Idle, FanoutAsked: "full", Rate: max(cfg.Rate, 0)}
	if cfg.Fanout != "" {
		res.FanoutAsked = cfg.Fanout
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			cfg.Progress(fmt.Sprintf(format, args...))
		}
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	info, err := ProbeHub(pctx, cfg.URI, cfg.Token, cfg.TLS)
	cancel()
	if err != nil {
		return res, err
	}
	res.Hub = info
	if res.Rate > 0 {
		res.OfferedPerSecond = res.Rate * float64(cfg.Agents)
	}
	if cfg.SDK {
		res.FanoutAsked, res.Fanout = "sdk", "sdk"
		return runSDKLoad(ctx, cfg, res, progress)
	}
	reg := registrationFor(info, cfg.Token, res.FanoutAsked)
	reg.tls = cfg.TLS
	res.Fanout = reg.fanoutRun()
	total := cfg.Agents + cfg.Idle
	agents := make([]*loadAgent, total)
	errs := make([]error, total)
	storm := startStorm(cfg)
	var wg sync.WaitGroup
	sem := make(chan struct{}, dialsInFlight)
	for i := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			name := fmt.Sprintf("load/a%d", i)
			if res.FanoutAsked != "full" {
				name = fmt.Sprintf("load%d/agent", i)
			}
			dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			readBuf := readBufSize
			if i >= cfg.Agents {
				readBuf = idleReadBufSize
			}
			agents[i], errs[i] = dialAgent(dctx, cfg.URI, name, reg, readBuf)
		}()
	}
	wg.Wait()
	defer closeAll(agents)
	for _, err := range errs {
		if err != nil {
			return res, fmt.Errorf("bench: connect: %w", err)
		}
	}
	storm.end(cfg, &res)
	progress("%d agents connected in %.2fs", total, res.ConnectSeconds)

	workers := agents[:cfg.Agents]
	if err := measureCycles(ctx, cfg, cyclers(workers), &res, progress); err != nil {
		return res, err
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

// stormStart is when a connect storm began, by the clock and by the CPU of
// the hub and of this process.
type stormStart struct {
	at            time.Time
	hubCPU, myCPU float64
}

func startStorm(cfg LoadConfig) stormStart {
	return stormStart{at: time.Now(), hubCPU: procCPU(cfg.HubPID), myCPU: procCPU(os.Getpid())}
}

// end puts the storm's figures in res: how long it took, what it cost the
// hub and this process, and the hub's memory after it.
func (s stormStart) end(cfg LoadConfig, res *LoadResult) {
	res.ConnectSeconds = time.Since(s.at).Seconds()
	res.ClientCPUConnectSeconds = procCPU(os.Getpid()) - s.myCPU
	if cfg.HubPID > 0 {
		res.HubCPUConnectSeconds = procCPU(cfg.HubPID) - s.hubCPU
		res.HubRSSConnectKB = procRSS(cfg.HubPID)
	}
}

// measureCycles runs the cycling phase and puts its figures in res: cycles
// and latencies, and the hub's and the client's CPU per cycle.
func measureCycles(ctx context.Context, cfg LoadConfig, workers []cycler, res *LoadResult, progress func(string, ...any)) error {
	hub0, cli0 := procCPU(cfg.HubPID), procCPU(os.Getpid())
	ph, err := cycle(ctx, cfg, workers, func(n int64, since time.Duration) {
		progress("%d cycles, %.0f/s", n, float64(n)/since.Seconds())
	})
	if err != nil {
		return err
	}
	hub1, cli1 := procCPU(cfg.HubPID), procCPU(os.Getpid())
	res.Cycles, res.Conflicts = ph.cycles, ph.conflicts
	res.CyclesPerSecond = float64(res.Cycles) / ph.elapsed.Seconds()
	res.Claim, res.Release = ph.claim, ph.release
	if cfg.HubPID > 0 {
		res.HubCores = (hub1 - hub0) / ph.elapsed.Seconds()
	}
	if res.Cycles > 0 {
		res.ClientCPUPerCycle = (cli1 - cli0) / float64(res.Cycles) * 1e6
		if cfg.HubPID > 0 {
			res.HubCPUPerCycle = (hub1 - hub0) / float64(res.Cycles) * 1e6
		}
	}
	return nil
}

// phase is what one cycling phase measured.
type phase struct {
	cycles, conflicts int64
	claim, release    Latency
	elapsed           time.Duration
}

// cycler is an agent that cycles: the load client's own (loadAgent) or the
// Go SDK's (sdkAgent).
type cycler interface {
	agentName() string
	// claim claims task's paths and waits for the answer; denied is a
	// refusal or an error frame.
	claim(ctx context.Context, task string, paths []string) (denied bool, err error)
	// release releases task and waits for the answer.
	release(ctx context.Context, task string) error
}

func (a *loadAgent) agentName() string { return a.name }

func (a *loadAgent) claim(ctx context.Context, task string, paths []string) (bool, error) {
	var denied bool
	b := pyjson.AppendStrings(pyjson.AppendKey(appendField(a.request("claim", "System"), "task_id", task), "paths"), paths)
	err := a.call(ctx, b, claimAnswer(a.name, task, &denied))
	return denied, err
}

func (a *loadAgent) release(ctx context.Context, task string) error {
	return a.call(ctx, appendField(a.request("release", "System"), "task_id", task), releaseAnswer(a.name, task))
}

// cyclers is workers as cyclers.
func cyclers(workers []*loadAgent) []cycler {
	out := make([]cycler, len(workers))
	for i, a := range workers {
		out[i] = a
	}
	return out
}

// cycle runs one cycling phase of cfg.Duration: each worker cycles claim →
// grant → release → grant on its own files (a cfg.Conflict share of its
// claims aimed at one contended scope). tick, if set, is told the cycles
// so far every second.
func cycle(ctx context.Context, cfg LoadConfig, workers []cycler, tick func(cycles int64, since time.Duration)) (phase, error) {
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
			name := a.agentName()
			own, ownPaths := name+"/T", []string{name}
			for k := 0; time.Now().Before(deadline) && ctx.Err() == nil; k++ {
				sleepUntil(start.Add(cycleDue(i, len(workers), k, cfg.Rate)))
				task, paths := own, ownPaths
				if cfg.Conflict > 0 && float64(k%100) < cfg.Conflict*100 {
					task, paths = fmt.Sprintf("%s/C%d", name, k), []string{"contended"}
				}
				s := time.Now()
				denied, err := a.claim(ctx, task, paths)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				claimLat[i] = append(claimLat[i], time.Since(s))
				if denied {
					conflicts.Add(1)
					continue
				}
				s = time.Now()
				if err := a.release(ctx, task); err != nil {
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

// cycleDue is when worker i of n runs its k-th cycle (from 0) at rate
// cycles per second, after the phase's start: every k/rate, the workers
// spread evenly over one period (i/n of it) rather than all claiming at
// once. A worker behind its schedule runs at once: the offered load stays
// rate × n whatever the hub does, and what it achieves is reported beside
// it. Without a rate (0) it is always 0: as fast as the hub answers.
func cycleDue(i, n, k int, rate float64) time.Duration {
	if rate <= 0 || n <= 0 {
		return 0
	}
	return time.Duration(float64(k*n+i) * float64(time.Second) / (rate * float64(n)))
}

// sleepUntil sleeps until t, if it is still to come.
func sleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}

// The frames the cycles wait for, as the reference sends them (PROTOCOL.md
// §2.4, §2.5; hub/testdata/traces/claims): claim_granted and
// release_granted are broadcast (to every socket, with the owner and
// task_id), claim_denied and release_denied go to the requester with the
// task_id, and an error (a rate limit, for one) to the requester.

// claimAnswer matches the hub's answer to owner's claim of task: the grant
// (a broadcast, so its owner is checked too), or the refusal or an error
// to owner (a rate limit), which it records in denied.
func claimAnswer(owner, task string, denied *bool) func([]byte) bool {
	granted := fields("type", "claim_granted", "owner", owner, "task_id", task)
	refused := fields("type", "claim_denied", "task_id", task)
	errored := fields("type", "error", "target", owner)
	return func(b []byte) bool {
		if granted.in(b) {
			return true
		}
		*denied = refused.in(b) || errored.in(b)
		return *denied
	}
}

// releaseAnswer matches the hub's answer to owner's release of task, an
// error to owner included.
func releaseAnswer(owner, task string) func([]byte) bool {
	granted := fields("type", "release_granted", "task_id", task)
	refused := fields("type", "release_denied", "task_id", task)
	errored := fields("type", "error", "target", owner)
	return func(b []byte) bool {
		return granted.in(b) || refused.in(b) || errored.in(b)
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
		posted := fields("type", "ledger_task_posted", "task_id", id)
		errored := fields("type", "error", "target", a.name)
		return func(b []byte) bool {
			if posted.in(b) {
				return true
			}
			refused = errored.in(b)
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
		// As paced as the cycles: a rate limit would refuse the rest.
		sleepUntil(start.Add(cycleDue(0, 1, k, cfg.Rate)))
		id := "m" + strconv.Itoa(k)
		w := newWaiter(fields("type", "chat", "client_msg_id", id).in)
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
