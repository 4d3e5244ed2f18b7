package hub_test

// TLS over real sockets (issue 23 item 6; docs/security.md, "TLS"): the
// hub's listener serves a certs.Reloader's pair, and the Go SDK dials it
// with the CA it is given. No mocks: every handshake is crypto/tls.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/synapse-hub/synapse/certs"
	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

// selfSigned writes a CA and its certificates in a fresh folder.
func selfSigned(t *testing.T) certs.Written {
	t.Helper()
	w, err := certs.SelfSigned(t.TempDir(), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// tlsHub serves a hub over TLS from w's pair and returns its wss:// URI
// and the reloader behind its listener.
func tlsHub(t *testing.T, cfg hub.Config, w certs.Written) (string, *certs.Reloader) {
	t.Helper()
	r, err := certs.NewReloader(w.Cert, w.Key, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return hubtest.StartTLS(t, cfg, certs.ServerConfig(r, nil)), r
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func dial(t *testing.T, o client.Options) (*client.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o.NoReconnect = true
	c, err := client.Dial(ctx, o)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func claimRelease(t *testing.T, c *client.Client, task string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{"src/" + task}}); err != nil {
		t.Fatalf("claim %s: %v", task, err)
	}
	if _, err := c.Release(ctx, task, client.ReleaseOptions{}); err != nil {
		t.Fatalf("release %s: %v", task, err)
	}
}

// A wss:// round trip with the hub's CA, given as Options.CA and as
// SYNAPSE_CA: a claim granted and released over TLS.
func TestTLS_RoundTripWithTheRightCA_Issue23_TLS(t *testing.T) {
	w := selfSigned(t)
	uri, _ := tlsHub(t, hub.Config{}, w)
	if !strings.HasPrefix(uri, "wss://") {
		t.Fatalf("uri %s", uri)
	}
	c, err := dial(t, client.Options{URI: uri, Name: "tls/alpha", CA: w.CA})
	if err != nil {
		t.Fatalf("dial with the right CA: %v", err)
	}
	claimRelease(t, c, "T1")

	t.Setenv("SYNAPSE_CA", w.CA)
	c2, err := dial(t, client.Options{URI: uri, Name: "tls/bravo"})
	if err != nil {
		t.Fatalf("dial with SYNAPSE_CA: %v", err)
	}
	claimRelease(t, c2, "T2")
}

// A hub whose certificate another CA signed is refused, and the error
// says which flag and variable give the right one.
func TestTLS_WrongCAIsRefusedNamingCAFlag_Issue23_TLS(t *testing.T) {
	uri, _ := tlsHub(t, hub.Config{}, selfSigned(t))
	other := selfSigned(t)
	for name, o := range map[string]client.Options{
		"wrong CA":       {URI: uri, Name: "tls/alpha", CA: other.CA},
		"system's roots": {URI: uri, Name: "tls/alpha"},
	} {
		t.Setenv("SYNAPSE_CA", "")
		_, err := dial(t, o)
		if err == nil {
			t.Fatalf("%s: dial succeeded", name)
		}
		var unknown x509.UnknownAuthorityError
		if !errors.Is(err, client.ErrUnreachable) || !errors.As(err, &unknown) {
			t.Errorf("%s: %v; want ErrUnreachable wrapping x509.UnknownAuthorityError", name, err)
		}
		for _, want := range []string{"--ca FILE", "SYNAPSE_CA"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not name %s", name, err, want)
			}
		}
	}
	_, err := dial(t, client.Options{URI: uri, Name: "tls/alpha", CA: filepath.Join(t.TempDir(), "none.pem")})
	if err == nil || !strings.Contains(err.Error(), "SYNAPSE_CA") {
		t.Errorf("a CA file that is not there: %v; want an error naming --ca, SYNAPSE_CA", err)
	}
}

// ws:// to a TLS hub, and wss:// to a plain one, fail saying which scheme
// to use.
func TestTLS_WrongSchemeFailsClearly_Issue23_TLS(t *testing.T) {
	w := selfSigned(t)
	uri, _ := tlsHub(t, hub.Config{}, w)
	plain := "ws://" + strings.TrimPrefix(uri, "wss://")
	_, err := dial(t, client.Options{URI: plain, Name: "tls/alpha", CA: w.CA})
	if err == nil || !errors.Is(err, client.ErrUnreachable) || !strings.Contains(err.Error(), "the hub speaks TLS: use wss://") {
		t.Errorf("ws:// to a TLS hub: %v; want it to say use wss://", err)
	}
	plainHub := hubtest.Start(t, hub.Config{})
	_, err = dial(t, client.Options{URI: "wss://" + strings.TrimPrefix(plainHub, "ws://"), Name: "tls/alpha", CA: w.CA})
	if err == nil || !strings.Contains(err.Error(), "the hub does not speak TLS: use ws://") {
		t.Errorf("wss:// to a plain hub: %v; want it to say use ws://", err)
	}
}

// Reloading: a new pair in the files serves every new connection (its
// CA now trusted, the old one not), the sockets opened before keep
// working, and a pair that does not load leaves the hub on the one it has.
func TestTLS_ReloadServesNewConnections_OldSocketsKeepWorking_BrokenPairKeepsOld_Issue23_TLS(t *testing.T) {
	dir := t.TempDir()
	first, err := certs.SelfSigned(dir, certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	oldCA := filepath.Join(t.TempDir(), "old-ca.pem")
	copyFile(t, first.CA, oldCA)
	uri, r := tlsHub(t, hub.Config{}, first)
	before, err := dial(t, client.Options{URI: uri, Name: "tls/before", CA: oldCA})
	if err != nil {
		t.Fatal(err)
	}

	second, err := certs.SelfSigned(dir, certs.Options{}) // a new CA and pair, over the same files
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if _, err := dial(t, client.Options{URI: uri, Name: "tls/old-ca", CA: oldCA}); err == nil {
		t.Fatal("a new connection trusting only the old CA got in after the reload: the hub still serves the old certificate")
	}
	after, err := dial(t, client.Options{URI: uri, Name: "tls/after", CA: second.CA})
	if err != nil {
		t.Fatalf("a new connection with the new CA: %v", err)
	}
	claimRelease(t, before, "T-before") // opened before the reload: still served
	claimRelease(t, after, "T-after")

	// A broken pair: the certificate file is garbage, then a key that is
	// not the certificate's. Each reload fails and says why; the hub
	// serves the second pair still.
	os.WriteFile(second.Cert, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), 0o644)
	if err := r.Reload(); !errors.Is(err, certs.ErrNoPair) {
		t.Fatalf("reload of a garbage certificate: %v; want ErrNoPair", err)
	}
	third, err := certs.SelfSigned(t.TempDir(), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, third.Cert, second.Cert) // the key stays the second's: a mismatched pair
	if err := r.Reload(); !errors.Is(err, certs.ErrNoPair) {
		t.Fatalf("reload of a mismatched pair: %v; want ErrNoPair", err)
	}
	still, err := dial(t, client.Options{URI: uri, Name: "tls/still", CA: second.CA})
	if err != nil {
		t.Fatalf("after broken reloads the hub should serve the last good pair: %v", err)
	}
	claimRelease(t, still, "T-still")
	claimRelease(t, before, "T-before-2")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// /metrics with Config.MetricsToken: 401 without the Bearer token (and
// with a wrong one), 200 with it; /health stays open.
func TestTLS_MetricsTokenRequired_401Without_200With_Issue23_TLS(t *testing.T) {
	w := selfSigned(t)
	uri, _ := tlsHub(t, hub.Config{MetricsToken: "m-secret"}, w)
	hc, err := client.Options{CA: w.CA}.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	base := "https://" + strings.TrimPrefix(uri, "wss://")
	get := func(path, auth string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s over https: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics", ""); code != http.StatusUnauthorized || !strings.Contains(body, "--metrics-token") {
		t.Errorf("/metrics without a token: %d %q; want 401 naming --metrics-token", code, body)
	}
	if code, _ := get("/metrics", "Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a wrong token: %d; want 401", code)
	}
	if code, body := get("/metrics", "Bearer m-secret"); code != http.StatusOK || !strings.Contains(body, "synapse_") {
		t.Errorf("/metrics with the token: %d; want 200 and the metrics", code)
	}
	if code, _ := get("/health", ""); code != http.StatusOK {
		t.Errorf("/health: %d; want 200 without a token", code)
	}
}

// Two hubs over wss://: syn-b forwards its agents' claims in namespace
// proj to syn-a, which requires peer hubs' client certificates. With its
// client certificate syn-b's forward is granted by syn-a; a peer socket
// without one is closed 4010 saying what to give.
func TestTLS_FederationOverWSS_PeerClientCertRequired_Issue23_TLS(t *testing.T) {
	w := selfSigned(t)
	serving, err := certs.NewReloader(w.Cert, w.Key, quiet())
	if err != nil {
		t.Fatal(err)
	}
	clientPair, err := certs.NewReloader(w.ClientCert, w.ClientKey, quiet())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := certs.LoadPool(w.CA)
	if err != nil {
		t.Fatal(err)
	}
	peerTLS, err := certs.ClientConfig(w.CA, clientPair)
	if err != nil {
		t.Fatal(err)
	}
	mesh := hubtest.Mesh("proj=syn-a")
	uris := hubtest.StartFederationTLS(t, []string{"syn-a", "syn-b"},
		func(string) *tls.Config { return certs.ServerConfig(serving, pool) },
		func(id string, uris map[string]string) hub.Config {
			c := mesh(id, uris)
			c.Federation.TLS = peerTLS
			c.PeerClientCert = true
			return c
		})
	agent, err := dial(t, client.Options{URI: uris["syn-b"], Name: "proj/alpha", CA: w.CA})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := agent.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src/a"}})
	if err != nil {
		t.Fatalf("claim through syn-b: %v", err)
	}
	if cl.HubID != "syn-a" {
		t.Fatalf("granted by %q; want the owner syn-a, over the wss:// link", cl.HubID)
	}

	// A peer's hello over TLS without a client certificate.
	noCert, err := certs.ClientConfig(w.CA, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = noCert
	conn, _, err := websocket.Dial(ctx, uris["syn-a"], &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	hello := `{"type":"` + federation.TypeHello + `","from_hub":"syn-b","to_hub":"syn-a","token":"tok-syn-b","timestamp":1}`
	if err := conn.Write(ctx, websocket.MessageText, []byte(hello)); err != nil {
		t.Fatal(err)
	}
	for {
		_, _, err = conn.Read(ctx)
		if err != nil {
			break
		}
	}
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4010 || ce.Reason != hub.CloseNoPeerCert {
		t.Fatalf("a peer hello without a client certificate: %v; want close 4010 %q", err, hub.CloseNoPeerCert)
	}
}

// BenchmarkTLS measures what TLS costs a Go SDK agent against an
// in-process hub: a connection (dial, handshake, registration, close) and
// a claim+release cycle, plain ws:// against wss:// (ECDSA P-256, TLS 1.3).
func BenchmarkTLS(b *testing.B) {
	w, err := certs.SelfSigned(b.TempDir(), certs.Options{})
	if err != nil {
		b.Fatal(err)
	}
	r, err := certs.NewReloader(w.Cert, w.Key, quiet())
	if err != nil {
		b.Fatal(err)
	}
	hubs := []struct{ name, uri string }{
		{"plain", hubtest.Start(b, hub.Config{Logger: quiet()})},
		{"tls", hubtest.StartTLS(b, hub.Config{Logger: quiet()}, certs.ServerConfig(r, nil))},
	}
	ctx := context.Background()
	for _, h := range hubs {
		b.Run("connect/"+h.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				c, err := client.Dial(ctx, client.Options{URI: h.uri, Name: "bench/c", CA: w.CA, NoReconnect: true})
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
		b.Run("claim_release/"+h.name, func(b *testing.B) {
			c, err := client.Dial(ctx, client.Options{URI: h.uri, Name: "bench/a", CA: w.CA, NoReconnect: true})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			for b.Loop() {
				if _, err := c.Claim(ctx, client.ClaimRequest{TaskID: "T", Paths: []string{"src/a"}}); err != nil {
					b.Fatal(err)
				}
				if _, err := c.Release(ctx, "T", client.ReleaseOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
