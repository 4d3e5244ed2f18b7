package hub

import (
	"strings"
	"testing"
)

func TestBucket_BurstThenRateAndBackwardClock(t *testing.T) {
	b := newBucket(2, 3, 100)
	for i := 0; i < 3; i++ {
		if !b.allow(100) {
			t.Fatalf("burst frame %d refused", i)
		}
	}
	if b.allow(100) {
		t.Fatal("a frame beyond the burst was admitted")
	}
	if !b.allow(100.5) || b.allow(100.5) {
		t.Fatal("2/s should earn exactly one frame in 0.5 s")
	}
	if b.allow(50) {
		t.Fatal("a clock stepping backwards earned tokens")
	}
	if !b.allow(51) { // one second after the backwards step earns 2 again
		t.Fatal("the bucket did not refill after a backwards step")
	}
	b = newBucket(10, 1000, 0)
	b.allow(0)
	if b.allow(1e6) && b.tokens > b.burst {
		t.Fatal("refill exceeded the burst")
	}
	if off := newBucket(0, 0, 0); !off.allow(0) || !off.allow(0) {
		t.Fatal("a zero rate must admit everything")
	}
	if d := newBucket(5, 0, 0); d.burst != 5 {
		t.Fatalf("burst 0 should default to one second's worth, got %v", d.burst)
	}
}

// The reference's secure ceilings (PROTOCOL.md §10).
func TestSecureRateLimits_AreTheReferences(t *testing.T) {
	if SecureRateLimits != (RateLimits{AgentPerSecond: 100, AgentBurst: 20, HostPerSecond: 500, HostBurst: 100}) {
		t.Fatalf("SecureRateLimits = %+v", SecureRateLimits)
	}
}

// §1.4 step 12: beyond its burst a socket's frames are refused with "Rate
// limit exceeded."; heartbeats are exempt and never spend a token; the
// limit is per socket.
func TestRateLimit_PerAgentRefusesAndExemptsHeartbeats(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, Config{RateLimits: RateLimits{AgentPerSecond: 1, AgentBurst: 3}, Clock: clk.now})
	a := th.join("p/a") // a heartbeat: free
	who := map[string]any{"sender": "p/a", "type": "who_request", "target": "System", "payload": "who"}
	for i := 0; i < 3; i++ {
		a.send(who)
		a.expect("who_snapshot")
	}
	a.send(who)
	m := a.expect("error")
	if m["payload"] != "Rate limit exceeded." || m["error_code"] != "rate_limited" || m["target"] != "p/a" {
		t.Fatalf("got %v", m)
	}
	b := th.join("p/b") // another socket has its own bucket
	b.sync("p/b")
	a.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "p/b" })
	for i := 0; i < 5; i++ {
		a.send(hb("p/a")) // heartbeats pass and spend nothing
	}
	clk.advance(1) // one token earned
	a.send(who)
	if m := a.next(); m["type"] != "who_snapshot" {
		t.Fatalf("after heartbeats and 1 s: %v, want who_snapshot (heartbeats must be exempt)", m)
	}
	a.send(who)
	if m := a.expect("error"); m["payload"] != "Rate limit exceeded." {
		t.Fatalf("got %v", m)
	}
	wantMetric(t, th, `synapse_rate_limited_total{scope="agent"} 2`)
}

// §1.4 step 2: every frame from a host, heartbeats and all its sockets
// together, is charged to one bucket; beyond it "Host rate limit
// exceeded.".
func TestRateLimit_PerHostSharedBySockets(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, Config{RateLimits: RateLimits{HostPerSecond: 1, HostBurst: 4}, Clock: clk.now})
	a := th.join("p/a") // 1
	b := th.join("p/b") // 2
	a.sync("p/a")       // 3
	b.sync("p/b")       // 4
	a.send(hb("p/a"))   // 5: over, heartbeat or not
	m := a.expect("error")
	if m["payload"] != "Host rate limit exceeded." || m["error_code"] != "host_rate_limited" || m["target"] != "p/a" {
		t.Fatalf("got %v", m)
	}
	b.sendRaw("not json") // charged before decoding
	if m := b.expect("error"); m["payload"] != "Host rate limit exceeded." {
		t.Fatalf("got %v", m)
	}
	clk.advance(1)
	b.sync("p/b")
	wantMetric(t, th, `synapse_rate_limited_total{scope="host"} 2`)
}

// Off by default: the zero Config limits nothing.
func TestRateLimit_OffByDefault(t *testing.T) {
	th := startHub(t, Config{})
	a := th.join("p/a")
	for i := 0; i < 150; i++ {
		a.send(map[string]any{"sender": "p/a", "type": "who_request", "target": "System", "payload": "who"})
	}
	for i := 0; i < 150; i++ {
		a.expect("who_snapshot")
	}
	if body := metricsText(t, th); strings.Contains(body, "\nsynapse_rate_limited_total{") {
		t.Fatal("a frame was rate limited on an unlimited hub")
	}
}

func TestHostBuckets_SweepsIdleHosts(t *testing.T) {
	old := maxHostBuckets
	maxHostBuckets = 2
	defer func() { maxHostBuckets = old }()
	hb := newHostBuckets(1, 1)
	hb.allow("a", 0)
	hb.allow("b", 0)
	hb.allow("c", 10) // a and b have refilled: forgotten
	if len(hb.m) != 1 {
		t.Fatalf("table holds %d hosts, want 1", len(hb.m))
	}
	if newHostBuckets(0, 5) != nil || !(*hostBuckets)(nil).allow("x", 0) {
		t.Fatal("a zero rate must be an unlimited (nil) table")
	}
}
