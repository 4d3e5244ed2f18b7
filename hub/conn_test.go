package hub

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"

	"github.com/coder/websocket"
	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// testDeadline bounds every wait for a frame: generous, since the suite must
// pass on a busy 2-core machine; a passing test never waits for it.
const testDeadline = 10 * time.Second

// testHub is a hub served over a real socket by httptest.
type testHub struct {
	t   *testing.T
	h   *Hub
	srv *httptest.Server
	url string
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startHub(t *testing.T, cfg Config) *testHub {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler())
	th := &testHub{t: t, h: h, srv: srv, url: "ws" + strings.TrimPrefix(srv.URL, "http")}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Close(ctx)
		srv.Close()
	})
	return th
}

// tconn is one test client socket. Frames are read by a background
// goroutine into a channel, so a test can wait for the frame it expects
// with a deadline and no sleeps.
type tconn struct {
	t      *testing.T
	name   string // the sender of its first frame: the name it binds
	c      *websocket.Conn
	frames chan map[string]any
	mu     sync.Mutex
	err    error // why reading ended
	done   chan struct{}
}

func (th *testHub) dial() *tconn {
	th.t.Helper()
	return th.dialWith(nil)
}

// dialWith dials with the upgrade request's headers set to header.
func (th *testHub) dialWith(header http.Header) *tconn {
	th.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	c, _, err := websocket.Dial(ctx, th.url, &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		th.t.Fatalf("dial: %v", err)
	}
	c.SetReadLimit(64 << 20)
	tc := &tconn{t: th.t, c: c, frames: make(chan map[string]any, 4096), done: make(chan struct{})}
	go tc.readLoop()
	th.t.Cleanup(func() { _ = c.CloseNow() })
	return tc
}

func (tc *tconn) readLoop() {
	defer close(tc.done)
	for {
		_, data, err := tc.c.Read(context.Background())
		if err != nil {
			tc.mu.Lock()
			tc.err = err
			tc.mu.Unlock()
			return
		}
		var m map[string]any
		d := json.NewDecoder(strings.NewReader(string(data)))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			tc.t.Errorf("hub sent non-JSON frame %q: %v", data, err)
			continue
		}
		tc.frames <- m
	}
}

// connect dials and reads the welcome of an open hub.
func (th *testHub) connect() *tconn {
	tc := th.dial()
	tc.expect("welcome")
	return tc
}

// join connects and registers name, reading its own joined presence.
func (th *testHub) join(name string, extra ...map[string]any) *tconn {
	tc := th.connect()
	f := map[string]any{"sender": name, "target": "System", "type": "heartbeat", "payload": "online", "timestamp": nowTS()}
	for _, e := range extra {
		for k, v := range e {
			f[k] = v
		}
	}
	tc.send(f)
	tc.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == name && m["event"] == "joined" })
	return tc
}

func nowTS() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func (tc *tconn) send(f map[string]any) {
	tc.t.Helper()
	if n, ok := f["sender"].(string); ok && tc.name == "" {
		tc.name = n
	}
	b, err := json.Marshal(f)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.sendRaw(string(b))
}

func (tc *tconn) sendRaw(s string) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	if err := tc.c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		tc.t.Fatalf("send: %v", err)
	}
}

// next returns the next frame, failing the test after the deadline.
func (tc *tconn) next() map[string]any {
	tc.t.Helper()
	select {
	case m := <-tc.frames:
		return m
	case <-tc.done:
		select {
		case m := <-tc.frames:
			return m
		default:
		}
		tc.t.Fatalf("connection ended while waiting for a frame: %v", tc.readErr())
	case <-time.After(testDeadline):
		tc.t.Fatalf("no frame within %v", testDeadline)
	}
	return nil
}

// expect reads until a frame of type typ arrives and returns it.
func (tc *tconn) expect(typ string) map[string]any {
	tc.t.Helper()
	return tc.expectWhere(typ, nil)
}

