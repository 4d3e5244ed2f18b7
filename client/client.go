package client

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/synapse-hub/synapse/wire"
)

// DefaultURI is where a hub started with no flags listens.
const DefaultURI = "ws://127.0.0.1:8876"

// Tunables with their defaults; the zero value of an Options field means
// its default.
const (
	DefaultHeartbeatInterval = 20 * time.Second // the reference clients' keepalive
	DefaultHandshakeTimeout  = 10 * time.Second // the hub's own auth timeout
	DefaultSubscriberBuffer  = 256
	DefaultMaxFrameBytes     = 64 << 20 // snapshots of a large board are big
	DefaultReconnectMin      = 100 * time.Millisecond
	DefaultReconnectMax      = 10 * time.Second
	// writeTimeout bounds one frame write. Writes never use the caller's
	// context: coder/websocket closes the socket when a write's context
	// ends, and one cancelled call must not drop everyone's connection.
	writeTimeout = 10 * time.Second
)

// Fanout is a client's ask for which broadcasts (other agents' claim and
// board events) the hub writes to its socket. Every fan-out gets the
// client's own replies, the broadcasts that name it, chats to all and to
// it, and presence. A hub without the features ignores the ask and sends
// everything, as FanoutFull does.
type Fanout string

const (
	// FanoutOwn (the default; welcome feature "own_fanout"): of the claim
	// and board events, those that name this agent — its grants, releases,
	// updates, handoffs to or from it, the board tasks it declares or is
	// suggested for: everything its calls act on, and no other agent's
	// grants.
	FanoutOwn Fanout = "own"
	// FanoutNamespace (feature "scoped_fanout") adds the claim and board
	// events of this agent's namespace (the part of its name before the
	// first "/"): its project's other agents'.
	FanoutNamespace Fanout = "scoped"
	// FanoutFull is every broadcast, as the reference sends to every
	// socket.
	FanoutFull Fanout = "full"
)

// Presence is a client's ask for presence_update frames (feature
// "presence_delta"; docs/protocol.md "Presence"). A hub without the
// feature ignores it and sends the reference's frames.
type Presence string

const (
	// PresenceNone (the default): no presence_update, and a welcome with
	// online_count instead of online_agents (Welcome.OnlineAgents is then
	// empty; Who lists who is online).
	PresenceNone Presence = "none"
	// PresenceCompact: the changes, merged within the hub's window,
	// without online_agents; Online folds them into a view seeded by the
	// welcome's list.
	PresenceCompact Presence = "compact"
	// PresenceFull: online_agents in every frame, changes merged within
	// the window.
	PresenceFull Presence = "full"
)

