package hub

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/dashboard"
	"github.com/synapse-hub/synapse/delivery"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/sequencer"
	"github.com/synapse-hub/synapse/transport"
	"github.com/synapse-hub/synapse/wire"
)

// DefaultVersion is the hub_version of a hub whose Config gives none.
const DefaultVersion = "dev"

// Features are the additive protocol features announced in welcome.
var Features = []string{"wait_ready", "error_code", "scoped_fanout", "leave", "namespaces", "presence_delta", "task_bound_claims", "glob_scopes", "shared_claims", "file_scopes", "ping", "own_fanout", "private_channels"}

// Config configures a Hub. The zero value serves an open, memory-only hub
// with the reference's defaults (withDefaults applies them). A plain number
// left 0 takes its default unless its comment says 0 is off; a Setting
// says which of default, a value or off it is.
type Config struct {
	HubID                 string // default "syn-" + 8 random hex
	Version               string // the release, reported as hub_version and in /health; default DefaultVersion
	Token                 string // "" = open hub; else the first frame must carry it
	MaxClients            int    // 256 (--max-clients) → close 4013 "hub at capacity"
	MaxConnectionsPerHost int    // 0 = unlimited; the CLI defaults to DefaultMaxConnectionsPerHost (--max-connections-per-host) → close 4015
	MaxUnauthClients      int    // secured hub: sockets in the pre-auth window; default MaxClients (--max-unauth-clients) → close 4014
	MaxFrameBytes         int    // 1 MiB (--max-msg-kb 1024)
	MaxHistory            int    // 10000 chat history (--max-history)
	// SnapshotEvery is how many journal records go between two snapshots
	// (--snapshot-every): 0 = sequencer.DefaultSnapshotEvery, -1 = none.
	SnapshotEvery        int
	PendingReceiptWindow int // 1024 receipts awaiting an ack; beyond, the oldest expires (--pending-receipt-window)
	SendQueue            int // bounded outbound frames per socket (default 1024)
	// SendQueueBytes bounds the bytes waiting in one socket's send queue:
	// a socket past it is dropped as a slow consumer, so a reader that
	// stops reading while large frames are broadcast holds at most this
	// much of the hub's memory (issue 12). Default DefaultSendQueueBytes;
	// off, only SendQueue bounds it (--send-queue-kb).
	SendQueueBytes Setting[int]
	PingInterval   time.Duration // 15s
	PongTimeout    time.Duration // 15s
	AuthTimeout    time.Duration // 10s
	Limits         coord.Limits  // core limits (MaxClaimsPerPrincipal = --max-claims-per-agent)
	State          *coord.State  // recovered state; nil = empty
	Journal        *journal.Store
	// Store, when set instead of Journal, is where the sequencer commits:
	// a fleet on etcd (package cluster) keeps each namespace's authority
	// there. Chats and mailboxes are then kept in memory only, unless
	// Mail and Chats keep them in etcd too.
	Store sequencer.Journal
	// Mail, with a Store, carries directed chats across the fleet and keeps
	// them, and the mailbox watermarks, in etcd (delivery/fleet.go).
	Mail delivery.MailStore
	// Fleet, with a Store, makes state, board, who and the dashboard
	// answer for the whole fleet: claims and board read from etcd at one
	// revision, the other hubs' agents from their published rosters
	// (fleetview.go). It also publishes this hub's roster. One that
	// streams changes (federation.FleetChanges) feeds /api/events with
	// every namespace's claim and board events (fleetfeed.go).
	Fleet federation.FleetView
	// Chats, with a Store, carries every chat that is not a directed
	// letter (broadcasts, lists, globs, roles) through etcd to every hub
	// of the fleet, with its revision as msg_id, and rebuilds the chat
	// history from it at start (fleetchat.go).
	Chats delivery.ChatStore
	// Degraded, when not "", is why replay quarantined rows: gated
	// mutations are refused (PROTOCOL.md §1.4 step 14) and /health says
	// degraded.
	Degraded string
	// JournalFault, when not nil, is why Journal could only be opened
	// read-only at startup (it wraps journal.ErrReadOnly): the hub serves
	// reads, refuses every gated mutation with journal_unavailable and
	// says degraded on /health, until restarted on a writable journal.
	JournalFault error
	Clock        func() float64 // unix seconds; default time.Now
	Logger       *slog.Logger

	// Security (package gate; auth.go, ratelimit.go; docs/security.md).

	// MessageAuthKeys are the per-message HMAC keys (--message-auth-key).
	// With any configured, a signed verb carrying auth is verified.
	MessageAuthKeys []gate.MessageAuthKey
	// RequireMessageAuth refuses signed verbs without a valid auth
	// (--require-message-auth); it needs MessageAuthKeys.
	RequireMessageAuth bool
	// RateLimits are the per-socket and per-host frame limits; the zero
	// value is off (--rate-*, --secure).
	RateLimits gate.RateLimits
	// AuthFailuresPerMinute is how many failed first frames a remote host
	// may send per minute (as a burst) before its attempts are refused
	// unchecked; default DefaultAuthFailuresPerMinute, off = unlimited
	// (--auth-fail-limit). Only a hub with a Token has failures.
	AuthFailuresPerMinute Setting[int]
	// MalformedPerSecond paces the frames one socket sends that fail to
	// decode, once MalformedBurst of them are spent: the socket's reader
	// waits before its next read, so a flood of garbage costs the hub a
	// few frames a second (ratelimit.go). Default DefaultMalformedPerSecond;
	// off, unpaced as the reference (--malformed-per-socket).
	MalformedPerSecond Setting[float64]
	// MalformedBurst is how many malformed frames a socket may send at
	// once; 0 = DefaultMalformedBurst (--malformed-burst).
	MalformedBurst int
	// FramesPerSocket is a hard cap on the frames one socket sends, of
	// every kind, once FramesPerSocketBurst are spent: after each frame
	// past the burst the socket's reader waits its share of a second
	// before the next read, whatever else the hub is doing; nothing is
	// refused. Sockets of peer hubs are exempt. 0 = off (the zero Config);
	// `synapse hub` sets DefaultFramesPerSocket when it listens off
	// loopback or has a token, and leaves it off on a loopback hub without
	// one (--frames-per-socket; ratelimit.go says why).
	FramesPerSocket float64
	// FramesPerSocketBurst is how many frames a socket may send at once
	// before its reads are paced; 0 = twice FramesPerSocket
	// (--frames-burst).
	FramesPerSocketBurst int
	// HeavyLanePerSecond paces the heavy lane hub-wide while it protects
	// someone: the frames of sockets that send ahead of their answers
	// (session.chargeFrame) are always handled one at a time, and past
	// HeavyLaneBurst at this many a second in all, however many sockets
	// flood, while another socket that waits for its answers was served
	// within the last second; such sockets never wait for the lane. With
	// nobody to protect the lane is not paced (session.enterLane).
	// Default DefaultHeavyLanePerSecond; off, never paced (--heavy-lane-rate).
	HeavyLanePerSecond Setting[float64]
	// HeavyLaneBurst is how many heavy frames may pass at once once the
	// pace engages; 0 = DefaultHeavyLaneBurst (--heavy-lane-burst).
	HeavyLaneBurst int
	// AheadBurst is how many frames a socket may send ahead of its answers
	// (read with more behind them) before it is heavy, earned back at one
	// a second: a registration written with its ping, a heartbeat with a
	// call, are not a flood (ratelimit.go). Default DefaultAheadBurst;
	// off, none (--ahead-burst).
	AheadBurst Setting[int]
	// ClosesPerHostPerSecond paces new sockets from a remote host whose
	// sockets the hub keeps closing for cause (an oversized frame, a
	// wrong token, a refused takeover or name, a registration timeout, a
	// slow consumer: closeCharged): past ClosesPerHostBurst such closes,
	// each costs the host 1/rate seconds, and its next upgrade waits until
	// that is paid (at most AuthTimeout), so a reconnect loop runs at this
	// rate instead of as fast as handshakes go (ratelimit.go). Default
	// DefaultClosesPerHostPerSecond (--closes-per-host).
	ClosesPerHostPerSecond Setting[float64]
	// ClosesPerHostBurst is how many such closes a host may have before
	// its upgrades wait; 0 = DefaultClosesPerHostBurst (--closes-burst).
	ClosesPerHostBurst int
	// LeaseOfflineTTL is how long a name-ownership lease outlives its
	// holder's connection (--lease-offline-ttl; default 3600 s).
	LeaseOfflineTTL time.Duration
	// PresenceWindow is the shortest time between two presence_update
	// frames to one socket while names bind and leave in a burst
	// (presence.go); default DefaultPresenceWindow.
	PresenceWindow time.Duration

	// AllowHosts are the Host authorities answered besides loopback ones
	// (gate.RequestPolicy): "NAME" or an IP for any port, "NAME:PORT" for that
	// port, "*" for any Host (--allow-host; the CLI adds the listen
	// address and --advertise).
	AllowHosts []string
	// AllowOrigins are the browser Origins accepted besides same-origin
	// ones: "SCHEME://HOST[:PORT]", or "*" for any (--allow-origin).
	AllowOrigins []string

	// NoDashboard turns off the dashboard at / and its JSON API under
	// /api/ (--no-dashboard; package dashboard, docs/api.md).
	NoDashboard bool
	// EventBuffer is how many events wait for one /api/events stream
	// before the hub drops it as too slow (--dashboard-event-buffer;
	// default dashboard.DefaultEventBuffer).
	EventBuffer int
	// EventStreams is how many /api/events streams may be open at once
	// (--dashboard-streams; default dashboard.DefaultEventStreams).
	EventStreams int
	// RecentRefusals is how many refusals /api/state lists
	// (--dashboard-refusals; default dashboard.DefaultRecentRefusals, off = none).
	RecentRefusals Setting[int]

	// MCP, when set, is served at /mcp for every method (Streamable HTTP
	// is plain HTTP, not a WebSocket upgrade): `synapse hub` mounts the MCP
	// server of package mcpserver there (docs/mcp.md).
	MCP http.Handler

	// Credentials, roles and access rules (issue 23 items 1, 3, 4;
	// access.go, verbs_access.go, docs/security.md).

	// Access holds the per-agent credentials and role grants (package
	// access), written through to its Backing (the journal's tables);
	// nil = an empty registry in memory. Credentials are accepted on a
	// secured hub (Token or RequireCredentials).
	Access *access.Registry
	// RequireCredentials secures the hub without a shared Token: every
	// socket's first frame must carry a live credential's token. The
	// dashboard, which only the shared Token opens, is then off.
	RequireCredentials bool
	// ACL is the access rules in force at start (deny by default); nil =
	// none. ACLFile is where ReloadACL reads them again (--acl).
	ACL     *access.Policy
	ACLFile string
	// ACLShadow logs and counts the frames the rules would refuse, and
	// refuses none; reads are not filtered (--acl-shadow).
	ACLShadow bool

	// Identity pins and private channels (issue 23 items 2, 5)

	// IdentityPins is where names are pinned to the key of their first
	// signed registration (identity.go). nil: the Journal when there is
	// one, else in memory (pins then end with the process).
	IdentityPins PinStore
	// NoIdentityPins turns pinning off: signed registrations are not
	// verified unless RequireIdentity (the reference's --identity-pins "").
	NoIdentityPins bool
	// RequireIdentity refuses (4013) a registration without a valid
	// signed proof (--require-identity); unsigned names otherwise keep
	// first-come binding.
	RequireIdentity bool
	// Channels keeps private channels' membership and history durably
	// (channels.go). nil: the Journal when there is one, else in memory.
	Channels ChannelStore

	// Federation configures namespace ownership, forwarding to owners and
	// watching peers (package federation, docs/federation.md). Its zero
	// value is a default hub: it grants locally and promises no cross-host
	// mutual exclusion (INV-MH-4). HubID and Logger are filled in.
	Federation federation.Config

	// TLS (issue 23 item 6; docs/security.md, "TLS"). The listener's TLS
	// is the caller's (synapse hub wraps its listener); these are what
	// the hub itself decides.
	//
	// PeerClientCert refuses (close 4010) a peer hub's socket — its first
	// frame speaks the hub-to-hub protocol, a federation link or a fleet's
	// forward — unless its TLS client presented a certificate the
	// listener verified (synapse hub --tls-client-ca). Agents need none.
	PeerClientCert bool
	// MetricsToken, when set, is the Bearer token /metrics requires
	// (--metrics-token, --metrics-token-file): 401 without it.
	MetricsToken string
}

