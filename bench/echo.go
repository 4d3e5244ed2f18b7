package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
)

// The floor of a round trip: a bare WebSocket echo server (read a message,
// write it back, on the same goroutine, nothing else) measured with the
// load client. On a given machine no request/reply hub can cost less CPU
// per round trip than this, so `bench load --floor` prints it beside the
// hub's figures: a claim+release cycle is two round trips.

// ServeEcho serves the echo on ln until it fails.
func ServeEcho(ln net.Listener) error {
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nc, rw, _, err := ws.UpgradeHTTP(r, w)
		if err != nil {
			return
		}
		go func() {
			defer nc.Close()
			rd := struct {
				io.Reader
				io.Writer
			}{rw.Reader, nc}
			for {
				b, op, err := wsutil.ReadClientData(rd)
				if err != nil {
					return
				}
				if err := wsutil.WriteServerMessage(nc, op, b); err != nil {
					return
				}
			}
		}()
	})}
	return srv.Serve(ln)
}

// MeasureEcho sends n claim-sized messages one at a time to the echo at
// uri and returns the server's CPU µs per round trip (read from /proc for
// pid) and the round trips per second.
func MeasureEcho(ctx context.Context, uri string, pid, n int) (usPerRoundTrip, perSecond float64, err error) {
	c, err := dialWS(ctx, ws.Dialer{}, uri)
	if err != nil {
		return 0, 0, fmt.Errorf("bench: echo: %w", err)
	}
	defer c.close()
	msg := []byte(`{"sender":"load/a0","target":"System","type":"claim","task_id":"load/a0/T","paths":["load/a0"]}`)
	run := func(n int) error {
		for range n {
			w := newWaiter(func([]byte) bool { return true })
			c.await(w)
			if err := c.sendText(msg); err != nil {
				return err
			}
			if err := c.wait(ctx, w); err != nil {
				return err
			}
		}
		return nil
	}
	if err := run(n / 10); err != nil { // warm up
		return 0, 0, fmt.Errorf("bench: echo: %w", err)
	}
	cpu0, t0 := procCPU(pid), time.Now()
	if err := run(n); err != nil {
		return 0, 0, fmt.Errorf("bench: echo: %w", err)
	}
	el := time.Since(t0).Seconds()
	if pid == os.Getpid() {
		return 0, float64(n) / el, nil // in-process: CPU not separable
	}
	return (procCPU(pid) - cpu0) / float64(n) * 1e6, float64(n) / el, nil
}
