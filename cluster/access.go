package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/journal"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Credentials, role grants and identity pins on a fleet (issue 23 items
// 1–3; docs/security.md, "On a fleet"). They are the fleet's, not a hub's:
//
//	access/cred/<id>               a credential's record: its digest (SHA-256 of the token), never the token
//	access/grant/<role>/<pattern>  a role grant (both query-escaped); deleted when revoked
//	access/pin/<name>              the key a name is pinned to, created once (create-if-absent)
//	access/nonce/<sha256>          an admitted signed registration's (key id, name, nonce), created once, under a
//	                               lease of 2–3 replay windows: a replay on any hub finds it and is refused
//	access/reclaim/<name>/<nanos>  the audit of a reclaimed pin
//
// Access is the store behind access.Registry (access.SharedBacking) and
// hub.PinStore, as the journal is on one hub. Writes go to etcd first and
// change this hub's view only once etcd committed them; every hub follows
// the prefix with one watch (Follow) and applies what the others wrote: a
// revocation closes the credential's sockets here, a reclaimed pin closes
// its holder. Reads of the registration path (a token, a pin) are served
// from this hub's view, the last state its watch saw: when etcd cannot be
// reached, sockets are checked against the last-known records, and every
// write (issue, revoke, grant, pin, reclaim) fails and changes nothing.
//
// Who owns what: the registry has its own lock; pins is guarded by mu; the
// follower goroutine is the only one that advances rev.
type Access struct {
	cli     *clientv3.Client
	pfx     string
	log     *slog.Logger
	timeout time.Duration

	mu   sync.Mutex
	pins map[string]journal.IdentityPin
	rev  int64 // the revision Load read at; Follow watches from rev+1

	nonceMu    sync.Mutex // the lease admitted proofs' nonces are written under
	nonceLease clientv3.LeaseID
	nonceAt    time.Time

	started atomic.Bool
	stop    chan struct{}
	done    chan struct{}
}

// AccessHost is what the follower tells its hub.
type AccessHost interface {
	// CredentialRevoked closes the live sockets that used credential id,
	// revoked through another hub.
	CredentialRevoked(id string) int
	// PinReclaimed closes the live holder of name, whose pin another hub
	// reclaimed.
	PinReclaimed(name string)
}

// ErrAccessWrite is a credential, grant or pin write etcd did not commit;
// nothing changed. Retry when etcd answers again.
var ErrAccessWrite = errors.New("cluster: the fleet's etcd did not take the write")

// NewAccess is the access store of member m's fleet.
func NewAccess(m *Member) *Access {
	// The timeout of one write: generous, since a bind that waits for a
	// slow etcd is better than one admitted unpinned (an identity write
	// that fails admits the socket without its pin, as an unsigned one).
	return &Access{cli: m.cli, pfx: m.cfg.Prefix + "access/", log: m.log, timeout: max(5*time.Second, m.cfg.LeaseTTL/3),
		pins: map[string]journal.IdentityPin{}, stop: make(chan struct{}), done: make(chan struct{})}
}

func (a *Access) credKey(id string) string { return a.pfx + "cred/" + id }
func (a *Access) grantKey(g access.Grant) string {
	return a.pfx + "grant/" + url.QueryEscape(g.Role) + "/" + url.QueryEscape(g.To)
}
func (a *Access) pinKey(name string) string { return a.pfx + "pin/" + name }

// credRecord is a credential as etcd holds it: the digest included
// (access.Credential keeps it out of its JSON, which clients see).
type credRecord struct {
	access.Credential
	Digest string `json:"digest"`
}

func encodeCred(c access.Credential) []byte {
	b, _ := json.Marshal(credRecord{Credential: c, Digest: c.Digest})
	return b
}

func decodeCred(b []byte) (access.Credential, bool) {
	var r credRecord
	if json.Unmarshal(b, &r) != nil || r.ID == "" || r.Digest == "" {
		return access.Credential{}, false
	}
	r.Credential.Digest = r.Digest
	return r.Credential, true
}

func (a *Access) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), a.timeout)
}

// FleetWide marks the store as the fleet's (access.Registry.FleetWide).
func (a *Access) FleetWide() bool { return true }

