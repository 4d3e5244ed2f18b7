package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/synapse-hub/synapse/cluster"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/dashboard"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/sequencer"
)

const hubUsage = `Usage: synapse hub [flags]

Runs the coordination hub: WebSocket (protocol v2) and HTTP (/health, /metrics,
the dashboard at /, its JSON API under /api/) on one port. With no flags it
listens on ws://127.0.0.1:8876 and keeps its journal in %s,
so a restart remembers every claim it acknowledged.

With --tls-cert and --tls-key the same port speaks TLS only: wss:// and
https://; clients then need --ca FILE (or SYNAPSE_CA) unless a CA they
already trust signed the certificate. SIGHUP re-reads the certificate
('synapse tls selfsigned --out DIR' makes a pair for testing). Listening off
loopback without TLS prints a warning (docs/security.md, "TLS").

Stop it with Ctrl-C (SIGINT) or SIGTERM: it stops accepting, finishes the
batch in flight, closes the journal and exits 0.

Flags:
`

// defaultJournalPath is the per-user journal: $XDG_STATE_HOME/synapse/hub.db,
// else ~/.local/state/synapse/hub.db.
func defaultJournalPath() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "synapse-hub.db"
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "synapse", "hub.db")
}

type hubFlags struct {
	host, hubID, token, db string
	port                   int
	noDB, insecure         bool
	maxClients, maxPerHost int
	maxUnauth              int
	maxMsgKB, maxHistory   int
	leaseOfflineTTL        float64
	logJSON                bool
	limits                 coord.Limits   // the core's limits (registerLimits)
	journalMaxKB           int64          // the journal file's cap (--journal-max-kb)
	idemWindow             time.Duration  // how long idempotency records answer (--idempotency-window)
	compactBatch           int            // rows per online compaction transaction (--journal-compact-batch)
	retain                 journal.Retain // how long chat, receipt and audit rows are kept (--retain)
	snapshotEvery          int            // records between snapshots (--snapshot-every)
	malformedRate          float64
	malformedBurst         int
	closesRate             float64
	framesRate             float64
	framesBurst            int
	heavyRate              float64
	heavyBurst             int
	aheadBurst             int
	closesBurst            int
	sendQueue              int
	sendQueueKB            int
	pendingReceipts        int
	pingInterval           time.Duration
	pongTimeout            time.Duration
	authTimeout            time.Duration
	presenceWindow         time.Duration
	eventBuffer            int // the dashboard's limits (docs/api.md)
	eventStreams           int
	recentRefusals         int

	// security (docs/security.md)
	tokenFile, keyFile        string
	keySpecs                  keySpecs
	requireMsgAuth, secure    bool
	ratePerAgent, ratePerHost float64
	burstAgent, burstHost     int
	authFailLimit             int

	// federation (docs/federation.md)
	owners, claimPeers, peerTokens, watches keySpecs
	ownerFile, peerTokenFile                string
	claimPeerToken, claimPeerTokenFile      string

	// fleet on etcd (docs/scale-out.md)
	etcd, advertise, etcdPrefix    string
	clusterToken, clusterTokenFile string
	etcdLeaseTTL                   time.Duration
	watchInterval, forwardTimeout  time.Duration

	// Host and Origin policy (hub_origin.go)
	allowHosts, allowOrigins listFlag

	pprofAddr string // Go's profiler on a loopback listener of its own (--pprof)

	access accessFlags // --credentials, --acl, --acl-shadow (hub_access.go)
	tls    tlsFlags    // TLS, the /metrics token (hub_tls.go)
}

