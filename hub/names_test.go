package hub

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func hb(name string, kv ...any) map[string]any {
	m := f("heartbeat", kv...)
	m["sender"] = name
	m["payload"] = "online"
	return m
}

func TestNames_DuplicateLiveNameClosed4009(t *testing.T) {
	th := startHub(t, Config{})
	th.join("p/b")
	b2 := th.connect()
	b2.send(hb("p/b"))
	m := b2.expect("name_conflict")
	if m["payload"] != "Name 'p/b' is already online from another session. Use a unique --name." {
		t.Errorf("payload = %v", m["payload"])
	}
	b2.expectClose(4009, "name conflict")
}

func TestNames_ReservedIdentityClosed4009(t *testing.T) {
	th := startHub(t, Config{})
	for _, n := range []string{"SynapseHub", "synapse", "SYSTEM"} {
		x := th.connect()
		x.send(hb(n))
		x.expect("name_conflict")
		x.expectClose(4009, "reserved identity")
	}
}

func TestNames_SenderSwitchAndMissingSenderClosed4009(t *testing.T) {
	th := startHub(t, Config{})
	a := th.join("p/a")
	a.send(map[string]any{"type": "who_request", "payload": "who"}) // no sender: anon-<id> (§10)
	m := a.expect("name_conflict")
	if p, _ := m["payload"].(string); !strings.HasPrefix(p, "Sender name switch denied: 'p/a' -> 'anon-") {
		t.Errorf("payload = %q", p)
	}
	a.expectClose(4009, "name switch")

	b := th.join("p/b")
	b.send(hb("p/c"))
	b.expect("name_conflict")
	b.expectClose(4009, "name switch")
}

func TestNames_TakeoverSupersedesSilently(t *testing.T) {
	th := startHub(t, Config{})
	a := th.join("p/a")
	b := th.join("p/b")
	a.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "p/b" })
	b2 := th.connect()
	b2.send(hb("p/b", "takeover", true))
	b.expectClose(4010, "superseded")
	b2.sync("p/b")
	// The name stayed online throughout: A saw no presence_update.
	a.sync("p/a")
	select {
	case m := <-a.frames:
		t.Fatalf("A got %v after a takeover", m)
	default:
	}
}

func TestNames_TakeoverDamping_CooldownThenQuarantine(t *testing.T) {
	var mu sync.Mutex
	clock := 1_800_000_000.0
	now := func() float64 { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d float64) { mu.Lock(); clock += d; mu.Unlock() }
	th := startHub(t, Config{Clock: now})
	cur := th.join("p/b")
	take := func() *tconn {
		n := th.connect()
		n.send(hb("p/b", "takeover", 1))
		return n
	}
	// First takeover admitted.
	n := take()
	cur.expectClose(4010, "superseded")
	n.sync("p/b")
	cur = n
	// A second one within 2 s: cooldown, the newcomer is closed.
	advance(1)
	take().expectClose(4014, "takeover cooldown")
	// Spaced takeovers: the 5th within 30 s quarantines the name.
	for i := 2; i <= 4; i++ {
		advance(2.5)
		n := take()
		cur.expectClose(4010, "superseded")
		n.sync("p/b")
		cur = n
	}
	advance(2.5)
	take().expectClose(4014, "takeover quarantine")
	advance(30)
	take().expectClose(4014, "takeover quarantine") // still within 60 s
	cur.sync("p/b")                                 // the owner is pinned
	advance(31)
	n = take()
	cur.expectClose(4010, "superseded")
	n.sync("p/b")
}

func TestAdmission_HubAtCapacity4013(t *testing.T) {
	th := startHub(t, Config{MaxClients: 2})
	th.connect()
	th.connect()
	x := th.dial()
	x.expectClose(4013, "hub at capacity")
}

func TestAdmission_PerHostCap4015(t *testing.T) {
	th := startHub(t, Config{MaxConnectionsPerHost: 2})
	th.connect()
	th.connect()
	x := th.dial()
	x.expectClose(4015, "too many connections from host")
}

func TestAdmission_RegistrationTimeout4012(t *testing.T) {
	th := startHub(t, Config{AuthTimeout: 50 * time.Millisecond})
	x := th.connect()
	x.expectClose(4012, "registration timeout")
}

