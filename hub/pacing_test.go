package hub

// Pacing bites only when it protects someone (issue 19; ratelimit.go,
// docs/security.md "Frames per socket and the heavy lane"). Each test holds
// the lane's pace at its strictest (one frame per 1,000 s of a clock held
// still, a burst of one), so a single paced frame would stop the socket;
// they assert who was paced with the hub's counters, never how long
// anything took.

import (
	"testing"
	"time"

	"github.com/synapse-hub/synapse/gate"
)

// strictLane is a hub as `synapse hub` runs on loopback without a token
// (no hard cap per socket), with the heavy lane's pace at its strictest
// and no allowance of frames sent ahead: the first such frame is heavy.
func strictLane(clk *fakeClock) Config {
	return Config{HeavyLanePerSecond: Set(0.001), HeavyLaneBurst: 1, AheadBurst: Off[int](), Clock: clk.now}
}

// pileUp sends frames from c while the registry lock is held, so that the
// hub's reader, stopped at the first, finds the rest already read in with
// it: c has sent ahead of its answers, as a pipelining script does.
func pileUp(th *testHub, c *tconn, frames []map[string]any) {
	th.h.mu.Lock()
	for _, fr := range frames {
		c.send(fr)
	}
	time.Sleep(50 * time.Millisecond) // loopback: written is received; this only lets the reader reach the lock
	th.h.mu.Unlock()
}

// whoRequests are n who_request frames from sender: cheap to send, each
// answered with a who_snapshot.
func whoRequests(sender string, n int) []map[string]any {
	fs := make([]map[string]any, n)
	for i := range fs {
		fs[i] = map[string]any{"sender": sender, "type": "who_request", "target": "System"}
	}
	return fs
}

// countWithin counts the frames of type typ that arrive within d (used
// only to check that no more than some arrive, never for ordering).
func (tc *tconn) countWithin(typ string, d time.Duration) int {
	n := 0
	for wait := time.After(d); ; {
		select {
		case m := <-tc.frames:
			if m["type"] == typ {
				n++
			}
		case <-wait:
			return n
		}
	}
}

// A lone client doing claim → grant → release → grant back to back, each
// request after its answer, is never paced and never enters the heavy
// lane: on an idle hub it runs at the hub's speed.
func TestPacing_LoneClientIsNeverPaced(t *testing.T) {
	th := startHub(t, strictLane(newFakeClock()))
	a := th.join("p/script")
	for i := range 100 {
		task := "T" + itoa(int64(i))
		a.send(f("claim", "sender", "p/script", "task_id", task, "paths", []string{task + ".go"}))
		a.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == task })
		a.send(f("release", "sender", "p/script", "task_id", task))
		a.expectWhere("release_granted", func(m map[string]any) bool { return m["task_id"] == task })
	}
	for name, c := range map[string]float64{
		"frames_paced":     counterValue(t, th.h.m.framesPaced),
		"heavy_lane":       counterValue(t, th.h.m.heavyLane),
		"heavy_lane_paced": counterValue(t, th.h.m.heavyLanePaced),
	} {
		if c != 0 {
			t.Errorf("%s = %v after 200 request-response frames of a lone client, want 0", name, c)
		}
	}
}

// A lone script pipelining board writes (ledger_task, every one sent
// before any answer) goes through the heavy lane, but with nobody else
// working the lane is not paced: every declaration is answered at once.
func TestPacing_LonePipeliningScriptIsNotPaced(t *testing.T) {
	th := startHub(t, strictLane(newFakeClock()))
	const n = 200
	a := th.join("p/import") // its registration, sent alone, waited for its answer
	frames := make([]map[string]any, n)
	for i := range frames {
		frames[i] = f("ledger_task", "sender", "p/import", "task_id", "I"+itoa(int64(i)), "title", "imported")
	}
	pileUp(th, a, frames)
	for i := range n {
		id := "I" + itoa(int64(i))
		a.expectWhere("ledger_task_posted", func(m map[string]any) bool { return m["task"].(map[string]any)["task_id"] == id })
	}
	if c := counterValue(t, th.h.m.heavyLane); c < 1 {
		t.Fatalf("heavy_lane = %v: the pipelined frames never went through the lane", c)
	}
	if c := counterValue(t, th.h.m.heavyLanePaced); c != 0 {
		t.Fatalf("heavy_lane_paced = %v for a lone script, want 0", c)
	}
}

