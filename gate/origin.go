package gate

// The Host and Origin policy: one decision, taken before any route, for
// the hub's WebSocket upgrade, /mcp, /health and /metrics alike
// (docs/security.md, "Host and Origin"). It stops DNS rebinding (a page
// from evil.example whose name resolves to 127.0.0.1 sends Host:
// evil.example) and cross-site browser requests (a page sends its own
// Origin), as the MCP specification asks of every server.
//
// The policy is immutable once built; every request goroutine reads it.
// The hub's Handler applies it, and the CLI puts it in front of the
// profiler listener (--pprof) and of `synapse mcp --http`, so every HTTP
// page synapse serves follows one rule.

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// ErrAllowSpec is wrapped by every refusal of an AllowHosts or
// AllowOrigins entry.
var ErrAllowSpec = errors.New("allow list")

// RequestPolicy is which Host and Origin headers an HTTP server answers;
// the hub's Handler applies hub.Config.AllowHosts and AllowOrigins.
//
//   - Host must name a loopback authority (localhost, 127.0.0.0/8, [::1],
//     any port) or one of the allowed hosts; a request without a Host is
//     refused.
//   - Origin may be absent (every non-browser client); if present it must
//     be same-origin (its host:port equals the request's Host, as Go's
//     http.CrossOriginProtection compares them; the scheme is not compared,
//     so a TLS-terminating proxy in front does not break it) or one of the
//     allowed origins. "null" is never same-origin.
type RequestPolicy struct {
	anyHost   bool
	hosts     map[string][]string // lowercase host (IPv6 unbracketed) → ports; a "" port is any
	anyOrigin bool
	origins   map[string]bool // normalised scheme://host[:port]
}

// NewRequestPolicy checks and indexes the allow lists (entries as
// --allow-host and --allow-origin take them: "NAME", "NAME:PORT" or "*";
// "SCHEME://HOST[:PORT]" or "*"); nil lists answer loopback hosts and
// same-origin or Origin-less requests only. A malformed entry is refused
// with an error wrapping ErrAllowSpec.
func NewRequestPolicy(hosts, origins []string) (*RequestPolicy, error) {
	p := &RequestPolicy{hosts: map[string][]string{}, origins: map[string]bool{}}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "*" {
			p.anyHost = true
			continue
		}
		name, port, err := parseHostSpec(h)
		if err != nil {
			return nil, err
		}
		p.hosts[name] = append(p.hosts[name], port)
	}
	for _, o := range origins {
		o = strings.TrimSpace(o)
		if o == "*" {
			p.anyOrigin = true
			continue
		}
		n, ok := normalOrigin(strings.TrimSuffix(o, "/"))
		if !ok {
			return nil, fmt.Errorf("%w: origin %q: want SCHEME://HOST[:PORT] as a browser sends it, e.g. https://app.example or http://localhost:3000", ErrAllowSpec, o)
		}
		p.origins[n] = true
	}
	return p, nil
}

// parseHostSpec reads an allowed host: NAME or IP (any port), or
// NAME:PORT, IP:PORT, [IPv6]:PORT (that port only).
func parseHostSpec(spec string) (name, port string, err error) {
	bad := func(why string) (string, string, error) {
		return "", "", fmt.Errorf("%w: host %q: %s", ErrAllowSpec, spec, why)
	}
	switch {
	case spec == "":
		return bad("empty")
	case strings.Contains(spec, "/"):
		return bad("want HOST or HOST:PORT, without a scheme or path (an origin goes to --allow-origin)")
	}
	name, port = splitAuthority(spec)
	if name == "" || strings.ContainsAny(name, " @") {
		return bad("want HOST or HOST:PORT")
	}
	return name, port, nil
}

// splitAuthority splits a Host header (or an allowed host) into its
// lowercase name, without IPv6 brackets or a trailing dot, and its port ("" if none).
func splitAuthority(a string) (name, port string) {
	name = a
	if h, p, err := net.SplitHostPort(a); err == nil {
		name, port = h, p
	} else if ip := net.ParseIP(strings.Trim(a, "[]")); ip != nil {
		name = ip.String() // a bare IPv6 literal: its colons are no port
	}
	name = strings.TrimSuffix(strings.ToLower(strings.Trim(name, "[]")), ".")
	return name, port
}

// isLoopbackName reports whether a host name is one only this machine
// answers: localhost, or a loopback IP literal.
func isLoopbackName(name string) bool {
	if name == "localhost" {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

// normalOrigin lowercases an origin and drops its scheme's default port;
// ok is false unless it is SCHEME://HOST[:PORT] and nothing more.
func normalOrigin(o string) (string, bool) {
	u, err := url.Parse(o)
	if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if p := u.Port(); (p == "80" && (scheme == "http" || scheme == "ws")) || (p == "443" && (scheme == "https" || scheme == "wss")) {
		host = strings.TrimSuffix(host, ":"+p)
	}
	return scheme + "://" + host, true
}

// Check decides one request: nil, or why it is refused, in words that say
// what to do, and which header refused it ("host" or "origin").
func (p *RequestPolicy) Check(r *http.Request) (header string, err error) {
	if !p.anyHost {
		if r.Host == "" {
			return "host", errors.New("the request has no Host header: synapse answers requests that name it (a loopback host, or one given with --allow-host)")
		}
		if !p.hostAllowed(r.Host) {
			name, _ := splitAuthority(r.Host)
			return "host", fmt.Errorf("Host '%s' is not allowed: synapse answers loopback hosts (localhost, 127.0.0.1, [::1]), the address it listens on and its --advertise name; if clients reach it by this name, restart it with --allow-host %s", r.Host, name)
		}
	}
	origin := r.Header.Get("Origin")
	if origin == "" || p.anyOrigin {
		return "", nil
	}
	n, ok := normalOrigin(origin)
	if ok && (strings.EqualFold(strings.TrimPrefix(n, schemeOf(n)), r.Host) || p.origins[n]) {
		return "", nil
	}
	return "origin", fmt.Errorf("Origin '%s' is not allowed: a web page from another site may not use synapse; if it should, restart it with --allow-origin %s", origin, origin)
}

// schemeOf returns "scheme://" of a normalised origin.
func schemeOf(origin string) string {
	i := strings.Index(origin, "://")
	return origin[:i+3]
}

// hostAllowed reports whether a Host header names this server.
func (p *RequestPolicy) hostAllowed(host string) bool {
	name, port := splitAuthority(host)
	if isLoopbackName(name) {
		return true
	}
	for _, want := range p.hosts[name] {
		if want == "" || want == port {
			return true
		}
	}
	return false
}

// Guard serves next only for requests the policy allows; others get 403
// and the reason, and refused (if not nil) is told which header failed.
func (p *RequestPolicy) Guard(refused func(header string), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if header, err := p.Check(r); err != nil {
			if refused != nil {
				refused(header)
			}
			http.Error(w, "synapse: "+err.Error(), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
