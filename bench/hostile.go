package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
)

// hostile.go is the load benchmark's hostile clients (--hostile N
// --hostile-kind K): sockets that attack the hub one way each while the good
// agents cycle claims, so the agents' claim latency can be read against a
// quiet phase run just before on the same hub and sockets (issue 12:
// hostile clients must not hurt well-behaved agents).
//
// Each attacker is one goroutine. The kinds that are about many attempts
// (oversized, bruteforce, takeover, and the half-open TCP connections the
// hub's HTTP server times out) dial again as soon as the hub ends a socket;
// the others hold the socket they have until the hub drops it. What the hub
// did is read from both ends: the close codes the attackers saw, and the
// hub's own counters (/metrics) before and after the phase.

// HostileKinds are the attacks, in the order a mix runs them.
var HostileKinds = []string{"malformed", "oversized", "nested", "halfopen", "slowreader", "bruteforce", "takeover", "validflood"}

// BaselineKinds are phases that attack nothing, to read the attacks
// against: bound sockets bind a name and read every frame the hub sends
// them, sending nothing more. Every grant is broadcast to them as to any
// agent, so they cost the agents what a fleet that much larger would; the
// attacks by bound sockets (halfopen, slowreader, validflood) pay that
// fan-out besides their own. Not part of mix.
var BaselineKinds = []string{"bound"}

// ParseHostileKinds reads --hostile-kind: a comma list of HostileKinds or
// BaselineKinds, or "mix" (every hostile kind at once, the sockets shared
// among them). Each element of the result is one phase: a phase of "mix"
// is every hostile kind.
func ParseHostileKinds(s string) ([][]string, error) {
	var phases [][]string
	for _, k := range strings.Split(s, ",") {
		switch k = strings.TrimSpace(k); {
		case k == "mix":
			phases = append(phases, HostileKinds)
		case slices.Contains(HostileKinds, k), slices.Contains(BaselineKinds, k):
			phases = append(phases, []string{k})
		default:
			return nil, fmt.Errorf("bench: unknown hostile kind %q (want %s, mix or %s)", k, strings.Join(HostileKinds, ", "), strings.Join(BaselineKinds, ", "))
		}
	}
	return phases, nil
}

// HostileResult is one hostile phase: the good agents' claims beside it,
// against the quiet phase, and what the hub did to the attackers.
type HostileResult struct {
	Kind     string  `json:"kind"`
	Sockets  int     `json:"sockets"`
	Cycles   int64   `json:"cycles"`
	Claim    Latency `json:"claim"`
	P50Ratio float64 `json:"claim_p50_vs_quiet"`
	P99Ratio float64 `json:"claim_p99_vs_quiet"`
	// Sent is the frames (or attempts) the attackers sent, Dials the
	// sockets they opened, reconnections included.
	Sent  int64 `json:"sent"`
	Dials int64 `json:"dials"`
	// Ends counts how the hub ended attackers' sockets, as they saw it: a
	// close code ("4010"), "dropped" (no close frame: killed, or the HTTP
	// server's timeout for a connection that never upgraded) or "refused
	// at upgrade" (an HTTP error instead of a WebSocket).
	Ends map[string]int `json:"ends,omitempty"`
	// Hub is what the hub's counters (/metrics) that concern hostile
	// clients moved by during the phase.
	Hub map[string]float64 `json:"hub,omitempty"`
	// The hub's resident memory before the attack, at its peak (sampled
	// every 200 ms) and once the attackers are gone.
	RSSBeforeKB int64 `json:"hub_rss_before_kb,omitempty"`
	RSSPeakKB   int64 `json:"hub_rss_peak_kb,omitempty"`
	RSSAfterKB  int64 `json:"hub_rss_after_kb,omitempty"`
	// HubCores and ClientCores are the CPU the hub and this process (the
	// good agents and the attackers) used through the phase, in cores.
	HubCores    float64 `json:"hub_cores,omitempty"`
	ClientCores float64 `json:"client_cores"`
	// AttackerCores is the attackers' process's CPU, when they run apart
	// (LoadConfig.Attackers); else their CPU is in ClientCores.
	AttackerCores float64 `json:"attacker_cores,omitempty"`
}

