package gate

import "testing"

func TestBucket_BurstThenRateAndBackwardClock(t *testing.T) {
	b := NewBucket(2, 3, 100)
	for i := 0; i < 3; i++ {
		if !b.Allow(100) {
			t.Fatalf("burst frame %d refused", i)
		}
	}
	if b.Allow(100) {
		t.Fatal("a frame beyond the burst was admitted")
	}
	if !b.Allow(100.5) || b.Allow(100.5) {
		t.Fatal("2/s should earn exactly one frame in 0.5 s")
	}
	if b.Allow(50) {
		t.Fatal("a clock stepping backwards earned tokens")
	}
	if !b.Allow(51) { // one second after the backwards step earns 2 again
		t.Fatal("the bucket did not refill after a backwards step")
	}
	b = NewBucket(10, 1000, 0)
	b.Allow(0)
	if b.Allow(1e6) && b.tokens > b.burst {
		t.Fatal("refill exceeded the burst")
	}
	if off := NewBucket(0, 0, 0); !off.Allow(0) || !off.Allow(0) {
		t.Fatal("a zero rate must admit everything")
	}
	if d := NewBucket(5, 0, 0); d.burst != 5 {
		t.Fatalf("burst 0 should default to one second's worth, got %v", d.burst)
	}
}

// The reference's secure ceilings (PROTOCOL.md §10).
func TestSecureRateLimits_AreTheReferences(t *testing.T) {
	if SecureRateLimits != (RateLimits{AgentPerSecond: 100, AgentBurst: 20, HostPerSecond: 500, HostBurst: 100}) {
		t.Fatalf("SecureRateLimits = %+v", SecureRateLimits)
	}
}

func TestHostBuckets_SweepsIdleHosts(t *testing.T) {
	old := maxHostBuckets
	maxHostBuckets = 2
	defer func() { maxHostBuckets = old }()
	hb := NewHostBuckets(1, 1)
	hb.Allow("a", 0)
	hb.Allow("b", 0)
	hb.Allow("c", 10) // a and b have refilled: forgotten
	if len(hb.m) != 1 {
		t.Fatalf("table holds %d hosts, want 1", len(hb.m))
	}
	if NewHostBuckets(0, 5) != nil || !(*HostBuckets)(nil).Allow("x", 0) {
		t.Fatal("a zero rate must be an unlimited (nil) table")
	}
}
