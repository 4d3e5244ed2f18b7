package hub

// Hostile clients must not hurt well-behaved agents (issue 12). A socket
// flooding frames that fail to decode (PROTOCOL.md §1.2: each answered
// "Malformed JSON.", the socket kept open) is paced past its burst: its
// reader waits before the next read, so the flood costs the hub a few
// frames a second instead of the cores the good agents' claims need.
// These tests assert the mechanism (replies and counters), never timing.

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/synapse-hub/synapse/gate"
)

// hostileFrames are what a flood sends: garbage and nesting past the
// decoder's 64 levels.
var hostileFrames = []string{"not json {{{", strings.Repeat("[", 100) + strings.Repeat("]", 100)}

// Past MalformedBurst, a socket's next malformed frame is still answered
// (§1.2), then its reader pauses (here for 1000 s of a held clock): the
// rest of its flood is neither read nor answered, the pause is counted,
// and a good agent's claims are granted meanwhile.
func TestHostile_MalformedFloodIsPacedPastItsBurst_Section1_2(t *testing.T) {
	const burst = 5
	clk := newFakeClock()
	th := startHub(t, Config{MalformedPerSecond: Set(0.001), MalformedBurst: burst, Clock: clk.now})
	good := th.join("p/good")
	flooder := th.connect()
	for i := range 40 {
		flooder.sendRaw(hostileFrames[i%len(hostileFrames)])
	}
	for i := range burst + 1 { // the burst, and the frame that exhausts it
		m := flooder.expect("error")
		if m["payload"] != "Malformed JSON." || m["target"] != "all" {
			t.Fatalf("reply %d = %v, want the reference's decode refusal", i, m)
		}
	}
	for i := range 3 {
		task := "T" + itoa(int64(i))
		good.send(map[string]any{"sender": "p/good", "type": "claim", "task_id": task, "paths": []string{task + ".go"}})
		good.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == task })
	}
	flooder.quiet(50 * time.Millisecond) // no further reply: its reader is paused
	if n := counterValue(t, th.h.m.malformedPaced); n != 1 {
		t.Fatalf("malformed_paced = %v, want 1 (one pause, the rest of the flood unread)", n)
	}
}

// A paced socket stays open and keeps its order: once its pause is over
// it is read again, and its frames are answered in turn.
func TestHostile_PacedSocketIsReadAgainAfterItsPause_Section1_2(t *testing.T) {
	clk := newFakeClock()
	// 1000/s on a held clock: the k-th frame past the burst waits k ms.
	th := startHub(t, Config{MalformedPerSecond: Set(1000.0), MalformedBurst: 2, Clock: clk.now})
	a := th.join("p/a")
	for range 6 {
		a.sendRaw("garbage")
	}
	for range 6 {
		if m := a.expect("error"); m["payload"] != "Malformed JSON." {
			t.Fatalf("got %v", m)
		}
	}
	a.sync("p/a")
	if n := counterValue(t, th.h.m.malformedPaced); n != 4 {
		t.Fatalf("malformed_paced = %v, want 4 (six frames, a burst of two)", n)
	}
}

// MalformedPerSecond < 0 answers every malformed frame unpaced, as the
// reference does.
func TestHostile_UnpacedWhenOff(t *testing.T) {
	th := startHub(t, Config{MalformedPerSecond: Off[float64](), MalformedBurst: 1})
	a := th.join("p/a")
	for range 20 {
		a.sendRaw("garbage")
	}
	for range 20 {
		a.expect("error")
	}
	if n := counterValue(t, th.h.m.malformedPaced); n != 0 {
		t.Fatalf("malformed_paced = %v with pacing off", n)
	}
}

// A paced socket that never binds a name is closed at its auth timeout
// (PROTOCOL.md §1.1, 4012) like any other, but the rest of its flood is not
// read at full speed for the close handshake: it is dropped at once.
func TestHostile_PacedUnboundSocketIsClosedAtItsAuthTimeout_Section1_1(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, Config{MalformedPerSecond: Set(0.001), MalformedBurst: 2, AuthTimeout: 100 * time.Millisecond, Clock: clk.now})
	flooder := th.connect()
	for range 20 {
		flooder.sendRaw("garbage")
	}
	for range 3 {
		flooder.expect("error")
	}
	select {
	case <-flooder.done:
	case <-time.After(testDeadline):
		t.Fatal("the paced socket was not dropped at its auth timeout")
	}
	if n := counterValue(t, th.h.m.framesIn.WithLabelValues("malformed")); n > 4 {
		t.Fatalf("%v malformed frames handled; want at most 4 (the burst, the frame that exhausts it, one read at the close)", n)
	}
}

