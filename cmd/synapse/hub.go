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
	"syscall"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/journal"
)

const hubUsage = `Usage: synapse hub [flags]

Runs the coordination hub: WebSocket (protocol v2) and HTTP (/health, /metrics)
on one port. With no flags it listens on ws://127.0.0.1:8876 and keeps its
journal in %s, so a restart remembers every claim it acknowledged.

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
	maxMsgKB, maxHistory   int
	maxClaims              int
	logJSON                bool
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
	fs.IntVar(&f.maxMsgKB, "max-msg-kb", 1024, "largest inbound frame in KiB (close 1009 beyond)")
	fs.IntVar(&f.maxHistory, "max-history", 10000, "chat messages kept for history and resume")
	fs.IntVar(&f.maxClaims, "max-claims-per-agent", coord.MaxClaimsPerAgent, "live claims per quota principal")
	fs.BoolVar(&f.logJSON, "log-json", false, "log as JSON lines on stderr")
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
	if err := checkExposure(f); err != nil {
		fmt.Fprintln(stderr, "synapse hub:", err)
		return 2
	}

	cfg := hub.Config{
		HubID: f.hubID, Token: f.token,
		MaxClients: f.maxClients, MaxConnectionsPerHost: f.maxPerHost,
		MaxFrameBytes: f.maxMsgKB << 10, MaxHistory: f.maxHistory,
		Limits: coord.Limits{MaxClaimsPerPrincipal: f.maxClaims},
		Logger: log,
	}
	var store *journal.Store
	journalDesc := "memory only (--no-db): a restart forgets every claim"
	if !f.noDB {
		if err := os.MkdirAll(filepath.Dir(f.db), 0o700); err != nil {
			fmt.Fprintf(stderr, "synapse hub: cannot create the journal's folder: %v. Choose another with --db PATH.\n", err)
			return 1
		}
		var err error
		store, err = journal.Open(f.db, journal.Options{HubID: f.hubID})
		if err != nil {
			fmt.Fprintf(stderr, "synapse hub: cannot open the journal %s: %v. Is another hub using it? Choose another with --db PATH, or run 'synapse journal check %s'.\n", f.db, err, f.db)
			return 1
		}
		defer store.Close()
		start := time.Now()
		rec, err := journal.Replay(store, cfg.Limits, float64(time.Now().UnixNano())/1e9, journal.ReplayOptions{Logger: log})
		if err != nil {
			fmt.Fprintf(stderr, "synapse hub: cannot replay the journal %s: %v. Run 'synapse journal check %s' to see what is wrong.\n", f.db, err, f.db)
			return 1
		}
		cfg.State, cfg.Journal = rec.State, store
		if cfg.HubID == "" {
			cfg.HubID = store.HubID() // a journal keeps its hub's identity across restarts
		}
		if rec.Degraded() {
			cfg.Degraded = fmt.Sprintf("%d journal rows could not be replayed (incomplete history: %v); run 'synapse journal check %s'", rec.QuarantinedCount, rec.Incomplete, f.db)
			log.Warn("journal recovery needed: mutations are refused", "quarantined", rec.QuarantinedCount, "check", "synapse journal check "+f.db)
		}
		journalDesc = fmt.Sprintf("%s (seq %d; %d claims restored from snapshot %d + %d events in %s)",
			f.db, rec.LastSeq, rec.State.ClaimCount(), rec.SnapshotSeq, rec.Events, time.Since(start).Round(time.Millisecond))
	}
	h, err := hub.New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "synapse hub:", err)
		return 1
	}
	addr := net.JoinHostPort(f.host, strconv.Itoa(f.port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		h.Close(context.Background())
		fmt.Fprintf(stderr, "synapse hub: cannot listen on %s: %v. Is another hub running? Choose another with --port.\n", addr, err)
		return 1
	}
	srv := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "synapse hub %s listening on ws://%s (hub_id %s, protocol v%d)\njournal: %s\n", hub.Version, ln.Addr(), h.HubID(), WireProtocolVersion, journalDesc)

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
	if err := h.Close(ctx); err != nil {
		log.Warn("hub close", "err", err)
	}
	srv.Shutdown(ctx)
	fmt.Fprintln(stdout, "synapse hub: stopped cleanly")
	return 0
}

// checkExposure refuses to serve off loopback without a token unless told.
func checkExposure(f hubFlags) error {
	ip := net.ParseIP(f.host)
	loopback := f.host == "localhost" || (ip != nil && ip.IsLoopback())
	if !loopback && f.token == "" && !f.insecure {
		return fmt.Errorf("refusing to listen on %s without a token: anyone who can reach it could act as any agent. Set --token (or SYNAPSE_TOKEN), or pass --insecure-off-loopback if the network is trusted", f.host)
	}
	return nil
}
