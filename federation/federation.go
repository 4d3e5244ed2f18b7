// Package federation spreads claim authority over several hubs, one owner
// per namespace (spec §6 INV-CR-4, §9 INV-MH-1..4; PROTOCOL.md §6):
//
//   - An Authority says, for a namespace, whether this hub decides its
//     claims (local), which hub does (remote), or why nobody may
//     (ungoverned, partitioned). Static reads the --namespace-owner map;
//     a dynamic authority (etcd) implements the same interface.
//   - A Link is this hub's long-lived, multiplexed connection to a peer: it
//     forwards an agent's claim-family frames to the namespace's owner and
//     brings back the owner's answers, in exactly the shape of a local
//     answer; with a reference peer it falls back to one socket per claim.
//   - A PeerConn is the owner's side of a link: it authenticates the peer
//     (deny-by-default, per-peer tokens), runs each forwarded frame as the
//     hub's own through Host, and delivers later frames (wait_ready, a
//     handoff to the agent) back over the link.
//   - A watch pulls each named peer's event log, verifies it (contiguity,
//     fingerprints; equivocation quarantines the peer) and folds it into
//     Observed: advisory state that never grants or revokes (INV-MH-2).
//
// Who owns what: Federation's maps are guarded by its mu; each Link owns
// its connection and pending calls under its own mu; the hub is reached
// only through Host, whose methods never call back into this package while
// holding a lock of ours.
package federation

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synapse-hub/synapse/certs"
)

// Host is what the federation needs of the hub it serves. Its methods are
// called from link and peer goroutines, never with a federation lock held.
type Host interface {
	// Now is the hub's clock in unix seconds.
	Now() float64
	// ServeForward runs one claim-family frame of agent, forwarded by hub
	// peer, as if it came from a local socket, with the quota charged to
	// from's credential when the hub checks it out, else to
	// "federation-peer:<peer>" (INV-ME-5). It returns the private replies
	// (refusals, idempotent replays); frames the commit addresses to agent
	// reach it through the directory (Federation.DeliverRemote) before
	// ServeForward returns. recipientHere says a handoff's recipient is an
	// agent of the forwarding hub.
	ServeForward(peer, agent string, from Principal, frame []byte, recipientHere bool) [][]byte
	// AgentGone ends the waits of an agent of a peer that left, or whose
	// link dropped, unless the agent is connected here too.
	AgentGone(agent string)
	// Deliver enqueues frame on the socket of a local agent; false when
	// no socket here is bound to agent.
	Deliver(agent string, frame []byte) bool
	// LogPage reads up to limit events of the hub's log after seq: the
	// events, the log's last seq, and its first seq (1 unless compacted).
	LogPage(after int64, limit int) (events []Event, end, start int64, err error)
	// Record journals an audit record (multihub_partition, multihub_heal,
	// multihub_equivocation) with the hub's group commit.
	Record(kind string, payload []byte)
}

// Config configures a Federation. HubID is required once any other field
// is set.
type Config struct {
	HubID string
	// Owners are NS=HUB_ID specs (--namespace-owner); empty = no map: the
	// hub grants locally and promises no cross-host exclusion (INV-MH-4).
	Owners []string
	// ClaimPeers maps a peer's hub id to its ws:// URI (--claim-peer).
	ClaimPeers map[string]string
	// ClaimPeerToken is what this hub presents when it forwards or pulls
	// (--claim-peer-token).
	ClaimPeerToken string
	// PeerTokens maps a peer's hub id to the token this hub accepts from it
	// (--peer-token). No entry: that peer is refused (deny-by-default).
	PeerTokens map[string]string
	// Watch maps a peer's hub id to the URI whose log this hub pulls
	// (--multihub-watch), every WatchInterval (default 30 s).
	Watch         map[string]string
	WatchInterval time.Duration
	// ForwardTimeout bounds one forward, reconnection included (default
	// 10 s, the reference's).
	ForwardTimeout time.Duration
	// MaxInflightPerPeer bounds the forwards one peer may have running on
	// this hub at once (default 256); more wait their turn.
	MaxInflightPerPeer int
	// ReferenceOnly makes this hub speak and serve only the reference's
	// shapes: no multihub_hello, no FeatureForward (for tests of the
	// fallback, and for a peer that must look like a reference hub).
	ReferenceOnly bool
	Logger        *slog.Logger

	// Authority, when set, decides ownership instead of Owners (the etcd
	// coordinator, package cluster).
	Authority Authority
	// PeerURI finds where a hub not named in ClaimPeers listens (etcd:
	// its registration); forwards to it open a link on first use.
	PeerURI func(hub string) (string, bool)
	// SharedPeerToken, when set, is accepted from any peer hub, and
	// presented when ClaimPeerToken is empty: a fleet on etcd shares one
	// secret (--cluster-token) instead of a token per pair.
	SharedPeerToken string

	// TLS is what links to wss:// peers dial with (issue 23 item 6): the
	// CA their certificates are checked against (--ca) and the client
	// certificate this hub presents (--tls-client-cert). nil: the
	// system's roots and no client certificate.
	TLS *tls.Config
}