// Options configures Dial. Empty fields take their defaults.
type Options struct {
	URI   string   // default $SYNAPSE_URI, else DefaultURI; several hubs of a fleet: "ws://a,ws://b"
	Name  string   // the agent name, e.g. "proj/alpha"; default $SYNAPSE_NAME; required
	Token string   // connect token of a secured hub; default $SYNAPSE_TOKEN
	Roles []string // "<project>/<role>" names this agent also answers to
	// Fanout is which broadcasts the hub writes to this client; the
	// default, FanoutOwn, is only what its own calls act on.
	Fanout Fanout
	// Presence is which presence_update frames the hub writes to it; the
	// default, PresenceNone, is none, and a welcome without the online
	// list (Who asks for it when wanted): a connect storm of clients that
	// show no presence then costs the hub nothing per join.
	Presence Presence

	HeartbeatInterval time.Duration // app-level keepalive (default 20 s)
	HandshakeTimeout  time.Duration // dial + welcome + registration (default 10 s)
	// NoReconnect turns off automatic reconnection: a dropped socket closes
	// the client. One-shot tools (the CLI) want this.
	NoReconnect bool
	// Background makes Dial return at once, before the first connection:
	// the client connects in the background as it reconnects after a drop
	// (jittered backoff up to ReconnectMax; a refused token ends it), and
	// calls made meanwhile fail at once with ErrDisconnected. DownReason
	// says why the last attempt failed. For a server that must answer its
	// own clients whether or not the hub is up (synapse mcp). Ignores
	// NoReconnect.
	Background bool
	// NoMovingRetry returns NAMESPACE_MOVING refusals to the caller
	// instead of retrying them after the hub's hint until the call's
	// context ends (a fleet on etcd moving a namespace).
	NoMovingRetry bool
	ReconnectMin  time.Duration // first backoff delay (default 100 ms)
	ReconnectMax  time.Duration // backoff cap (default 10 s)
	// SubscriberBuffer is each subscription's channel capacity (default
	// 256). A subscriber that falls further behind loses frames (counted in
	// Stats.Dropped); it never slows the client.
	SubscriberBuffer int
	MaxFrameBytes    int64 // largest frame accepted from the hub (default 64 MiB)

	// Mailbox asks the hub, on every (re)connect, to replay the directed
	// chats addressed to this agent that it has not acked (PROTOCOL.md
	// §2.3, INV-DG-3): registration carries mailbox:true and since_seq =
	// the highest seq this client acked (SinceSeq at first). Replayed
	// chats reach subscribers with Frame.Replayed() true and their
	// Frame.Seq(); acknowledge them with Ack. Off by default, so one-shot
	// tools do not pull a backlog they will not read.
	Mailbox bool
	// SinceSeq is the mailbox cursor to start from (a seq acked by an
	// earlier process); Ack advances it.
	SinceSeq int64
	// MailboxFor is the identity whose mailbox Inbox replays and Ack
	// acknowledges, when this client is its sidecar (Name is
	// MailboxFor+"-rx" or +"-pane-rx": a waiter beside the agent, PROTOCOL.md
	// §1.7). Empty: Name's own. The hub ignores it for any other name.
	MailboxFor string

	// CA is a PEM file of the CA that signed a wss:// hub's certificate
	// (`synapse tls selfsigned` writes ca.pem); default $SYNAPSE_CA, else
	// the system's roots. A ws:// hub ignores it.
	CA string
	// TLS, when set, is the TLS of wss:// and https:// hubs instead of CA:
	// a client certificate, other roots, a pinned certificate.
	TLS *tls.Config
	// IdentityKey signs the registration (identity.go): a hub pins the
	// name to its key on first use. nil: this machine's key
	// (MachineKeyPath), created on first use, unless NoIdentity.
	IdentityKey ed25519.PrivateKey
	// NoIdentity sends unsigned registrations, as before (also
	// $SYNAPSE_NO_IDENTITY). A name a hub pinned then cannot bind there.
	NoIdentity bool
}

