package client

// An in-process hub for the tests: hub.New behind httptest, with a
// listener that remembers its connections so a test can drop them.

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/journal"
)

// testTimeout bounds anything a test waits for; the machine may be busy.
const testTimeout = 20 * time.Second

type testHub struct {
	h   *hub.Hub
	uri string
	ln  *trackingListener
}

// trackingListener records accepted connections so a test can cut them
// as a network failure would.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// dropAll closes every server-side connection at the TCP level.
func (l *trackingListener) dropAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// startHub serves a fresh hub; withJournal backs it with a journal file in
// a temp folder.
func startHub(t testing.TB, cfg hub.Config, withJournal bool) *testHub {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	var store *journal.Store
	if withJournal {
		var err error
		store, err = journal.Open(filepath.Join(t.TempDir(), "hub.db"), journal.Options{HubID: cfg.HubID})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Journal = store
	}
	h, err := hub.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &trackingListener{Listener: inner}
	srv := httptest.NewUnstartedServer(h.Handler())
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.Close(ctx)
		srv.Close()
		if store != nil {
			store.Close()
		}
	})
	return &testHub{h: h, uri: "ws://" + ln.Addr().String(), ln: ln}
}

// dial connects name to the hub; the client is closed when the test ends.
func (th *testHub) dial(t testing.TB, name string, mods ...func(*Options)) *Client {
	t.Helper()
	o := Options{URI: th.uri, Name: name}
	for _, m := range mods {
		m(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := Dial(ctx, o)
	if err != nil {
		t.Fatalf("dial %s: %v", name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// waitUntil waits for cond, checking every few milliseconds.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recv reads one frame from a subscription.
func recv(t testing.TB, ch <-chan Frame, what string) Frame {
	t.Helper()
	select {
	case f, ok := <-ch:
		if !ok {
			t.Fatalf("%s: subscription closed", what)
		}
		return f
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
	return Frame{}
}
