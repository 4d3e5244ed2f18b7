package hub

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The rule (origin.go): Host must name a loopback authority or an allowed
// host; Origin must be absent, same-origin, or allowed.
func TestPolicy_HostAndOriginRule(t *testing.T) {
	p, err := NewRequestPolicy(
		[]string{"hub.example", "proxy.example:8443", "10.0.0.5", "[2001:db8::1]:8876"},
		[]string{"https://app.example", "http://localhost:3000/", "https://ui.example:443"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host, origin string
		refusedBy    string // "" = allowed
	}{
		// Loopback authorities, with or without port.
		{"localhost", "", ""},
		{"LOCALHOST:8876", "", ""},
		{"localhost.:8876", "", ""},
		{"127.0.0.1:8876", "", ""},
		{"127.1.2.3", "", ""},
		{"[::1]:8876", "", ""},
		{"[::1]", "", ""},
		// Foreign hosts: DNS rebinding sends the attacker's name.
		{"evil.example", "", "host"},
		{"evil.example:8876", "", "host"},
		{"localhost.evil.example", "", "host"},
		{"127.0.0.1.evil.example", "", "host"},
		{"", "", "host"},
		// Allowed hosts: a bare name any port, NAME:PORT that port only.
		{"hub.example:8876", "", ""},
		{"HUB.example", "", ""},
		{"proxy.example:8443", "", ""},
		{"proxy.example:8876", "", "host"},
		{"10.0.0.5:8876", "", ""},
		{"[2001:db8::1]:8876", "", ""},
		{"[2001:db8::1]:9000", "", "host"},
		// Origin: same-origin (host:port equal to Host; scheme not compared).
		{"127.0.0.1:8876", "http://127.0.0.1:8876", ""},
		{"hub.example", "https://hub.example", ""},
		{"hub.example", "https://hub.example:443", ""},
		{"127.0.0.1:8876", "http://127.0.0.1:9999", "origin"},
		{"127.0.0.1:8876", "http://localhost:8876", "origin"},
		{"127.0.0.1:8876", "http://evil.example", "origin"},
		{"127.0.0.1:8876", "null", "origin"},
		{"127.0.0.1:8876", "file://", "origin"},
		// Allowed origins, default ports dropped on both sides.
		{"127.0.0.1:8876", "https://app.example", ""},
		{"127.0.0.1:8876", "HTTPS://APP.example", ""},
		{"127.0.0.1:8876", "http://app.example", "origin"},
		{"127.0.0.1:8876", "http://localhost:3000", ""},
		{"127.0.0.1:8876", "https://ui.example", ""},
		// The Host is checked first.
		{"evil.example", "https://app.example", "host"},
	}
	for _, c := range cases {
		r := httptest.NewRequest(http.MethodGet, "/health", nil)
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		header, err := p.Check(r)
		if header != c.refusedBy || (err == nil) != (c.refusedBy == "") {
			t.Errorf("Host %q Origin %q: refused by %q (%v), want %q", c.host, c.origin, header, err, c.refusedBy)
		}
	}
}

// "*" turns a check off, for a proxy that rewrites Host or a hub meant
// for any page.
func TestPolicy_StarAllowsAny(t *testing.T) {
	p, err := NewRequestPolicy([]string{"*"}, []string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/health", nil)
	r.Host = "evil.example"
	r.Header.Set("Origin", "http://evil.example:1")
	if header, err := p.Check(r); err != nil {
		t.Fatalf("refused by %s: %v", header, err)
	}
}

func TestPolicy_RefusesMalformedAllowLists(t *testing.T) {
	for _, c := range []struct{ hosts, origins []string }{
		{hosts: []string{""}},
		{hosts: []string{"http://hub.example"}},
		{hosts: []string{"hub.example/mcp"}},
		{origins: []string{"app.example"}},
		{origins: []string{"https://app.example/path"}},
		{origins: []string{"null"}},
	} {
		if _, err := NewRequestPolicy(c.hosts, c.origins); !errors.Is(err, ErrAllowSpec) {
			t.Errorf("hosts %q origins %q: %v, want ErrAllowSpec", c.hosts, c.origins, err)
		}
		if _, err := New(Config{AllowHosts: c.hosts, AllowOrigins: c.origins, Logger: quietLogger()}); !errors.Is(err, ErrAllowSpec) {
			t.Errorf("New with hosts %q origins %q: %v, want ErrAllowSpec", c.hosts, c.origins, err)
		}
	}
}

// surface is one HTTP route of the hub and the status it answers when
// the policy lets the request through.
type surface struct {
	name, method, path string
	upgrade            bool
	ok                 int
}

var surfaces = []surface{
	{"websocket", http.MethodGet, "/", true, http.StatusSwitchingProtocols},
	{"mcp", http.MethodPost, "/mcp", false, http.StatusOK},
	{"health", http.MethodGet, "/health", false, http.StatusOK},
	{"metrics", http.MethodGet, "/metrics", false, http.StatusOK},
}

// do sends one real request to the hub with the given Host and Origin and
// returns the status and body.
func (s surface) do(t *testing.T, th *testHub, host, origin string) (int, string) {
	t.Helper()
	var body io.Reader
	if s.method == http.MethodPost {
		body = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	}
	req, err := http.NewRequest(s.method, th.srv.URL+s.path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if s.upgrade {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return resp.StatusCode, "" // the socket: closed unread
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// mcpStub stands in for package mcpserver: the policy is decided before
// the route, so what answers behind it does not matter here
// (cmd/synapse's TestHubOrigin_RealMCP runs the real one).
var mcpStub = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

// Every surface applies the one rule: a loopback Host is answered, a
// foreign Host and a foreign Origin are refused 403 with the flag that
// would allow them, and hosts and origins on the allow lists are answered.
func TestPolicy_EverySurfaceAppliesTheRule(t *testing.T) {
	th := startHub(t, Config{MCP: mcpStub, AllowHosts: []string{"hub.example"}, AllowOrigins: []string{"https://app.example"}})
	self := strings.TrimPrefix(th.srv.URL, "http://") // 127.0.0.1:PORT
	for _, s := range surfaces {
		t.Run(s.name, func(t *testing.T) {
			for _, c := range []struct {
				rule, host, origin string
				status             int
				says               string
			}{
				{"loopback Host accepted", self, "", s.ok, ""},
				{"localhost Host accepted", "localhost", "", s.ok, ""},
				{"same-origin Origin accepted", self, "http://" + self, s.ok, ""},
				{"foreign Host refused", "evil.example", "", http.StatusForbidden, "--allow-host evil.example"},
				{"foreign Host with port refused", "evil.example:8876", "", http.StatusForbidden, "--allow-host evil.example"},
				{"foreign Origin refused", self, "http://evil.example", http.StatusForbidden, "--allow-origin http://evil.example"},
				{"--allow-host accepted", "hub.example:8876", "", s.ok, ""},
				{"--allow-origin accepted", self, "https://app.example", s.ok, ""},
			} {
				status, body := s.do(t, th, c.host, c.origin)
				if status != c.status || !strings.Contains(body, c.says) {
					t.Errorf("%s (Host %q, Origin %q): %d %q, want %d saying %q", c.rule, c.host, c.origin, status, body, c.status, c.says)
				}
			}
		})
	}
	if got := counterValue(t, th.h.m.httpRefused.WithLabelValues("host")); got != 8 {
		t.Errorf("synapse_http_refused_total{header=host} = %v, want 8", got)
	}
	if got := counterValue(t, th.h.m.httpRefused.WithLabelValues("origin")); got != 4 {
		t.Errorf("synapse_http_refused_total{header=origin} = %v, want 4", got)
	}
}
