package client

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/hub"
)

// A Background client returns before any hub answers, fails calls at once
// while it is down (saying why), and connects as soon as a hub listens
// (issue 21 item 6: synapse mcp answers its own client whatever the hub
// does).
func TestBackground_ConnectsWhenTheHubComesUp_Issue21_6(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there yet
	c, err := Dial(context.Background(), Options{URI: "ws://" + addr, Name: "p/bg", Background: true, ReconnectMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("a Background dial failed: %v", err)
	}
	defer c.Close()
	if _, err := c.State(testCtx(t)); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("a call with no hub = %v; want ErrDisconnected at once", err)
	}
	waitUntil(t, "the reason to say the hub is unreachable", func() bool { return errors.Is(c.DownReason(), ErrUnreachable) })

	h, err := hub.New(hub.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := httptest.NewUnstartedServer(h.Handler())
	srv.Listener = ln
	srv.Start()
	defer func() { h.Close(context.Background()); srv.Close() }()
	waitUntil(t, "the client to connect", func() bool { return c.DownReason() == nil })
	if _, err := c.State(testCtx(t)); err != nil {
		t.Fatalf("a call once connected: %v", err)
	}
}

// A Background client whose name is held does not take it over (it never
// had it): it says the name is taken and binds once the holder leaves.
func TestBackground_TakenNameIsNotTakenOver_Issue21_6(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	holder := th.dial(t, "p/a")
	c, err := Dial(context.Background(), Options{URI: th.uri, Name: "p/a", Background: true, ReconnectMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var rej *RejectedError
	waitUntil(t, "the reason to say the name is taken", func() bool { return errors.As(c.DownReason(), &rej) })
	if _, err := holder.State(testCtx(t)); err != nil {
		t.Fatalf("the holder lost its name to a client that never had it: %v", err)
	}
	holder.Close()
	waitUntil(t, "the background client to bind the freed name", func() bool { return c.DownReason() == nil })
	if c.Stats().Reconnects != 0 {
		t.Errorf("a first connection counted as a reconnect: %+v", c.Stats())
	}
}
