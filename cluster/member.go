// Package cluster runs a hub as a member of a fleet whose namespace
// ownership lives in etcd (docs/scale-out.md; the second seed's rules):
//
//   - Member keeps the hub's registration alive under an etcd lease and
//     fences it before the lease can be treated as expired (rules 1, 3, 4):
//     it renews at T/3, and from 2T/3 without a renewal it stops the hub
//     serving, drains, and only then revokes its own lease. Its local
//     deadline, measured from the send time of the last successful
//     renewal, is the only thing that decides whether the hub may serve.
//   - Owners resolves namespaces from etcd's owner keys (federation's
//     Authority): the owner key of a namespace names the hub that serves
//     it, lives under that hub's lease, and its ModRevision is the
//     namespace's fencing token.
//
// Who owns what: Member's state is guarded by its mu and changed only by
// its keeper goroutine; Owners' cache is guarded by its mu and changed
// only by its watch goroutine and by its own claims.
package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Tunables (variables so tests can shorten them).
var (
	// retryEvery is how often a failed renewal is retried: an etcd leader
	// election blocks ~1–1.6 s (ETCD.md), so a few retries absorb one.
	retryEvery = 250 * time.Millisecond
	// minEpsilon bounds the safety margin before the local deadline: the
	// hub serves nothing after deadline − eps, eps = max(200 ms, 2% TTL).
	minEpsilon = 200 * time.Millisecond
)

// DefaultLeaseTTL is the hub lease's TTL (--etcd-lease-ttl).
const DefaultLeaseTTL = 9 * time.Second

// DefaultPrefix is where a fleet keeps its keys in etcd.
const DefaultPrefix = "/synapse/v1/"

// Errors.
var (
	ErrFenced  = errors.New("cluster: this hub is fenced (its lease could not be renewed in time)")
	ErrNoEtcd  = errors.New("cluster: etcd unreachable")
	ErrConfig  = errors.New("cluster: bad configuration")
	ErrStopped = errors.New("cluster: member stopped")
)

// Config configures a Member.
type Config struct {
	Endpoints []string      // etcd client URLs (--etcd a,b,c)
	HubID     string        // this hub's id (--hub-id)
	Advertise string        // ws://host:port peers and clients reach this hub at (--advertise)
	LeaseTTL  time.Duration // default DefaultLeaseTTL; etcd raises anything under 2 s to 2 s
	Prefix    string        // default DefaultPrefix
	Version   string        // reported in the registration
	Logger    *slog.Logger
	// TLS is what the etcd client dials https:// endpoints with (synapse
	// hub --etcd-ca, --etcd-cert, --etcd-key; issue 23 item 6); nil: plain.
	TLS *tls.Config

	// Fence is called when the hub must stop serving every namespace it
	// owns (the last third of the lease began without a renewal): stop
	// admitting, drain what is in flight, return within budget. The
	// lease is revoked only after Fence returns (rule 3).
	Fence func(budget time.Duration)
	// Registered is called after every (re)registration with the new lease.
	Registered func(lease clientv3.LeaseID)
	// MaxFences is the consecutive-failure budget (rule 9): this many
	// fences with no applied work between them end the process through
	// Exit (default 3).
	MaxFences int
	// Exit ends the process (default: log and os.Exit(3)).
	Exit func(reason string)
	// IdemRetention is how long the fleet honours an idempotency key
	// (synapse hub --idempotency-window, the journal's promise): 0 is the
	// package's IdemRetention, negative keeps records forever (no lease).
	IdemRetention time.Duration
}

// Registration is a hub's record under hubs/<id>.
type Registration struct {
	HubID   string  `json:"hub_id"`
	Addr    string  `json:"addr"`
	Version string  `json:"version"`
	Started float64 `json:"started"`
}

// Member is a hub's membership in the fleet. Its methods are safe for
// concurrent use.
type Member struct {
	cfg Config
	cli *clientv3.Client
	log *slog.Logger

	mu        sync.Mutex
	lease     clientv3.LeaseID
	deadline  time.Time // the hub serves nothing at or after deadline − eps
	serving   bool
	fences    int // consecutive fences with no applied work since
	stopped   bool
	changed   chan struct{} // closed and replaced when serving flips
	lastRenew time.Time

	stop chan struct{}
	done chan struct{}
}