func (o *Options) setDefaults() error {
	if o.URI == "" {
		o.URI = os.Getenv("SYNAPSE_URI")
	}
	if o.URI == "" {
		o.URI = DefaultURI
	}
	if o.Name == "" {
		o.Name = os.Getenv("SYNAPSE_NAME")
	}
	o.Name = strings.TrimSpace(o.Name)
	if o.Name == "" {
		return errors.New("client: an agent name is required (Options.Name or SYNAPSE_NAME)")
	}
	if o.Token == "" {
		o.Token = os.Getenv("SYNAPSE_TOKEN")
	}
	if o.CA == "" {
		o.CA = envCA()
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.ReconnectMin <= 0 {
		o.ReconnectMin = DefaultReconnectMin
	}
	if o.ReconnectMax < o.ReconnectMin {
		o.ReconnectMax = max(DefaultReconnectMax, o.ReconnectMin)
	}
	if o.SubscriberBuffer <= 0 {
		o.SubscriberBuffer = DefaultSubscriberBuffer
	}
	if o.MaxFrameBytes <= 0 {
		o.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if v := os.Getenv(NoIdentityEnv); v != "" && v != "0" {
		o.NoIdentity = true
	}
	if o.NoIdentity {
		o.IdentityKey = nil
	} else if o.IdentityKey == nil {
		o.IdentityKey, _ = defaultIdentityKey() // none: unsigned, as before
	}
	return nil
}

// Welcome is what the hub said when the connection opened.
type Welcome struct {
	HubID            string   `json:"hub_id"`
	ProtocolVersion  int      `json:"protocol_version"`
	Features         []string `json:"features"` // additive features; empty on the reference hub
	OnlineAgents     []string `json:"online_agents"`
	ConnectedClients int      `json:"connected_clients"`
	Timestamp        float64  `json:"timestamp"` // hub clock, unix seconds
}

// HasFeature reports whether the hub announced an additive feature
// ("wait_ready", "error_code", "scoped_fanout").
func (w Welcome) HasFeature(name string) bool { return slices.Contains(w.Features, name) }

// Stats are the client's counters.
type Stats struct {
	Reconnects uint64 // successful reconnections since Dial
	Dropped    uint64 // frames a full subscriber channel lost
}

// Client is one agent's connection to a hub. Its methods are safe for
// concurrent use.
//
// Who owns what: one reader goroutine per socket reads every frame and
// dispatches it under mu, to the call in flight it answers or to the
// subscribers; it never blocks on either. Writers serialise on wmu, which
// also orders the pending list (see call). A heartbeat goroutine lives as
// long as the client; a reconnect goroutine runs while the socket is down.
type Client struct {
	opts Options
	http *http.Client // dials the hubs: TLS for wss:// (tls.go)
	cur  atomic.Int32 // index of the hub URI in use (Options.URI may list several)

	wmu sync.Mutex // held across "register the call + write its frame"

	mu      sync.Mutex // guards everything below
	conn    *conn      // nil while disconnected
	up      chan struct{}
	pending []*call
	taken   answered // keyed calls' answers, so a copy answers no other call (dispatch.go)
	subs    map[*subscriber]struct{}
	welcome Welcome
	closed  bool
	failErr error // why the client gave up, if it did
	downErr error // why the last connection attempt failed; nil once connected (DownReason)
	bound   bool  // a connection registered the name once: later ones take it over (reconnectLoop)

	done       chan struct{} // closed by Close (or when the client gives up)
	wg         sync.WaitGroup
	reconnects atomic.Uint64
	dropped    atomic.Uint64
	acked      atomic.Int64 // mailbox cursor: the highest seq acked

	identitySeq atomic.Int64 // the last signed registration's sequence (identity.go)
}

// conn is one socket's life.
type conn struct {
	ws   *websocket.Conn
	down chan struct{} // closed when this socket is gone
}

// Dial connects to the hub, registers the name and returns once the hub
// has bound it: the registration heartbeat gets no reply, so Dial follows
// it with a who_request and waits for the answer. A connection the hub
// refuses returns a *RejectedError; no hub at the URI, ErrUnreachable.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	hc, err := opts.httpClient()
	if err != nil {
		return nil, err
	}
	c := &Client{opts: opts, http: hc, subs: make(map[*subscriber]struct{}), done: make(chan struct{}), up: make(chan struct{})}
	c.acked.Store(max(opts.SinceSeq, 0))
	if opts.Background {
		c.opts.NoReconnect = false
		c.downErr = fmt.Errorf("%w: connecting to %s", ErrUnreachable, opts.URI)
		c.wg.Add(2)
		go c.reconnectLoop()
		go c.heartbeatLoop()
		return c, nil
	}
	hctx, cancel := context.WithTimeout(ctx, opts.HandshakeTimeout)
	cn, w, err := c.connect(hctx, false)
	cancel()
	if err != nil {
		return nil, err
	}
	c.install(cn, w)
	c.wg.Add(1)
	go c.heartbeatLoop()
	return c, nil
}

// Name returns the agent name the client registered.
func (c *Client) Name() string { return c.opts.Name }

// URI returns the hub's address.
func (c *Client) URI() string { return c.opts.URI }

// Welcome returns the welcome of the current (or last) connection.
func (c *Client) Welcome() Welcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.welcome
}