// dialFrom opens a test socket from another loopback address, so the hub
// sees another remote host (per-host limits).
func (th *testHub) dialFrom(ip string) *tconn {
	th.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, _, err := websocket.Dial(ctx, th.url, &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}})
	if err != nil {
		th.t.Fatalf("dial from %s: %v", ip, err)
	}
	c.SetReadLimit(64 << 20)
	tc := &tconn{t: th.t, c: c, frames: make(chan map[string]any, 4096), done: make(chan struct{})}
	go tc.readLoop()
	th.t.Cleanup(func() { _ = c.CloseNow() })
	return tc
}

// rawJoin binds name on a socket that never reads a frame (a slow reader
// at its slowest).
func (th *testHub) rawJoin(name string, token string) net.Conn {
	th.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	nc, _, _, err := ws.Dial(ctx, th.url)
	if err != nil {
		th.t.Fatal(err)
	}
	th.t.Cleanup(func() { nc.Close() })
	reg := `{"sender":"` + name + `","target":"System","type":"heartbeat","payload":"online","token":"` + token + `"}`
	if err := wsutil.WriteClientText(nc, []byte(reg)); err != nil {
		th.t.Fatal(err)
	}
	return nc
}

// eventually polls cond until it holds (a mechanism's asynchronous end, not
// a timing), failing after the test deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (th *testHub) sessions() int {
	th.h.mu.Lock()
	defer th.h.mu.Unlock()
	return len(th.h.reg.sessions)
}

// A socket bound to a name that stops reading while large broadcasts go by
// is dropped as a slow consumer once its queued bytes would pass
// SendQueueBytes, long before SendQueue frames wait: the hub never holds
// more than the bound for it, and the sender is not slowed (issue 12).
func TestHostile_SlowReaderIsDroppedAtItsByteBound(t *testing.T) {
	const bound = 256 << 10
	th := startHub(t, Config{SendQueueBytes: Set(bound), SendQueue: 1 << 16})
	talker := th.join("p/talker")
	th.rawJoin("p/slow", "")
	eventually(t, "p/slow bound", func() bool {
		th.h.mu.Lock()
		defer th.h.mu.Unlock()
		return th.h.reg.byName["p/slow"] != nil
	})
	payload := strings.Repeat("x", 32<<10)
	for i := 0; counterValue(t, th.h.m.slowConsumers) == 0; i++ {
		if i == 10000 { // 320 MiB: far past any kernel buffer
			t.Fatal("the slow reader was never dropped")
		}
		id := "c" + itoa(int64(i))
		talker.send(map[string]any{"sender": "p/talker", "type": "chat", "target": "all", "payload": payload, "client_msg_id": id})
		talker.expectWhere("chat", func(m map[string]any) bool { return m["client_msg_id"] == id })
		th.h.mu.Lock()
		if s := th.h.reg.byName["p/slow"]; s != nil && s.queuedBytes() > bound {
			th.h.mu.Unlock()
			t.Fatalf("%d bytes queued to the slow reader, bound %d", s.queuedBytes(), bound)
		}
		th.h.mu.Unlock()
	}
	eventually(t, "the slow reader's session ends", func() bool { return th.sessions() == 1 })
	talker.sync("p/talker")
}

