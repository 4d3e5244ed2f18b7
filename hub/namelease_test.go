package hub

import (
	"sync"
	"testing"
	"time"
)

// leaseClock is a settable clock for the lease's offline TTL.
type leaseClock struct {
	mu sync.Mutex
	t  float64
}

func (c *leaseClock) now() float64  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *leaseClock) add(d float64) { c.mu.Lock(); c.t += d; c.mu.Unlock() }

func heartbeat(name string, extra map[string]any) map[string]any {
	f := map[string]any{"sender": name, "target": "System", "type": "heartbeat", "payload": "online"}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

// A name lease protects a name while its holder is connected and for
// LeaseOfflineTTL after, whatever the takeover flag (PROTOCOL.md §1.7, the
// spec's NAME_OWNED_CLOSE_CODE 4016 and DEFAULT_LEASE_OFFLINE_TTL).
func TestNameLease_OwnedNameRefusedWithoutItsSecret(t *testing.T) {
	clock := &leaseClock{t: 1_800_000_000}
	th := startHub(t, Config{Clock: clock.now, LeaseOfflineTTL: 600 * time.Second})
	holder := th.connect()
	holder.send(heartbeat("proj/a", map[string]any{"lease": true}))
	g := holder.expect("lease_granted")
	secret, _ := g["owner_lease"].(string)
	if len(secret) < 40 || g["lease_name"] != "proj/a" || g["target"] != "proj/a" {
		t.Fatalf("lease_granted %v: want a token_urlsafe(32) secret for proj/a, sent privately", g)
	}

	intruder := th.connect()
	intruder.send(heartbeat("proj/a", map[string]any{"takeover": true}))
	intruder.expect("name_conflict")
	intruder.expectClose(NameOwnedCloseCode, "name owned")

	holder.close()
	waitGone(t, th, "proj/a")
	clock.add(599) // still inside the offline TTL
	late := th.connect()
	late.send(heartbeat("proj/a", nil))
	late.expectClose(NameOwnedCloseCode, "name owned")

	owner := th.connect()
	owner.send(heartbeat("proj/a", map[string]any{"owner_lease": secret}))
	owner.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "proj/a" && m["event"] == "joined" })
	owner.close()
	waitGone(t, th, "proj/a")

	clock.add(601) // the lease has lapsed
	anyone := th.connect()
	anyone.send(heartbeat("proj/a", nil))
	anyone.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "proj/a" && m["event"] == "joined" })
}

// The holder's own secret lets a new session take the name over from a
// connected one (a restarted agent whose old socket is not yet reaped).
func TestNameLease_SecretAllowsTakeoverFromTheHolder(t *testing.T) {
	th := startHub(t, Config{})
	holder := th.connect()
	holder.send(heartbeat("proj/a", map[string]any{"lease": true}))
	secret := holder.expect("lease_granted")["owner_lease"]
	again := th.connect()
	again.send(heartbeat("proj/a", map[string]any{"owner_lease": secret, "takeover": true}))
	holder.expectClose(4010, "superseded")
}

// waitGone waits until the hub has unbound name after its socket closed.
func waitGone(t *testing.T, th *testHub, name string) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	for time.Now().Before(deadline) {
		th.h.mu.Lock()
		_, bound := th.h.reg.byName[name]
		th.h.mu.Unlock()
		if !bound {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s still bound after its socket closed", name)
}