func runHub(args []string, stdout, stderr io.Writer) int {
	var f hubFlags
	fs := flag.NewFlagSet("hub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, hubUsage, defaultJournalPath()); fs.PrintDefaults() }
	fs.StringVar(&f.host, "host", "127.0.0.1", "address to listen on (loopback by default)")
	fs.IntVar(&f.port, "port", 8876, "port for WebSocket and HTTP")
	fs.StringVar(&f.db, "db", defaultJournalPath(), "journal file (SQLite, created with mode 0600)")
	fs.BoolVar(&f.noDB, "no-db", false, "keep everything in memory: a restart forgets every claim")
	fs.StringVar(&f.token, "token", os.Getenv("SYNAPSE_TOKEN"), "connect token agents must present (env SYNAPSE_TOKEN)")
	fs.BoolVar(&f.insecure, "insecure-off-loopback", false, "allow listening off loopback without a token")
	fs.StringVar(&f.hubID, "hub-id", "", "hub id shown to clients (default syn-<8 hex>)")
	fs.IntVar(&f.maxClients, "max-clients", 256, "sockets the hub accepts at once (close 4013 beyond)")
	fs.IntVar(&f.maxPerHost, "max-connections-per-host", 32, "sockets per remote address, 0 = unlimited (close 4015 beyond)")
	fs.IntVar(&f.maxUnauth, "max-unauth-clients", 0, "with a token: sockets that have not yet authenticated, 0 = --max-clients (close 4014 beyond)")
	fs.IntVar(&f.maxMsgKB, "max-msg-kb", 1024, "largest inbound frame in KiB (close 1009 beyond)")
	fs.IntVar(&f.maxHistory, "max-history", 10000, "chat messages kept for history and resume")
	f.registerLimits(fs)
	fs.Float64Var(&f.leaseOfflineTTL, "lease-offline-ttl", hub.DefaultLeaseOfflineTTL.Seconds(),
		"seconds a name-ownership lease (an agent that registered with lease:true) outlives its connection; others get close 4016")
	fs.BoolVar(&f.logJSON, "log-json", false, "log as JSON lines on stderr")
	fs.StringVar(&f.pprofAddr, "pprof", "", "serve Go's profiler (/debug/pprof/) at this loopback `ADDR` (e.g. 127.0.0.1:6060), apart from the hub's port; see docs/benchmarks.md")
	noMCP := fs.Bool("no-mcp", false, "do not serve MCP (Streamable HTTP) at /mcp; see 'synapse mcp --help'")
	noDashboard := fs.Bool("no-dashboard", false, "do not serve the dashboard at / and its JSON API under /api/ (docs/dashboard.md, docs/api.md)")
	fs.StringVar(&f.tokenFile, "token-file", "", "read the connect token from the first line of `PATH` (not world-readable; keeps it out of ps and shell history)")
	fs.IntVar(&f.authFailLimit, "auth-fail-limit", hub.DefaultAuthFailuresPerMinute, "failed token attempts per remote host per minute before the host's attempts are refused unchecked (close 4010), 0 = unlimited")
	fs.Var(&f.keySpecs, "message-auth-key", "per-message HMAC key `KEY_ID:SECRET:SENDER[,SENDER…]`: signed claim-family frames from those senders are verified (repeatable; the secret shows in ps, prefer --message-auth-key-file)")
	fs.StringVar(&f.keyFile, "message-auth-key-file", "", "read per-message HMAC keys from `PATH`, one KEY_ID:SECRET:SENDER[,…] per line (not world-readable)")
	fs.BoolVar(&f.requireMsgAuth, "require-message-auth", false, "refuse claim, release, task_update, handoff, checkpoint and resource frames that are not signed with a configured key (signed −10 s/+1 s of the hub clock, nonce not replayed)")
	fs.BoolVar(&f.secure, "secure", false, "turn on rate limits: per agent 100/s burst 20, per host 500/s burst 100 (the --rate-* flags override)")
	fs.Float64Var(&f.ratePerAgent, "rate-per-agent", 0, "non-heartbeat frames per second one socket may send, 0 = off (\"Rate limit exceeded.\")")
	fs.IntVar(&f.burstAgent, "rate-burst-agent", 0, "frames one socket may send at once above --rate-per-agent (0 = one second's worth)")
	fs.Float64Var(&f.ratePerHost, "rate-per-host", 0, "frames per second all sockets of one remote address may send, 0 = off (\"Host rate limit exceeded.\")")
	fs.IntVar(&f.burstHost, "rate-burst-host", 0, "frames one remote address may send at once above --rate-per-host (0 = one second's worth)")
	f.registerOrigin(fs)
	f.registerFederation(fs)
	f.registerFleet(fs)
	f.access.register(fs)
	f.registerTLS(fs)
	idf := registerIdentityFlags(fs) // identity pins (hub_identity.go)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "synapse hub: unexpected argument %q. Run 'synapse hub --help'.\n", fs.Arg(0))
		return 2
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, nil)
	if f.logJSON {
		handler = slog.NewJSONHandler(stderr, nil)
	}
	log := slog.New(handler)
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	sec, err := resolveSecurity(&f, set)
	if err != nil {
		fmt.Fprintln(stderr, "synapse hub:", err)
		return 2
	}
	if err := checkExposure(f); err != nil {
		fmt.Fprintln(stderr, "synapse hub:", err)
		return 2
	}
	f.framesRate = framesPerSocket(f, set)
	tlsOn, err := f.tls.setUp(log)
	if err != nil {
		fmt.Fprintln(stderr, "synapse hub:", err)
		return 2
	}
	metricsToken, err := f.tls.resolveMetricsToken()
	if err != nil {
		fmt.Fprintln(stderr, "synapse hub:", err)
		return 2
	}

	cfg := hub.Config{
		Version: version,
		HubID:   f.hubID, Token: f.token,
		MaxClients: f.maxClients, MaxConnectionsPerHost: f.maxPerHost, MaxUnauthClients: f.maxUnauth,
		MaxFrameBytes: f.maxMsgKB << 10, MaxHistory: f.maxHistory, SnapshotEvery: f.snapshotEvery,
		Limits:          f.limits,
		LeaseOfflineTTL: time.Duration(f.leaseOfflineTTL * float64(time.Second)),
		SendQueue:       f.sendQueue, SendQueueBytes: hub.Set(f.sendQueueKB << 10), PendingReceiptWindow: f.pendingReceipts,
		PingInterval: f.pingInterval, PongTimeout: f.pongTimeout, AuthTimeout: f.authTimeout, PresenceWindow: f.presenceWindow,
		MalformedPerSecond: hub.Set(f.malformedRate), MalformedBurst: f.malformedBurst,
		ClosesPerHostPerSecond: hub.Set(f.closesRate), ClosesPerHostBurst: f.closesBurst,
		FramesPerSocket: f.framesRate, FramesPerSocketBurst: f.framesBurst,
		HeavyLanePerSecond: hub.Set(f.heavyRate), HeavyLaneBurst: f.heavyBurst, AheadBurst: aheadBurst(f.aheadBurst),
		NoDashboard: *noDashboard, EventBuffer: f.eventBuffer, EventStreams: f.eventStreams, RecentRefusals: hub.Set(f.recentRefusals),
		Logger: log,
	}
	if cfg.Federation, err = f.federationConfig(); err != nil {
		fmt.Fprintln(stderr, "synapse hub:", err)
		return 2
	}
	cfg.Federation.TLS, cfg.PeerClientCert, cfg.MetricsToken = tlsOn.peer, tlsOn.requirePeerCert, metricsToken
	cfg.MessageAuthKeys, cfg.RequireMessageAuth = sec.MessageAuthKeys, sec.RequireMessageAuth
	idf.apply(&cfg)
	cfg.RateLimits, cfg.AuthFailuresPerMinute = sec.RateLimits, sec.AuthFailuresPerMinute
	cfg.AllowHosts, err = f.allowedHosts()
	if err == nil {
		cfg.AllowOrigins = f.allowOrigins
		_, err = gate.NewRequestPolicy(cfg.AllowHosts, cfg.AllowOrigins) // a typo is a usage error, before the journal opens
	}
	if err != nil {
		fmt.Fprintln(stderr, "synapse hub:", err)
		return 2
	}
	var selfURI string // the hub's own ws:// (wss:// with TLS) address, set once listening: /mcp dials it
	closeMCP := func() {}
	if !*noMCP {
		m := hubMCP(f.token, tlsOn.self, func() string { return selfURI }, log)
		closeMCP = func() { m.Close() }
		defer closeMCP()
		cfg.MCP = m
	}
	var store *journal.Store
	journalDesc := "memory only (--no-db): a restart forgets every claim"
	addr := net.JoinHostPort(f.host, strconv.Itoa(f.port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "synapse hub: cannot listen on %s: %v. Is another hub running? Choose another with --port.\n", addr, err)
		return 1
	}
	defer ln.Close()
	var fleet *fleetMember
	if f.etcd != "" {
		if set["db"] {
			fmt.Fprintln(stderr, "synapse hub: --etcd keeps every namespace's authority and directed mail in etcd; drop --db (broadcast chat and history are kept in memory in this mode)")
			return 2
		}
		f.noDB = true
		if fleet, err = joinFleet(&f, &cfg, ln.Addr(), tlsOn.etcd, log); err != nil {
			fmt.Fprintln(stderr, "synapse hub:", err)
			return 1
		}
		defer fleet.leave()
		journalDesc = fleet.describe()
	}
	if !f.noDB {
		if err := os.MkdirAll(filepath.Dir(f.db), 0o700); err != nil {
			fmt.Fprintf(stderr, "synapse hub: cannot create the journal's folder: %v. Choose another with --db PATH.\n", err)
			return 1
		}
		progress := func(done, total int64) { log.Info("replaying the journal", "rows", done, "of", total) }
		rec, err := journal.Recover(f.db, journal.RecoverOptions{
			Open: journal.Options{HubID: f.hubID, MaxBytes: f.journalMaxKB << 10, IdempotencyWindow: f.idemWindow, CompactBatch: f.compactBatch, Retain: f.retain, KeepChatRows: f.maxHistory,
				CompressResponses: f.compactBatch > 0},
			Limits: cfg.Limits, Now: float64(time.Now().UnixNano()) / 1e9,
			Replay: journal.ReplayOptions{Logger: log, Progress: progress},
		})
		var replayErr *journal.ReplayError
		if errors.As(err, &replayErr) {
			fmt.Fprintf(stderr, "synapse hub: cannot replay the journal %s: %v.\nThe hub did not start, so nothing was changed. Run 'synapse journal check %s' to see what is wrong.\n", f.db, replayErr.Err, f.db)
			return 1
		}
		if err != nil {
			fmt.Fprintln(stderr, "synapse hub:", journalOpenFailure(f.db, err))
			return 1
		}
		store = rec.Store
		defer store.Close()
		if cfg.JournalFault = rec.Fault; rec.Fault != nil {
			log.Error("the journal cannot be written: serving reads, refusing every mutation until it is writable and the hub restarts",
				"db", f.db, "err", rec.Fault)
		}
		cfg.State, cfg.Journal = rec.State, store
		if cfg.HubID == "" {
			cfg.HubID = rec.HubID // a journal keeps its hub's identity across restarts
		}
		if rec.DegradedReason != "" {
			cfg.Degraded = rec.DegradedReason + "; run 'synapse journal check " + f.db + "'"
			log.Warn("journal recovery needed: mutations are refused", "quarantined", rec.QuarantinedCount, "check", "synapse journal check "+f.db)
		}
		journalDesc = fmt.Sprintf("%s (seq %d; %d claims restored from snapshot %d + %d events in %s)",
			f.db, rec.LastSeq, rec.State.ClaimCount(), rec.SnapshotSeq, rec.Events, rec.Took.Round(time.Millisecond))
		if cfg.JournalFault != nil {
			journalDesc += "; READ-ONLY: every mutation is refused until it is writable and the hub restarts"
		}
	}
	if err := f.access.apply(&cfg, store, stdout); err != nil {
		fmt.Fprintln(stderr, "synapse hub:", err)
		return 2
	}
	h, err := hub.New(cfg)
	if errors.Is(err, journal.ErrDamaged) { // a damaged page that replay did not read, the hub's own rebuild did
		fmt.Fprintln(stderr, "synapse hub:", journalOpenFailure(f.db, err))
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "synapse hub:", err)
		return 1
	}
	if fleet != nil {
		if err := fleet.start(h); err != nil {
			h.Close(context.Background())
			fmt.Fprintln(stderr, "synapse hub:", err)
			return 1
		}
	}
	srv := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(handler, slog.LevelWarn)}
	ln = tlsOn.listener(ln)
	fmt.Fprintf(stdout, "synapse hub %s listening on %s://%s (hub_id %s, protocol v%d)\njournal: %s\n", version, tlsOn.scheme(), ln.Addr(), h.HubID(), WireProtocolVersion, journalDesc)
	fmt.Fprintln(stdout, describeRequestPolicy(cfg.AllowHosts, cfg.AllowOrigins))
	fmt.Fprintln(stdout, tlsOn.describe())
	if warn := plaintextWarning(f.host, tlsOn.on()); warn != "" {
		fmt.Fprintln(stdout, warn)
		fmt.Fprintln(stderr, "synapse hub: "+warn)
	}
	tlsCtx, stopTLS := context.WithCancel(context.Background())
	defer stopTLS()
	tlsOn.keepFresh(tlsCtx)
	if !*noMCP {
		selfURI = tlsOn.scheme() + strings.TrimPrefix(loopbackURI(f.host, ln.Addr()), "ws")
		fmt.Fprintf(stdout, "mcp: %s://%s/mcp?name=PROJECT/AGENT (Streamable HTTP)\n", tlsOn.httpScheme(), ln.Addr())
	}
	if !*noDashboard {
		login := ""
		if f.token != "" {
			login = " (asks for the token)"
		}
		fmt.Fprintf(stdout, "dashboard: %s://%s/%s\n", tlsOn.httpScheme(), ln.Addr(), login)
	}

	if f.pprofAddr != "" {
		stopProf, err := servePprof(f.pprofAddr, h.RequestPolicy())
		if err != nil {
			fmt.Fprintln(stderr, "synapse hub:", err)
			h.Close(context.Background())
			return 1
		}
		defer stopProf()
		fmt.Fprintf(stdout, "pprof: http://%s/debug/pprof/\n", f.pprofAddr)
	}
	defer f.access.watch(h, log)()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	select {
	case s := <-sig:
		log.Info("shutting down", "signal", s.String())
	case err := <-serveErr:
		fmt.Fprintln(stderr, "synapse hub: server stopped:", err)
		h.Close(context.Background())
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.SetKeepAlivesEnabled(false)
	ln.Close()
	closeMCP() // ends the MCP sessions and their loopback agents first
	if err := h.Close(ctx); err != nil {
		log.Warn("hub close", "err", err)
	}
	if fleet != nil {
		fleet.leave() // after the hub stopped serving: its lease, and its namespaces, go now
	}
	srv.Shutdown(ctx)
	fmt.Fprintln(stdout, "synapse hub: stopped cleanly")
	return 0
}

