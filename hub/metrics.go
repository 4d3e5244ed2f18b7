package hub

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	rtmetrics "runtime/metrics"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/transport"
	"github.com/synapse-hub/synapse/wire"
)

// metrics are the hub's Prometheus series, on a private registry. Names
// follow the reference's where one exists (PROTOCOL.md §7.1).
type metrics struct {
	reg                 *prometheus.Registry
	connections         prometheus.Gauge
	rejected            *prometheus.CounterVec
	framesIn            *prometheus.CounterVec
	framesOut           *prometheus.CounterVec
	bytesIn             prometheus.Counter
	claimsGranted       prometheus.Counter
	claimsDenied        *prometheus.CounterVec
	slowConsumers       prometheus.Counter
	eventStreamsDropped prometheus.Counter
	dashboardAuthFailed prometheus.Counter
	reaped              prometheus.Counter
	authFailures        prometheus.Counter
	authLockouts        prometheus.Counter
	upgradesPaced       prometheus.Counter
	framesPaced         prometheus.Counter
	heavyLane           prometheus.Counter
	heavyLanePaced      prometheus.Counter
	httpRefused         *prometheus.CounterVec
	messageAuthFailures *prometheus.CounterVec
	rateLimited         *prometheus.CounterVec
	malformedPaced      prometheus.Counter
	takeovers           prometheus.Counter
	takeoverQuarantines prometheus.Counter
	idemReplays         prometheus.Counter
	idemConflicts       prometheus.Counter
	chatDirected        prometheus.Counter
	chatBroadcast       prometheus.Counter
	replayed            prometheus.Counter
	receiptsExpired     prometheus.Counter
	submitSeconds       prometheus.Histogram
	commitEvents        prometheus.Histogram

	fedForwards       *prometheus.CounterVec   // verb, result
	fedForwardSeconds *prometheus.HistogramVec // verb
	fleetReadSeconds  prometheus.Histogram     // a fleet-wide read of claims and board from etcd (fleetview.go)
	fedRefused        *prometheus.CounterVec   // outcome
	fedServed         prometheus.Counter
}