// Beside an agent that waits for its answers and was served within
// protectFor, the lane is paced: past its burst the flood's next frame
// waits (1,000 s of the held clock), while the agent, never in the lane,
// has its claims granted. Once the agent has rested longer than
// protectFor, the same flood is not paced.
func TestPacing_TheLaneIsPacedOnlyWhileAnAgentWorks(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, strictLane(clk))
	flood := th.join("p/flood")
	good := th.join("p/good")

	// The agent's last frame (its registration) is older than protectFor:
	// nobody to protect, so the flood is answered in full.
	clk.advance(protectFor + 1)
	pileUp(th, flood, whoRequests("p/flood", 10))
	for range 10 {
		flood.expect("who_snapshot")
	}
	if c := counterValue(t, th.h.m.heavyLanePaced); c != 0 {
		t.Fatalf("heavy_lane_paced = %v with no agent working, want 0", c)
	}
	lane := counterValue(t, th.h.m.heavyLane)

	// The agent works: its claim is served outside the lane, and the
	// flood's pace engages behind it.
	good.send(f("claim", "sender", "p/good", "task_id", "G0", "paths", []string{"g0"}))
	good.expect("claim_granted")
	if c := counterValue(t, th.h.m.heavyLane); c != lane {
		t.Fatal("the waiting agent's claim went through the heavy lane")
	}
	pileUp(th, flood, whoRequests("p/flood", 10))
	// The lane's burst of one, and the first frame if it was read alone.
	if answered := flood.countWithin("who_snapshot", 300*time.Millisecond); answered < 1 || answered > 2 {
		t.Fatalf("the flood got %d answers beside a working agent, want the lane's burst (1) and at most its first frame", answered)
	}
	if c := counterValue(t, th.h.m.heavyLanePaced); c != 1 {
		t.Fatalf("heavy_lane_paced = %v, want 1 (the frame now waiting)", c)
	}
	for i := 1; i <= 3; i++ {
		task := "G" + itoa(int64(i))
		good.send(f("claim", "sender", "p/good", "task_id", task, "paths", []string{"g" + itoa(int64(i))}))
		good.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == task })
	}
}

// pendingSocket is a socket whose reader always has, or never has, the
// peer's next frames in hand.
type pendingSocket struct {
	*nullSocket
	pending bool
	limits  []int // LimitReceiveBuffer's calls
}

func (p *pendingSocket) Pending() bool            { return p.pending }
func (p *pendingSocket) LimitReceiveBuffer(n int) { p.limits = append(p.limits, n) }

// A socket that sends ahead of its answers now and then — our SDK writes
// its registration and the ping that acks it at once — stays out of the
// heavy lane for DefaultAheadBurst such frames, earned back at
// aheadPerSecond; one that keeps sending ahead, past the allowance, is
// heavy (a storm of 10,000 SDK agents once went through the lane, paced)
// and has its kernel receive buffer capped, once.
func TestPacing_SendingAheadNowAndThenIsNotHeavy(t *testing.T) {
	clk := newFakeClock()
	h := newLocalHub(t, Config{Clock: clk.now})
	ps := &pendingSocket{nullSocket: newNullSocket(), pending: true}
	s := &session{h: h, id: 1, conn: ps, ahead: gate.NewBucket(aheadPerSecond, DefaultAheadBurst, h.now())}
	for i := range DefaultAheadBurst {
		if s.chargeFrame() {
			t.Fatalf("heavy at the %d-th frame sent ahead, want an allowance of %d", i+1, DefaultAheadBurst)
		}
	}
	if len(ps.limits) != 0 {
		t.Fatalf("receive buffer capped within the allowance: %v", ps.limits)
	}
	if !s.chargeFrame() {
		t.Fatal("not heavy past the allowance")
	}
	// Heavy: what it sends beyond what is read waits in its own host.
	if s.chargeFrame(); len(ps.limits) != 1 || ps.limits[0] != heavyReceiveBuffer {
		t.Fatalf("receive buffer caps %v once heavy, want one of %d", ps.limits, heavyReceiveBuffer)
	}
	// Waiting for its answers again, it leaves the lane after heavyFor,
	// and the allowance comes back with time.
	ps.pending = false
	clk.advance(heavyFor + float64(DefaultAheadBurst)/aheadPerSecond)
	if s.chargeFrame() {
		t.Fatal("still heavy after heavyFor of waiting for its answers")
	}
	ps.pending = true
	for i := range DefaultAheadBurst {
		if s.chargeFrame() {
			t.Fatalf("heavy at the %d-th frame after the allowance was earned back", i+1)
		}
	}
}

// A socket's own frames sent alone (a script's first request) do not make
// the lane protect it from itself, nor hide the agent served just before
// them.
func TestPacing_OwnFramesNeitherPaceNorHideAnAgent(t *testing.T) {
	th := startHub(t, strictLane(newFakeClock()))
	s := &session{h: th.h, id: 1}
	agent := &session{h: th.h, id: 2}
	now := th.h.now()
	s.noteWaiting(now)
	if th.h.protecting(s, now) {
		t.Fatal("a socket's own earlier frame paced its lane")
	}
	agent.noteWaiting(now)
	then := now
	now += 2 * noteEvery // past the grain of the notes
	s.noteWaiting(now)   // the script's frame after the agent's
	if w := th.h.lastWaiting.Load(); w != s {
		t.Fatal("the script's frame after the agent's was not noted")
	}
	if !th.h.protecting(s, now) {
		t.Fatal("the script's own frame hid the agent served before it")
	}
	if th.h.protecting(s, then+protectFor) {
		t.Fatal("the lane still protects an agent that rested protectFor")
	}
}
