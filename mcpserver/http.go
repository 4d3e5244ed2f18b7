package mcpserver

// Streamable HTTP: one endpoint serving many agents, each request naming
// the agent it acts as.

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/synapse-hub/synapse/client"
)

// NameHeader names the agent an HTTP request acts as, when the URL has no
// ?name= parameter.
const NameHeader = "X-Synapse-Name"

// DefaultIdleTimeout is how long an HTTP agent stays connected to the hub
// after its last request ends.
const DefaultIdleTimeout = 30 * time.Minute

// HTTPOptions configures NewHTTPHandler.
type HTTPOptions struct {
	// Dial connects an agent to the hub; required. The handler passes the
	// agent name the request carries.
	Dial func(ctx context.Context, name string) (*client.Client, error)
	// DefaultName is the agent of requests that name none; "" refuses them.
	DefaultName string
	// Token, when set, must come with every request as
	// "Authorization: Bearer TOKEN" (the hub's connect token, so /mcp is
	// no weaker than the WebSocket).
	Token string
	// Profile is the tool set of every agent.
	Profile Profile
	// Version is the server version reported to clients.
	Version string
	// IdleTimeout is how long an agent's hub connection (and its lease
	// keepers) outlive its last request; default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// HostChecked says the server in front already applies a Host and
	// Origin policy (the hub's, gate.RequestPolicy), which may allow names the
	// SDK's own check (loopback listener ⇒ loopback Host only) would
	// refuse; that check is then off. Leave it false when serving alone.
	HostChecked bool
	// Channel, WaitDefault, ProgressEvery and OutputSchemas are every
	// agent's, as in Options.
	Channel       ChannelOptions
	WaitDefault   time.Duration
	ProgressEvery time.Duration
	OutputSchemas bool
	// Logger receives one line per agent connected or reaped (the SDK's
	// per-request chatter is not logged).
	Logger *slog.Logger
}

// HTTPHandler serves MCP over Streamable HTTP for any number of agents.
// Each request names its agent with ?name=PROJECT/AGENT or the
// X-Synapse-Name header; the first request of a name dials the hub as
// that name and builds its Server, later requests reuse it, and it is
// closed once idle for IdleTimeout. Two MCP clients using one name share
// one agent.
//
// Who owns what: mu guards the agent table; the reaper goroutine closes
// idle agents.
type HTTPHandler struct {
	opts HTTPOptions
	sdk  *mcp.StreamableHTTPHandler
	log  *slog.Logger

	mu       sync.Mutex
	agents   map[string]*httpAgent
	sessions map[string]string // Mcp-Session-Id → the agent name it was made for
	closed   bool
	stop     chan struct{}
	done     chan struct{}
}

type httpAgent struct {
	ready    chan struct{} // closed once dialled (err or srv set)
	err      error
	c        *client.Client
	srv      *Server
	inflight int       // requests being served (a listening stream counts)
	last     time.Time // when the last request ended
}

type agentKey struct{}

// NewHTTPHandler builds the handler. Close it to disconnect every agent.
func NewHTTPHandler(opts HTTPOptions) *HTTPHandler {
	if opts.Dial == nil {
		panic("mcpserver: HTTPOptions.Dial is required")
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h := &HTTPHandler{opts: opts, log: log, agents: map[string]*httpAgent{}, sessions: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	h.sdk = mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if a, ok := r.Context().Value(agentKey{}).(*httpAgent); ok {
			return a.srv.MCP()
		}
		return nil
	}, &mcp.StreamableHTTPOptions{SessionTimeout: opts.IdleTimeout, DisableLocalhostProtection: opts.HostChecked})
	go h.reap()
	return h
}

