package hub

// Hostile clients must not hurt well-behaved agents (issue 12). A socket
// flooding frames that fail to decode (PROTOCOL.md §1.2: each answered
// "Malformed JSON.", the socket kept open) is paced past its burst: its
// reader waits before the next read, so the flood costs the hub a few
// frames a second instead of the cores the good agents' claims need.
// These tests assert the mechanism (replies and counters), never timing.

import (
	"strings"
	"testing"
	"time"
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
	th := startHub(t, Config{MalformedPerSecond: 0.001, MalformedBurst: burst, Clock: clk.now})
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
	th := startHub(t, Config{MalformedPerSecond: 1000, MalformedBurst: 2, Clock: clk.now})
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
	th := startHub(t, Config{MalformedPerSecond: -1, MalformedBurst: 1})
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
	th := startHub(t, Config{MalformedPerSecond: 0.001, MalformedBurst: 2, AuthTimeout: 100 * time.Millisecond, Clock: clk.now})
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