// StoreMaxBatch bounds a batch committed to a Store: one etcd transaction
// holds at most 128 operations by default, and a claim writes its key and
// may write an idempotency record.
const StoreMaxBatch = 48

// Defaults (the reference's flags).
const (
	DefaultMaxClients            = 256
	DefaultMaxConnectionsPerHost = 32
	DefaultMaxHistory            = 10000
	DefaultSendQueue             = 1024
	DefaultSendQueueBytes        = 16 << 20
	DefaultPingInterval          = 15 * time.Second
	DefaultPongTimeout           = 15 * time.Second
	DefaultAuthTimeout           = 10 * time.Second
)

// Hub is one Synapse hub. Its methods are safe for concurrent use.
type Hub struct {
	cfg     Config
	knobs   knobs // cfg's Settings, resolved
	log     *slog.Logger
	seq     *sequencer.Sequencer
	keeper  *transport.Keepalive // pings every socket (one goroutine)
	state   *coord.State         // owned by seq; read only on its goroutine (OnCommit)
	started float64
	epoch   string // config_epoch: an opaque fingerprint of the posture

	closing atomic.Bool
	// lane is where the frames of sockets that send ahead of their
	// answers are handled, one at a time (lane.go, session.enterLane);
	// heavyPace, touched only by the lane's holder, paces it hub-wide.
	lane      heavyLane
	heavyPace gate.Bucket
	// lastWaiting and prevWaiting are the two sockets last served outside
	// the lane (session.noteWaiting), the latest first: the lane is paced
	// while they work (Hub.protecting).
	lastWaiting, prevWaiting atomic.Pointer[session]

	conns   sync.WaitGroup // live socket handlers
	submits sync.WaitGroup // in-flight Submits, so Close lets them finish
	subMu   sync.Mutex     // orders submits.Add against Close's Wait
	nsBusy  nsInflight     // in-flight mutations by namespace (a planned move drains one)
	nextID  atomic.Int64
	// liveSockets counts the admitted sockets not being closed (welcome's
	// and who_snapshot's connected_clients): kept as sockets come and go,
	// so no welcome scans every socket (session.uncount).
	liveSockets atomic.Int64

	activeClaims atomic.Int64 // published from OnCommit for /health and /metrics

	// rendered holds broadcast frames Render encoded for a keyed request,
	// so OnCommit sends the very bytes an idempotent replay will re-send.
	// Sequencer goroutine only.
	rendered map[any][]byte

	// Each claim's and task's encoding for the reads that list them all,
	// by pointer (encodings.go).
	stateClaims *encodings[coord.Claim]     // state_snapshot's active_claims, on a fleet
	apiClaims   *encodings[coord.Claim]     // /api/state's claims
	apiTasks    *encodings[coord.BoardTask] // /api/state's and /api/board's tasks

	// fleetFeed, on a fleet, streams every namespace's claim and board
	// changes to the dashboard in place of this hub's commits; nil on one
	// hub (fleetfeed.go). Each stream's opening starts it unless it runs.
	fleetFeed federation.FleetChanges

	m *metrics

	feed *dashboard.Feed   // the dashboard's event streams and recent refusals
	dash *dashboard.Server // the dashboard's routes, reading the hub through dashHost (dashboard.go)

	mu      sync.Mutex // guards the registry below, and delivery's Locked state
	reg     registry
	history *delivery.History     // the chat history (package delivery), under mu
	dead    *delivery.DeadLetters // the dead-letter ledger, under mu
	mb      *delivery.Projection  // the mailbox pending projection, under mu

	receipts *delivery.Receipts // receipts and their pending window (its own mutex)
	mail     delivery.Mailbox   // mailbox:true and ack: the fleet's, the journal's or none (delivery.go)

	fed        *federation.Federation // namespace authority, links, peers (federation.go)
	stopMail   context.CancelFunc     // ends the fleet mail watch (chat.go: deliverLetter), the chat watch (fleetchat.go) and the roster publisher (fleetview.go)
	fleetChats fleetChats             // the fleet's chats handed over so far (fleetchat.go), under mu
	features   []string               // welcome.features: Features and the federation's

	policy    *gate.RequestPolicy // Host and Origin of every HTTP request
	verifier  *gate.Verifier      // per-message HMAC; nil without keys
	hostRates *gate.HostBuckets   // per-host frame limiter; nil when off
	authFails *gate.HostBuckets   // failed first frames per host; nil when unlimited
	closes    *gate.HostBuckets   // sockets closed for cause per host (closeCharged); nil when off
	quit      chan struct{}       // closed by Close: paced upgrades stop waiting
	access    accessState         // credentials, grants, access rules (access.go)

	// Identity pins and private channels (issue 23 items 2, 5).
	ident identityRoom // identity.go
	chans channelRoom  // channels.go
}