// HasFeature reports whether the hub announced an additive feature.
func (c *Client) HasFeature(name string) bool { return c.Welcome().HasFeature(name) }

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{Reconnects: c.reconnects.Load(), Dropped: c.dropped.Load()}
}

// Close ends the connection: calls in flight fail with ErrClosed and every
// subscription channel is closed. Claims stay with the hub until their
// leases expire (release them first if the work is done).
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	cn := c.conn
	c.conn = nil
	c.failPendingLocked(ErrClosed)
	for s := range c.subs {
		c.removeSubLocked(s)
	}
	leave := c.welcome.HasFeature("leave")
	c.mu.Unlock()
	if cn != nil {
		if leave {
			c.leave(cn)
		}
		_ = cn.ws.Close(websocket.StatusNormalClosure, "client closed")
	}
	c.wg.Wait()
	return nil
}

// leave asks the hub to free the name before the socket closes (feature
// "leave"): the hub unbinds it, answers `left` and closes the socket, so a
// process started right after this one may bind the same name. Bounded:
// a hub that does not answer within leaveTimeout is simply closed on.
func (c *Client) leave(cn *conn) {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	c.wmu.Lock()
	err := writeJSON(cn.ws, c.envelope("leave", "bye"))
	c.wmu.Unlock()
	if err != nil {
		return
	}
	select {
	case <-cn.down: // the hub closed the socket after freeing the name
	case <-ctx.Done():
	}
}

// leaveTimeout bounds how long Close waits for the hub to free the name.
const leaveTimeout = 2 * time.Second

// connect dials and registers one socket. takeover is set on reconnects:
// the name's old socket is ours and may not have been reaped yet. With
// several hub URIs (a fleet: any hub answers for any namespace) it tries
// them in turn, a reconnect starting after the one that was lost, and
// stays on the first that registers it.
func (c *Client) connect(ctx context.Context, takeover bool) (*conn, Welcome, error) {
	uris := c.opts.uris()
	start := int(c.cur.Load())
	if takeover && len(uris) > 1 {
		start++
	}
	var err error
	for i := range uris {
		k := (start + i) % len(uris)
		var cn *conn
		var w Welcome
		cn, w, err = c.connectTo(ctx, uris[k], takeover)
		if err == nil {
			c.cur.Store(int32(k))
			return cn, w, nil
		}
		var rej *RejectedError
		if errors.As(err, &rej) || ctx.Err() != nil {
			return nil, Welcome{}, err
		}
	}
	return nil, Welcome{}, err
}

// uris splits Options.URI: several hubs are given comma-separated.
func (o *Options) uris() []string {
	var out []string
	for _, u := range strings.Split(o.URI, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		out = []string{DefaultURI}
	}
	return out
}

// refusalText is what a hub said when it refused the handshake (a 403 from
// its Host and Origin policy names the flag that would allow it), as ": …",
// or "" if it said nothing.
func refusalText(resp *http.Response) string {
	if resp == nil || resp.Body == nil || resp.StatusCode < 400 {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024)) // the library kept at most 1 KiB
	if text := strings.TrimSpace(string(b)); text != "" {
		return ": " + text
	}
	return ""
}

// registrationPing is the ping_id of the ping that acks a registration.
const registrationPing = "registered"