func TestAuth_TokenOnFirstFrame(t *testing.T) {
	th := startHub(t, Config{Token: "secret"})
	a1 := th.dial()
	a1.send(hb("p/a"))
	m := a1.expect("auth_denied")
	if m["payload"] != "Authentication token required." {
		t.Errorf("payload %v", m["payload"])
	}
	a1.expectClose(4010, "auth denied")

	a2 := th.dial()
	a2.send(hb("p/a", "token", "wrong"))
	if m := a2.expect("auth_denied"); m["payload"] != "Invalid authentication token." {
		t.Errorf("payload %v", m["payload"])
	}
	a2.expectClose(4010, "auth denied")

	a3 := th.dial()
	a3.send(hb("p/a", "token", "secret"))
	w := a3.next()
	if w["type"] != "welcome" || num(t, w["connected_clients"]) != 1 || len(w["online_agents"].([]any)) != 0 {
		t.Fatalf("first frame after auth = %v, want welcome", w)
	}
	if m := a3.next(); m["type"] != "presence_update" {
		t.Fatalf("then %v, want presence_update", m)
	}
	a3.sync("p/a")
}

func TestAuth_UnauthenticatedSocketGetsNoBroadcast(t *testing.T) {
	th := startHub(t, Config{Token: "secret"})
	idle := th.dial() // connected, never authenticates
	a := th.dial()
	a.send(hb("p/a", "token", "secret"))
	a.expect("presence_update")
	a.send(f("chat", "target", "all", "payload", "hello"))
	a.expect("chat")
	idle.quiet(200 * time.Millisecond)
}

func TestOpenHub_UnboundSocketGetsNoBroadcast(t *testing.T) {
	th := startHub(t, Config{})
	idle := th.connect() // welcomed, never registers
	a := th.join("p/a")
	a.send(f("claim", "task_id", "T1"))
	a.expect("claim_granted")
	a.send(f("chat", "target", "all", "payload", "hello"))
	a.expect("chat")
	idle.quiet(200 * time.Millisecond)
	_ = websocket.StatusNormalClosure
}

// A secured hub bounds the sockets still in their pre-auth window, so a
// burst of connections that never authenticate cannot hold every slot;
// authenticated agents do not count (PROTOCOL.md §1.4 step 3).
func TestAdmission_UnauthenticatedCap4014(t *testing.T) {
	th := startHub(t, Config{Token: "s3cret", MaxUnauthClients: 2})
	authed := th.dial()
	authed.send(map[string]any{"sender": "proj/a", "type": "heartbeat", "token": "s3cret"})
	authed.expect("welcome")
	pending := th.dial()
	gone := th.dial()
	waitSessions(t, th, 3) // admitted: a pre-auth socket gets no welcome to wait for
	x := th.dial()
	x.expectClose(4014, "too many unauthenticated connections")
	// A pre-auth socket that authenticates, or goes, frees its slot.
	pending.send(map[string]any{"sender": "proj/b", "type": "heartbeat", "token": "s3cret"})
	pending.expect("welcome")
	_ = gone.c.CloseNow()
	eventually(t, "both pre-auth slots free", func() bool {
		th.h.mu.Lock()
		defer th.h.mu.Unlock()
		return th.h.reg.unauthed == 0
	})
	th.dial()
	th.dial()
	waitSessions(t, th, 4)
	th.dial().expectClose(4014, "too many unauthenticated connections")
}

func waitSessions(t *testing.T, th *testHub, n int) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	for {
		th.h.mu.Lock()
		got := len(th.h.reg.sessions)
		th.h.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions admitted, want %d", got, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Takeover damping records of names that are idle again are forgotten once
// there are many: the map does not grow with every name that ever took over.
func TestTakeoverDamping_IdleRecordsAreSwept(t *testing.T) {
	h := &Hub{}
	h.reg.init()
	for i := range maxTakeoverRecords {
		h.reg.takeovers[string(rune('a'+i%26))+strconv.Itoa(i)] = &damping{times: []float64{100}}
	}
	h.reg.takeovers["busy"] = &damping{times: []float64{1000}}
	h.reg.sweepTakeoversLocked(1010) // 1010-100 ≥ window: idle; "busy" took over 10 s ago
	if len(h.reg.takeovers) != 1 || h.reg.takeovers["busy"] == nil {
		t.Fatalf("%d records left; want only the one still inside its window", len(h.reg.takeovers))
	}
}

// The additive leave verb frees the name before it answers, so a process
// started right after may bind it: when `left` arrives the hub no longer
// holds the name, and a new socket binds it without a conflict.
func TestLeave_FreesTheNameBeforeAnswering(t *testing.T) {
	th := startHub(t, Config{})
	a := th.join("proj/a")
	a.send(map[string]any{"sender": "proj/a", "type": "leave"})
	a.expect("left")
	th.h.mu.Lock()
	_, held := th.h.reg.byName["proj/a"]
	th.h.mu.Unlock()
	if held {
		t.Fatal("the name is still bound when `left` arrives")
	}
	a.expectClose(1000, "left")
	th.join("proj/a") // no 4009: the name is free
}