func (tc *tconn) expectWhere(typ string, ok func(map[string]any) bool) map[string]any {
	tc.t.Helper()
	deadline := time.After(testDeadline)
	for {
		select {
		case m := <-tc.frames:
			if m["type"] == typ && (ok == nil || ok(m)) {
				return m
			}
		case <-tc.done:
			select {
			case m := <-tc.frames:
				if m["type"] == typ && (ok == nil || ok(m)) {
					return m
				}
				continue
			default:
			}
			tc.t.Fatalf("connection ended while waiting for %s: %v", typ, tc.readErr())
		case <-deadline:
			tc.t.Fatalf("no %s frame within %v", typ, testDeadline)
		}
	}
}

// expectClose waits for the hub to close the socket and checks the code
// and reason.
func (tc *tconn) expectClose(code websocket.StatusCode, reason string) {
	tc.t.Helper()
	select {
	case <-tc.done:
	case <-time.After(testDeadline):
		tc.t.Fatalf("socket not closed within %v (want %d %q)", testDeadline, code, reason)
	}
	err := tc.readErr()
	var ce websocket.CloseError
	if !errors.As(err, &ce) {
		tc.t.Fatalf("socket ended with %v, want close %d %q", err, code, reason)
	}
	if ce.Code != code || ce.Reason != reason {
		tc.t.Fatalf("close = %d %q, want %d %q", ce.Code, ce.Reason, code, reason)
	}
}

func (tc *tconn) readErr() error {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.err
}

// quiet asserts that no frame arrives for d (used only to check that
// something does NOT happen, never for ordering).
func (tc *tconn) quiet(d time.Duration) {
	tc.t.Helper()
	select {
	case m := <-tc.frames:
		tc.t.Fatalf("unexpected frame %v", m)
	case <-time.After(d):
	}
}

// sync makes sure everything caused by earlier sends has been queued to
// this socket: the reply to a who_request comes after them.
func (tc *tconn) sync(name string) {
	tc.t.Helper()
	tc.send(map[string]any{"sender": name, "type": "who_request", "target": "System", "payload": "who"})
	tc.expect("who_snapshot")
}

// close leaves the hub the way our client does: `leave`, then the close
// once the hub has freed the name, so a test may rejoin the name at once.
func (tc *tconn) close() {
	b, _ := json.Marshal(map[string]any{"type": "leave", "sender": tc.name})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	if tc.name != "" && tc.c.Write(ctx, websocket.MessageText, b) == nil {
		select {
		case <-tc.done: // the hub closes the socket after `left`
		case <-ctx.Done():
		}
	}
	_ = tc.c.Close(websocket.StatusNormalClosure, "")
}

func num(t *testing.T, v any) float64 {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v (%T) is not a number", v, v)
	}
	f, err := n.Float64()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type limitsT = coordLimits

func defaultLimitsWith(edit func(*limitsT)) limitsT {
	l := coordDefaultLimits()
	edit(&l)
	return l
}

type coordLimits = coord.Limits

var coordDefaultLimits = coord.DefaultLimits

// A peer that stops answering pings (a hung or vanished process that never
// closed its socket) is reaped after the pong timeout, and its name is
// freed: the others see it leave (PROTOCOL.md §1.1).
func TestKeepalive_SilentPeerIsReapedAndItsNameFreed(t *testing.T) {
	// No presence window: the join and the reaping leave, ~0.1 s apart,
	// must not be coalesced into nothing.
	th := startHub(t, Config{PingInterval: 30 * time.Millisecond, PongTimeout: 60 * time.Millisecond, PresenceWindow: time.Microsecond})
	watcher := th.join("p/watcher")
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	nc, _, _, err := ws.Dial(ctx, th.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	reg := `{"sender":"p/hung","target":"System","type":"heartbeat","payload":"online"}`
	if err := wsutil.WriteClientText(nc, []byte(reg)); err != nil {
		t.Fatal(err)
	}
	watcher.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "p/hung" && m["event"] == "joined" })
	// p/hung never reads again, so it never answers a ping.
	watcher.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "p/hung" && m["event"] == "left" })
	if n := counterValue(t, th.h.m.reaped); n != 1 {
		t.Fatalf("reaped counter = %v, want 1", n)
	}
	// The watcher, which answers pings, is still served.
	watcher.sync("p/watcher")
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