// Defaults.
const (
	DefaultForwardTimeout     = 10 * time.Second
	DefaultWatchInterval      = 30 * time.Second
	DefaultMaxInflightPerPeer = 256
)

// Errors a Forward may return; each is refused to the agent with its
// forward_error (ForwardError).
var (
	// ErrNoRoute: the owner has no --claim-peer URI here.
	ErrNoRoute = errors.New("federation: no route to the owner")
	// ErrUnreachable: the owner could not be reached within the timeout.
	ErrUnreachable = errors.New("federation: owner unreachable")
	// ErrTimeout: the owner did not answer within the timeout.
	ErrTimeout = errors.New("federation: forward timed out")
	// ErrLost: the link dropped after the frame was sent and before its
	// answer; the owner may or may not have applied it. A frame with an
	// idem_key is re-sent instead, so this is only seen without one.
	ErrLost = errors.New("federation: link lost, outcome unknown")
	// ErrUnsupported: the owner is a reference hub, which is forwarded
	// claims only.
	ErrUnsupported = errors.New("federation: the owner accepts forwarded claims only")
	// ErrRefusedByPeer: the owner refused this hub (token, policy).
	ErrRefusedByPeer = errors.New("federation: the owner refused this hub")
)

// ForwardError is the reference's forward_error word for err.
func ForwardError(err error) string {
	switch {
	case errors.Is(err, ErrNoRoute):
		return "no_route"
	case errors.Is(err, ErrUnreachable):
		return "unreachable"
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrLost):
		return "connection_lost"
	case errors.Is(err, ErrUnsupported):
		return "unsupported"
	case errors.Is(err, ErrRefusedByPeer):
		return "peer_refused"
	}
	return "forward_failed"
}

// Federation is one hub's part in a federation. Its methods are safe for
// concurrent use.
type Federation struct {
	cfg  Config
	host Host
	log  *slog.Logger
	auth Authority
	http *http.Client // dials the peers (tls.go)

	linkMu sync.Mutex
	links  map[string]*Link // by peer hub id; configured ones at New, etcd peers on first use

	mu        sync.Mutex
	dir       map[string]sink              // agents of peers → where their frames go (owner side)
	dirLen    atomic.Int64                 // len(dir), read without mu: the hub asks on every broadcast
	declared  map[string]map[string]string // peer hub id → the owners it declared
	contested map[string][]string          // namespace → contesting hubs last journalled
	watch     *watchState                  // nil without --multihub-watch

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	Stats Stats
}

// Stats are the federation's counters, for /metrics and status.
type Stats struct {
	Forwarded       atomic.Int64 // forwards sent
	ForwardGranted  atomic.Int64 // forwarded claims the owner granted
	ForwardDenied   atomic.Int64 // forwarded claims the owner refused
	ForwardFailed   atomic.Int64 // forwards that failed (no route, timeout, lost)
	ForwardTimeouts atomic.Int64
	Served          atomic.Int64 // forwards this hub served as owner
	PeerRefused     atomic.Int64 // peer frames refused (token, not owner)
}