// A secured hub tells a socket that has not authenticated nothing about the
// fleet (PROTOCOL.md §5.1; the reference leaks broadcasts to pre-auth
// sockets, we must not): while two agents join, claim, chat to all and to
// each other, ask who is online, release and leave, a silent pre-auth
// socket, one sending garbage, one sending a wrong token and one posing as
// a peer hub receive no presence, broadcast, chat, claim event or snapshot,
// and nothing they receive names an agent, a task or a path of the fleet.
func TestHostile_PreAuthSocketsLearnNothing_Section5_1(t *testing.T) {
	th := startHub(t, Config{Token: "s3cret", AuthTimeout: time.Second, MalformedBurst: 1000})
	silent := th.dial()
	garbage := th.dial()
	peer := th.dial()
	garbage.sendRaw("not json {{{")
	garbage.expect("error")

	join := func(name string) *tconn {
		c := th.dial()
		c.send(hb(name, "token", "s3cret"))
		c.expect("welcome")
		return c
	}
	alice := join("fleet/alice")
	garbage.sendRaw(strings.Repeat("[", 100))
	bob := join("fleet/bob")
	alice.send(f("claim", "sender", "fleet/alice", "task_id", "T-secret", "paths", []string{"secret/x.go"}))
	alice.expect("claim_granted")
	garbage.sendRaw("\xff\xfe")
	bob.send(f("chat", "sender", "fleet/bob", "target", "all", "payload", "secret-broadcast"))
	alice.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "secret-broadcast" })
	alice.send(f("chat", "sender", "fleet/alice", "target", "fleet/bob", "payload", "secret-direct"))
	bob.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "secret-direct" })
	peer.send(map[string]any{"type": "multihub_log_request", "sender": "evil-hub", "after_seq": 0, "req_id": "r1"})
	bob.sync("fleet/bob")
	alice.send(f("release", "sender", "fleet/alice", "task_id", "T-secret"))
	alice.expect("release_granted")
	intruder := th.dial()
	intruder.send(hb("x/intruder", "token", "guess"))
	bob.close()
	alice.sync("fleet/alice")
	garbage.sendRaw("still not json")
	garbage.expectWhere("error", func(m map[string]any) bool { return m["payload"] == "Malformed JSON." })

	for _, c := range []*tconn{silent, garbage, intruder} {
		select {
		case <-c.done: // auth timeout (4012) or auth denied (4010)
		case <-time.After(testDeadline):
			t.Fatal("a pre-auth socket was not closed")
		}
	}
	allowed := map[string]bool{"error": true, "auth_denied": true}
	secrets := []string{"fleet/", "alice", "bob", "T-secret", "secret/", "secret-broadcast", "secret-direct"}
	for label, c := range map[string]*tconn{"silent": silent, "garbage": garbage, "peer": peer, "intruder": intruder} {
		for len(c.frames) > 0 {
			m := <-c.frames
			typ, _ := m["type"].(string)
			if !allowed[typ] && !(label == "peer" && strings.HasPrefix(typ, "multihub_")) {
				t.Errorf("%s pre-auth socket received %s: %v", label, typ, m)
			}
			b, _ := json.Marshal(m)
			for _, s := range secrets {
				if strings.Contains(string(b), s) {
					t.Errorf("%s pre-auth socket learned %q: %s", label, s, b)
				}
			}
		}
	}
}

// Token brute force from one host: past its failure allowance the host's
// first frames are refused unchecked ("Too many failed …", 4010), its
// closes are charged so its next upgrades wait, and none of it touches
// another host: an agent already in keeps working, and a new agent with
// the right token from another host gets in (docs/security.md).
func TestHostile_TokenBruteForceIsLockedOutToItsHost(t *testing.T) {
	th := startHub(t, Config{Token: "s3cret", AuthFailuresPerMinute: Set(3), ClosesPerHostBurst: 2, ClosesPerHostPerSecond: Set(0.001), AuthTimeout: 200 * time.Millisecond})
	good := th.dial()
	good.send(hb("p/good", "token", "s3cret"))
	good.expect("welcome")
	var payloads []string
	for i := range 6 {
		c := th.dialFrom("127.0.0.2")
		c.send(hb("brute/x", "token", "guess"+itoa(int64(i))))
		payloads = append(payloads, c.expect("auth_denied")["payload"].(string))
		c.expectClose(4010, "auth denied")
	}
	for i, p := range payloads {
		want := "Invalid authentication token."
		if i >= 3 {
			want = "Too many failed authentication attempts from this host; try again later."
		}
		if p != want {
			t.Fatalf("attempt %d: %q, want %q", i, p, want)
		}
	}
	if n := counterValue(t, th.h.m.authLockouts); n != 3 {
		t.Fatalf("lockout refusals %v, want 3", n)
	}
	eventually(t, "the guessing host owes for its closed sockets", func() bool { return th.h.closes.Debt("127.0.0.2", th.h.now()) > 0 })
	if d := th.h.closes.Debt("127.0.0.3", th.h.now()); d != 0 {
		t.Fatalf("another host owes %v s", d)
	}
	late := th.dialFrom("127.0.0.2") // waits its debt out (at most the auth timeout), then is locked out
	late.send(hb("brute/y", "token", "s3cret"))
	late.expectClose(4010, "auth denied")
	if n := counterValue(t, th.h.m.upgradesPaced); n < 1 {
		t.Fatalf("upgrades paced %v, want the guessing host's", n)
	}

	good.send(f("claim", "sender", "p/good", "task_id", "T1", "paths", []string{"a.go"}))
	good.expect("claim_granted")
	other := th.dialFrom("127.0.0.3")
	other.send(hb("p/other", "token", "s3cret"))
	other.expect("welcome")
}