// Join connects to etcd, registers the hub under a fresh lease and starts
// keeping it alive. The hub may serve once Join returns.
func Join(ctx context.Context, cfg Config) (*Member, error) {
	if len(cfg.Endpoints) == 0 || cfg.HubID == "" || cfg.Advertise == "" {
		return nil, fmt.Errorf("%w: etcd endpoints, --hub-id and --advertise are required", ErrConfig)
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxFences <= 0 {
		cfg.MaxFences = 3
	}
	if cfg.Fence == nil {
		cfg.Fence = func(time.Duration) {}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		// etcd refuses client pings more often than every 5 s (its
		// --grpc-keepalive-min-time); a dead member is noticed within 7 s.
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
		TLS: cfg.TLS,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoEtcd, err)
	}
	m := &Member{cfg: cfg, cli: cli, log: cfg.Logger.With("member", cfg.HubID), changed: make(chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := m.register(ctx); err != nil {
		cli.Close()
		return nil, err
	}
	go m.keep()
	return m, nil
}

// Client is the etcd client the member uses (shared with Owners).
func (m *Member) Client() *clientv3.Client { return m.cli }

// Config returns the member's configuration.
func (m *Member) Config() Config { return m.cfg }

func (m *Member) key(parts ...string) string {
	k := m.cfg.Prefix
	for i, p := range parts {
		if i > 0 {
			k += "/"
		}
		k += p
	}
	return k
}

// register grants a fresh lease and writes hubs/<id> under it. The local
// deadline starts at the grant's send time.
func (m *Member) register(ctx context.Context) error {
	ttl := int64((m.cfg.LeaseTTL + time.Second - 1) / time.Second)
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseTTL/3)
	defer cancel()
	g, err := m.cli.Grant(cctx, ttl)
	if err != nil {
		return fmt.Errorf("%w: grant a lease: %v", ErrNoEtcd, err)
	}
	reg, _ := json.Marshal(Registration{HubID: m.cfg.HubID, Addr: m.cfg.Advertise, Version: m.cfg.Version, Started: float64(time.Now().UnixNano()) / 1e9})
	if _, err := m.cli.Put(cctx, m.key("hubs", m.cfg.HubID), string(reg), clientv3.WithLease(g.ID)); err != nil {
		m.revoke(g.ID)
		return fmt.Errorf("%w: register: %v", ErrNoEtcd, err)
	}
	m.mu.Lock()
	m.lease = g.ID
	m.deadline = sent.Add(time.Duration(g.TTL) * time.Second)
	m.lastRenew = sent
	m.setServingLocked(true)
	m.mu.Unlock()
	m.log.Info("cluster: registered", "lease", fmt.Sprintf("%x", g.ID), "ttl_s", g.TTL)
	if m.cfg.Registered != nil {
		m.cfg.Registered(g.ID)
	}
	return nil
}

// Lease is the lease the hub's keys live under now (0 while fenced).
func (m *Member) Lease() clientv3.LeaseID {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.serving {
		return 0
	}
	return m.lease
}

func (m *Member) epsilon() time.Duration { return max(minEpsilon, m.cfg.LeaseTTL/50) }

// Serving reports whether the hub may serve now: registered, not fenced,
// and before its local deadline less the safety margin (rule 1, rule 4).
func (m *Member) Serving() bool {
	if keepServingPastLease {
		return true // the harness's broken build (unsafe_on.go)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.serving && time.Now().Before(m.deadline.Add(-m.epsilon()))
}

// Deadline is the local lease deadline (for synapse ns list).
func (m *Member) Deadline() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deadline
}

// Changed is closed when Serving flips; take a new one after it fires.
func (m *Member) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *Member) setServingLocked(v bool) {
	if m.serving != v {
		m.serving = v
		close(m.changed)
		m.changed = make(chan struct{})
	}
}

// Applied records applied work: it resets the fence budget (rule 9: only
// work resets it, never time or reads).
func (m *Member) Applied() {
	m.mu.Lock()
	m.fences = 0
	m.mu.Unlock()
}