func newMetrics(h *Hub) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		m.reg.MustRegister(c)
		return c
	}
	vec := func(name, help, label string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
		m.reg.MustRegister(c)
		return c
	}
	gaugeFunc := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	m.connections = prometheus.NewGauge(prometheus.GaugeOpts{Name: "synapse_connected_clients", Help: "Open WebSocket connections."})
	m.reg.MustRegister(m.connections)
	m.rejected = vec("synapse_connections_rejected_total", "Sockets refused at admission, by close code.", "code")
	m.framesIn = vec("synapse_messages_total", "Frames received, by type.", "type")
	m.framesOut = vec("synapse_frames_out_total", "Frames enqueued to sockets, by type.", "type")
	m.bytesIn = counter("synapse_bytes_in_total", "Bytes of frames received.")
	m.claimsGranted = counter("synapse_claims_granted_total", "Claims granted.")
	m.claimsDenied = vec("synapse_claims_denied_total", "Claims denied, by reason code.", "reason")
	m.slowConsumers = counter("synapse_slow_consumer_disconnects_total", "Sockets dropped because their send queue was full.")
	m.eventStreamsDropped = counter("synapse_event_streams_dropped_total", "Dashboard event streams (/api/events) dropped because their buffer was full.")
	m.dashboardAuthFailed = counter("synapse_dashboard_auth_failures_total", "Dashboard and /api requests refused for a missing or wrong token.")
	m.reaped = counter("synapse_dead_sockets_reaped_total", "Sockets dropped for a missed pong.")
	m.authFailures = counter("synapse_auth_failures_total", "First frames refused by the token gate.")
	m.framesPaced = counter("synapse_frames_paced_total", "Frames past a socket's burst under the hard cap per socket, after which its reader paused (--frames-per-socket).")
	m.heavyLane = counter("synapse_heavy_lane_frames_total", "Frames of sockets sending ahead of their answers, handled one at a time in the heavy lane.")
	m.heavyLanePaced = counter("synapse_heavy_lane_paced_total", "Heavy-lane frames that waited for the lane's hub-wide pace, which engages while sockets that wait for their answers are served beside it (--heavy-lane-rate).")
	m.upgradesPaced = counter("synapse_upgrades_paced_total", "New sockets that waited because their host's sockets were closed for cause too often (--closes-per-host).")
	m.authLockouts = counter("synapse_auth_lockout_refusals_total", "First frames refused unchecked because their host failed the token too often.")
	m.httpRefused = vec("synapse_http_refused_total", "HTTP requests and upgrades refused 403 by the Host and Origin policy, by header (host or origin).", "header")
	m.messageAuthFailures = vec("synapse_message_auth_failures_total", "Signed-verb frames refused by per-message authentication, by verification_result.", "result")
	m.rateLimited = vec("synapse_rate_limited_total", "Frames refused by a rate limiter, by scope (agent or host).", "scope")
	m.malformedPaced = counter("synapse_malformed_paced_total", "Malformed frames beyond a socket's burst, after which its reader paused (--malformed-per-socket).")
	m.takeovers = counter("synapse_takeovers_total", "Name takeovers admitted.")
	m.takeoverQuarantines = counter("synapse_takeover_quarantines_total", "Names put in takeover quarantine.")
	m.idemReplays = counter("synapse_atomic_operations_replayed_total", "Idempotent retries answered from the stored response.")
	m.idemConflicts = counter("synapse_atomic_operations_conflicts_total", "Idempotency keys reused for a different request.")
	m.chatDirected = counter("synapse_chat_directed_total", "Directed chats relayed.")
	m.chatBroadcast = counter("synapse_chat_broadcast_total", "Broadcast chats relayed.")
	m.replayed = counter("synapse_mailbox_replayed_total", "Directed chats re-sent by mailbox replay.")
	m.receiptsExpired = counter("synapse_receipts_expired_total", "Pending delivery receipts expired: evicted from the pending window (--pending-receipt-window).")
	m.submitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "synapse_commit_latency_seconds", Help: "Time from Submit to committed reply of a mutation (batching and journal included).",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
	})
	m.commitEvents = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "synapse_commit_batch_events", Help: "Events published per committed batch.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 11),
	})
	m.reg.MustRegister(m.submitSeconds, m.commitEvents)
	m.fedForwards = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "synapse_forwards_total",
		Help: "Claim-family frames forwarded to their namespace's owning hub, by verb and result (ok, or the forward_error)."}, []string{"verb", "result"})
	m.fedForwardSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "synapse_forward_seconds",
		Help: "Round trip of a forward to the owning hub, by verb.", Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16)}, []string{"verb"})
	m.fedRefused = vecOf(m, "synapse_federation_denied_total", "Claim-family frames refused by the namespace-ownership gate, by outcome (ungoverned, partitioned, remote).", "outcome")
	m.fedServed = counter("synapse_forwards_served_total", "Forwarded frames this hub ran as a namespace's owner.")
	m.fleetReadSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "synapse_fleet_read_seconds",
		Help: "A fleet-wide read of every namespace's claims and board tasks from etcd (state, board, the dashboard).", Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16)})
	m.reg.MustRegister(m.fedForwards, m.fedForwardSeconds, m.fleetReadSeconds)
	counterFunc := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	fed := func(pick func(*federation.Stats) int64) func() float64 {
		return func() float64 {
			if h.fed == nil {
				return 0
			}
			return float64(pick(&h.fed.Stats))
		}
	}
	counterFunc("synapse_forwarded_claims_total", "Claims forwarded to their namespace's owner.", fed(func(s *federation.Stats) int64 { return s.Forwarded.Load() }))
	counterFunc("synapse_forwarded_claims_granted_total", "Forwarded claims the owner granted.", fed(func(s *federation.Stats) int64 { return s.ForwardGranted.Load() }))
	counterFunc("synapse_forwarded_claims_denied_total", "Forwarded claims the owner refused.", fed(func(s *federation.Stats) int64 { return s.ForwardDenied.Load() }))
	counterFunc("synapse_forwarded_claim_timeouts_total", "Forwards that timed out.", fed(func(s *federation.Stats) int64 { return s.ForwardTimeouts.Load() }))
	counterFunc("synapse_federation_peer_refusals_total", "Peer frames refused (no --peer-token for the peer, or a wrong token).", fed(func(s *federation.Stats) int64 { return s.PeerRefused.Load() }))
	gaugeFunc("synapse_up", "1 while the hub serves.", func() float64 { return 1 })
	gaugeFunc("synapse_active_claims", "Live claims.", func() float64 { return float64(h.activeClaims.Load()) })
	gaugeFunc("synapse_online_agents", "Bound names, sidecars included.", func() float64 {
		h.mu.Lock()
		defer h.mu.Unlock()
		return float64(len(h.reg.byName))
	})
	gaugeFunc("synapse_chat_history_messages", "Chats retained in history.", func() float64 {
		h.mu.Lock()
		defer h.mu.Unlock()
		return float64(h.history.LenLocked())
	})
	gaugeFunc("synapse_pending_receipts", "Delivery receipts awaiting an ack (at most --pending-receipt-window).", func() float64 {
		return float64(h.receipts.Pending())
	})
	gaugeFunc("synapse_dead_letter_targets", "Targets with dead letters.", func() float64 {
		h.mu.Lock()
		defer h.mu.Unlock()
		return float64(h.dead.LenLocked())
	})
	gaugeFunc("synapse_dead_letters", "Directed chats that reached no live recipient, summed over the dead-letter ledger's targets.", func() float64 {
		h.mu.Lock()
		defer h.mu.Unlock()
		return float64(h.dead.SumLocked())
	})
	gaugeFunc("synapse_send_queue_frames", "Frames waiting in all send queues.", func() float64 {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := 0
		for s := range h.reg.sessions {
			n += s.queued()
		}
		return float64(n)
	})
	gaugeFunc("synapse_send_queue_max_frames", "Frames waiting in the fullest send queue.", func() float64 {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := 0
		for s := range h.reg.sessions {
			n = max(n, s.queued())
		}
		return float64(n)
	})
	gaugeFunc("synapse_journal_corrupt_rows", "1 when replay quarantined rows (gated mutations refused).", func() float64 {
		if h.cfg.Degraded != "" {
			return 1
		}
		return 0
	})
	gaugeFunc("synapse_journal_unwritable", "1 when the journal cannot be written (disk full, read-only, damaged): mutations are refused until the hub restarts.", func() float64 {
		if h.journalErr() != nil {
			return 1
		}
		return 0
	})
	gaugeFunc("synapse_sequencer_batches", "Batches the sequencer decided.", func() float64 { return float64(h.seq.Stats().Batches) })
	gaugeFunc("synapse_socket_frames_written", "Frames written to sockets (control frames included).", func() float64 { return float64(transport.Stats().Frames) })
	gaugeFunc("synapse_socket_writes", "Write system calls to sockets by writer goroutines.", func() float64 { return float64(transport.Stats().Writes) })
	gaugeFunc("synapse_socket_inline_writes", "Non-blocking socket writes by the goroutine that read the request (its own replies).", func() float64 { return float64(transport.Stats().InlineWrites) })
	gaugeFunc("synapse_socket_flush_writes", "Non-blocking socket writes by the flusher: frames for sockets whose reader did not hold them (broadcasts).", func() float64 { return float64(transport.Stats().FlushWrites) })
	gaugeFunc("synapse_sequencer_inline_calls", "Calls decided on the caller's goroutine because the sequencer was idle (no hand-off).", func() float64 { return float64(h.seq.Stats().Inline) })
	gaugeFunc("synapse_mailbox_recount_chats_read", "Directed chats read from the journal to make mailbox_pending counts exact.", func() float64 { return float64(h.mb.Read()) })
	// The process's own footprint, for soaks (synapse bench soak) and
	// dashboards: goroutines, and the heap from runtime/metrics, which reads
	// it without stopping the world (runtime.ReadMemStats would).
	gaugeFunc("synapse_go_goroutines", "Goroutines of the hub process.", func() float64 { return float64(runtime.NumGoroutine()) })
	gaugeFunc("synapse_go_heap_live_bytes", "Heap bytes the last garbage collection marked live.", runtimeMetric("/gc/heap/live:bytes"))
	gaugeFunc("synapse_go_heap_objects_bytes", "Heap bytes in objects, live or not yet swept.", runtimeMetric("/memory/classes/heap/objects:bytes"))
	gaugeFunc("synapse_sequencer_max_batch", "Most requests one batch carried.", func() float64 { return float64(h.seq.Stats().MaxBatch) })
	return m
}