// registerLimits adds a flag for every limit of the core and of a socket,
// each defaulting to the value the hub uses without it.
func (f *hubFlags) registerLimits(fs *flag.FlagSet) {
	d := coord.DefaultLimits()
	l := &f.limits
	fs.IntVar(&l.MaxClaimsPerPrincipal, "max-claims-per-agent", d.MaxClaimsPerPrincipal, "live claims per quota principal (a token, or a host on an open hub)")
	fs.Float64Var(&l.DefaultTTL, "default-ttl", d.DefaultTTL, "seconds of a lease when a claim asks for none")
	fs.Float64Var(&l.MinTTL, "min-ttl", d.MinTTL, "shortest lease in seconds; shorter requests are raised to it")
	fs.Float64Var(&l.MaxTTL, "max-ttl", d.MaxTTL, "longest lease in seconds; longer requests are cut to it")
	fs.IntVar(&l.MaxPathsPerClaim, "max-paths-per-claim", d.MaxPathsPerClaim, "distinct paths a claim may list before it widens to its whole worktree")
	fs.IntVar(&l.MaxPathLength, "max-path-length", d.MaxPathLength, "characters of a path before the claim widens to its whole worktree")
	fs.IntVar(&l.MaxRetainedCheckpoints, "max-retained-checkpoints", d.MaxRetainedCheckpoints, "checkpoints kept from expired claims for their next claimant (oldest forgotten first)")
	fs.Float64Var(&l.ResourceTTL, "resource-ttl", d.ResourceTTL, "seconds a resource offer lives after its last refresh")
	fs.IntVar(&l.MaxOffersPerAgent, "max-offers-per-agent", d.MaxOffersPerAgent, "live resource offers per agent")
	fs.IntVar(&l.MaxWaitsPerAgent, "max-waits-per-agent", d.MaxWaitsPerAgent, "tasks one agent may wait on at once")
	fs.IntVar(&l.MaxBoardTasks, "max-board-tasks", d.MaxBoardTasks, "tasks on the board")
	fs.IntVar(&l.MaxNotesTotal, "max-notes", d.MaxNotesTotal, "progress notes kept in all (oldest dropped)")
	fs.IntVar(&l.MaxNotesPerAuthor, "max-notes-per-author", d.MaxNotesPerAuthor, "progress notes kept per author")
	fs.IntVar(&l.MaxNotesPerTask, "max-notes-per-task", d.MaxNotesPerTask, "progress notes kept per task")
	fs.IntVar(&f.sendQueue, "send-queue", hub.DefaultSendQueue, "frames queued to one socket before it is dropped as a slow consumer")
	fs.IntVar(&f.sendQueueKB, "send-queue-kb", hub.DefaultSendQueueBytes>>10, "KiB queued to one socket before it is dropped as a slow consumer (a reader that stops reading holds at most this), 0 = frames only (--send-queue)")
	fs.IntVar(&f.pendingReceipts, "pending-receipt-window", hub.DefaultPendingReceiptWindow, "delivery receipts awaiting the recipient's ack; one more expires the oldest, and its sender gets an expired delivery_receipt")
	fs.DurationVar(&f.pingInterval, "ping-interval", hub.DefaultPingInterval, "how often each socket is pinged")
	fs.DurationVar(&f.pongTimeout, "pong-timeout", hub.DefaultPongTimeout, "how long a ping may go unanswered before the socket is reaped")
	fs.DurationVar(&f.authTimeout, "auth-timeout", hub.DefaultAuthTimeout, "how long a new socket may take to send its first frame (close 4012)")
	fs.Float64Var(&f.malformedRate, "malformed-per-socket", hub.DefaultMalformedPerSecond, "frames per second a socket may send that fail to decode, past --malformed-burst: its reads are paced to this (docs/security.md), 0 = unpaced")
	fs.IntVar(&f.malformedBurst, "malformed-burst", hub.DefaultMalformedBurst, "frames failing to decode a socket may send before its reads are paced")
	fs.Float64Var(&f.framesRate, "frames-per-socket", 0, fmt.Sprintf("hard cap: frames per second one socket is read at, of every kind, past --frames-burst, however idle the hub: its reads are paced, nothing refused; peer hubs exempt (docs/security.md). Default %d when the hub listens off loopback or has a token, off on a loopback hub without one; 0 = off", hub.DefaultFramesPerSocket))
	fs.IntVar(&f.framesBurst, "frames-burst", hub.DefaultFramesPerSocketBurst, "frames a socket may send at once before --frames-per-socket paces its reads")
	fs.Float64Var(&f.heavyRate, "heavy-lane-rate", hub.DefaultHeavyLanePerSecond, "frames per second, hub-wide, of sockets that send ahead of their answers (floods, pipelining scripts), which are handled one at a time: past --heavy-lane-burst the lane is paced to this while agents that wait for their answers work beside it, and not at all otherwise (docs/security.md), 0 = never paced")
	fs.IntVar(&f.heavyBurst, "heavy-lane-burst", hub.DefaultHeavyLaneBurst, "heavy-lane frames that may pass at once before the lane's pace engages")
	fs.IntVar(&f.aheadBurst, "ahead-burst", hub.DefaultAheadBurst, "frames a socket may send ahead of its answers (a registration with its ping) before its frames go through the heavy lane, earned back at 1 a second; -1 = none")
	fs.Float64Var(&f.closesRate, "closes-per-host", hub.DefaultClosesPerHostPerSecond, "sockets per second one remote host may have closed for cause (oversized frame, wrong token, refused name or takeover, registration timeout, slow consumer) past --closes-burst; beyond, its new sockets wait before the upgrade (docs/security.md), 0 = off")
	fs.IntVar(&f.closesBurst, "closes-burst", hub.DefaultClosesPerHostBurst, "sockets one remote host may have closed for cause before its new sockets wait")
	fs.DurationVar(&f.idemWindow, "idempotency-window", cluster.IdemRetention, "how long the journal keeps an idempotency record after it committed: a retry with the same idem_key within it gets the first answer, one later an error frame with error_code idempotency_expired (for one more window; then the key is new), 0 = forever (docs/journal.md, Retention); a fleet on etcd keeps its records as long (0: without a lease)")
	fs.IntVar(&f.compactBatch, "journal-compact-batch", journal.DefaultCompactBatch, "rows the hub drops per transaction, in the background after each snapshot, of those the oldest snapshot kept covers (claims, updates, releases, board rows), so the file stops growing with history; a commit waits for at most one such batch (docs/journal.md, Compaction), 0 = keep every row until 'synapse journal compact'")
	f.retain = journal.DefaultRetain
	fs.Func("retain", fmt.Sprintf("how long the journal keeps each class of row after it was written, as kind=duration[,...] over the defaults %s: chat (chat rows and mailbox watermark events; the newest --max-history (%d) are always kept, and directed mail that waits — dead-lettered, or not yet acknowledged by an identity it names — is kept whatever its age, INV-DG-3), receipts (settled receipts whose notifications reached their sender), audit (denials, lapsed leases, dead-letter records), mail (the one window that drops mail that still waits; 0, the default, never does); all=D sets chat, receipts and audit; 0 = forever (docs/journal.md, Retention)", journal.DefaultRetain, journal.DefaultKeepChatRows), func(v string) error {
		r, err := journal.ParseRetain(v, f.retain)
		f.retain = r
		return err
	})
	fs.IntVar(&f.snapshotEvery, "snapshot-every", sequencer.DefaultSnapshotEvery, "records the journal takes between two snapshots of the state: a restart replays at most about this many (docs/journal.md, Snapshots); lower is a faster restart for more snapshot writes, -1 = none")
	fs.Int64Var(&f.journalMaxKB, "journal-max-kb", 0, "largest the journal file may grow, in KiB, 0 = no cap: past it every mutation is refused as on a full disk until the hub restarts with room (docs/journal.md, Disk faults)")
	fs.DurationVar(&f.presenceWindow, "presence-window", hub.DefaultPresenceWindow, "presence changes within this of the last presence_update are sent together at its end (docs/protocol.md, Presence)")
	fs.IntVar(&f.eventBuffer, "dashboard-event-buffer", dashboard.DefaultEventBuffer, "events queued to one /api/events stream before it is dropped as too slow (its browser reconnects and reloads the state)")
	fs.IntVar(&f.eventStreams, "dashboard-streams", dashboard.DefaultEventStreams, "/api/events streams open at once (503 beyond)")
	fs.IntVar(&f.recentRefusals, "dashboard-refusals", dashboard.DefaultRecentRefusals, "recent refusals /api/state and the dashboard list, 0 = none")
}