// PutCredential implements access.Backing.
func (a *Access) PutCredential(c access.Credential) error {
	ctx, cancel := a.ctx()
	defer cancel()
	if _, err := a.cli.Put(ctx, a.credKey(c.ID), string(encodeCred(c))); err != nil {
		return fmt.Errorf("%w: credential %s: %v", ErrAccessWrite, c.ID, err)
	}
	return nil
}

// PutGrant implements access.Backing.
func (a *Access) PutGrant(g access.Grant, granted bool) error {
	ctx, cancel := a.ctx()
	defer cancel()
	var err error
	if granted {
		b, _ := json.Marshal(g)
		_, err = a.cli.Put(ctx, a.grantKey(g), string(b))
	} else {
		_, err = a.cli.Delete(ctx, a.grantKey(g))
	}
	if err != nil {
		return fmt.Errorf("%w: grant %s to %s: %v", ErrAccessWrite, g.Role, g.To, err)
	}
	return nil
}

// FetchCredential implements access.SharedBacking: one read of etcd, for
// a token issued through another hub that this hub's watch has not
// delivered yet.
func (a *Access) FetchCredential(id string) (access.Credential, bool, error) {
	if id == "" || strings.ContainsAny(id, "/") {
		return access.Credential{}, false, nil
	}
	ctx, cancel := a.ctx()
	defer cancel()
	r, err := a.cli.Get(ctx, a.credKey(id))
	if err != nil {
		return access.Credential{}, false, fmt.Errorf("%w: read credential: %v", ErrNoEtcd, err)
	}
	if len(r.Kvs) == 0 {
		return access.Credential{}, false, nil
	}
	c, ok := decodeCred(r.Kvs[0].Value)
	return c, ok, nil
}

// Load reads every credential, grant and pin of the fleet, for a hub that
// starts: its registry is built from them, and Follow goes on from there.
func (a *Access) Load(ctx context.Context) ([]access.Credential, []access.Grant, error) {
	r, err := a.cli.Get(ctx, a.pfx, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: read %s: %v", ErrNoEtcd, a.pfx, err)
	}
	var creds []access.Credential
	var grants []access.Grant
	pins := map[string]journal.IdentityPin{}
	for _, kv := range r.Kvs {
		key := string(kv.Key)
		switch {
		case strings.HasPrefix(key, a.pfx+"cred/"):
			if c, ok := decodeCred(kv.Value); ok {
				creds = append(creds, c)
			}
		case strings.HasPrefix(key, a.pfx+"grant/"):
			if g, ok := a.grantOf(key); ok {
				grants = append(grants, g)
			}
		case strings.HasPrefix(key, a.pfx+"pin/"):
			var p journal.IdentityPin
			if json.Unmarshal(kv.Value, &p) == nil && p.Name != "" {
				pins[p.Name] = p
			}
		}
	}
	a.mu.Lock()
	a.pins, a.rev = pins, r.Header.Revision
	a.mu.Unlock()
	return creds, grants, nil
}

// grantOf reads the grant a grant key names.
func (a *Access) grantOf(key string) (access.Grant, bool) {
	role, to, ok := strings.Cut(strings.TrimPrefix(key, a.pfx+"grant/"), "/")
	if !ok {
		return access.Grant{}, false
	}
	var g access.Grant
	var err1, err2 error
	g.Role, err1 = url.QueryUnescape(role)
	g.To, err2 = url.QueryUnescape(to)
	return g, err1 == nil && err2 == nil && g.Role != "" && g.To != ""
}

