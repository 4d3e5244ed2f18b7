package main

// TLS of `synapse hub` and of the CLI (issue 23 item 6; docs/security.md,
// "TLS"): real processes, real handshakes.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/synapse-hub/synapse/certs"
	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster/clustertest"
	"github.com/synapse-hub/synapse/mcpserver"
	"github.com/synapse-hub/synapse/mcpserver/mcptest"
)

// A hub off loopback without TLS warns, saying what to do; on loopback
// or with TLS it does not (the decision the banner and stderr print).
func TestHub_PlaintextWarningOffLoopback_Issue23_TLS(t *testing.T) {
	for _, c := range []struct {
		host  string
		tls   bool
		warns bool
	}{
		{"127.0.0.1", false, false}, {"localhost", false, false}, {"::1", false, false}, {"127.0.0.2", false, false},
		{"0.0.0.0", false, true}, {"192.0.2.10", false, true}, {"::", false, true}, {"hub.example", false, true},
		{"0.0.0.0", true, false}, {"192.0.2.10", true, false},
	} {
		w := plaintextWarning(c.host, c.tls)
		if (w != "") != c.warns {
			t.Errorf("host %s, tls %v: warning %q; want one: %v", c.host, c.tls, w, c.warns)
		}
		if c.warns {
			for _, want := range []string{"WARNING", c.host, "without TLS", "--tls-cert", "synapse tls selfsigned", "127.0.0.1"} {
				if !strings.Contains(w, want) {
					t.Errorf("host %s: the warning %q does not say %q", c.host, w, want)
				}
			}
		}
	}
}

// The banner's tls line says what is served and how it reloads.
func TestHub_TLSBannerLine_Issue23_TLS(t *testing.T) {
	var off *hubTLS
	if d := off.describe(); !strings.Contains(d, "tls: off") || off.scheme() != "ws" || off.httpScheme() != "http" {
		t.Errorf("no TLS: %q %s %s", d, off.scheme(), off.httpScheme())
	}
	w, err := certs.SelfSigned(t.TempDir(), certs.Options{Hosts: []string{"hub.example"}})
	if err != nil {
		t.Fatal(err)
	}
	on, err := tlsFlags{cert: w.Cert, key: w.Key, clientCA: w.CA, reloadInterval: time.Second}.setUp(quietLog())
	if err != nil {
		t.Fatal(err)
	}
	d := on.describe()
	for _, want := range []string{w.Cert, "hub.example", "SIGHUP", "every 1s", "--tls-client-ca"} {
		if !strings.Contains(d, want) {
			t.Errorf("banner %q does not say %q", d, want)
		}
	}
	if on.scheme() != "wss" || on.httpScheme() != "https" || !on.requirePeerCert {
		t.Errorf("TLS on: %s %s peer certs %v", on.scheme(), on.httpScheme(), on.requirePeerCert)
	}
}

