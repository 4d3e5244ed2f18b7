package bench

import (
	"bytes"
	"context"
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
	// Hostile is how many sockets flood malformed frames (hostile.go)
	// through the cycling phase, never binding a name.
	Hostile int
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
	Conflicts       int64   `json:"conflicts_refused"`
	// Hostile sockets flooded HostileFrames malformed frames during the
	// cycling phase (--hostile); HostileClosed of them the hub closed.
	Hostile       int     `json:"hostile,omitempty"`
	HostileFrames int64   `json:"hostile_frames,omitempty"`
	HostileClosed int     `json:"hostile_closed,omitempty"`
	Chat          Latency `json:"directed_chat"`
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
func dialAgent(ctx context.Context, uri, name string, scoped bool) (*loadAgent, error) {
	c, err := dialWS(ctx, ws.Dialer{}, uri)
	if err != nil {
		return nil, err
	}
	a := &loadAgent{name: name, c: c}
	if err := a.register(ctx, scoped, false); err != nil {
		c.close()
		return nil, err
	}
	return a, nil
}

// register sends the agent's first frame (with takeover, evicting a live
// socket of the same name) and waits until the hub has read it.
func (a *loadAgent) register(ctx context.Context, scoped, takeover bool) error {
	b := appendField(a.request("heartbeat", "System"), "payload", "online")
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
			agents[i], errs[i] = dialAgent(dctx, cfg.URI, name, cfg.Scoped)
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
	var fl *flood
	if cfg.Hostile > 0 {
		var err error
		if fl, err = startFlood(ctx, cfg.URI, cfg.Hostile); err != nil {
			return res, fmt.Errorf("bench: hostile: %w", err)
		}
		defer fl.stop()
		res.Hostile = cfg.Hostile
	}
	hub0, cli0 := procCPU(cfg.HubPID), procCPU(os.Getpid())
	claimLat := make([][]time.Duration, len(workers))
	releaseLat := make([][]time.Duration, len(workers))
	var cycles, conflicts atomic.Int64
	deadline := time.Now().Add(cfg.Duration)
	stopProgress := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				progress("%d cycles, %.0f/s", cycles.Load(), float64(cycles.Load())/time.Since(deadline.Add(-cfg.Duration)).Seconds())
			}
		}
	}()
	phase := time.Now()
	var firstErr atomic.Value
	for i, a := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var denied bool
			own, ownPaths := a.name+"/T", []string{a.name}
			claimOwn, releaseOwn := claimAnswer(a.name, own, &denied), releaseAnswer(own)
			for k := 0; time.Now().Before(deadline) && ctx.Err() == nil; k++ {
				task, paths, claimed, released := own, ownPaths, claimOwn, releaseOwn
				if cfg.Conflict > 0 && float64(k%100) < cfg.Conflict*100 {
					task, paths = fmt.Sprintf("%s/C%d", a.name, k), []string{"contended"}
					claimed, released = claimAnswer(a.name, task, &denied), releaseAnswer(task)
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
	close(stopProgress)
	elapsed := time.Since(phase).Seconds()
	if fl != nil {
		res.HostileFrames, res.HostileClosed = fl.sent.Load(), fl.closed()
	}
	if err, _ := firstErr.Load().(error); err != nil {
		return res, fmt.Errorf("bench: cycle: %w", err)
	}
	hub1, cli1 := procCPU(cfg.HubPID), procCPU(os.Getpid())
	res.Cycles, res.Conflicts = cycles.Load(), conflicts.Load()
	res.CyclesPerSecond = float64(res.Cycles) / elapsed
	res.Claim, res.Release = summarize(claimLat), summarize(releaseLat)
	if res.Cycles > 0 {
		res.ClientCPUPerCycle = (cli1 - cli0) / float64(res.Cycles) * 1e6
		if cfg.HubPID > 0 {
			res.HubCPUPerCycle = (hub1 - hub0) / float64(res.Cycles) * 1e6
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

// claimAnswer matches the hub's answer to owner's claim of task: the grant
// (a broadcast, so its owner is checked too) or the refusal, which it
// records in denied.
func claimAnswer(owner, task string, denied *bool) func([]byte) bool {
	taskID := `"task_id":"` + task + `"`
	granted := []string{`"type":"claim_granted"`, `"owner":"` + owner + `"`, taskID}
	refused := []string{`"type":"claim_denied"`, taskID}
	return func(b []byte) bool {
		if has(b, granted...) {
			return true
		}
		*denied = has(b, refused...)
		return *denied
	}
}

// releaseAnswer matches the hub's answer to a release of task.
func releaseAnswer(task string) func([]byte) bool {
	granted := []string{`"type":"release_granted"`, `"task_id":"` + task + `"`}
	return func(b []byte) bool { return has(b, granted...) || has(b, `"type":"release_denied"`) }
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
	for k := 0; time.Now().Before(end); k++ {
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