// Follow applies to reg what any hub writes from the revision Load read
// on, and tells host of revocations and reclaims, until Close. A lost or
// compacted watch reads the whole prefix again and applies the
// difference, so a revocation written while this hub could not see etcd
// closes its sockets when it can again.
func (a *Access) Follow(reg *access.Registry, host AccessHost) {
	if a.started.Swap(true) {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-a.stop
		cancel()
	}()
	go func() {
		defer close(a.done)
		a.mu.Lock()
		rev := a.rev
		a.mu.Unlock()
		for ctx.Err() == nil {
			wch := a.cli.Watch(clientv3.WithRequireLeader(ctx), a.pfx, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
			for resp := range wch {
				if resp.Err() != nil {
					break // lost or compacted: relisted below
				}
				rev = resp.Header.Revision
				for _, ev := range resp.Events {
					a.apply(reg, host, string(ev.Kv.Key), ev.Type == clientv3.EventTypeDelete, ev.Kv.Value)
				}
			}
			if ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryEvery):
			}
			if r, err := a.resync(ctx, reg, host); err != nil {
				a.log.Warn("cluster: credentials and pins: relist failed; serving the last-known records", "err", err)
			} else {
				rev = r
			}
		}
	}()
}

// Close stops following (Follow's goroutine ends before it returns).
func (a *Access) Close() {
	select {
	case <-a.stop:
		return
	default:
		close(a.stop)
	}
	if a.started.Load() {
		<-a.done
	}
}

// apply takes one change of the prefix into this hub's view.
func (a *Access) apply(reg *access.Registry, host AccessHost, key string, deleted bool, value []byte) {
	switch {
	case strings.HasPrefix(key, a.pfx+"cred/"):
		if c, ok := decodeCred(value); ok && !deleted && reg.Apply(c) {
			n := host.CredentialRevoked(c.ID)
			a.log.Info("cluster: credential revoked through another hub; its sockets here closed", "credential", c.ID, "sockets_closed", n)
		}
	case strings.HasPrefix(key, a.pfx+"grant/"):
		if g, ok := a.grantOf(key); ok {
			reg.ApplyGrant(g, !deleted)
		}
	case strings.HasPrefix(key, a.pfx+"pin/"):
		name := strings.TrimPrefix(key, a.pfx+"pin/")
		a.mu.Lock()
		_, had := a.pins[name]
		var p journal.IdentityPin
		if deleted {
			delete(a.pins, name)
		} else if json.Unmarshal(value, &p) == nil && p.Name == name {
			a.pins[name] = p
		}
		a.mu.Unlock()
		if deleted && had {
			host.PinReclaimed(name)
		}
	}
}

// resync reads the whole prefix again after a lost watch and applies what
// changed meanwhile; it returns the revision read at.
func (a *Access) resync(ctx context.Context, reg *access.Registry, host AccessHost) (int64, error) {
	a.mu.Lock()
	before := a.pins
	a.mu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	creds, grants, err := a.Load(lctx)
	if err != nil {
		return 0, err
	}
	for _, c := range creds {
		if reg.Apply(c) {
			host.CredentialRevoked(c.ID)
		}
	}
	want := map[access.Grant]bool{}
	for _, g := range grants {
		want[g] = true
		reg.ApplyGrant(g, true)
	}
	for _, g := range reg.Grants() {
		if !want[g] {
			reg.ApplyGrant(g, false)
		}
	}
	a.mu.Lock()
	after, rev := a.pins, a.rev
	a.mu.Unlock()
	for name := range before {
		if _, ok := after[name]; !ok {
			host.PinReclaimed(name)
		}
	}
	return rev, nil
}

// PinIdentity implements hub.PinStore: create-if-absent in one etcd
// transaction, so two hubs pinning one name with different keys resolve
// to one winner, and the loser learns the winner's key.
func (a *Access) PinIdentity(p journal.IdentityPin) (journal.IdentityPin, bool, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	key := a.pinKey(p.Name)
	b, _ := json.Marshal(p)
	t, err := a.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return journal.IdentityPin{}, false, fmt.Errorf("%w: pin %q: %v", ErrAccessWrite, p.Name, err)
	}
	got, made := p, t.Succeeded
	if !made {
		kvs := t.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || json.Unmarshal(kvs[0].Value, &got) != nil {
			return journal.IdentityPin{}, false, fmt.Errorf("%w: pin %q: unreadable record", ErrAccessWrite, p.Name)
		}
	}
	a.mu.Lock()
	a.pins[got.Name] = got
	a.mu.Unlock()
	return got, made, nil
}

