package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
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
	Chat            Latency `json:"directed_chat"`
	// HubCPUPerCycle and ClientCPUPerCycle are CPU µs per claim+release
	// cycle, read from /proc: the hub's is the figure that matters on two
	// shared cores, where the load client bounds throughput.
	HubCPUPerCycle    float64 `json:"hub_cpu_us_per_cycle,omitempty"`
	ClientCPUPerCycle float64 `json:"client_cpu_us_per_cycle"`
	HubCPUPerChat     float64 `json:"hub_cpu_us_per_chat,omitempty"`
	HubRSSKB          int64   `json:"hub_rss_kb,omitempty"`
}

// loadAgent is one connected agent: a socket, a reader goroutine that
// hands the frames it waits for to the worker, and its name.
type loadAgent struct {
	name string
	c    *websocket.Conn
	want atomic.Pointer[waiter]
	done chan struct{}
}

type waiter struct {
	match func([]byte) bool
	ch    chan []byte
}

func dialAgent(ctx context.Context, uri, name string, scoped bool) (*loadAgent, error) {
	c, _, err := websocket.Dial(ctx, uri, &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(64 << 20)
	a := &loadAgent{name: name, c: c, done: make(chan struct{})}
	go a.read()
	reg := map[string]any{"sender": name, "type": "heartbeat", "target": "System", "payload": "online"}
	if scoped {
		reg["fanout"] = "scoped"
	}
	if err := a.send(ctx, reg); err != nil {
		c.CloseNow()
		return nil, err
	}
	return a, nil
}

func (a *loadAgent) read() {
	defer close(a.done)
	for {
		_, data, err := a.c.Read(context.Background())
		if err != nil {
			return
		}
		if w := a.want.Load(); w != nil && w.match(data) {
			a.want.CompareAndSwap(w, nil)
			w.ch <- data
		}
	}
}

func (a *loadAgent) send(ctx context.Context, m map[string]any) error {
	b, _ := json.Marshal(m)
	return a.c.Write(ctx, websocket.MessageText, b)
}

// call sends m and waits for the first frame match accepts.
func (a *loadAgent) call(ctx context.Context, m map[string]any, match func([]byte) bool) ([]byte, error) {
	w := &waiter{match: match, ch: make(chan []byte, 1)}
	a.want.Store(w)
	if err := a.send(ctx, m); err != nil {
		return nil, err
	}
	select {
	case b := <-w.ch:
		return b, nil
	case <-a.done:
		return nil, fmt.Errorf("%s: connection closed", a.name)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (a *loadAgent) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = a.send(ctx, map[string]any{"sender": a.name, "type": "leave", "target": "System"})
	a.c.Close(websocket.StatusNormalClosure, "")
}

func has(b []byte, parts ...string) bool {
	for _, p := range parts {
		if !bytes.Contains(b, []byte(p)) {
			return false
		}
	}
	return true
}

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
	sem := make(chan struct{}, 64) // dials in flight
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
	defer func() {
		for _, a := range agents {
			if a != nil {
				a.close()
			}
		}
	}()
	for _, err := range errs {
		if err != nil {
			return res, fmt.Errorf("bench: connect: %w", err)
		}
	}
	// Every registration has been read once a who_request sent after it is
	// answered (frames of one socket are handled in order).
	for _, a := range agents {
		if _, err := a.call(ctx, map[string]any{"sender": a.name, "type": "who_request", "target": "System"}, func(b []byte) bool { return has(b, `"type":"who_snapshot"`) }); err != nil {
			return res, fmt.Errorf("bench: register: %w", err)
		}
	}
	res.ConnectSeconds = time.Since(t0).Seconds()
	progress("%d agents connected in %.2fs", total, res.ConnectSeconds)

	workers := agents[:cfg.Agents]
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
			mine := `"owner":"` + a.name + `"`
			for k := 0; time.Now().Before(deadline) && ctx.Err() == nil; k++ {
				task := a.name + "/T"
				paths := []string{a.name}
				contended := cfg.Conflict > 0 && float64(k%100) < cfg.Conflict*100
				if contended {
					task, paths = fmt.Sprintf("%s/C%d", a.name, k), []string{"contended"}
				}
				s := time.Now()
				b, err := a.call(ctx, map[string]any{"sender": a.name, "type": "claim", "target": "System", "task_id": task, "paths": paths},
					func(b []byte) bool {
						return has(b, `"type":"claim_granted"`, mine, `"task_id":"`+task+`"`) || has(b, `"type":"claim_denied"`, `"task_id":"`+task+`"`)
					})
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				claimLat[i] = append(claimLat[i], time.Since(s))
				if has(b, `"type":"claim_denied"`) {
					conflicts.Add(1)
					continue
				}
				s = time.Now()
				if _, err := a.call(ctx, map[string]any{"sender": a.name, "type": "release", "target": "System", "task_id": task},
					func(b []byte) bool {
						return has(b, `"type":"release_granted"`, `"task_id":"`+task+`"`) || has(b, `"type":"release_denied"`)
					}); err != nil {
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

	// Directed chat: the first agent writes to the second, which must
	// receive each message (the hub's echo to the sender comes first).
	if len(agents) >= 2 {
		from, to := agents[0], agents[1]
		var lat []time.Duration
		h0 := procCPU(cfg.HubPID)
		end := time.Now().Add(min(cfg.Duration, 2*time.Second))
		for k := 0; time.Now().Before(end); k++ {
			id := "m" + strconv.Itoa(k)
			w := &waiter{match: func(b []byte) bool { return has(b, `"type":"chat"`, `"client_msg_id":"`+id+`"`) }, ch: make(chan []byte, 1)}
			to.want.Store(w)
			s := time.Now()
			if err := from.send(ctx, map[string]any{"sender": from.name, "type": "chat", "target": to.name, "payload": "hello", "client_msg_id": id}); err != nil {
				return res, err
			}
			select {
			case <-w.ch:
				lat = append(lat, time.Since(s))
			case <-time.After(5 * time.Second):
				return res, fmt.Errorf("bench: directed chat %s never arrived", id)
			}
		}
		res.Chat = summarize([][]time.Duration{lat})
		if cfg.HubPID > 0 && len(lat) > 0 {
			res.HubCPUPerChat = (procCPU(cfg.HubPID) - h0) / float64(len(lat)) * 1e6
		}
	}
	res.HubRSSKB = procRSS(cfg.HubPID)
	return res, nil
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