// A takeover storm (many sockets binding the same names with takeover, at
// once) leaves exactly one live holder per name, and once the storm's
// sockets are gone the hub holds no session or goroutine of theirs.
func TestHostile_TakeoverStormLeavesOneHolderPerName(t *testing.T) {
	th := startHub(t, Config{ClosesPerHostPerSecond: Off[float64]()})
	watcher := th.join("p/watcher")
	watcher.sync("p/watcher")
	baseGoroutines := runtime.NumGoroutine()
	names := []string{"storm/a", "storm/b", "storm/c"}
	var storm []*tconn
	for i := range 30 {
		c := th.dial()
		c.send(hb(names[i%len(names)], "takeover", true))
		storm = append(storm, c)
	}
	open := func() int {
		n := 0
		for _, c := range storm {
			select {
			case <-c.done:
			default:
				n++
			}
		}
		return n
	}
	eventually(t, "one open socket per name", func() bool { return open() == len(names) && th.sessions() == 1+len(names) })
	th.h.mu.Lock()
	for _, name := range names {
		live := 0
		for s := range th.h.reg.sessions {
			if s.name == name && !s.superseded && !s.isClosing() {
				live++
			}
		}
		if s := th.h.reg.byName[name]; live != 1 || s == nil || s.superseded || s.isClosing() {
			t.Errorf("%s: %d live holders, registry holder %v; want exactly one", name, live, s)
		}
	}
	th.h.mu.Unlock()
	for _, c := range storm {
		c.close()
	}
	eventually(t, "the storm's sessions end", func() bool { return th.sessions() == 1 })
	eventually(t, "the storm's goroutines end", func() bool { return runtime.NumGoroutine() <= baseGoroutines+2 })
	watcher.sync("p/watcher")
}

// A flood of valid frames past a socket's rate limit (--rate-per-agent)
// gets the documented refusal, "Rate limit exceeded." with error_code
// rate_limited, once; then its reader waits until the limit would admit a
// frame, so the rest of the flood is neither read nor answered, and another
// agent's claims are granted meanwhile.
func TestHostile_ValidFloodIsRefusedThenPaced(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, Config{RateLimits: gate.RateLimits{AgentPerSecond: 0.001, AgentBurst: 3}, Clock: clk.now})
	good := th.join("p/good")
	flood := th.join("p/flood")
	for range 20 {
		flood.send(map[string]any{"sender": "p/flood", "type": "who_request", "target": "System"})
	}
	for range 3 {
		flood.expect("who_snapshot")
	}
	m := flood.expect("error")
	if m["payload"] != "Rate limit exceeded." || m["error_code"] != "rate_limited" {
		t.Fatalf("refusal %v, want the documented rate_limited", m)
	}
	for i := range 3 {
		task := "T" + itoa(int64(i))
		good.send(f("claim", "sender", "p/good", "task_id", task, "paths", []string{task + ".go"}))
		good.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == task })
	}
	// Its reader waits: the rest is unread (the good agent's grants are
	// broadcasts, written to it all the same).
	for wait := time.After(50 * time.Millisecond); ; {
		select {
		case m := <-flood.frames:
			if m["type"] != "claim_granted" {
				t.Fatalf("the paced flooder was answered: %v", m)
			}
			continue
		case <-wait:
		}
		break
	}
	if n := counterValue(t, th.h.m.rateLimited.WithLabelValues("agent")); n != 1 {
		t.Fatalf("rate_limited{agent} = %v, want 1 (one refusal, then the reader waits)", n)
	}
}

// A large malformed frame costs the pacing its size: 1 + size/16 KiB
// tokens, so a flood of large garbage is paced by the bytes it makes the
// hub read, not only by its frames.
func TestHostile_LargeMalformedFramesCostTheirSize(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, Config{MalformedPerSecond: Set(0.001), MalformedBurst: 10, Clock: clk.now})
	flooder := th.connect()
	big := "{" + strings.Repeat("[", 100<<10) // 7 tokens
	for range 5 {
		flooder.sendRaw(big)
	}
	flooder.expect("error")
	flooder.expect("error") // 14 tokens: the burst of 10 is spent by the second
	flooder.quiet(50 * time.Millisecond)
	if n := counterValue(t, th.h.m.malformedPaced); n != 1 {
		t.Fatalf("malformed_paced = %v, want 1 after the second large frame", n)
	}
}