// RequestName is the agent a request names: ?name=, else X-Synapse-Name.
func RequestName(r *http.Request) string {
	if n := strings.TrimSpace(r.URL.Query().Get("name")); n != "" {
		return n
	}
	return strings.TrimSpace(r.Header.Get(NameHeader))
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.opts.Token != "" {
		got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(got), []byte(h.opts.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="synapse-mcp"`)
			http.Error(w, "synapse mcp: this hub needs its token: send the header 'Authorization: Bearer TOKEN' (the hub's --token).", http.StatusUnauthorized)
			return
		}
	}
	name := RequestName(r)
	sid := r.Header.Get(sessionHeader)
	if sid != "" {
		h.mu.Lock()
		bound, known := h.sessions[sid]
		h.mu.Unlock()
		switch {
		case !known:
			// Refused before a name is dialled: an old or made-up session
			// id must not bring an agent online.
			http.Error(w, "synapse mcp: unknown or ended MCP session "+sid+": start a new session (initialize again).", http.StatusNotFound)
			return
		case name != "" && name != bound:
			http.Error(w, fmt.Sprintf("synapse mcp: session %s belongs to %s, not %s: a session keeps the agent name it began with; start a new session for %s.",
				sid, bound, name, name), http.StatusBadRequest)
			return
		}
		name = bound
	}
	if name == "" {
		name = h.opts.DefaultName
	}
	if name == "" {
		http.Error(w, "synapse mcp: say which agent this MCP client acts as: add ?name=PROJECT/AGENT to the URL "+
			"(e.g. /mcp?name=myproject/claude-1) or send the header "+NameHeader+".", http.StatusBadRequest)
		return
	}
	a, err := h.acquire(r.Context(), name)
	if err != nil {
		status, msg := dialFailure(name, err)
		http.Error(w, msg, status)
		return
	}
	h.sdk.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), agentKey{}, a)))
	if r.Method == http.MethodDelete && sid != "" {
		h.endSession(name, sid, a)
		return
	}
	h.releaseAgent(a)
}

// sessionHeader is Streamable HTTP's session id header.
const sessionHeader = "Mcp-Session-Id"

// endSession forgets a session its client ended with DELETE, and
// disconnects its agent at once when no other session holds the name:
// messages to it must not say "delivered" for 30 minutes more. Requests
// still in flight (the ended session's listening stream) end with it. A
// new session's id is bound when its initialize arrives, so it counts.
// The claims stay until their leases end.
func (h *HTTPHandler) endSession(name, sid string, a *httpAgent) {
	h.mu.Lock()
	delete(h.sessions, sid)
	a.inflight--
	a.last = time.Now()
	alone := h.agents[name] == a && !h.holdsSessionLocked(name)
	if alone {
		delete(h.agents, name)
	}
	h.mu.Unlock()
	if alone {
		h.log.Info("mcp agent's last session ended: disconnecting", "name", name)
		a.srv.Close()
		a.c.Close()
	}
}

func (h *HTTPHandler) holdsSessionLocked(name string) bool {
	for _, n := range h.sessions {
		if n == name {
			return true
		}
	}
	return false
}

// newSessionID makes a session id bound to name.
func (h *HTTPHandler) newSessionID(name string) string {
	id := rand.Text()
	h.mu.Lock()
	h.sessions[id] = name
	h.mu.Unlock()
	return id
}

// forgetSessionsLocked drops the session ids bound to name.
func (h *HTTPHandler) forgetSessionsLocked(name string) {
	for id, n := range h.sessions {
		if n == name {
			delete(h.sessions, id)
		}
	}
}

// dialFailure maps a failed dial to an HTTP status and a sentence.
func dialFailure(name string, err error) (int, string) {
	var rej *client.RejectedError
	switch {
	case errors.As(err, &rej) && rej.AuthFailed():
		return http.StatusUnauthorized, fmt.Sprintf("synapse mcp: the hub refused the token for %s: %v.", name, err)
	case errors.As(err, &rej) && (rej.Code == 4009 || rej.Code == 4016):
		return http.StatusConflict, fmt.Sprintf("synapse mcp: the name %s is already online (another agent or session uses it): choose another ?name=.", name)
	case errors.As(err, &rej):
		return http.StatusForbidden, fmt.Sprintf("synapse mcp: the hub refused %s: %v.", name, err)
	case errors.Is(err, errHandlerClosed):
		return http.StatusServiceUnavailable, "synapse mcp: shutting down."
	}
	return http.StatusBadGateway, fmt.Sprintf("synapse mcp: cannot reach the hub as %s: %v. Is `synapse hub` running?", name, err)
}

var errHandlerClosed = errors.New("mcpserver: handler closed")

// acquire returns the named agent, dialling it on first use, with one
// more request in flight.
func (h *HTTPHandler) acquire(ctx context.Context, name string) (*httpAgent, error) {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, errHandlerClosed
		}
		a, found := h.agents[name]
		if !found {
			a = &httpAgent{ready: make(chan struct{})}
			h.agents[name] = a
		}
		a.inflight++
		h.mu.Unlock()
		if !found {
			h.dial(ctx, name, a)
		}
		select {
		case <-a.ready:
		case <-ctx.Done():
			h.releaseAgent(a)
			return nil, ctx.Err()
		}
		if a.err == nil {
			return a, nil
		}
		h.releaseAgent(a)
		if found {
			continue // the dial another request made failed; try our own
		}
		return nil, a.err
	}
}

// dial connects a new agent; on failure it leaves the table so the next
// request tries again.
func (h *HTTPHandler) dial(ctx context.Context, name string, a *httpAgent) {
	c, err := h.opts.Dial(context.WithoutCancel(ctx), name)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil && h.closed {
		c.Close()
		err = errHandlerClosed
	}
	if err != nil {
		a.err = err
		delete(h.agents, name)
	} else {
		a.c = c
		a.srv = New(Options{Client: c, Profile: h.opts.Profile, Version: h.opts.Version, Channel: h.opts.Channel,
			WaitDefault: h.opts.WaitDefault, ProgressEvery: h.opts.ProgressEvery, OutputSchemas: h.opts.OutputSchemas,
			SessionID: func() string { return h.newSessionID(name) }})
		h.log.Info("mcp agent connected", "name", name)
	}
	close(a.ready)
}

func (h *HTTPHandler) releaseAgent(a *httpAgent) {
	h.mu.Lock()
	a.inflight--
	a.last = time.Now()
	h.mu.Unlock()
}

// reap closes agents idle for IdleTimeout.
func (h *HTTPHandler) reap() {
	defer close(h.done)
	t := time.NewTicker(max(h.opts.IdleTimeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		var idle []*httpAgent
		h.mu.Lock()
		for name, a := range h.agents {
			if a.srv != nil && a.inflight == 0 && time.Since(a.last) >= h.opts.IdleTimeout {
				delete(h.agents, name)
				h.forgetSessionsLocked(name)
				idle = append(idle, a)
			}
		}
		h.mu.Unlock()
		for _, a := range idle {
			h.log.Info("mcp agent idle: disconnecting", "name", a.c.Name())
			a.srv.Close()
			a.c.Close()
		}
	}
}

// Agents lists the agent names connected through this handler.
func (h *HTTPHandler) Agents() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for name, a := range h.agents {
		if a.srv != nil {
			out = append(out, name)
		}
	}
	sortStrings(out)
	return out
}

// Close disconnects every agent. Their claims stay until their leases run
// out.
func (h *HTTPHandler) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	agents := h.agents
	h.agents = map[string]*httpAgent{}
	h.mu.Unlock()
	close(h.stop)
	<-h.done
	for _, a := range agents {
		<-a.ready
		if a.srv != nil {
			a.srv.Close()
			a.c.Close()
		}
	}
	return nil
}
