package hub

import (
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/gate"
)

// §1.4 step 12: beyond its burst a socket's frames are refused with "Rate
// limit exceeded."; heartbeats are exempt and never spend a token; the
// limit is per socket.
func TestRateLimit_PerAgentRefusesAndExemptsHeartbeats(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, Config{RateLimits: gate.RateLimits{AgentPerSecond: 1, AgentBurst: 3}, Clock: clk.now})
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
	th := startHub(t, Config{RateLimits: gate.RateLimits{HostPerSecond: 1, HostBurst: 4}, Clock: clk.now})
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
