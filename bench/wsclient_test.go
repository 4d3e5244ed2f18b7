package bench

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

// The load client's framing against a real hub over real sockets.

// tappedConn is a real socket whose reads return at most max bytes, so
// every frame's header and payload reach the client over several reads.
// It reports each pong the client writes (one write per frame) and when
// an armed number of bytes has been read.
type tappedConn struct {
	net.Conn
	max   int
	pongs chan struct{}

	mu      sync.Mutex
	read    int64
	target  int64
	reached chan struct{}
}

func (c *tappedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p[:min(len(p), c.max)])
	c.mu.Lock()
	c.read += int64(n)
	if c.reached != nil && c.read >= c.target {
		close(c.reached)
		c.reached = nil
	}
	c.mu.Unlock()
	return n, err
}

// arm returns a channel closed once n more bytes have been read.
func (c *tappedConn) arm(n int64) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.target, c.reached = c.read+n, make(chan struct{})
	return c.reached
}

func (c *tappedConn) Write(p []byte) (int, error) {
	if len(p) > 0 && p[0] == 0x80|byte(ws.OpPong) {
		select {
		case c.pongs <- struct{}{}:
		default:
		}
	}
	return c.Conn.Write(p)
}

// dialTapped connects and registers an agent whose socket reads at most
// maxRead bytes at a time.
func dialTapped(t *testing.T, uri, name string, maxRead int) (*loadAgent, *tappedConn) {
	t.Helper()
	var tap *tappedConn
	d := ws.Dialer{WrapConn: func(nc net.Conn) net.Conn {
		tap = &tappedConn{Conn: nc, max: maxRead, pongs: make(chan struct{}, 16)}
		return tap
	}}
	c, err := dialWS(t.Context(), d, uri)
	if err != nil {
		t.Fatal(err)
	}
	a := &loadAgent{name: name, c: c}
	t.Cleanup(a.close)
	if err := a.register(t.Context(), registration{leave: true}, false); err != nil {
		t.Fatal(err)
	}
	return a, tap
}

func mustDial(t *testing.T, uri, name string) *loadAgent {
	t.Helper()
	a, err := dialAgent(t.Context(), uri, name, registration{leave: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	return a
}

// chatTo sends a directed chat from one agent to another and waits until
// it has arrived whole; it returns what the receiver matched.
func chatTo(t *testing.T, from, to *loadAgent, id, payload string) []byte {
	t.Helper()
	var got []byte
	w := newWaiter(func(b []byte) bool {
		if !fields("type", "chat", "client_msg_id", id).in(b) {
			return false
		}
		got = append([]byte(nil), b...)
		return true
	})
	to.c.await(w)
	if err := from.send(appendField(appendField(from.request("chat", to.name), "payload", payload), "client_msg_id", id)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := to.c.wait(ctx, w); err != nil {
		t.Fatalf("chat %s: %v", id, err)
	}
	return got
}

func TestWSClient_ReadsFramesSplitAcrossReadsAndLargerThanItsBuffer(t *testing.T) {
	uri := hubtest.Start(t, hub.Config{})
	to, tap := dialTapped(t, uri, "wsc/to", 3) // 3 bytes per read: every header is split
	from := mustDial(t, uri, "wsc/from")

	big := strings.Repeat("x", 3*readBufSize) + "-end"
	for i := range 2 {
		// A large frame someone waits for is gathered whole.
		id := "big" + strconv.Itoa(i)
		b := chatTo(t, from, to, id, big)
		var m struct {
			Payload string `json:"payload"`
			ID      string `json:"client_msg_id"`
		}
		if err := json.Unmarshal(b, &m); err != nil || m.Payload != big || m.ID != id {
			t.Fatalf("large frame %s arrived as %d bytes (%v), payload %d bytes", id, len(b), err, len(m.Payload))
		}

		// A large frame nobody waits for is skipped to its last byte:
		// once the client has read past its header (nothing else is due),
		// the next frame is matched intact.
		past := tap.arm(int64(len(big) / 2))
		if err := from.send(appendField(appendField(from.request("chat", to.name), "payload", big), "client_msg_id", "skipped")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-past:
		case <-time.After(10 * time.Second):
			t.Fatal("the client did not read the unawaited frame")
		}
		id = "small" + strconv.Itoa(i)
		if err := json.Unmarshal(chatTo(t, from, to, id, "hi"), &m); err != nil || m.Payload != "hi" || m.ID != id {
			t.Fatalf("small frame after a skipped one: %+v, %v", m, err)
		}
	}
}

func TestWSClient_AnswersTheHubsPings(t *testing.T) {
	uri := hubtest.Start(t, hub.Config{PingInterval: 5 * time.Millisecond, PongTimeout: 5 * time.Second})
	a, tap := dialTapped(t, uri, "wsc/pinged", 1)
	// The hub sends its next ping only after the last one's pong came back
	// with the ping's payload, so the fourth pong means three were taken.
	timeout := time.After(10 * time.Second)
	for range 4 {
		select {
		case <-tap.pongs:
		case <-timeout:
			t.Fatal("the client answered fewer than 4 pings in 10 s")
		}
	}
	if err := a.call(t.Context(), a.request("who_request", "System"), fields("type", "who_snapshot").in); err != nil {
		t.Fatalf("the socket did not outlive the pings: %v", err)
	}
}

func TestWSClient_ClosingHandshakeBothWays(t *testing.T) {
	uri := hubtest.Start(t, hub.Config{MaxClients: 1})
	a := mustDial(t, uri, "wsc/first")

	// The hub closes the socket beyond its capacity with a code and reason.
	_, err := dialAgent(t.Context(), uri, "wsc/second", registration{}, 0)
	if !errors.Is(err, errClosed) || !strings.Contains(err.Error(), "4013") {
		t.Fatalf("dial beyond capacity: %v, want the hub's close 4013", err)
	}

	// The client's close is answered by the hub's.
	a.c.close()
	<-a.c.done
	if !errors.Is(a.c.err, errClosed) {
		t.Fatalf("after close the reader ended with %v, want the hub's close frame", a.c.err)
	}
}