// Each TLS flag mistake is a usage error (exit 2) before the hub
// listens, saying what to do.
func TestHub_TLSFlagMistakes_Issue23_TLS(t *testing.T) {
	isolate(t)
	w, err := certs.SelfSigned(t.TempDir(), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(t.TempDir(), "open-key.pem")
	copyFileMode(t, w.Key, open, 0o644)
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	os.WriteFile(garbage, []byte("not a certificate"), 0o600)
	tokFile := filepath.Join(t.TempDir(), "metrics-token")
	os.WriteFile(tokFile, []byte("m\n"), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", w.Cert}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-client-ca", w.CA}, "needs --tls-cert"},
		{[]string{"--tls-cert", w.Cert, "--tls-key", open}, "chmod 600"},
		{[]string{"--tls-cert", garbage, "--tls-key", w.Key}, "cannot load the certificate pair"},
		{[]string{"--tls-cert", w.Cert, "--tls-key", w.Key, "--tls-client-ca", garbage}, "no CA certificate"},
		{[]string{"--tls-client-cert", w.ClientCert}, "--tls-client-cert and --tls-client-key go together"},
		{[]string{"--ca", garbage}, "--ca"},
		{[]string{"--etcd-cert", w.ClientCert}, "--etcd-cert and --etcd-key go together"},
		{[]string{"--etcd-ca", garbage}, "--etcd-ca"},
		{[]string{"--tls-reload-interval", "-1s", "--tls-cert", w.Cert, "--tls-key", w.Key}, "--tls-reload-interval"},
		{[]string{"--metrics-token", "a", "--metrics-token-file", tokFile}, "once"},
	} {
		var out, errb bytes.Buffer
		code := runHub(append([]string{"--no-db", "--port", "1"}, c.args...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("synapse hub %v: exit %d, %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

func copyFileMode(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(to, mode)
}

// tlsProc is a `synapse hub` process and what it printed.
type tlsProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stdout strings.Builder
	stderr strings.Builder
}

func (p *tlsProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String() + p.stderr.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// startTLSHub runs `synapse hub` with args and returns once its banner is
// printed whole (its last line, the dashboard's, is there).
func startTLSHub(t *testing.T, bin string, args ...string) *tlsProc {
	t.Helper()
	p := &tlsProc{cmd: exec.Command(bin, append([]string{"hub"}, args...)...)}
	p.cmd.Env = append(os.Environ(), "SYNAPSE_TOKEN=", "SYNAPSE_CA=")
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = lockedWriter{&p.mu, &p.stderr}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Signal(syscall.SIGTERM); p.cmd.Wait() })
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() {
			p.mu.Lock()
			p.stdout.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if !said && strings.HasPrefix(sc.Text(), "dashboard: ") {
				said = true
				close(up)
			}
		}
	}()
	select {
	case <-up:
	case <-time.After(60 * time.Second):
		t.Fatalf("the hub did not start within 60 s: %s", p.output())
	}
	return p
}

// runCLI runs the synapse binary with env added and returns its exit
// code and output.
func runCLI(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), "SYNAPSE_CONFIG="+filepath.Join(t.TempDir(), "none.json"), "SYNAPSE_TOKEN=", "SYNAPSE_CA="), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}

