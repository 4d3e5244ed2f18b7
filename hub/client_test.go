package hub

// Test clients over real sockets (github.com/coder/websocket), shared by the
// compatibility and malformed-input suites. Every helper is prefixed tc so
// it cannot collide with the hub's own conn tests.
//
// Each tcConn has one reader goroutine that owns the socket's read side and
// appends what arrives (frames, then at most one close) to a list guarded by
// mu; tests wait on that list with deadlines. Reads never take a deadline
// context themselves: coder/websocket closes the socket when a Read's
// context ends.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Waits of the socket helpers. The machine running CI may be busy, so the
// deadlines are generous; only the quiet period bounds how long a test
// waits for frames that must not come.
var (
	tcFrameTimeout = 10 * time.Second       // a frame that must arrive
	tcQuiet        = 150 * time.Millisecond // no frame for this long = nothing more is coming
	tcQuietMax     = 10 * time.Second       // cap on one quiet-period collection
)

// tcEvent is one thing that arrived on a test connection: a frame, or the
// end of the connection.
type tcEvent struct {
	Raw    []byte
	Binary bool
	Frame  map[string]any // decoded with UseNumber; nil if Raw is not a JSON object
	Closed bool           // the connection ended: Code and Reason say how
	Code   websocket.StatusCode
	Reason string
}

func (e tcEvent) String() string {
	if e.Closed {
		return fmt.Sprintf("close %d %q", e.Code, e.Reason)
	}
	return string(e.Raw)
}

// Type is the frame's type field, or "" for a close.
func (e tcEvent) Type() string {
	s, _ := e.Frame["type"].(string)
	return s
}

// Payload is the frame's payload when it is a string.
func (e tcEvent) Payload() string {
	s, _ := e.Frame["payload"].(string)
	return s
}

// tcConn is one client socket.
type tcConn struct {
	t     testing.TB
	Label string
	ws    *websocket.Conn

	mu      sync.Mutex
	events  []tcEvent
	next    int           // events before next were handed out
	changed chan struct{} // closed and replaced on every append
	done    chan struct{} // the reader goroutine ended
}

// tcServe serves a hub's handler on a loopback test server and returns its
// ws:// URL. The server is closed at the end of the test.
func tcServe(t testing.TB, h *Hub) string {
	t.Helper()
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// tcDial opens a client socket to url. The socket is closed at the end of
// the test if the test has not closed it.
func tcDial(t testing.TB, url, label string) *tcConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tcFrameTimeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("%s: dial %s: %v", label, url, err)
	}
	ws.SetReadLimit(64 << 20)
	c := &tcConn{t: t, Label: label, ws: ws, changed: make(chan struct{}), done: make(chan struct{})}
	go c.readLoop()
	t.Cleanup(func() {
		_ = ws.CloseNow()
		<-c.done
	})
	return c
}

func (c *tcConn) readLoop() {
	defer close(c.done)
	for {
		typ, data, err := c.ws.Read(context.Background())
		if err != nil {
			ev := tcEvent{Closed: true, Code: websocket.CloseStatus(err)}
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				ev.Reason = ce.Reason
			}
			c.add(ev)
			return
		}
		ev := tcEvent{Raw: data, Binary: typ == websocket.MessageBinary}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var m map[string]any
		if dec.Decode(&m) == nil {
			ev.Frame = m
		}
		c.add(ev)
	}
}

func (c *tcConn) add(ev tcEvent) {
	c.mu.Lock()
	c.events = append(c.events, ev)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// pending returns how many events arrived and were not handed out yet, and
// a channel closed at the next arrival.
func (c *tcConn) pending() (int, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events) - c.next, c.changed
}

// take hands out the events that arrived and were not handed out yet.
func (c *tcConn) take() []tcEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]tcEvent(nil), c.events[c.next:]...)
	c.next = len(c.events)
	return out
}

// SendJSON sends v as one text frame.
func (c *tcConn) SendJSON(v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatalf("%s: marshal: %v", c.Label, err)
	}
	c.SendText(string(b))
}

// SendText sends text as one text frame, byte for byte (it need not be JSON
// or even UTF-8).
func (c *tcConn) SendText(text string) { c.t.Helper(); c.write(websocket.MessageText, []byte(text)) }

// SendBinary sends data as one binary frame.
func (c *tcConn) SendBinary(data []byte) { c.t.Helper(); c.write(websocket.MessageBinary, data) }