// journalOpenFailure explains why the hub's journal could not be opened
// and what to do.
func journalOpenFailure(path string, err error) string {
	switch {
	case errors.Is(err, journal.ErrDamaged):
		return fmt.Sprintf("the journal %s is damaged: %v.\nThe hub did not start, so nothing was changed. It was cut short or corrupted (a torn copy, a bad disk). "+
			"Run 'synapse journal check %s', then restore the file from a backup or a complete copy (copy it with its -wal file, the hub stopped); "+
			"do not start a hub on it (docs/journal.md, Disk faults).", path, err, path)
	case errors.Is(err, journal.ErrDiskFull):
		return fmt.Sprintf("cannot open the journal %s: %v.\nFree space on its disk, then start the hub again.", path, err)
	case errors.Is(err, journal.ErrReadOnly):
		return fmt.Sprintf("cannot open the journal %s, even read-only: %v.\nMake the file and its folder readable and writable by the hub, then start it again.", path, err)
	}
	return fmt.Sprintf("cannot open the journal %s: %v. Is another hub using it? Choose another with --db PATH, or run 'synapse journal check %s'.", path, err, path)
}

// checkExposure refuses to serve off loopback without a token unless told.
func checkExposure(f hubFlags) error {
	if !isLoopbackHost(f.host) && f.token == "" && !f.access.credentials && !f.insecure {
		return fmt.Errorf("refusing to listen on %s without a token: anyone who can reach it could act as any agent. Set --token (or SYNAPSE_TOKEN), or pass --insecure-off-loopback if the network is trusted", f.host)
	}
	return nil
}