// hostilePhase runs one cycling phase of the workers beside cfg.Hostile
// attackers of kinds and reports it against quiet.
func hostilePhase(ctx context.Context, cfg LoadConfig, workers []*loadAgent, kinds []string, quiet Latency, progress func(string, ...any)) (HostileResult, error) {
	hr := HostileResult{Kind: strings.Join(kinds, "+"), Sockets: cfg.Hostile, RSSBeforeKB: procRSS(cfg.HubPID)}
	if len(kinds) == len(HostileKinds) {
		hr.Kind = "mix"
	}
	maxMsg := cfg.MaxMsgBytes
	if maxMsg <= 0 {
		maxMsg = 1 << 20
	}
	c0 := hubCounters(cfg.URI)
	rss := sampleRSS(cfg.HubPID)
	hub0, cli0, t0 := procCPU(cfg.HubPID), procCPU(os.Getpid()), time.Now()
	var stop func() (AttackStats, error)
	var err error
	if cfg.Attackers != nil {
		stop, err = cfg.Attackers(kinds, maxMsg)
	} else {
		var at *attack
		if at, err = startAttack(ctx, cfg.URI, cfg.Token, maxMsg, kinds, cfg.Hostile); err == nil {
			stop = func() (AttackStats, error) { at.stop(); return at.stats(), nil }
		}
	}
	if err != nil {
		rss.end()
		return hr, fmt.Errorf("bench: hostile %s: %w", hr.Kind, err)
	}
	ph, cycleErr := cycle(ctx, cfg, cyclers(workers), func(n int64, since time.Duration) {
		progress("%s: %d cycles, %.0f/s", hr.Kind, n, float64(n)/since.Seconds())
	})
	hub1, cli1, secs := procCPU(cfg.HubPID), procCPU(os.Getpid()), time.Since(t0).Seconds()
	st, stopErr := stop()
	hr.RSSPeakKB = rss.end()
	if err = cycleErr; err == nil {
		err = stopErr
	}
	if cfg.HubPID > 0 {
		hr.HubCores = (hub1 - hub0) / secs
	}
	hr.ClientCores = (cli1 - cli0) / secs
	if err != nil {
		return hr, fmt.Errorf("bench: beside hostile %s: %w", hr.Kind, err)
	}
	hr.Cycles, hr.Claim = ph.cycles, ph.claim
	if quiet.P50 > 0 && quiet.P99 > 0 {
		hr.P50Ratio, hr.P99Ratio = ph.claim.P50/quiet.P50, ph.claim.P99/quiet.P99
	}
	hr.Sent, hr.Dials, hr.Ends = st.Sent, st.Dials, st.Ends
	hr.AttackerCores = st.CPUSeconds / secs
	if c0 != nil {
		hr.Hub = counterDeltas(c0, hubCounters(cfg.URI))
	}
	hr.RSSAfterKB = procRSS(cfg.HubPID)
	return hr, nil
}

// AttackStats is what a set of attackers did: frames (or attempts) sent,
// sockets opened, how the hub ended them, and the CPU the attackers' own
// process used (when they run apart: RunAttack).
type AttackStats struct {
	Sent       int64          `json:"sent"`
	Dials      int64          `json:"dials"`
	Ends       map[string]int `json:"ends"`
	CPUSeconds float64        `json:"cpu_s,omitempty"`
}

// RunAttack runs n attackers of kinds against uri until ctx is done (the
// body of 'synapse bench attack', the attackers' own process, so that they
// do not share a Go scheduler with the good agents they are measured
// against).
func RunAttack(ctx context.Context, uri, token string, maxMsg int, kinds []string, n int) (AttackStats, error) {
	at, err := startAttack(ctx, uri, token, maxMsg, kinds, n)
	if err != nil {
		return AttackStats{}, err
	}
	<-ctx.Done()
	at.stop()
	st := at.stats()
	st.CPUSeconds = procCPU(os.Getpid())
	return st, nil
}

func (a *attack) stats() AttackStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return AttackStats{Sent: a.sent.Load(), Dials: a.dials.Load(), Ends: maps.Clone(a.ends)}
}

// attack is a running set of attackers.
type attack struct {
	uri, token string
	maxMsg     int
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	sent       atomic.Int64
	dials      atomic.Int64

	mu    sync.Mutex
	ends  map[string]int
	conns map[net.Conn]struct{} // open, closed by stop
}