func (c *tcConn) write(typ websocket.MessageType, data []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tcFrameTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, typ, data); err != nil {
		c.t.Fatalf("%s: write: %v", c.Label, err)
	}
}

// Close closes the socket from the client side with 1000 and waits until
// the reader goroutine has seen the end.
func (c *tcConn) Close() {
	c.t.Helper()
	_ = c.ws.Close(websocket.StatusNormalClosure, "")
	select {
	case <-c.done:
	case <-time.After(tcFrameTimeout):
		c.t.Fatalf("%s: the connection did not finish closing", c.Label)
	}
	c.take() // our own close is not something the hub sent
}

// Next returns the next event (a frame or the close), failing the test if
// nothing arrives within timeout.
func (c *tcConn) Next(timeout time.Duration) tcEvent {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		n, changed := c.pending()
		if n > 0 {
			c.mu.Lock()
			ev := c.events[c.next]
			c.next++
			c.mu.Unlock()
			return ev
		}
		select {
		case <-changed:
		case <-deadline:
			c.t.Fatalf("%s: no frame within %v", c.Label, timeout)
		}
	}
}

// NextFrame returns the next frame, failing the test on a close.
func (c *tcConn) NextFrame() tcEvent {
	c.t.Helper()
	ev := c.Next(tcFrameTimeout)
	if ev.Closed {
		c.t.Fatalf("%s: connection closed (%s) while a frame was expected", c.Label, ev)
	}
	return ev
}

// Until reads frames until one of type typ arrives and returns it with the
// frames skipped on the way.
func (c *tcConn) Until(typ string) (tcEvent, []tcEvent) {
	c.t.Helper()
	var skipped []tcEvent
	for {
		ev := c.NextFrame()
		if ev.Type() == typ {
			return ev, skipped
		}
		skipped = append(skipped, ev)
	}
}

// tcAnyReason makes ExpectClose check the close code only (the WebSocket
// library words the reason of a 1009 itself).
const tcAnyReason = "\x00any"

// ExpectClose reads until the connection ends and checks the close code
// and reason the hub sent. It returns the frames that came before.
func (c *tcConn) ExpectClose(code websocket.StatusCode, reason string) []tcEvent {
	c.t.Helper()
	var before []tcEvent
	for {
		ev := c.Next(tcFrameTimeout)
		if !ev.Closed {
			before = append(before, ev)
			continue
		}
		if ev.Code != code || (reason != tcAnyReason && ev.Reason != reason) {
			c.t.Errorf("%s: closed with %d %q, want %d %q", c.Label, ev.Code, ev.Reason, code, reason)
		}
		return before
	}
}

// ExpectQuiet fails the test if anything arrives within the quiet period.
func (c *tcConn) ExpectQuiet() {
	c.t.Helper()
	if extra := tcCollect([]*tcConn{c}, nil)[c]; len(extra) > 0 {
		c.t.Errorf("%s: unexpected frames: %v", c.Label, extra)
	}
}

// tcCollect waits until every connection in want has received at least
// want[c] events (or tcFrameTimeout passed), then until no event has arrived
// on any of conns for tcQuiet (at most tcQuietMax), and hands out what
// arrived on each connection. This mirrors how the traces were recorded:
// after every send, the recorder waited until no socket had received a
// frame for 0.3 s.
func tcCollect(conns []*tcConn, want map[*tcConn]int) map[*tcConn][]tcEvent {
	deadline := time.Now().Add(tcFrameTimeout)
	for _, c := range conns {
		for {
			n, changed := c.pending()
			if n >= want[c] || time.Now().After(deadline) {
				break
			}
			select {
			case <-changed:
			case <-time.After(time.Until(deadline)):
			}
		}
	}
	quietEnd := time.Now().Add(tcQuietMax)
	counts := make([]int, len(conns))
	lastChange := time.Now()
	for time.Since(lastChange) < tcQuiet && time.Now().Before(quietEnd) {
		time.Sleep(10 * time.Millisecond)
		for i, c := range conns {
			if n, _ := c.pending(); n != counts[i] {
				counts[i], lastChange = n, time.Now()
			}
		}
	}
	out := make(map[*tcConn][]tcEvent, len(conns))
	for _, c := range conns {
		out[c] = c.take()
	}
	return out
}
