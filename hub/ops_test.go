package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// TestSlowConsumer_DoesNotSlowOthers: one socket that never reads must not
// delay 50 others; it is disconnected once its bounded queue fills.
func TestSlowConsumer_DoesNotSlowOthers(t *testing.T) {
	// The slow client can hold at most its queue plus what the kernel
	// buffers (a few MiB: ~70 frames of 64 KiB), so 700 frames overflow
	// it; a fast reader would have to fall 512 frames (32 MiB) behind to
	// be dropped, which no scheduling hiccup on a busy machine does. The
	// byte bound is raised to match (its default, 16 MiB, is 256 of these
	// frames: a reader starved for a moment under a full test run was
	// dropped).
	const readers, n, sendQueue = 10, 700, 512
	th := startHub(t, Config{SendQueue: sendQueue, SendQueueBytes: Set(sendQueue * 66 << 10)})

	// The slow client: a tiny receive buffer, registers, then never reads.
	// SO_RCVBUF before connect, so the advertised window stays small.
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	hc := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	slow, _, err := websocket.Dial(ctx, th.url, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.CloseNow()
	b, _ := json.Marshal(hb("p/slow"))
	if err := slow.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}

	// Fast readers count the chats without decoding them.
	var wg sync.WaitGroup
	got := make([]int, readers)
	sawLeft := make([]bool, readers)
	conns := make([]*websocket.Conn, readers)
	for i := range readers {
		c, _, err := websocket.Dial(ctx, th.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadLimit(1 << 20)
		conns[i] = c
		defer c.CloseNow()
		name := "p/r" + itoa(int64(i))
		b, _ := json.Marshal(hb(name))
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	// The sender reads (and discards) its own copies, so it keeps up.
	sender, _, err := websocket.Dial(ctx, th.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.CloseNow()
	sender.SetReadLimit(1 << 20)
	b, _ = json.Marshal(hb("p/sender"))
	if err := sender.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, _, err := sender.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	// Everyone is bound before the first chat: wait until the hub lists them.
	for deadline := time.Now().Add(testDeadline); ; {
		th.h.mu.Lock()
		bound := len(th.h.reg.byName)
		th.h.mu.Unlock()
		if bound == readers+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d sockets bound", bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
	payload := strings.Repeat("x", 64<<10)
	start := time.Now()
	for i := range readers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for got[i] < n || !sawLeft[i] {
				_, data, err := conns[i].Read(rctx)
				if err != nil {
					return
				}
				if bytes.Contains(data, []byte(`"type":"chat"`)) {
					got[i]++
				} else if bytes.Contains(data, []byte(`"event":"left","agent":"p/slow"`)) {
					sawLeft[i] = true
				}
			}
		}(i)
	}
	chat, _ := json.Marshal(f("chat", "sender", "p/sender", "target", "all", "payload", payload))
	sctx, scancel := context.WithTimeout(context.Background(), 60*time.Second) // -race is slow
	defer scancel()
	for range n {
		if err := sender.Write(sctx, websocket.MessageText, chat); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	for i := range readers {
		if got[i] != n || !sawLeft[i] {
			t.Fatalf("reader %d got %d/%d chats, saw slow leave: %v", i, got[i], n, sawLeft[i])
		}
	}
	if elapsed > 45*time.Second {
		t.Fatalf("fan-out took %v", elapsed)
	}
	th.h.mu.Lock()
	_, online := th.h.reg.byName["p/slow"]
	th.h.mu.Unlock()
	if online {
		t.Fatal("slow consumer still online")
	}
	t.Logf("%d readers got %d×64 KiB broadcasts in %v; slow consumer dropped", readers, n, elapsed)
}

func TestHealthAndMetrics(t *testing.T) {
	th := startHub(t, Config{HubID: "syn-test0001"})
	a := th.join("p/a")
	a.send(f("claim", "task_id", "T1", "paths", []string{"a"}))
	a.expect("claim_granted")
	a.send(f("claim", "sender", "p/a", "task_id", ""))
	a.expect("claim_denied")

	resp, err := http.Get(th.srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := map[string]any{"status": "ok", "protocol_version": 2.0, "hub_id": "syn-test0001", "online_agents": 1.0, "active_claims": 1.0, "journal": "memory"}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("/health %s = %v, want %v", k, h[k], v)
		}
	}
	for _, k := range []string{"uptime_seconds", "version", "config_epoch", "journal_corrupt_rows"} {
		if _, ok := h[k]; !ok {
			t.Errorf("/health lacks %s", k)
		}
	}

	resp, err = http.Get(th.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		"synapse_claims_granted_total 1",
		`synapse_claims_denied_total{reason="TASK_ID_REQUIRED"} 1`,
		"synapse_connected_clients 1",
		"synapse_active_claims 1",
		`synapse_messages_total{type="claim"} 2`,
		"synapse_commit_latency_seconds_count 2",
		"synapse_slow_consumer_disconnects_total 0",
		"synapse_send_queue_frames",
		"synapse_go_goroutines ",
		"synapse_go_heap_live_bytes ",
		"synapse_go_heap_objects_bytes ",
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

func TestHealth_DegradedJournalRefusesGatedMutations(t *testing.T) {
	th := startHub(t, Config{Degraded: "2 quarantined rows"})
	a := th.join("p/a")
	a.send(f("claim", "task_id", "T1"))
	m := a.expect("error")
	if m["error_code"] != "journal_recovery_required" || !strings.HasPrefix(m["payload"].(string), "Mutation refused: durable journal recovery is required.") {
		t.Fatalf("got %v", m)
	}
	a.send(f("state_request")) // reads still work
	a.expect("state_snapshot")
	resp, err := http.Get(th.srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&h)
	if h["status"] != "degraded" {
		t.Fatalf("/health status = %v", h["status"])
	}
}

// TestClose_FinishesInFlightWork: claims already read when Close begins
// are committed and answered before the sockets close with 1001, and what
// the client saw granted is exactly what the journal holds.
func TestClose_FinishesInFlightWork(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	st, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	th := startHub(t, Config{Journal: st})
	a := th.join("p/a")
	const n = 200
	for i := range n {
		a.send(f("claim", "task_id", "T"+itoa(int64(i)), "paths", []string{"p" + itoa(int64(i))}, "idem_key", "k"+itoa(int64(i))))
	}
	a.expect("claim_granted")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := th.h.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	granted := map[string]bool{}
	for {
		select {
		case m := <-a.frames:
			if m["type"] == "claim_granted" {
				granted[m["task_id"].(string)] = true
			}
			continue
		case <-a.done:
		}
		break
	}
	for len(a.frames) > 0 {
		if m := <-a.frames; m["type"] == "claim_granted" {
			granted[m["task_id"].(string)] = true
		}
	}
	a.expectClose(websocket.StatusGoingAway, "hub shutting down")
	claims := replayClosed(t, st).Claims()
	if len(claims)+1 < len(granted) || len(claims) == 0 {
		t.Fatalf("journal holds %d claims, client saw %d grants", len(claims), len(granted)+1)
	}
	for _, c := range claims {
		if c.TaskID != "T0" && !granted[c.TaskID] {
			t.Errorf("claim %s committed but its grant never reached the client", c.TaskID)
		}
	}
	t.Logf("%d of %d claims committed and answered before shutdown", len(claims), n)
}

// replayClosed closes st, the journal of a hub that has stopped, and
// returns the state a restart would rebuild from its file.
func replayClosed(t *testing.T, st *journal.Store) *coord.State {
	t.Helper()
	path := st.Path()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st2.Close() })
	rec, err := journal.Replay(st2, coord.DefaultLimits(), nowTS(), journal.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rec.State
}
