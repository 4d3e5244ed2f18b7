// Package hubtest starts in-process hubs over real sockets for the tests of
// the packages built on the hub (client, mcpserver, the CLI).
package hubtest

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/hub"
)

// Start serves a hub configured by cfg on a loopback port for the test's
// length and returns its ws:// URI. Logs are discarded unless cfg has a
// Logger.
func Start(t testing.TB, cfg hub.Config) string {
	t.Helper()
	ln := listen(t)
	serve(t, cfg, ln)
	return "ws://" + ln.Addr().String()
}

// StartTLS is Start over TLS: the listener serves tlsCfg (a
// certs.ServerConfig), and the URI is wss://.
func StartTLS(t testing.TB, cfg hub.Config, tlsCfg *tls.Config) string {
	t.Helper()
	ln := listen(t)
	serve(t, cfg, tls.NewListener(ln, tlsCfg))
	return "wss://" + ln.Addr().String()
}

// StartFederation serves one hub per id, each configured by cfg(id, uris)
// with its HubID set to id. Every listener is open before the first hub
// starts, so each config can name the others as peers by URI. It returns
// the URIs by hub id.
func StartFederation(t testing.TB, ids []string, cfg func(id string, uris map[string]string) hub.Config) map[string]string {
	t.Helper()
	return StartFederationTLS(t, ids, nil, cfg)
}

// StartFederationTLS is StartFederation with every hub serving
// serverTLS(id) (nil: plain ws://), its URI then wss://.
func StartFederationTLS(t testing.TB, ids []string, serverTLS func(id string) *tls.Config, cfg func(id string, uris map[string]string) hub.Config) map[string]string {
	t.Helper()
	lns := make(map[string]net.Listener, len(ids))
	uris := make(map[string]string, len(ids))
	for _, id := range ids {
		lns[id] = listen(t)
		uris[id] = "ws://" + lns[id].Addr().String()
		if serverTLS != nil {
			uris[id] = "wss://" + lns[id].Addr().String()
			lns[id] = tls.NewListener(lns[id], serverTLS(id))
		}
	}
	for _, id := range ids {
		c := cfg(id, uris)
		c.HubID = id
		serve(t, c, lns[id])
	}
	return uris
}

// Mesh configures hubs that share one ownership map (NS=HUB_ID specs),
// each forwarding to every other and accepting each (hub X presents
// "tok-X"): a federation as an operator would set it up.
func Mesh(owners ...string) func(id string, uris map[string]string) hub.Config {
	return func(id string, uris map[string]string) hub.Config {
		fc := federation.Config{
			Owners:         owners,
			ClaimPeers:     map[string]string{},
			ClaimPeerToken: "tok-" + id,
			PeerTokens:     map[string]string{},
			ForwardTimeout: 5 * time.Second,
		}
		for peer, uri := range uris {
			if peer != id {
				fc.ClaimPeers[peer] = uri
				fc.PeerTokens[peer] = "tok-" + peer
			}
		}
		return hub.Config{Federation: fc}
	}
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() }) // a listener whose hub never started
	return ln
}

// serve runs a hub on ln until the test ends.
func serve(t testing.TB, cfg hub.Config, ln net.Listener) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h, err := hub.New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h.Handler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // failed TLS handshakes are what some tests make
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.Close(ctx)
		srv.Close()
	})
}

// Agent holds name online at uri for the test's length, as a running agent
// does, with the SDK's own fan-out.
func Agent(t testing.TB, uri, name string) *client.Client {
	return Watcher(t, uri, name, client.FanoutOwn)
}

// Watcher is Agent with the fan-out given: a test that watches other
// agents' grants asks for their broadcasts.
func Watcher(t testing.TB, uri, name string, fanout client.Fanout) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URI: uri, Name: name, Fanout: fanout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