// keep renews the lease at T/3 from the last successful renewal's send
// time, retries failures, and fences at 2T/3.
func (m *Member) keep() {
	defer close(m.done)
	ttl := m.cfg.LeaseTTL
	for {
		m.mu.Lock()
		last, lease := m.lastRenew, m.lease
		m.mu.Unlock()
		next := last.Add(ttl / 3)
		fenceAt := last.Add(2 * ttl / 3)
		if !m.sleepUntil(next) {
			return
		}
		renewed := false
		for !renewed {
			sent := time.Now()
			if !sent.Before(fenceAt) {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), min(retryEvery*2, fenceAt.Sub(sent)))
			r, err := m.cli.KeepAliveOnce(ctx, lease)
			cancel()
			if err == nil && r.TTL > 0 {
				m.mu.Lock()
				m.lastRenew = sent
				m.deadline = sent.Add(time.Duration(r.TTL) * time.Second)
				m.mu.Unlock()
				renewed = true
				break
			}
			m.log.Warn("cluster: lease renewal failed; retrying", "err", err)
			wake := time.Now().Add(retryEvery)
			if fenceAt.Before(wake) {
				wake = fenceAt
			}
			if !m.sleepUntil(wake) {
				return
			}
		}
		if renewed {
			continue
		}
		m.fence(lease)
		if !m.rejoin() {
			return
		}
	}
}

// fence stops the hub serving, drains within the last third of the TTL
// less the margin, and then revokes the lease if etcd is reachable: the
// lease dies only after this hub can no longer serve (rules 3, 4).
func (m *Member) fence(lease clientv3.LeaseID) {
	m.mu.Lock()
	m.setServingLocked(false)
	m.fences++
	fences, deadline := m.fences, m.deadline
	m.mu.Unlock()
	budget := time.Until(deadline.Add(-m.epsilon()))
	m.log.Error("cluster: lease not renewed in time; fencing: no more admissions, draining", "budget", budget, "consecutive_fences", fences)
	m.cfg.Fence(max(budget, 0))
	m.revoke(lease)
	if fences >= m.cfg.MaxFences {
		reason := fmt.Sprintf("cluster: %d consecutive fences with no applied work in between", fences)
		if m.cfg.Exit != nil {
			m.cfg.Exit(reason)
		} else {
			m.log.Error(reason + "; exiting so a supervisor restarts the hub")
			exit(3)
		}
	}
}

func (m *Member) revoke(lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.LeaseTTL/3)
	defer cancel()
	if _, err := m.cli.Revoke(ctx, lease); err != nil {
		m.log.Warn("cluster: revoke after fence failed; the lease will expire on its own", "err", err)
	}
}

// rejoin registers again under a new lease once etcd answers: a fenced hub
// never resumes an old lease or an old epoch.
func (m *Member) rejoin() bool {
	for {
		if err := m.register(context.Background()); err == nil {
			return true
		}
		if !m.sleepUntil(time.Now().Add(retryEvery * 4)) {
			return false
		}
	}
}

func (m *Member) sleepUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		select {
		case <-m.stop:
			return false
		default:
			return true
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-m.stop:
		return false
	case <-timer.C:
		return true
	}
}

// Leave stops keeping the lease, revokes it (the hub's registration and
// owner keys go with it) and closes the client. Call it after the hub
// stopped serving.
func (m *Member) Leave() {
	if lease, ok := m.stopKeeping(); ok {
		m.revoke(lease)
		m.cli.Close()
	}
}

// Abandon stops keeping the lease without revoking it (tests: a hub that
// dies; its lease expires on its own).
func (m *Member) Abandon() {
	if _, ok := m.stopKeeping(); ok {
		m.cli.Close()
	}
}

// stopKeeping stops serving and the keeper, once; it returns the lease in
// force, and false if the member was already stopped.
func (m *Member) stopKeeping() (clientv3.LeaseID, bool) {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return 0, false
	}
	m.stopped = true
	m.setServingLocked(false)
	lease := m.lease
	m.mu.Unlock()
	close(m.stop)
	<-m.done
	return lease, true
}