// New builds a hub's federation. With an empty cfg (a default hub) it
// governs nothing, dials no one and refuses every peer. Call Start once
// the hub serves.
func New(cfg Config, host Host) (*Federation, error) {
	if cfg.HubID == "" {
		return nil, ErrNoHubID
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = DefaultForwardTimeout
	}
	if cfg.WatchInterval <= 0 {
		cfg.WatchInterval = DefaultWatchInterval
	}
	if cfg.MaxInflightPerPeer <= 0 {
		cfg.MaxInflightPerPeer = DefaultMaxInflightPerPeer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	f := &Federation{
		cfg:       cfg,
		host:      host,
		log:       cfg.Logger.With("federation", cfg.HubID),
		links:     make(map[string]*Link),
		dir:       make(map[string]sink),
		declared:  make(map[string]map[string]string),
		contested: make(map[string][]string),
		http:      certs.HTTPClient(cfg.TLS), // wss:// peers: Config.TLS's roots and client certificate
	}
	if cfg.ClaimPeerToken == "" {
		cfg.ClaimPeerToken = cfg.SharedPeerToken
		f.cfg.ClaimPeerToken = cfg.SharedPeerToken
	}
	switch {
	case cfg.Authority != nil:
		f.auth = cfg.Authority
	case len(cfg.Owners) > 0:
		own, err := NewOwnership(cfg.HubID, cfg.Owners)
		if err != nil {
			return nil, err
		}
		f.auth = &Static{own: own, asserting: f.asserting}
	}
	for peer, uri := range cfg.ClaimPeers {
		if peer == cfg.HubID {
			return nil, fmt.Errorf("federation: --claim-peer names this hub (%s) itself", peer)
		}
		f.links[peer] = newLink(f, peer, uri)
	}
	for peer, uri := range cfg.Watch {
		if peer == cfg.HubID {
			return nil, fmt.Errorf("federation: --multihub-watch names this hub (%s) itself", peer)
		}
		if l, ok := f.links[peer]; ok {
			if l.uri != uri {
				return nil, fmt.Errorf("federation: peer %s has two URIs, %s (--claim-peer) and %s (--multihub-watch)", peer, l.uri, uri)
			}
			continue
		}
		f.links[peer] = newLink(f, peer, uri)
	}
	if len(cfg.Watch) > 0 {
		f.watch = newWatchState()
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	return f, nil
}

// SetAuthority replaces the ownership authority (the etcd coordinator
// installs itself here). Call before Start.
func (f *Federation) SetAuthority(a Authority) { f.auth = a }

// Start dials the peers and starts the watches.
func (f *Federation) Start() {
	if f == nil {
		return
	}
	for _, l := range f.allLinks() {
		f.wg.Add(1)
		go func() { defer f.wg.Done(); l.run(f.ctx) }()
	}
	for peer := range f.cfg.Watch {
		f.wg.Add(1)
		go func() { defer f.wg.Done(); f.watchLoop(f.ctx, peer) }()
	}
}

// Close stops the links and watches and waits for them.
func (f *Federation) Close() {
	if f == nil {
		return
	}
	f.cancel()
	for _, l := range f.allLinks() {
		l.close()
	}
	f.wg.Wait()
}

// Governed reports whether claims are routed by an ownership authority.
// Without one the hub grants locally and promises no cross-host mutual
// exclusion (INV-MH-4).
func (f *Federation) Governed() bool { return f != nil && f.auth != nil }

// HubID is this hub's id.
func (f *Federation) HubID() string { return f.cfg.HubID }

// Resolve routes ns now (Governed hubs only).
func (f *Federation) Resolve(ns string) Resolution { return f.auth.Resolve(ns) }

// Features are what this hub adds to welcome.features.
func (f *Federation) Features() []string {
	if f == nil || f.cfg.ReferenceOnly {
		return nil
	}
	return []string{FeatureForward}
}

// Principal is who a forwarded frame's socket authenticated as on the
// forwarding hub (issue 23): the id of its credential, and the name that
// credential was checked for when the socket bound it. Zero for a socket
// of the shared token or of an open hub. The owner checks it against its
// own registry and charges the credential's quota (INV-ME-5).
type Principal struct {
	Credential string // credential id; "" = none
	Name       string // the socket's bound name
}

// Forward sends one claim-family frame of a local agent to owner and
// returns the owner's private replies; frames the owner addresses to the
// agent arrive through Host.Deliver first. recipientHere: a handoff's
// recipient is an agent of this hub.
//
// A retryable frame (one with an idem_key) is re-sent after a dropped link
// until the timeout: the owner's idempotency applies it once.
func (f *Federation) Forward(ctx context.Context, owner, agent, typ string, frame []byte, recipientHere, retryable bool) ([][]byte, error) {
	return f.ForwardAs(ctx, owner, agent, Principal{}, typ, frame, recipientHere, retryable)
}

// ForwardAs is Forward for a socket that authenticated as from: the owner
// is told, checks it and charges its quota. A reference owner is not told.
func (f *Federation) ForwardAs(ctx context.Context, owner, agent string, from Principal, typ string, frame []byte, recipientHere, retryable bool) ([][]byte, error) {
	l := f.linkFor(owner)
	if l == nil {
		f.Stats.ForwardFailed.Add(1)
		return nil, fmt.Errorf("%w: %s has no --claim-peer URI here", ErrNoRoute, owner)
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.ForwardTimeout)
	defer cancel()
	f.Stats.Forwarded.Add(1)
	frames, err := l.forward(ctx, agent, from, typ, frame, recipientHere, retryable)
	if err != nil {
		f.Stats.ForwardFailed.Add(1)
		if errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			f.Stats.ForwardTimeouts.Add(1)
		}
		return nil, err
	}
	if typ == "claim" {
		// A grant reaches the agent by delivery, so a claim with no private
		// reply was granted; a replayed grant comes back as a reply.
		if len(frames) == 0 || grantedIn(frames, agent) {
			f.Stats.ForwardGranted.Add(1)
		} else {
			f.Stats.ForwardDenied.Add(1)
		}
	}
	return frames, nil
}

func (f *Federation) isClaimPeer(peer string) bool {
	if _, ok := f.cfg.ClaimPeers[peer]; ok {
		return true
	}
	if f.cfg.PeerURI != nil {
		_, ok := f.cfg.PeerURI(peer)
		return ok
	}
	return false
}

// linkFor is the link forwards to owner go over: a configured claim peer,
// or (etcd) one opened on first use at the owner's registered address. A
// link whose peer moved to another address is replaced.
func (f *Federation) linkFor(owner string) *Link {
	f.linkMu.Lock()
	defer f.linkMu.Unlock()
	l := f.links[owner]
	if _, static := f.cfg.ClaimPeers[owner]; static {
		return l
	}
	if f.cfg.PeerURI == nil {
		return nil
	}
	uri, ok := f.cfg.PeerURI(owner)
	if !ok {
		return nil
	}
	if l != nil && l.uri == uri {
		return l
	}
	if l != nil {
		l.close()
	}
	l = newLink(f, owner, uri)
	f.links[owner] = l
	if f.ctx.Err() == nil {
		f.wg.Add(1)
		go func() { defer f.wg.Done(); l.run(f.ctx) }()
	}
	return l
}

// link is the link to peer, if one was opened.
func (f *Federation) link(peer string) *Link {
	f.linkMu.Lock()
	defer f.linkMu.Unlock()
	return f.links[peer]
}

// allLinks snapshots the links.
func (f *Federation) allLinks() []*Link {
	f.linkMu.Lock()
	defer f.linkMu.Unlock()
	out := make([]*Link, 0, len(f.links))
	for _, l := range f.links {
		out = append(out, l)
	}
	return out
}

// AgentLeft tells every peer this agent forwarded through that it left,
// so the owners end its waits.
func (f *Federation) AgentLeft(agent string) {
	if f == nil {
		return
	}
	for _, l := range f.allLinks() {
		l.agentLeft(agent)
	}
}

// DeliverRemote sends frame to agent when agent belongs to a peer that
// forwarded for it (owner side); false when no peer speaks for agent. The
// hub calls it for frames whose agent is not bound locally.
func (f *Federation) DeliverRemote(agent string, frame []byte) bool {
	if f == nil || f.dirLen.Load() == 0 { // the hub's commit path: no lock when no peer speaks for anyone
		return false
	}
	f.mu.Lock()
	s := f.dir[agent]
	f.mu.Unlock()
	return s != nil && s.deliver(agent, frame)
}

// RemotePeer names the peer an agent of another hub is reached through,
// "" if none (a handoff's recipient, INV-ME-5 principal).
func (f *Federation) RemotePeer(agent string) string {
	if f == nil {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.dir[agent]; s != nil {
		return s.peerID()
	}
	return ""
}

// sink is where a peer's agent's frames go: a link's deliveries, or a
// reference request's capture.
type sink interface {
	deliver(agent string, frame []byte) bool
	peerID() string
}

func (f *Federation) bind(agent string, s sink) (restore func()) {
	f.mu.Lock()
	prev := f.dir[agent]
	f.dir[agent] = s
	f.dirLen.Store(int64(len(f.dir)))
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		if f.dir[agent] == s {
			if prev != nil {
				f.dir[agent] = prev
			} else {
				delete(f.dir, agent)
			}
		}
		f.dirLen.Store(int64(len(f.dir)))
		f.mu.Unlock()
	}
}

// unbindAll forgets every agent a sink speaks for and returns them.
func (f *Federation) unbindAll(s sink) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var gone []string
	for a, t := range f.dir {
		if t == s {
			delete(f.dir, a)
			gone = append(gone, a)
		}
	}
	f.dirLen.Store(int64(len(f.dir)))
	sort.Strings(gone)
	return gone
}

func (f *Federation) unbind(agent string, s sink) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dir[agent] == s {
		delete(f.dir, agent)
		f.dirLen.Store(int64(len(f.dir)))
		return true
	}
	return false
}

// peerDeclared records the ownership map a peer declared on its link.
func (f *Federation) peerDeclared(peer string, owners map[string]string) {
	if len(owners) > MaxOwnersDeclared {
		f.log.Warn("federation: peer declared too many namespaces; ignoring its map", "peer", peer, "count", len(owners))
		owners = nil
	}
	f.mu.Lock()
	f.declared[peer] = owners
	f.mu.Unlock()
}

// declaredOwners is the map this hub tells its peers.
func (f *Federation) declaredOwners() map[string]string {
	if f.auth == nil {
		return nil
	}
	return f.auth.Declared()
}

// Authority is the ownership authority in force (nil on a default hub).
func (f *Federation) Authority() Authority { return f.auth }

// RoutesBoard reports whether board writes are routed like claims: on a
// fleet, whose boards live with the namespaces' state.
func (f *Federation) RoutesBoard() bool {
	_, ok := f.auth.(Fleet)
	return ok
}