// framesPerSocket is the hard cap per socket: --frames-per-socket if
// given (set names the flags given), else on where clients may be
// strangers (the hub listens off loopback, or has a token to keep them
// out) and off on a loopback hub without a token, whose clients are the
// user's own processes. The heavy lane protects agents from floods either
// way (hub/ratelimit.go).
func framesPerSocket(f hubFlags, set map[string]bool) float64 {
	switch {
	case set["frames-per-socket"]:
		return f.framesRate
	case f.token != "" || !isLoopbackHost(f.host):
		return hub.DefaultFramesPerSocket
	}
	return 0
}

// isLoopbackHost reports whether host, the address the hub listens on,
// is reachable from this machine only.
func isLoopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// keySpecs collects repeated --message-auth-key flags.
type keySpecs []string

func (k *keySpecs) String() string     { return strings.Join(*k, " ") }
func (k *keySpecs) Set(v string) error { *k = append(*k, v); return nil }

// resolveSecurity turns the security flags into hub settings: the token
// from --token-file (into f.token), the HMAC keys, the rate limits
// (--secure's, overridden by any --rate-* flag given) and the failed-auth
// limit. set names the flags given on the command line.
func resolveSecurity(f *hubFlags, set map[string]bool) (hub.Config, error) {
	var sec hub.Config
	if f.tokenFile != "" {
		if set["token"] {
			return sec, errors.New("give the connect token once: --token or --token-file, not both")
		}
		tok, err := gate.ReadTokenFile(f.tokenFile)
		if err != nil {
			return sec, fmt.Errorf("--token-file: %w", err)
		}
		f.token = tok // the file beats SYNAPSE_TOKEN: it was asked for explicitly
	}
	for _, spec := range f.keySpecs {
		k, err := gate.ParseMessageAuthKey(spec)
		if err != nil {
			return sec, fmt.Errorf("--message-auth-key: %w", err)
		}
		sec.MessageAuthKeys = append(sec.MessageAuthKeys, k)
	}
	if f.keyFile != "" {
		keys, err := gate.ReadMessageAuthKeyFile(f.keyFile)
		if err != nil {
			return sec, fmt.Errorf("--message-auth-key-file: %w", err)
		}
		sec.MessageAuthKeys = append(sec.MessageAuthKeys, keys...)
	}
	if f.requireMsgAuth && len(sec.MessageAuthKeys) == 0 {
		return sec, errors.New("--require-message-auth needs a key: add --message-auth-key KEY_ID:SECRET:SENDER or --message-auth-key-file PATH")
	}
	sec.RequireMessageAuth = f.requireMsgAuth
	if f.secure {
		sec.RateLimits = gate.SecureRateLimits
	}
	r := &sec.RateLimits
	for name, v := range map[string]float64{"rate-per-agent": f.ratePerAgent, "rate-per-host": f.ratePerHost} {
		if v < 0 {
			return sec, fmt.Errorf("--%s must be 0 (off) or positive, got %g", name, v)
		}
	}
	if set["rate-per-agent"] || !f.secure {
		r.AgentPerSecond = f.ratePerAgent
	}
	if set["rate-burst-agent"] || !f.secure {
		r.AgentBurst = f.burstAgent
	}
	if set["rate-per-host"] || !f.secure {
		r.HostPerSecond = f.ratePerHost
	}
	if set["rate-burst-host"] || !f.secure {
		r.HostBurst = f.burstHost
	}
	sec.AuthFailuresPerMinute = hub.Set(f.authFailLimit) // 0 = unlimited
	return sec, nil
}

// aheadBurst is --ahead-burst as a Setting: -1 is none, 0 the default.
func aheadBurst(flag int) hub.Setting[int] {
	switch {
	case flag < 0:
		return hub.Off[int]()
	case flag == 0:
		return hub.Setting[int]{}
	}
	return hub.Set(flag)
}