// knobs are the Config's Settings resolved against their defaults by
// withDefaults: plain numbers, 0 meaning off.
type knobs struct {
	sendQueueBytes         int
	authFailuresPerMinute  int
	malformedPerSecond     float64
	heavyLanePerSecond     float64
	aheadBurst             int
	closesPerHostPerSecond float64
	recentRefusals         int
}

// withDefaults fills in every default of the Config (the zero Config is an
// open, memory-only hub with the reference's defaults) and resolves its
// Settings. It is the one place defaults are applied.
func (cfg Config) withDefaults() (Config, knobs, error) {
	if cfg.HubID == "" {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return cfg, knobs{}, fmt.Errorf("hub: hub id: %w", err)
		}
		cfg.HubID = "syn-" + hex.EncodeToString(b[:])
	}
	cfg.Version = cmp.Or(cfg.Version, DefaultVersion)
	positive := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	positive(&cfg.MaxClients, DefaultMaxClients)
	positive(&cfg.MaxUnauthClients, cfg.MaxClients)
	cfg.MaxConnectionsPerHost = max(cfg.MaxConnectionsPerHost, 0) // 0 = unlimited
	positive(&cfg.MaxFrameBytes, wire.DefaultMaxFrameBytes)
	positive(&cfg.MaxHistory, DefaultMaxHistory)
	positive(&cfg.SendQueue, DefaultSendQueue)
	positive(&cfg.PendingReceiptWindow, DefaultPendingReceiptWindow)
	positive(&cfg.MalformedBurst, DefaultMalformedBurst)
	positive(&cfg.HeavyLaneBurst, DefaultHeavyLaneBurst)
	positive(&cfg.ClosesPerHostBurst, DefaultClosesPerHostBurst)
	positive(&cfg.EventBuffer, dashboard.DefaultEventBuffer)
	positive(&cfg.EventStreams, dashboard.DefaultEventStreams)
	if cfg.FramesPerSocket > 0 {
		positive(&cfg.FramesPerSocketBurst, int(2*cfg.FramesPerSocket))
	}
	duration := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	duration(&cfg.PingInterval, DefaultPingInterval)
	duration(&cfg.PongTimeout, DefaultPongTimeout)
	duration(&cfg.AuthTimeout, DefaultAuthTimeout)
	duration(&cfg.LeaseOfflineTTL, DefaultLeaseOfflineTTL)
	duration(&cfg.PresenceWindow, DefaultPresenceWindow)
	if cfg.Limits == (coord.Limits{}) {
		cfg.Limits = coord.DefaultLimits()
	}
	if cfg.Clock == nil {
		cfg.Clock = func() float64 { return float64(time.Now().UnixNano()) / 1e9 }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.State == nil {
		cfg.State = coord.New(cfg.Limits)
	}
	k := knobs{
		sendQueueBytes:         cfg.SendQueueBytes.or(DefaultSendQueueBytes),
		authFailuresPerMinute:  cfg.AuthFailuresPerMinute.or(DefaultAuthFailuresPerMinute),
		malformedPerSecond:     cfg.MalformedPerSecond.or(DefaultMalformedPerSecond),
		heavyLanePerSecond:     cfg.HeavyLanePerSecond.or(DefaultHeavyLanePerSecond),
		aheadBurst:             cfg.AheadBurst.or(DefaultAheadBurst),
		closesPerHostPerSecond: cfg.ClosesPerHostPerSecond.or(DefaultClosesPerHostPerSecond),
		recentRefusals:         cfg.RecentRefusals.or(dashboard.DefaultRecentRefusals),
	}
	return cfg, k, nil
}