// startAttack starts n attackers of kinds (shared in turn) against uri.
// Attackers that register send token (a hub with a token), except the
// brute force, whose tokens are wrong. maxMsg is the hub's frame limit.
func startAttack(ctx context.Context, uri, token string, maxMsg int, kinds []string, n int) (*attack, error) {
	if slices.Contains(kinds, "bruteforce") && token == "" {
		if len(kinds) == 1 {
			return nil, fmt.Errorf("bench: hostile kind bruteforce needs a hub with a token")
		}
		kinds = slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k == "bruteforce" })
	}
	a := &attack{uri: uri, token: token, maxMsg: maxMsg, ends: map[string]int{}, conns: map[net.Conn]struct{}{}}
	ctx, a.cancel = context.WithCancel(ctx)
	names := max(1, n/len(kinds)/8) // a takeover storm's names: eight sockets per name
	for i := range n {
		kind := kinds[i%len(kinds)]
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.run(ctx, kind, i, names)
		}()
	}
	return a, nil
}

// stop ends the attack and closes its sockets.
func (a *attack) stop() {
	a.cancel()
	a.mu.Lock()
	for nc := range a.conns {
		nc.Close() // unblocks a writer the hub no longer reads
	}
	a.mu.Unlock()
	a.wg.Wait()
}

func (a *attack) track(nc net.Conn) {
	a.mu.Lock()
	a.conns[nc] = struct{}{}
	a.mu.Unlock()
	a.dials.Add(1)
}

func (a *attack) untrack(nc net.Conn) {
	a.mu.Lock()
	delete(a.conns, nc)
	a.mu.Unlock()
	nc.Close()
}

// ended records how the hub ended a socket, unless the attack is over (its
// own close is not the hub's doing).
func (a *attack) ended(ctx context.Context, how string) {
	if ctx.Err() != nil {
		return
	}
	a.mu.Lock()
	a.ends[how]++
	a.mu.Unlock()
}

// endOf is how c's reader ended: the hub's close code, or dropped.
func endOf(c *wsConn) string {
	if c.code != 0 {
		return strconv.Itoa(int(c.code))
	}
	return "dropped"
}

// dial opens an attacker's WebSocket. Brute force comes from another
// loopback address (127.0.0.2) when the hub is on loopback: the hub's
// failed-token lockout is per host, and the good agents' host is not the
// attacker's.
func (a *attack) dial(ctx context.Context, kind string, reader bool) (*wsConn, error) {
	d := ws.Dialer{}
	if kind == "bruteforce" && loopbackURI(a.uri) {
		nd := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
		d.NetDial = nd.DialContext
	}
	if reader {
		c, err := dialWS(ctx, d, a.uri)
		if err == nil {
			a.track(c.nc)
		}
		return c, err
	}
	// A socket that never reads (or reads on its own terms): no reader.
	d.ReadBufferSize = 4 << 10
	nc, br, _, err := d.Dial(ctx, a.uri)
	if err != nil {
		return nil, err
	}
	if br == nil {
		br = bufio.NewReaderSize(nc, 4<<10)
	}
	a.track(nc)
	return &wsConn{nc: nc, br: br, done: make(chan struct{})}, nil
}

