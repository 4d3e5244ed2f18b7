package gate

import (
	"errors"
	"net/http"
	"net/http/httptest"
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
	}
}