// New builds a hub and starts its sequencer. The caller serves Handler and
// ends with Close, then closes the journal.
func New(cfg Config) (*Hub, error) {
	cfg, k, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	started := cfg.Clock()
	verifier, err := gate.NewVerifier(cfg.MessageAuthKeys, cfg.RequireMessageAuth, started)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	policy, err := gate.NewRequestPolicy(cfg.AllowHosts, cfg.AllowOrigins)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	h := &Hub{
		cfg:         cfg,
		knobs:       k,
		log:         cfg.Logger.With("hub_id", cfg.HubID),
		state:       cfg.State,
		started:     started,
		rendered:    make(map[any][]byte),
		stateClaims: newEncodings(func(b []byte, c *coord.Claim) []byte { return wire.AppendClaim(b, c, false) }),
		apiClaims:   newEncodings(dashboard.AppendClaim),
		apiTasks:    newEncodings(dashboard.AppendTask),
	}
	if k.heavyLanePerSecond > 0 {
		h.heavyPace = gate.NewBucket(k.heavyLanePerSecond, cfg.HeavyLaneBurst, h.started)
	}
	h.epoch = configEpoch(cfg)
	h.policy = policy
	h.verifier = verifier
	h.hostRates = gate.NewHostBuckets(cfg.RateLimits.HostPerSecond, cfg.RateLimits.HostBurst)
	h.authFails = gate.NewHostBuckets(float64(k.authFailuresPerMinute)/60, k.authFailuresPerMinute)
	h.closes = gate.NewHostBuckets(k.closesPerHostPerSecond, cfg.ClosesPerHostBurst)
	h.quit = make(chan struct{})
	h.reg.init()
	// Before the replay below, which publishes (to no stream) as it rebuilds.
	feedCfg := dashboard.FeedConfig{Buffer: cfg.EventBuffer, Streams: cfg.EventStreams,
		Refusals: k.recentRefusals, Dropped: func() { h.m.eventStreamsDropped.Inc() }}
	if h.fleetFeed, _ = cfg.Fleet.(federation.FleetChanges); h.fleetFeed != nil {
		feedCfg.Opened = h.streamOpened // fleetfeed.go
	}
	h.feed = dashboard.NewFeed(feedCfg)
	h.history = delivery.NewHistory(cfg.MaxHistory)
	h.dead = delivery.NewDeadLetters(events{h})
	h.mb = delivery.NewProjection(directory{h}, events{h})
	window := delivery.NewWindow(cfg.PendingReceiptWindow)
	var overflow []journal.ReceiptRow
	if cfg.Journal != nil {
		if overflow, err = delivery.Load(cfg.Journal, h.now(), h.history, window, h.mb, h.dead); err != nil {
			return nil, fmt.Errorf("hub: rebuild chat history and mailbox from the journal: %w", err)
		}
	}
	h.activeClaims.Store(int64(cfg.State.ClaimCount()))
	h.m = newMetrics(h)
	h.initAccess()
	if err := h.initIdentity(); err != nil { // identity pins (issue 23 item 2)
		return nil, fmt.Errorf("hub: identity pins from the journal: %w", err)
	}
	if err := h.initChannels(); err != nil { // private channels (issue 23 item 5)
		return nil, fmt.Errorf("hub: private channels from the journal: %w", err)
	}
	h.receipts = newReceipts(h, window)
	if cfg.Token == "" && cfg.RequireCredentials {
		h.cfg.NoDashboard = true // only the shared token opens it (access.go)
	}
	h.dash = dashboard.NewServer(dashHost{h}, h.feed, dashboard.Config{HubID: cfg.HubID, Token: cfg.Token})
	var j sequencer.Journal
	maxBatch := 0
	switch {
	case cfg.Journal != nil && cfg.Store != nil:
		return nil, errors.New("hub: give a Journal or a Store, not both")
	case cfg.Journal != nil:
		j = cfg.Journal
	case cfg.Store != nil:
		j = cfg.Store
		maxBatch = StoreMaxBatch
	}
	h.seq = sequencer.New(cfg.State, j, sequencer.Options{
		Clock:    cfg.Clock,
		OnCommit: h.onCommit,
		Logger:   cfg.Logger,
		MaxBatch: maxBatch,
		// SnapshotEvery 0 is the sequencer's default too.
		SnapshotEvery: cfg.SnapshotEvery,
	})
	fc := cfg.Federation
	fc.HubID, fc.Logger = cfg.HubID, cfg.Logger
	if h.fed, err = federation.New(fc, fedHost{h}); err != nil {
		h.seq.Close()
		return nil, fmt.Errorf("hub: federation: %w", err)
	}
	h.features = append(slices.Clip(Features), h.fed.Features()...)
	if h.ident.pins != nil {
		h.features = append(h.features, "identity_pins") // identity.go
	}
	h.m.registerPeers(h)
	if cfg.Journal != nil {
		if err := h.restoreQuarantine(); err != nil {
			h.seq.Close()
			return nil, fmt.Errorf("hub: federation quarantine from the journal: %w", err)
		}
	}
	h.mail = newMailbox(h)
	h.receipts.ExpireOverflow(overflow)
	h.fed.Start()
	if cfg.Mail != nil || cfg.Fleet != nil || cfg.Chats != nil {
		ctx, cancel := context.WithCancel(context.Background())
		h.stopMail = cancel
		if cfg.Chats != nil {
			if err := h.followFleetChats(ctx); err != nil {
				cancel()
				h.fed.Close()
				h.seq.Close()
				return nil, fmt.Errorf("hub: the fleet's chat history: %w", err)
			}
		}
		if cfg.Mail != nil {
			cfg.Mail.WatchMail(ctx, h.deliverLetter)
		}
		if cfg.Fleet != nil {
			go h.publishRoster(ctx)
		}
	}
	h.keeper = transport.NewKeepalive(cfg.PingInterval, cfg.PongTimeout, h.reaped)
	return h, nil
}