func loopbackURI(uri string) bool {
	u, err := url.Parse(uri)
	if err != nil {
		return false
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback() && ip.To4() != nil
}

// pause waits d or until ctx is done; it reports whether to go on.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// run is one attacker.
func (a *attack) run(ctx context.Context, kind string, i, names int) {
	for ctx.Err() == nil {
		var again bool
		switch kind {
		case "malformed", "nested":
			again = a.flood(ctx, kind)
		case "oversized":
			again = a.oversized(ctx)
		case "halfopen":
			again = a.halfOpen(ctx, i)
		case "slowreader":
			again = a.slowReader(ctx, i)
		case "bruteforce":
			again = a.bruteForce(ctx, i)
		case "takeover":
			again = a.takeover(ctx, fmt.Sprintf("storm/s%d", i%names))
		case "validflood":
			again = a.validFlood(ctx, i)
		case "bound":
			again = a.bound(ctx, i)
		}
		if !again {
			<-ctx.Done()
			return
		}
	}
}

// What the floods send. malformed: garbage and nesting deeper than the
// decoder's limit, and every 16th frame 64 KiB of garbage (under the hub's
// 1 MiB limit); none binds a name, each is "Malformed JSON.". nested: an
// object whose payload opens 100,000 arrays (100 KiB).
var (
	floodSmall = [][]byte{
		[]byte("this is not json {{{"),
		[]byte(strings.Repeat("[", 100) + strings.Repeat("]", 100)),
	}
	floodLarge  = []byte("{" + strings.Repeat("x", 64<<10))
	floodNested = []byte(`{"type":"chat","sender":"x","payload":` + strings.Repeat("[", 100_000))
)

func floodFrame(k int) []byte {
	if k%16 == 15 {
		return floodLarge
	}
	return floodSmall[k%2]
}

// flood sends malformed or deeply nested frames as fast as the hub reads
// them, on one socket, until the hub ends it.
func (a *attack) flood(ctx context.Context, kind string) bool {
	c, err := a.dial(ctx, kind, true)
	if err != nil {
		return pause(ctx, 10*time.Millisecond)
	}
	defer a.untrack(c.nc)
	for k := 0; ctx.Err() == nil; k++ {
		b := floodNested
		if kind == "malformed" {
			b = floodFrame(k)
		}
		if c.sendText(b) != nil {
			break
		}
		a.sent.Add(1)
	}
	<-c.done
	a.ended(ctx, endOf(c))
	return false // hold: a flooder the hub dropped stays dropped
}

// oversized announces a frame one byte over the hub's limit, sends its
// first 4 KiB, and waits for the hub to close the socket (1009); then
// again.
func (a *attack) oversized(ctx context.Context) bool {
	c, err := a.dial(ctx, "oversized", true)
	if err != nil {
		return pause(ctx, 10*time.Millisecond)
	}
	defer a.untrack(c.nc)
	var mask [4]byte
	b := binary.BigEndian.AppendUint64([]byte{0x80 | byte(ws.OpText), 0x80 | 127}, uint64(a.maxMsg+1))
	b = append(append(b, mask[:]...), make([]byte, 4<<10)...) // a zero mask leaves the payload as is
	c.wmu.Lock()
	_, err = c.nc.Write(b)
	c.wmu.Unlock()
	if err == nil {
		a.sent.Add(1)
	}
	select {
	case <-c.done:
		a.ended(ctx, endOf(c))
	case <-ctx.Done():
	}
	return true
}

// halfOpen holds a connection the hub cannot use: even attackers open a TCP
// connection and never send the HTTP request (the hub's HTTP server times
// it out; then again); odd ones upgrade, bind a name, so every broadcast is
// queued to them, and never read (the hub drops them; they stay dropped).
func (a *attack) halfOpen(ctx context.Context, i int) bool {
	if i%2 == 0 {
		u, _ := url.Parse(a.uri)
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", u.Host)
		if err != nil {
			return pause(ctx, 10*time.Millisecond)
		}
		a.track(nc)
		defer a.untrack(nc)
		var p [1]byte
		_, _ = nc.Read(p[:]) // returns when the server gives up on it
		a.ended(ctx, "dropped")
		return true
	}
	c, err := a.dial(ctx, "halfopen", false)
	if err != nil {
		return pause(ctx, 10*time.Millisecond)
	}
	if c.sendText(a.register(fmt.Sprintf("hostile/half%d", i), "")) == nil {
		a.sent.Add(1)
	}
	<-ctx.Done()
	a.untrack(c.nc)
	return false
}

// slowReader binds a name, so every broadcast is queued to it, and reads
// one byte a second.
func (a *attack) slowReader(ctx context.Context, i int) bool {
	c, err := a.dial(ctx, "slowreader", false)
	if err != nil {
		return pause(ctx, 10*time.Millisecond)
	}
	defer a.untrack(c.nc)
	if c.sendText(a.register(fmt.Sprintf("hostile/slow%d", i), "")) == nil {
		a.sent.Add(1)
	}
	var p [1]byte
	for pause(ctx, time.Second) {
		if _, err := c.nc.Read(p[:]); err != nil { // the socket itself: a buffer would take kilobytes at once
			a.ended(ctx, "dropped")
			break
		}
	}
	return false
}

// bruteForce sends a first frame with a random token, waits for the
// refusal, and again, as fast as the hub answers.
func (a *attack) bruteForce(ctx context.Context, i int) bool {
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	return a.once(ctx, "bruteforce", a.register(fmt.Sprintf("brute/b%d", i), hex.EncodeToString(tok[:])))
}

// takeover binds name with takeover:true and holds it until the hub ends
// the socket (superseded by the next one, or refused: cooldown,
// quarantine); then again.
func (a *attack) takeover(ctx context.Context, name string) bool {
	b := a.register(name, "")
	return a.once(ctx, "takeover", append(b[:len(b)-1], `,"takeover":true}`...))
}

// once opens a socket, sends frame and waits for the hub to end the
// socket; it reports that the attacker goes on.
func (a *attack) once(ctx context.Context, kind string, frame []byte) bool {
	c, err := a.dial(ctx, kind, true)
	if err != nil {
		return pause(ctx, 10*time.Millisecond)
	}
	defer a.untrack(c.nc)
	if c.sendText(frame) == nil {
		a.sent.Add(1)
	}
	select {
	case <-c.done:
		a.ended(ctx, endOf(c))
	case <-ctx.Done():
	}
	return true
}

// validFlood binds a name and sends valid frames as fast as the hub takes
// them: who_request, a chat to itself, a heartbeat, in turn; its reader
// takes the answers.
func (a *attack) validFlood(ctx context.Context, i int) bool {
	c, err := a.dial(ctx, "validflood", true)
	if err != nil {
		return pause(ctx, 10*time.Millisecond)
	}
	defer a.untrack(c.nc)
	name := fmt.Sprintf("hostile/flood%d", i)
	frames := [][]byte{
		a.register(name, ""),
		[]byte(`{"sender":"` + name + `","target":"System","type":"who_request"}`),
		[]byte(`{"sender":"` + name + `","target":"` + name + `","type":"chat","payload":"x"}`),
		[]byte(`{"sender":"` + name + `","target":"System","type":"heartbeat","payload":"online"}`),
	}
	for k := 0; ctx.Err() == nil; k++ {
		if c.sendText(frames[k%len(frames)]) != nil {
			break
		}
		a.sent.Add(1)
	}
	<-c.done
	a.ended(ctx, endOf(c))
	return false
}

// bound binds a name and reads every frame the hub sends it, sending
// nothing more (BaselineKinds).
func (a *attack) bound(ctx context.Context, i int) bool {
	c, err := a.dial(ctx, "bound", true)
	if err != nil {
		return pause(ctx, 10*time.Millisecond)
	}
	defer a.untrack(c.nc)
	if c.sendText(a.register(fmt.Sprintf("hostile/bound%d", i), "")) == nil {
		a.sent.Add(1)
	}
	<-c.done
	a.ended(ctx, endOf(c))
	return false
}

// register is a registration heartbeat for name, with token (the hub's,
// unless one is given).
func (a *attack) register(name, token string) []byte {
	if token == "" {
		token = a.token
	}
	b := `{"sender":"` + name + `","target":"System","type":"heartbeat","payload":"online"`
	if token != "" {
		b += `,"token":"` + token + `"`
	}
	return []byte(b + "}")
}

// hostileCounters are the hub counters (/metrics) a hostile phase reports
// the movement of.
var hostileCounters = []string{
	"synapse_slow_consumer_disconnects_total", "synapse_dead_sockets_reaped_total",
	"synapse_auth_failures_total", "synapse_auth_lockout_refusals_total", "synapse_connections_rejected_total",
	"synapse_rate_limited_total", "synapse_malformed_paced_total", `synapse_messages_total{type="malformed"}`,
	`synapse_messages_total{type="who_request"}`, `synapse_messages_total{type="heartbeat"}`,
	"synapse_takeovers_total", "synapse_takeover_quarantines_total", "synapse_upgrades_paced_total", "synapse_frames_paced_total",
	"synapse_heavy_lane_frames_total", "synapse_heavy_lane_paced_total",
}

// hubCounters reads hostileCounters from the hub's /metrics (nil if it
// cannot).
func hubCounters(uri string) map[string]float64 {
	u, err := url.Parse(uri)
	if err != nil {
		return nil
	}
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + u.Host + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:sp]
		for _, w := range hostileCounters {
			if strings.HasPrefix(name, w) {
				if v, err := strconv.ParseFloat(line[sp+1:], 64); err == nil {
					out[name] = v
				}
			}
		}
	}
	return out
}

// counterDeltas is after − before, the counters that moved.
func counterDeltas(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if v-before[k] != 0 {
			d[k] = v - before[k]
		}
	}
	return d
}

// rssSampler samples a process's resident memory until stopped and keeps
// the peak.
type rssSampler struct {
	peak atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func sampleRSS(pid int) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			s.peak.Store(max(s.peak.Load(), procRSS(pid)))
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) end() int64 {
	close(s.stop)
	<-s.done
	return s.peak.Load()
}