// connectTo dials and registers one socket at uri.
func (c *Client) connectTo(ctx context.Context, uri string, takeover bool) (*conn, Welcome, error) {
	presence := c.opts.Presence
	if presence == "" {
		presence = PresenceNone
	}
	// On an open hub the welcome goes out at connect: the header asks for
	// the presence form before it does; the registration says it again.
	header := http.Header{wire.PresenceHeader: {string(presence)}}
	ws, resp, err := websocket.Dial(ctx, uri, &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled, HTTPHeader: header, HTTPClient: c.http})
	if err != nil {
		said := refusalText(resp)
		return nil, Welcome{}, fmt.Errorf("%w at %s: %w%s%s", ErrUnreachable, uri, err, said, explainDial(uri, said, err))
	}
	ws.SetReadLimit(c.opts.MaxFrameBytes)
	reg := c.envelope("heartbeat", "online")
	if c.opts.Token != "" {
		reg["token"] = c.opts.Token
	}
	if c.opts.Roles != nil {
		reg["roles"] = c.opts.Roles
	}
	switch c.opts.Fanout {
	case FanoutFull:
		reg["fanout"] = "full"
	case FanoutNamespace:
		reg["fanout"] = "scoped"
	default:
		reg["fanout"] = "own"
	}
	reg["presence"] = string(presence)
	if takeover {
		reg["takeover"] = true
	}
	if c.opts.Mailbox {
		reg["mailbox"] = true
		reg["since_seq"] = c.acked.Load()
		if c.opts.MailboxFor != "" {
			reg["mailbox_for"] = c.opts.MailboxFor
		}
	}
	reg = c.signRegistration(reg) // last: the proof covers every field, the token included
	fail := func(err error) (*conn, Welcome, error) {
		ws.CloseNow()
		return nil, Welcome{}, err
	}
	// The ping after the registration is its ack: frames of one socket
	// are handled in order, so its answer means the registration was. A
	// pong, or the "Unknown message type" error of a hub without the verb
	// (the reference's): either costs the hub nothing, where a who_request
	// would list every agent online.
	ping := c.envelope("ping", "")
	ping["ping_id"] = registrationPing
	for _, m := range []map[string]any{reg, ping} {
		if err := writeJSON(ws, m); err != nil {
			return fail(fmt.Errorf("%w at %s: register: %v", ErrUnreachable, uri, err))
		}
	}
	var (
		w       Welcome
		seen    bool
		refusal string
		early   []Frame
	)
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return fail(&RejectedError{Code: int(ce.Code), Reason: ce.Reason, Message: refusal})
			}
			return fail(fmt.Errorf("%w at %s: no answer to the registration: %v", ErrUnreachable, uri, err))
		}
		f, err := parseFrame(data)
		if err != nil {
			continue
		}
		if f.Type == "error" && f.Has("verification_result") { // an identity refusal: the close 4013 follows
			refusal = f.Payload
			continue
		}
		switch f.Type {
		case "welcome":
			if err := f.Decode(&w); err == nil {
				seen = true
			}
		case "name_conflict", "auth_denied":
			refusal = f.Payload // the close follows
		case "pong", "error":
			if f.Type == "pong" && f.String("ping_id") != registrationPing ||
				f.Type == "error" && f.Payload != "Unknown message type 'ping'." {
				early = append(early, f)
				continue
			}
			if !seen {
				return fail(fmt.Errorf("%w at %s: the hub sent no welcome", ErrUnreachable, uri))
			}
			c.mu.Lock()
			for _, e := range early {
				c.publishLocked(e)
			}
			c.mu.Unlock()
			return &conn{ws: ws, down: make(chan struct{})}, w, nil
		default:
			early = append(early, f)
		}
	}
}

// install makes cn the live socket and starts its reader.
func (c *Client) install(cn *conn, w Welcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cn.ws.CloseNow()
		return
	}
	c.conn, c.welcome = cn, w
	c.downErr, c.bound = nil, true
	close(c.up)
	c.wg.Add(1)
	go c.readLoop(cn)
}

func (c *Client) readLoop(cn *conn) {
	defer c.wg.Done()
	for {
		_, data, err := cn.ws.Read(context.Background())
		if err != nil {
			c.lost(cn)
			return
		}
		f, err := parseFrame(data)
		if err != nil {
			continue
		}
		c.dispatch(f)
	}
}