// HubID returns the hub's id, stamped on every frame it sends.
func (h *Hub) HubID() string { return h.cfg.HubID }

// Handler serves WebSocket upgrades on any path, and GET /health and
// /metrics as plain HTTP on the same port (and /mcp with Config.MCP, and
// the dashboard at / with its JSON API under /api/, package dashboard). Every
// request, whatever its route, passes the Host and Origin policy first
// (gate.RequestPolicy) or gets 403.
func (h *Hub) Handler() http.Handler {
	metricsHandler := h.m.handler()
	refused := func(header string) { h.m.httpRefused.WithLabelValues(header).Inc() }
	return h.policy.Guard(refused, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mcp" && h.cfg.MCP != nil {
			h.cfg.MCP.ServeHTTP(w, r)
			return
		}
		if !transport.IsUpgrade(r) {
			switch r.URL.Path {
			case "/health":
				h.serveHealth(w, r)
				return
			case "/metrics":
				if h.metricsAllowed(w, r) {
					metricsHandler.ServeHTTP(w, r)
				}
				return
			}
			if !h.cfg.NoDashboard && h.dash.Serve(w, r) {
				return
			}
			http.Error(w, "websocket upgrade required", http.StatusUpgradeRequired)
			return
		}
		h.serveSocket(w, r)
	}))
}

