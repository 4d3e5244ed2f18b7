package main

// mcp: the MCP server (package mcpserver) over stdio, or over Streamable
// HTTP with --http.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/mcpserver"
)

const mcpUsage = `Usage: synapse mcp [--name NAME] [--tools full|minimal] [--http ADDR]

Serves the hub to an AI agent host (Claude Code, Codex, Cursor) as an MCP
server acting as agent --name: tools to claim, release, wait, message and
plan, and the resources synapse://board, synapse://claims and
synapse://inbox, with change notifications. Claims made through it are
renewed in the background until released or the server exits (then they
last until their lease runs out).

By default it speaks MCP on stdin/stdout: the host starts it. It completes
the MCP handshake even when the hub is down or --name is held by another
live connection: every tool then answers with the reason, and the server
connects (and binds the name) in the background as soon as it can. 'synapse init
claude|codex|gemini|opencode|cursor' writes the host's configuration for you. With --http
ADDR it serves Streamable HTTP at http://ADDR/mcp instead; each request
names its agent with ?name=PROJECT/AGENT or the header X-Synapse-Name
(default --name). The hub serves the same endpoint at /mcp.

Tools (--tools full): claim renew release handoff claim_update checkpoint
wait send inbox who status board task_declare task_update task_progress.
--tools minimal: claim release wait send inbox status. claim_update changes a
claim you hold; task_update changes a task on the board. Tools list no
output schemas (their results carry structured content all the same);
--output-schemas lists them (tools/list grows from about 7 KB to 20 KB).

Wait: the wait tool gives up after --wait-default (50s) unless the call
says timeout_seconds (at most 3600), and sends notifications/progress every
--progress-every (10s) to a client that gave a progress token.

Channel events (Claude Code's claude/channel; --channel=false turns them
off): the server pushes a new turn to an idle agent for a directed message,
a task it waited on coming free, a handoff to it, its lease nearing expiry
(--lease-lead before, 5m; for claims this server does not renew), a board
task suggested to it becoming ready, and the claim that refused it going
away. Claude Code needs 'claude --dangerously-load-development-channels
server:synapse' to take them (docs/mcp.md, "Channels").

See docs/mcp.md.
`

func runMCP(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("mcp", mcpUsage, "", stderr)
	f.register(fs)
	tools := fs.String("tools", "full", "tool profile: full or minimal")
	httpAddr := fs.String("http", "", "serve Streamable HTTP on this address (e.g. 127.0.0.1:8877) instead of stdio")
	channelOn := fs.Bool("channel", true, "declare claude/channel and push channel events (Claude Code)")
	leaseLead := fs.Duration("lease-lead", mcpserver.DefaultLeaseLead, "warn this long before a lease this server does not renew ends (channel event lease_expiring)")
	waitDefault := fs.Duration("wait-default", mcpserver.DefaultWait, "the wait tool's timeout when the call gives none (keep it under a client's request timeout: 60s for the TypeScript SDK)")
	progressEvery := fs.Duration("progress-every", mcpserver.DefaultProgressEvery, "how often the wait tool sends notifications/progress to a client that gave a progress token")
	outputSchemas := fs.Bool("output-schemas", false, "list each tool's output schema in tools/list (about 13 KB more)")
	var allowHosts, allowOrigins listFlag
	registerAllowLists(fs, &allowHosts, &allowOrigins)
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "mcp", "unexpected argument %q", pos[0])
	}
	profile, err := mcpserver.ParseProfile(*tools)
	if err != nil {
		return usageError(stderr, "mcp", "%v", err)
	}
	if err := f.resolve(); err != nil {
		fmt.Fprintf(stderr, "synapse mcp: %v\n", err)
		return exitUsage
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--lease-lead", *leaseLead}, {"--wait-default", *waitDefault}, {"--progress-every", *progressEvery}} {
		if d.v <= 0 {
			return usageError(stderr, "mcp", "%s %s: want a positive duration, e.g. 30s", d.flag, d.v)
		}
	}
	tuning := mcpTuning{channel: mcpserver.ChannelOptions{Off: !*channelOn, LeaseLead: *leaseLead},
		waitDefault: *waitDefault, progressEvery: *progressEvery, outputSchemas: *outputSchemas}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *httpAddr != "" {
		policy, hosts, err := mcpRequestPolicy(*httpAddr, allowHosts, allowOrigins)
		if err != nil {
			return usageError(stderr, "mcp", "%v", err)
		}
		fmt.Fprintln(stdout, describeRequestPolicy(hosts, allowOrigins))
		return serveMCPHTTP(ctx, &f, profile, tuning, *httpAddr, policy, stdout, stderr, log)
	}

	// With the hub up the server starts connected. Otherwise its client
	// connects in the background, so the MCP handshake still completes:
	// with the hub down or the name taken each tool says so, the log says
	// so, and the server binds once it can (issue 21).
	f.fanout = mcpserver.Fanout
	c, err := f.dial(ctx, f.name, true)
	if err != nil {
		log.Warn("synapse mcp: cannot connect to the hub yet; serving MCP anyway and retrying", "uri", f.uri, "name", f.name, "err", err)
		o := f.options(f.name)
		o.Fanout, o.Background = mcpserver.Fanout, true
		c, err = client.Dial(ctx, o)
	}
	if err != nil {
		return f.failure(stderr, "mcp", err)
	}
	defer c.Close()
	go logConnection(ctx, c, log)
	wd, _ := os.Getwd()
	s := mcpserver.New(mcpserver.Options{Client: c, Profile: profile, Version: version, Logger: log, Ledger: ledgerFor(wd), Checkout: projectRoot(wd),
		Channel: tuning.channel, WaitDefault: tuning.waitDefault, ProgressEvery: tuning.progressEvery, OutputSchemas: tuning.outputSchemas})
	defer s.Close()
	// stdout carries the protocol: nothing else may be written there.
	// Every request read before stdin ends is answered before the exit.
	if err := s.Run(ctx, mcpserver.DrainingTransport(&mcp.StdioTransport{})); err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) && !errors.Is(err, mcp.ErrConnectionClosed) {
		fmt.Fprintf(stderr, "synapse mcp: %v\n", err)
		return exitRefused
	}
	return exitOK
}