// lost handles the end of socket cn: calls in flight fail with
// ErrDisconnected and, unless the client is closed or told not to, a
// reconnect begins.
func (c *Client) lost(cn *conn) {
	cn.ws.CloseNow()
	c.mu.Lock()
	defer c.mu.Unlock()
	close(cn.down)
	if c.conn != cn {
		return // Close already let it go
	}
	c.conn = nil
	c.up = make(chan struct{})
	c.failPendingLocked(ErrDisconnected)
	if c.closed {
		return
	}
	if c.opts.NoReconnect {
		c.giveUpLocked(ErrDisconnected)
		return
	}
	c.wg.Add(1)
	go c.reconnectLoop()
}

// giveUpLocked closes the client from the inside (no more reconnects).
func (c *Client) giveUpLocked(err error) {
	c.closed = true
	c.failErr = err
	close(c.done)
	for s := range c.subs {
		c.removeSubLocked(s)
	}
}

// reconnectLoop redials with jittered exponential backoff until it
// succeeds, the client is closed, or the hub refuses the token.
func (c *Client) reconnectLoop() {
	defer c.wg.Done()
	delay := c.opts.ReconnectMin
	for {
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-c.done:
			t.Stop()
			return
		case <-t.C:
		}
		c.mu.Lock()
		takeover := c.bound // a name never bound is not ours to take over (Background)
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.HandshakeTimeout)
		cn, w, err := c.connect(ctx, takeover)
		cancel()
		if err == nil {
			if takeover {
				c.reconnects.Add(1)
			}
			c.install(cn, w)
			return
		}
		c.mu.Lock()
		c.downErr = err
		c.mu.Unlock()
		var rej *RejectedError
		if errors.As(err, &rej) && (rej.AuthFailed() || rej.IdentityRefused()) {
			c.mu.Lock()
			if !c.closed {
				c.giveUpLocked(err)
			}
			c.mu.Unlock()
			return
		}
		delay = min(delay*2, c.opts.ReconnectMax)
	}
}

// DownReason is why the client is not connected: the last connection
// attempt's error, or ErrDisconnected after a drop; nil while connected.
func (c *Client) DownReason() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.conn != nil:
		return nil
	case c.downErr != nil:
		return c.downErr
	}
	return ErrDisconnected
}

// WaitUp blocks until the client is connected, the client is closed
// (ErrClosed, with why) or ctx ends.
func (c *Client) WaitUp(ctx context.Context) error { return c.awaitUp(ctx) }

// awaitUp blocks until the client is connected.
func (c *Client) awaitUp(ctx context.Context) error {
	c.mu.Lock()
	up, closed := c.up, c.closed
	c.mu.Unlock()
	if closed {
		return c.closedErr()
	}
	select {
	case <-up:
		return nil
	case <-c.done:
		return c.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failErr != nil {
		return fmt.Errorf("%w: %w", ErrClosed, c.failErr)
	}
	return ErrClosed
}

func (c *Client) heartbeatLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			m := c.envelope("heartbeat", "alive")
			if c.opts.Roles != nil {
				m["roles"] = c.opts.Roles
			}
			c.wmu.Lock()
			c.mu.Lock()
			cn := c.conn
			c.mu.Unlock()
			if cn != nil {
				_ = writeJSON(cn.ws, m) // a failed write ends the reader, which reconnects
			}
			c.wmu.Unlock()
		}
	}
}

// envelope starts an agent frame (PROTOCOL.md §1.3). Control verbs go to
// target "System", as the reference clients send them.
func nowSeconds() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func (c *Client) envelope(typ, payload string) map[string]any {
	return map[string]any{
		"sender":    c.opts.Name,
		"target":    "System",
		"type":      typ,
		"payload":   payload,
		"timestamp": float64(time.Now().UnixNano()) / 1e9,
	}
}

func writeJSON(ws *websocket.Conn, m map[string]any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return ws.Write(ctx, websocket.MessageText, b)
}
