package hub

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

func TestChat_DirectedNeverLeaksToThirdAgent(t *testing.T) {
	th := startHub(t, Config{})
	a := th.join("p/a")
	b := th.join("p/b")
	c := th.join("q/c")
	a.send(f("chat", "target", "p/b", "payload", "secret"))
	if m := b.expect("chat"); m["payload"] != "secret" {
		t.Fatalf("B got %v", m)
	}
	a.expect("chat") // the sender's own echo
	a.send(f("chat", "target", "all", "payload", "public"))
	if m := c.expect("chat"); m["payload"] != "public" {
		t.Fatalf("C's first chat is %v: the directed chat leaked", m)
	}
	c.send(f("history_request", "sender", "q/c"))
	h := c.expect("history_snapshot")
	for _, e := range h["history"].([]any) {
		if e.(map[string]any)["payload"] == "secret" {
			t.Fatalf("directed chat visible to a third agent in history: %v", h)
		}
	}
	c.send(f("resume_request", "sender", "q/c", "since", 0))
	if r := c.expect("resume_snapshot"); len(r["messages"].([]any)) != 1 {
		t.Fatalf("resume for C = %v, want only the public chat", r["messages"])
	}
	b.send(f("history_request", "sender", "p/b"))
	if n := len(b.expect("history_snapshot")["history"].([]any)); n != 2 {
		t.Fatalf("B sees %d chats in history, want 2", n)
	}
}

func TestChat_TargetsGlobRoleListAndSidecar(t *testing.T) {
	th := startHub(t, Config{})
	a := th.join("p/a")
	b := th.join("p/b", map[string]any{"roles": []any{"p/reviewer", 7, ""}})
	c := th.join("q/c")
	brx := th.join("p/b-rx")
	for _, target := range []string{"p/*", "p/reviewer", "q/c,p/b", "p/[!a]", "p"} {
		a.send(f("chat", "target", target, "payload", target))
		a.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == target })
		b.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == target })
		brx.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == target })
	}
	a.send(f("chat", "target", "all", "payload", "end"))
	// C was addressed only by the comma list.
	if m := c.expect("chat"); m["payload"] != "q/c,p/b" {
		t.Fatalf("C got %v first", m["payload"])
	}
	if m := c.expect("chat"); m["payload"] != "end" {
		t.Fatalf("C got %v, want end", m["payload"])
	}
}

func TestChat_HubClockOverridesClientTimestamp_INV_CK_1(t *testing.T) {
	var mu sync.Mutex
	clock := 1_800_000_000.25
	th := startHub(t, Config{Clock: func() float64 { mu.Lock(); defer mu.Unlock(); return clock }})
	a := th.join("p/a")
	cases := []struct {
		ts      any
		keep    bool
		keptVal float64
	}{
		{4_000_000_000.5, true, 4_000_000_000.5}, // a future stamp is advisory only
		{12.0, true, 12},                         // a backdated one too
		{0, false, 0},
		{"yesterday", false, 0},
		{true, false, 0},
		{nil, false, 0},
	}
	for i, c := range cases {
		mu.Lock()
		clock += 1
		want := clock
		mu.Unlock()
		a.send(f("chat", "target", "all", "payload", fmt.Sprint(i), "timestamp", c.ts))
		m := a.expect("chat")
		if got := num(t, m["timestamp"]); got != want {
			t.Errorf("case %d: timestamp %v, want hub clock %v", i, got, want)
		}
		ct, has := m["client_timestamp"]
		if has != c.keep || (has && num(t, ct) != c.keptVal) {
			t.Errorf("case %d: client_timestamp = %v (present %v), want %v (present %v)", i, ct, has, c.keptVal, c.keep)
		}
	}
	// History is ordered by the hub stamp, whatever the clients claimed.
	a.send(f("history_request"))
	prev := math.Inf(-1)
	for _, e := range a.expect("history_snapshot")["history"].([]any) {
		ts := num(t, e.(map[string]any)["timestamp"])
		if ts < prev {
			t.Fatalf("history not in hub-clock order")
		}
		prev = ts
	}
}

func TestChat_DeadLetterInStateSnapshot(t *testing.T) {
	th := startHub(t, Config{})
	a := th.join("p/a")
	a.send(f("chat", "target", "p/zz", "payload", "anyone?"))
	a.expect("chat")
	a.send(f("state_request"))
	s := a.expect("state_snapshot")["snapshot"].(map[string]any)
	dl := s["dead_letters"].([]any)
	if len(dl) != 1 || dl[0].(map[string]any)["target"] != "p/zz" || fmt.Sprint(dl[0].(map[string]any)["count"]) != "1" {
		t.Fatalf("dead_letters = %v", dl)
	}
}

func TestScopedFanout_OnlyOwnNamespaceAndAddressed(t *testing.T) {
	th := startHub(t, Config{})
	s := th.join("p/scoped", map[string]any{"fanout": "scoped"})
	full := th.join("x/full")
	other := th.join("q/other")
	s.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "q/other" })
	other.send(f("claim", "sender", "q/other", "task_id", "QT", "paths", []string{"q"}))
	full.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == "QT" })
	other.send(f("claim", "sender", "q/other", "task_id", "p/PT", "paths", []string{"p"}))
	full.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == "p/PT" })
	full.send(f("claim", "sender", "x/full", "task_id", "XT", "paths", []string{"x"}))
	full.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == "XT" })
	full.send(f("chat", "sender", "x/full", "target", "q/other", "payload", "not for scoped"))
	full.send(f("chat", "sender", "x/full", "target", "p/scoped", "payload", "for scoped"))
	// The scoped client sees the claim on its namespace's task and the chat
	// addressed to it, not the other namespaces' claims.
	if m := s.next(); m["type"] != "claim_granted" || m["task_id"] != "p/PT" {
		t.Fatalf("scoped got %v, want the p/PT grant", m)
	}
	if m := s.next(); m["type"] != "chat" || m["payload"] != "for scoped" {
		t.Fatalf("scoped got %v, want the chat addressed to it", m)
	}
	s.send(f("claim", "sender", "p/scoped", "task_id", "ST", "paths", []string{"s"}))
	if m := s.next(); m["type"] != "claim_granted" || m["task_id"] != "ST" {
		t.Fatalf("scoped got %v, want its own grant", m)
	}
	s.quiet(50 * time.Millisecond)
}
