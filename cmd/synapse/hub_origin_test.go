package main

import (
	"bufio"
	"bytes"
	"flag"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/hub"
)

// --allow-host and --allow-origin are repeatable and take comma lists.
func TestHubOrigin_FlagsAreRepeatableCommaLists(t *testing.T) {
	var f hubFlags
	fs := flag.NewFlagSet("hub", flag.ContinueOnError)
	f.registerOrigin(fs)
	if err := fs.Parse([]string{"--allow-host", "a.example, b.example:8876", "--allow-host", "c.example",
		"--allow-origin", "https://app.example", "--allow-origin", "http://localhost:3000,https://ui.example"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.example", "b.example:8876", "c.example"}; !slices.Equal(f.allowHosts, want) {
		t.Errorf("--allow-host %q, want %q", f.allowHosts, want)
	}
	if want := []string{"https://app.example", "http://localhost:3000", "https://ui.example"}; !slices.Equal(f.allowOrigins, want) {
		t.Errorf("--allow-origin %q, want %q", f.allowOrigins, want)
	}
}

// The hosts answered besides loopback: --allow-host, the address bound off
// loopback (every interface's for a wildcard), and --advertise's host, so
// fleet peers dialling the advertised name get in.
func TestHubOrigin_AllowedHostsFollowTheListenAddressAndAdvertise(t *testing.T) {
	cases := []struct {
		f          hubFlags
		want, not  []string
		exactlyLen int // -1: not checked
	}{
		{f: hubFlags{host: "127.0.0.1"}, exactlyLen: 0},
		{f: hubFlags{host: "localhost", allowHosts: listFlag{"hub.example"}}, want: []string{"hub.example"}, exactlyLen: 1},
		{f: hubFlags{host: "10.0.0.5"}, want: []string{"10.0.0.5"}, exactlyLen: 1},
		{f: hubFlags{host: "hub-a.internal"}, want: []string{"hub-a.internal"}, exactlyLen: 1},
		{f: hubFlags{host: "0.0.0.0"}, want: interfaceIPs(t), not: []string{"127.0.0.1", "evil.example"}, exactlyLen: -1},
		{f: hubFlags{host: "127.0.0.1", advertise: "ws://hub-a.internal:8876"}, want: []string{"hub-a.internal"}, exactlyLen: 1},
	}
	for _, c := range cases {
		got, err := c.f.allowedHosts()
		if err != nil {
			t.Fatalf("%+v: %v", c.f, err)
		}
		for _, w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("--host %s --advertise %q: %q lacks %s", c.f.host, c.f.advertise, got, w)
			}
		}
		for _, n := range c.not {
			if slices.Contains(got, n) {
				t.Errorf("--host %s: %q holds %s", c.f.host, got, n)
			}
		}
		if c.exactlyLen >= 0 && len(got) != c.exactlyLen {
			t.Errorf("--host %s --advertise %q: %q, want %d entries", c.f.host, c.f.advertise, got, c.exactlyLen)
		}
	}
	if _, err := (&hubFlags{host: "127.0.0.1", advertise: "ws://"}).allowedHosts(); err == nil {
		t.Error("--advertise ws:// accepted")
	}
}

// The hub's real /mcp (package mcpserver behind hub.Handler) follows the
// hub's rule alone: a foreign Host or Origin is refused 403 by the hub,
// and a host on --allow-host is answered even though the listener is on
// loopback (the MCP SDK's own check would refuse it).
func TestHubOrigin_RealMCP(t *testing.T) {
	isolate(t)
	url := startMCPHub(t, hub.Config{AllowHosts: []string{"hub.example"}, AllowOrigins: []string{"https://app.example"}})
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	loopback := strings.TrimPrefix(url, "http://")
	for _, c := range []struct {
		rule, host, origin string
		status             int
		says               string
	}{
		{"foreign Origin refused", loopback, "http://evil.example", http.StatusForbidden, "--allow-origin http://evil.example"},
		{"foreign Host refused", "evil.example", "", http.StatusForbidden, "--allow-host evil.example"},
		{"loopback Host accepted", loopback, "", http.StatusOK, "serverInfo"},
		{"--allow-host accepted", "hub.example:8876", "", http.StatusOK, "serverInfo"},
		{"--allow-origin accepted", loopback, "https://app.example", http.StatusOK, "serverInfo"},
	} {
		if status, body := postAs(t, url+"/mcp?name=proj/web-1", c.host, c.origin, initialize); status != c.status || !strings.Contains(body, c.says) {
			t.Errorf("%s (Host %q, Origin %q): %d %q, want %d with %q", c.rule, c.host, c.origin, status, body, c.status, c.says)
		}
	}
}

// `synapse mcp --http` applies the hub's rule too: a foreign Host or Origin
// is refused 403 before any agent dials the hub, and --allow-origin lets
// the named page in (it then fails only because no hub runs here).
func TestHubOrigin_MCPHTTPAppliesTheRule(t *testing.T) {
	isolate(t)
	bin := synapseBinary(t)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command(bin, "mcp", "--http", addr, "--uri", "ws://127.0.0.1:1", "--name", "p/web",
		"--allow-origin", "https://app.example")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	up := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			up <- sc.Text()
		}
	}()
	for line := ""; !strings.Contains(line, "Streamable HTTP on"); {
		select {
		case line = <-up:
		case <-time.After(30 * time.Second):
			t.Fatal("synapse mcp --http did not start")
		}
	}
	post := func(host, origin string) (int, string) {
		return postAs(t, "http://"+addr+"/mcp", host, origin, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	}
	if status, body := post("evil.example", ""); status != http.StatusForbidden || !strings.Contains(body, "--allow-host evil.example") {
		t.Errorf("foreign Host: %d %q, want 403", status, body)
	}
	if status, body := post(addr, "http://evil.example"); status != http.StatusForbidden || !strings.Contains(body, "--allow-origin http://evil.example") {
		t.Errorf("foreign Origin: %d %q, want 403", status, body)
	}
	if status, body := post(addr, "https://app.example"); status == http.StatusForbidden {
		t.Errorf("--allow-origin: %d %q, want past the policy", status, body)
	}
}

// postAs POSTs an MCP JSON-RPC body to url with the given Host and Origin
// and returns the status and body.
func postAs(t *testing.T, url, host, origin, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// interfaceIPs are this machine's addresses off loopback.
func interfaceIPs(t *testing.T) []string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
			ips = append(ips, n.IP.String())
		}
	}
	return ips
}

// A malformed entry is a usage error, said before anything opens.
func TestHubOrigin_MalformedAllowListIsAUsageError(t *testing.T) {
	for _, args := range [][]string{{"--allow-host", "http://hub.example"}, {"--allow-origin", "app.example"}} {
		var out, errb bytes.Buffer
		code := run(append([]string{"hub", "--no-db", "--port", "0"}, args...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "allow list") {
			t.Errorf("%q: exit %d, stderr %q: want 2 and the entry's fault", args, code, errb.String())
		}
	}
}