// The hub binary over TLS: its banner says wss:// and https://; the CLI
// claims with --ca and with SYNAPSE_CA; a wrong CA and ws:// fail with
// exit 3 saying what to do; /mcp answers over https (its agents dial the
// hub's own wss:// port); SIGHUP loads a new pair that new connections
// get, and a broken pair is logged and the old one kept.
func TestHubBinary_TLS_CLI_CA_MCP_SIGHUPReload_Issue23_TLS(t *testing.T) {
	bin := synapseBinary(t)
	dir := t.TempDir()
	w, err := certs.SelfSigned(dir, certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	oldCA := filepath.Join(t.TempDir(), "old-ca.pem")
	copyFileMode(t, w.CA, oldCA, 0o644)
	other, err := certs.SelfSigned(t.TempDir(), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := startTLSHub(t, bin, "--no-db", "--port", strconv.Itoa(port), "--tls-cert", w.Cert, "--tls-key", w.Key, "--tls-reload-interval", "0")
	banner := p.output()
	for _, want := range []string{"listening on wss://" + addr, "dashboard: https://" + addr, "mcp: https://" + addr, "tls: " + w.Cert} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner does not say %q:\n%s", want, banner)
		}
	}
	if strings.Contains(banner, "WARNING") {
		t.Errorf("a loopback TLS hub warned:\n%s", banner)
	}
	uri := "wss://" + addr
	if code, out := runCLI(t, bin, nil, "claim", "T1", "--paths", "src/a", "--name", "proj/alpha", "--uri", uri, "--ca", oldCA); code != 0 {
		t.Fatalf("claim with --ca: exit %d: %s", code, out)
	}
	if code, out := runCLI(t, bin, []string{"SYNAPSE_CA=" + oldCA}, "release", "T1", "--name", "proj/alpha", "--uri", uri); code != 0 {
		t.Fatalf("release with SYNAPSE_CA: exit %d: %s", code, out)
	}
	code, out := runCLI(t, bin, nil, "who", "--uri", uri, "--ca", other.CA)
	if code != exitUnreachable || !strings.Contains(out, "--ca FILE or SYNAPSE_CA=FILE") || !strings.Contains(out, "not signed by a CA this client trusts") {
		t.Errorf("who with the wrong CA: exit %d: %s; want 3 naming --ca and SYNAPSE_CA", code, out)
	}
	code, out = runCLI(t, bin, nil, "who", "--uri", "ws://"+addr)
	if code != exitUnreachable || !strings.Contains(out, "use wss://") {
		t.Errorf("who over ws:// to a TLS hub: exit %d: %s; want 3 saying use wss://", code, out)
	}

	// /mcp over https: the tool's agent dials the hub's own wss:// port.
	hc, err := client.Options{CA: oldCA}.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcptest.NewClient(mcptest.NewUpdates()).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: "https://" + addr + "/mcp?name=proj/cursor-1", HTTPClient: hc, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
	if err != nil {
		t.Fatalf("MCP over https: %v", err)
	}
	var cl mcpserver.ClaimResult
	if res := mcpCall(t, cs, "claim", map[string]any{"task_id": "T-mcp"}, &cl); res.IsError || cl.Claim.Owner != "proj/cursor-1" {
		t.Fatalf("claim over /mcp on a TLS hub: %s", mcpText(res))
	}
	cs.Close()

	// SIGHUP: a new CA and pair over the same files.
	second, err := certs.SelfSigned(dir, certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if code, _ := runCLI(t, bin, nil, "who", "--uri", uri, "--ca", second.CA); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGHUP the hub did not serve the new pair within 60 s:\n%s", p.output())
		}
	}
	if code, _ := runCLI(t, bin, nil, "who", "--uri", uri, "--ca", oldCA); code != exitUnreachable {
		t.Errorf("after the reload a client trusting only the old CA got in (exit %d)", code)
	}
	// A broken pair: logged, the second pair kept.
	os.WriteFile(second.Cert, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(p.output(), "does not load; still serving the old one"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a broken pair on SIGHUP was not logged within 60 s:\n%s", p.output())
		}
	}
	if code, out := runCLI(t, bin, nil, "who", "--uri", uri, "--ca", second.CA); code != 0 {
		t.Fatalf("after a broken reload the hub should serve the last good pair: exit %d: %s", code, out)
	}
}