// runtimeMetric reads one runtime/metrics value (a uint64 kind) per call.
func runtimeMetric(name string) func() float64 {
	return func() float64 {
		s := []rtmetrics.Sample{{Name: name}}
		rtmetrics.Read(s)
		if s[0].Value.Kind() != rtmetrics.KindUint64 {
			return 0
		}
		return float64(s[0].Value.Uint64())
	}
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// serveHealth answers GET /health with the reference's fields (§7.1).
func (h *Hub) serveHealth(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	online := len(h.reg.byName)
	h.mu.Unlock()
	status, reason, journalKind := h.health()
	corrupt := 0
	if h.cfg.Degraded != "" {
		corrupt = 1
	}
	body := map[string]any{
		"status":                   status,
		"protocol_version":         wire.ProtocolVersion,
		"hub_id":                   h.cfg.HubID,
		"version":                  h.cfg.Version,
		"uptime_seconds":           h.now() - h.started,
		"online_agents":            online,
		"active_claims":            h.activeClaims.Load(),
		"journal":                  journalKind,
		"journal_corrupt_rows":     corrupt,
		"config_epoch":             h.epoch,
		"operation_outbox_pending": 0,
	}
	if reason != "" {
		body["degraded_reason"] = reason
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// health is the hub's verdict on itself (/health, /api/state): ok,
// degraded (replay quarantined rows, or the journal cannot be written: the
// reason says what to do) or fenced (a fleet member without its etcd
// lease); why, when not ok; and where its journal is.
func (h *Hub) health() (status, reason, journal string) {
	status, journal = "ok", "memory"
	switch {
	case h.cfg.Journal != nil:
		journal = "sqlite"
	case h.cfg.Store != nil:
		journal = "etcd"
	}
	if h.cfg.Degraded != "" {
		status, reason = "degraded", h.cfg.Degraded
	}
	if err := h.journalErr(); err != nil {
		status, reason = "degraded", journalHealth(h.journalName(), err)
	}
	if fl, ok := h.fed.Authority().(federation.Fleet); ok && !fl.Serving() && status == "ok" {
		status, reason = "fenced", "this hub could not renew its etcd lease in time and serves no namespace until it has re-registered"
	}
	return status, reason, journal
}

// configEpoch is an opaque fingerprint of the hub's posture (who_snapshot
// and /health config_epoch).
func configEpoch(cfg Config) string {
	s := fmt.Sprintf("v1|token=%t|max_clients=%d|per_host=%d|frame=%d|history=%d|claims=%d|journal=%t",
		cfg.Token != "", cfg.MaxClients, cfg.MaxConnectionsPerHost, cfg.MaxFrameBytes, cfg.MaxHistory,
		cfg.Limits.MaxClaimsPerPrincipal, cfg.Journal != nil)
	if len(cfg.MessageAuthKeys) > 0 || cfg.RateLimits != (gate.RateLimits{}) {
		// Appended only when set, so an unchanged posture keeps its epoch.
		s += fmt.Sprintf("|message_auth=%d/%t|rates=%g/%d/%g/%d", len(cfg.MessageAuthKeys), cfg.RequireMessageAuth,
			cfg.RateLimits.AgentPerSecond, cfg.RateLimits.AgentBurst, cfg.RateLimits.HostPerSecond, cfg.RateLimits.HostBurst)
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8]) + "-" + strconv.Itoa(1)
}

func vecOf(m *metrics, name, help, label string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	m.reg.MustRegister(c)
	return c
}

// registerPeers adds a reachability gauge per configured peer.
func (m *metrics) registerPeers(h *Hub) {
	for _, p := range h.fed.Peers() {
		peer := p.Peer
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "synapse_federation_peer_up",
			Help: "1 while the link to a peer hub is up.", ConstLabels: prometheus.Labels{"peer": peer}}, func() float64 {
			if h.fed.PeerReachable(peer) {
				return 1
			}
			return 0
		}))
	}
}