// RequestPolicy is the Host and Origin policy Handler applies, for other
// listeners of the same process to apply too.
func (h *Hub) RequestPolicy() *gate.RequestPolicy { return h.policy }

// Close stops accepting sockets and frames, lets the requests already
// submitted commit and their replies reach the send queues, closes every
// socket with 1001 once its queue is written, and closes the sequencer. The
// caller closes the journal afterwards. If ctx ends first the remaining
// sockets are dropped at once.
func (h *Hub) Close(ctx context.Context) error {
	if h.closing.Swap(true) {
		return nil
	}
	close(h.quit)
	// No new Submit can start now (see beginSubmit); wait for the ones in
	// flight so their replies are queued before the sockets close.
	h.subMu.Lock()
	h.subMu.Unlock()
	waitCtx(ctx, &h.submits)
	h.feed.Close() // ends every event stream
	h.mu.Lock()
	for s := range h.reg.sessions {
		s.closeWith(1001, "hub shutting down")
	}
	h.mu.Unlock()
	err := waitCtx(ctx, &h.conns)
	if err != nil {
		h.mu.Lock()
		for s := range h.reg.sessions {
			s.kill()
		}
		h.mu.Unlock()
	}
	h.keeper.Close()
	h.fed.Close()
	if h.stopMail != nil {
		h.stopMail()
	}
	h.seq.Close()
	if err != nil {
		return fmt.Errorf("hub: close: %w", err)
	}
	return nil
}