// Two hub processes over wss://: syn-b forwards claims of namespace proj
// to syn-a (--claim-peer wss://…, --ca), presenting its client
// certificate (--tls-client-cert), which syn-a requires
// (--tls-client-ca). The owner decides (INV-MH-1) over TLS; /metrics on
// syn-a needs its --metrics-token-file.
func TestHubBinaries_FederationOverWSS_PeerClientCerts_MetricsToken_Issue23_TLS(t *testing.T) {
	bin := synapseBinary(t)
	w, err := certs.SelfSigned(t.TempDir(), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "metrics-token")
	os.WriteFile(tokFile, []byte("m-secret\n"), 0o600)
	pa, pb := freePort(t), freePort(t)
	tlsArgs := []string{"--no-db", "--no-mcp", "--tls-cert", w.Cert, "--tls-key", w.Key, "--namespace-owner", "proj=syn-a", "--forward-timeout", "5s"}
	startTLSHub(t, bin, append(tlsArgs, "--hub-id", "syn-a", "--port", strconv.Itoa(pa),
		"--tls-client-ca", w.CA, "--peer-token", "syn-b=fed-secret", "--metrics-token-file", tokFile)...)
	startTLSHub(t, bin, append(tlsArgs, "--hub-id", "syn-b", "--port", strconv.Itoa(pb),
		"--claim-peer", "syn-a=wss://127.0.0.1:"+strconv.Itoa(pa), "--claim-peer-token", "fed-secret",
		"--ca", w.CA, "--tls-client-cert", w.ClientCert, "--tls-client-key", w.ClientKey)...)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URI: "wss://127.0.0.1:" + strconv.Itoa(pb), Name: "proj/alpha", CA: w.CA, NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var cl *client.Claim
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if cl, err = c.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src/a"}}); err == nil || time.Now().After(deadline) {
			break // the link may still be connecting: a forward is refused until it is up
		}
	}
	if err != nil || cl.HubID != "syn-a" {
		t.Fatalf("claim through syn-b: %+v %v; want granted by the owner syn-a over wss://", cl, err)
	}

	hc, err := client.Options{CA: w.CA}.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	metrics := func(auth string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+strconv.Itoa(pa)+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := metrics(""); got != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d; want 401", got)
	}
	if got := metrics("Bearer m-secret"); got != http.StatusOK {
		t.Errorf("/metrics with the token: %d; want 200", got)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A fleet over TLS end to end: etcd serves https:// and requires client
// certificates (--etcd-ca, --etcd-cert, --etcd-key); the two hubs serve
// wss://, advertise it, and forward between themselves over it with the
// CA (--ca) and their client certificates, which each requires of its
// peers (--tls-client-ca). A claim made on syn-b in the namespace syn-a
// owns is decided by syn-a.
func TestFleet_Processes_OverTLS_EtcdAndForwards_Issue23_TLS(t *testing.T) {
	bin := synapseBinary(t)
	w, err := certs.SelfSigned(t.TempDir(), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := clustertest.StartTLS(t, w.Cert, w.Key, w.CA)
	procs := map[string]*fedProc{}
	for _, id := range []string{"syn-a", "syn-b"} {
		p := &fedProc{id: id, port: freePort(t)}
		p.args = []string{"--etcd", x.Endpoint, "--etcd-ca", w.CA, "--etcd-cert", w.ClientCert, "--etcd-key", w.ClientKey,
			"--cluster-token", "fleet", "--etcd-lease-ttl", "2s", "--forward-timeout", "5s",
			"--tls-cert", w.Cert, "--tls-key", w.Key, "--ca", w.CA, "--tls-client-ca", w.CA,
			"--tls-client-cert", w.ClientCert, "--tls-client-key", w.ClientKey}
		p.startNoDB(t, bin)
		procs[id] = p
	}
	wss := func(id string) string { return "wss://127.0.0.1:" + strconv.Itoa(procs[id].port) }
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dial := func(id, name string) *client.Client {
		c, err := client.Dial(ctx, client.Options{URI: wss(id), Name: name, CA: w.CA, NoReconnect: true})
		if err != nil {
			t.Fatalf("dial %s: %v", id, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	seed, err := claimMoving(ctx, dial("syn-a", "proj/seed"), client.ClaimRequest{TaskID: "seed", Paths: []string{"seed"}})
	if err != nil || seed.HubID != "syn-a" {
		t.Fatalf("first use of proj on syn-a: %+v %v", seed, err)
	}
	cl, err := claimMoving(ctx, dial("syn-b", "proj/bravo"), client.ClaimRequest{TaskID: "T1", Paths: []string{"src/b"}})
	if err != nil || cl.HubID != "syn-a" {
		t.Fatalf("claim on syn-b in syn-a's namespace: %+v %v; want forwarded over wss:// and granted by syn-a", cl, err)
	}
}

// --host may repeat: every name given, repeated or comma-separated, is in
// the certificate (a second --host once silently replaced the first).
func TestTLSSelfSigned_RepeatedHostsAllCount_Issue23_TLS(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCmd("tls", "selfsigned", "--out", dir, "--host", "a.example", "--host", "127.0.0.1,b.example")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	pemBytes, err := os.ReadFile(filepath.Join(dir, "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"a.example", "b.example", "127.0.0.1"} {
		if cert.VerifyHostname(h) != nil {
			t.Errorf("certificate not valid for %s: DNS %v, IPs %v", h, cert.DNSNames, cert.IPAddresses)
		}
	}
}