// Under the hard cap per socket (FramesPerSocket: `synapse hub` sets it
// off loopback or with a token), a socket flooding valid frames is read at
// that rate past its burst: the frame that spends the burst is answered,
// then the reader waits, so the rest of the flood is neither read nor
// answered and takes nothing from the agents beside it; nothing is
// refused.
func TestHostile_ValidFloodIsPacedPerSocket(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, Config{FramesPerSocket: 0.001, FramesPerSocketBurst: 6, Clock: clk.now})
	good := th.join("p/good")
	flood := th.join("p/flood") // its registration spends one
	for range 20 {
		flood.send(map[string]any{"sender": "p/flood", "type": "who_request", "target": "System"})
	}
	for range 6 { // five of the burst, and the frame that overspends it
		flood.expect("who_snapshot")
	}
	good.send(f("claim", "sender", "p/good", "task_id", "T1", "paths", []string{"a.go"}))
	good.expect("claim_granted")
	good.send(f("claim", "sender", "p/good", "task_id", "T2", "paths", []string{"b.go"}))
	good.expect("claim_granted")
	for wait := time.After(50 * time.Millisecond); ; {
		select {
		case m := <-flood.frames:
			if m["type"] != "claim_granted" {
				t.Fatalf("the paced socket was answered: %v", m)
			}
			continue
		case <-wait:
		}
		break
	}
	if n := counterValue(t, th.h.m.framesPaced); n != 1 {
		t.Fatalf("frames_paced = %v, want 1", n)
	}
	if n := counterValue(t, th.h.m.rateLimited.WithLabelValues("agent")); n != 0 {
		t.Fatalf("%v frames refused; pacing refuses none", n)
	}
}

// A socket that sends ahead of its answers (a flood of valid frames) is
// handled in the heavy lane, one frame at a time with every other such
// socket, and is still answered; an agent that waits for each answer never
// enters the lane. The lane needs no hard cap per socket. Frames are made
// to pile up in the flooder's socket by holding the registry lock while it
// sends.
func TestHostile_SocketsSendingAheadShareTheHeavyLane(t *testing.T) {
	th := startHub(t, Config{})
	good := th.join("p/good")
	for i := range 10 {
		good.send(f("claim", "sender", "p/good", "task_id", "T"+itoa(int64(i)), "paths", []string{"f" + itoa(int64(i))}))
		good.expect("claim_granted")
	}
	if n := counterValue(t, th.h.m.heavyLane); n != 0 {
		t.Fatalf("%v frames of a request-response agent went to the heavy lane", n)
	}
	flood := th.join("p/flood")
	pileUp(th, flood, whoRequests("p/flood", 20))
	for range 20 {
		flood.expect("who_snapshot")
	}
	if n := counterValue(t, th.h.m.heavyLane); n < 1 || n > 20 {
		t.Fatalf("heavy lane frames = %v, want the flood's frames (1..20: a socket that sent ahead stays heavy for a second)", n)
	}
	before := counterValue(t, th.h.m.heavyLane)
	good.send(f("claim", "sender", "p/good", "task_id", "T99", "paths", []string{"z"}))
	good.expect("claim_granted")
	if n := counterValue(t, th.h.m.heavyLane); n != before {
		t.Fatal("the waiting agent's claim went to the heavy lane")
	}
}

// Beside an agent that waits for its answers (here it has just joined),
// the heavy lane is paced hub-wide past its burst (--heavy-lane-rate):
// its third frame would wait 1,000 s of a held clock, so the flood gets no
// more answers, the wait is counted, and the agent is served meanwhile
// (TestPacing_TheLaneIsPacedOnlyWhileAnAgentWorks: not without one).
func TestHostile_TheHeavyLaneIsPacedHubWide(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, Config{HeavyLanePerSecond: Set(0.001), HeavyLaneBurst: 2, AheadBurst: Off[int](), Clock: clk.now})
	good := th.join("p/good")
	flood := th.join("p/flood")
	pileUp(th, flood, whoRequests("p/flood", 10))
	// The lane's burst of two, and the first frame if it was read alone.
	if answered := flood.countWithin("who_snapshot", 300*time.Millisecond); answered < 2 || answered > 3 {
		t.Fatalf("the flood got %d answers, want the lane's burst (2) and at most its first frame", answered)
	}
	if n := counterValue(t, th.h.m.heavyLanePaced); n != 1 {
		t.Fatalf("heavy_lane_paced = %v, want 1 (the frame now waiting)", n)
	}
	for i := range 3 {
		good.send(f("claim", "sender", "p/good", "task_id", "G"+itoa(int64(i)), "paths", []string{"g" + itoa(int64(i))}))
		good.expect("claim_granted")
	}
}