// LookupIdentityPin implements hub.PinStore from this hub's view (the
// last state its watch saw; a pin made here is in it at once).
func (a *Access) LookupIdentityPin(name string) (journal.IdentityPin, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.pins[name]
	return p, ok, nil
}

// IdentityPins implements hub.PinStore, read from etcd.
func (a *Access) IdentityPins() ([]journal.IdentityPin, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	r, err := a.cli.Get(ctx, a.pfx+"pin/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("%w: list pins: %v", ErrNoEtcd, err)
	}
	out := make([]journal.IdentityPin, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		var p journal.IdentityPin
		if json.Unmarshal(kv.Value, &p) == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// ReclaimIdentityPin implements hub.PinStore: the pin is deleted and the
// reclaim recorded (access/reclaim/…) in one transaction, guarded by the
// pin's revision, so a pin made anew meanwhile is not the one removed.
func (a *Access) ReclaimIdentityPin(name, by string, at float64) (journal.IdentityPin, bool, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	key := a.pinKey(name)
	r, err := a.cli.Get(ctx, key)
	if err != nil {
		return journal.IdentityPin{}, false, fmt.Errorf("%w: read pin %q: %v", ErrNoEtcd, name, err)
	}
	if len(r.Kvs) == 0 {
		return journal.IdentityPin{}, false, nil
	}
	var p journal.IdentityPin
	if json.Unmarshal(r.Kvs[0].Value, &p) != nil {
		return journal.IdentityPin{}, false, fmt.Errorf("%w: pin %q: unreadable record", ErrAccessWrite, name)
	}
	audit, _ := json.Marshal(struct {
		journal.IdentityPin
		ReclaimedAt float64 `json:"reclaimed_at"`
		ReclaimedBy string  `json:"reclaimed_by"`
	}{p, at, by})
	auditKey := a.pfx + "reclaim/" + url.QueryEscape(name) + "/" + padSeq(time.Now().UnixNano())
	t, err := a.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", r.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(key), clientv3.OpPut(auditKey, string(audit))).Commit()
	if err != nil {
		return journal.IdentityPin{}, false, fmt.Errorf("%w: reclaim %q: %v", ErrAccessWrite, name, err)
	}
	if !t.Succeeded {
		return journal.IdentityPin{}, false, nil
	}
	a.mu.Lock()
	delete(a.pins, name)
	a.mu.Unlock()
	return p, true, nil
}

var _ access.SharedBacking = (*Access)(nil)

func (a *Access) nonceKey(n journal.IdentityNonce) string {
	sum := sha256.Sum256([]byte(n.KeyID + "\x00" + n.Name + "\x00" + n.Nonce))
	return a.pfx + "nonce/" + hex.EncodeToString(sum[:])
}

// ClaimIdentityNonce records an admitted proof's nonce in the fleet's
// etcd, create-if-absent, and reports whether this call made it: false
// means another hub (or this one) admitted the same proof already, a
// replay (hub.nonceClaimer). The record lives under a lease of at least
// keep (reused for keep, so 2–3 × keep at most).
func (a *Access) ClaimIdentityNonce(n journal.IdentityNonce, keep time.Duration) (bool, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	lease, err := a.nonceLeaseFor(ctx, keep)
	if err != nil {
		return false, fmt.Errorf("%w: nonce lease: %v", ErrAccessWrite, err)
	}
	key := a.nonceKey(n)
	t, err := a.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "", clientv3.WithLease(lease))).Commit()
	if err != nil {
		return false, fmt.Errorf("%w: nonce: %v", ErrAccessWrite, err)
	}
	return t.Succeeded, nil
}

func (a *Access) nonceLeaseFor(ctx context.Context, keep time.Duration) (clientv3.LeaseID, error) {
	a.nonceMu.Lock()
	defer a.nonceMu.Unlock()
	if a.nonceLease != 0 && time.Since(a.nonceAt) < keep {
		return a.nonceLease, nil
	}
	g, err := a.cli.Grant(ctx, int64((2*keep+time.Second-1)/time.Second))
	if err != nil {
		return 0, err
	}
	a.nonceLease, a.nonceAt = g.ID, time.Now()
	return g.ID, nil
}
