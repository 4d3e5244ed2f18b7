package hub

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/gate"
)

// New refuses a malformed allow list as the policy does (gate's
// TestPolicy_RefusesMalformedAllowLists holds every case).
func TestNew_RefusesMalformedAllowLists(t *testing.T) {
	for _, c := range []struct{ hosts, origins []string }{
		{hosts: []string{"http://hub.example"}},
		{origins: []string{"https://app.example/path"}},
	} {
		if _, err := New(Config{AllowHosts: c.hosts, AllowOrigins: c.origins, Logger: quietLogger()}); !errors.Is(err, gate.ErrAllowSpec) {
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