// mcpTuning is the flags that shape the tools and the channel events.
type mcpTuning struct {
	channel       mcpserver.ChannelOptions
	waitDefault   time.Duration
	progressEvery time.Duration
	outputSchemas bool
}

// mcpDialer connects agents for an HTTP MCP endpoint, reconnecting: base
// is the hub's address, token and TLS, uri (if not nil) its address when
// it is known only once the hub listens.
func mcpDialer(base client.Options, uri func() string, timeout func() time.Duration) func(context.Context, string) (*client.Client, error) {
	return func(ctx context.Context, name string) (*client.Client, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout())
		defer cancel()
		o := base
		o.Name, o.Fanout = name, mcpserver.Fanout
		if uri != nil {
			o.URI = uri()
		}
		return client.Dial(ctx, o)
	}
}

// mcpRequestPolicy is the hub's Host and Origin policy for `synapse mcp
// --http ADDR` (docs/security.md, "Host and Origin").
func mcpRequestPolicy(addr string, allowHosts, allowOrigins []string) (*gate.RequestPolicy, []string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--http %q: want HOST:PORT, e.g. 127.0.0.1:8877", addr)
	}
	hosts, err := allowedHostsFor(host, "", allowHosts)
	if err != nil {
		return nil, nil, err
	}
	p, err := gate.NewRequestPolicy(hosts, allowOrigins)
	return p, hosts, err
}

func serveMCPHTTP(ctx context.Context, f *clientFlags, profile mcpserver.Profile, tuning mcpTuning, addr string, policy *gate.RequestPolicy, stdout, stderr io.Writer, log *slog.Logger) int {
	h := mcpserver.NewHTTPHandler(mcpserver.HTTPOptions{
		Dial:        mcpDialer(f.options(""), nil, func() time.Duration { return f.timeout }),
		DefaultName: f.name, Token: f.token, Profile: profile, Version: version, Logger: log,
		Channel: tuning.channel, WaitDefault: tuning.waitDefault, ProgressEvery: tuning.progressEvery, OutputSchemas: tuning.outputSchemas,
		HostChecked: true, // policy, below, checks Host and Origin as the hub does
	})
	defer h.Close()
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "synapse mcp: cannot listen on %s: %v. Choose another --http address.\n", addr, err)
		return exitRefused
	}
	srv := &http.Server{Handler: policy.Guard(nil, mux), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "synapse mcp: Streamable HTTP on http://%s/mcp for the hub at %s (default agent %s; ?name= or %s picks another)\n",
		ln.Addr(), f.uri, f.name, mcpserver.NameHeader)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		fmt.Fprintf(stderr, "synapse mcp: server stopped: %v\n", err)
		return exitRefused
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	return exitOK
}

// hubMCP is the hub's /mcp: each agent dials the hub itself over loopback
// WebSocket (self() is its address once listening), with the hub's token,
// which MCP clients must then present as a Bearer token. On a TLS hub
// self() is wss:// and tlsCfg (certs.PinnedConfig) trusts the hub's own
// certificate.
func hubMCP(token string, tlsCfg *tls.Config, self func() string, log *slog.Logger) *mcpserver.HTTPHandler {
	return mcpserver.NewHTTPHandler(mcpserver.HTTPOptions{
		Dial:  mcpDialer(client.Options{Token: token, TLS: tlsCfg}, self, func() time.Duration { return 10 * time.Second }),
		Token: token, Version: version, Logger: log,
		HostChecked: true, // the hub's Handler checks Host and Origin first
	})
}

// loopbackURI is how the hub reaches itself: its listening address, with
// loopback for a wildcard host.
func loopbackURI(host string, addr net.Addr) string {
	port := 0
	if ta, ok := addr.(*net.TCPAddr); ok {
		port = ta.Port
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "ws://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// logConnection logs when the client is not connected, and why, and when it
// connects again: what `synapse mcp`'s host shows as the server's log.
func logConnection(ctx context.Context, c *client.Client, log *slog.Logger) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	var said string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		why, now := c.DownReason(), ""
		if why != nil {
			now = why.Error()
		}
		switch {
		case now == said:
		case now != "":
			log.Warn("synapse mcp: not connected to the hub; tools answer with the reason until it is", "uri", c.URI(), "name", c.Name(), "reason", now)
		default:
			log.Warn("synapse mcp: connected to the hub", "uri", c.URI(), "name", c.Name())
		}
		said = now
	}
}
