package gate

import "sync"

// Rate limits bound how fast one socket or one remote host can make the
// hub work (PROTOCOL.md §1.4 steps 2 and 12). They bound abuse; they
// authenticate nobody (docs/security.md).
//
// Who owns what: a Bucket has no lock and belongs to one goroutine (a
// session's read goroutine for its own buckets, the heavy lane's holder
// for the lane's pace); a HostBuckets table is shared by every socket and
// carries its own mutex. Time is a parameter, the hub's clock in unix
// seconds, so tests can hold it still.

// RateLimits are the ingress frame limits. A zero rate turns that limiter
// off; the zero value turns both off, as the reference does without a
// token.
type RateLimits struct {
	// AgentPerSecond is the sustained rate of non-heartbeat frames one
	// socket may send (--rate-per-agent); beyond it the frame is refused
	// with "Rate limit exceeded.". Heartbeats are exempt, so keepalives
	// and registration never starve.
	AgentPerSecond float64
	// AgentBurst is how many frames above the rate a socket may send at
	// once (--rate-burst-agent); < 1 means one second's worth.
	AgentBurst int
	// HostPerSecond is the sustained rate of frames of any kind from one
	// remote host, all its sockets together (--rate-per-host); beyond it
	// the frame is refused with "Host rate limit exceeded.".
	HostPerSecond float64
	// HostBurst is the per-host burst (--rate-burst-host); < 1 means one
	// second's worth.
	HostBurst int
}

// SecureRateLimits are the limits --secure turns on: the reference's with
// --token (PROTOCOL.md §10): per agent 100/s burst 20, per host 500/s
// burst 100.
var SecureRateLimits = RateLimits{AgentPerSecond: 100, AgentBurst: 20, HostPerSecond: 500, HostBurst: 100}

// maxDebt bounds how far a host's bucket goes into debt through Owe, in
// seconds: a host that stops misbehaving is trusted again within a minute.
const maxDebt = 60

// maxHostBuckets bounds each per-host table; idle (refilled) buckets are
// swept when it is exceeded, so a host that stops sending costs nothing.
var maxHostBuckets = 4096

// Bucket is a token bucket: it holds up to burst tokens and gains rate per
// second; each admitted event spends one. The zero Bucket (rate 0) admits
// everything and never owes. A Bucket is not safe for concurrent use: it
// belongs to one goroutine.
type Bucket struct {
	rate, burst float64
	tokens      float64
	last        float64 // clock of the last refill
}

// NewBucket returns a full bucket gaining rate tokens a second, holding at
// most burst (< 1: one second's worth, at least one), at clock now.
func NewBucket(rate float64, burst int, now float64) Bucket {
	b := float64(burst)
	if b < 1 {
		b = max(1, rate)
	}
	return Bucket{rate: rate, burst: b, tokens: b, last: now}
}

// Rate is the tokens the bucket gains a second; not positive means it is
// off.
func (b *Bucket) Rate() float64 { return b.rate }

// refill adds what the elapsed time earned. A clock that steps backwards
// earns nothing rather than draining the bucket.
func (b *Bucket) refill(now float64) {
	if dt := now - b.last; dt > 0 {
		b.tokens = min(b.burst, b.tokens+dt*b.rate)
	}
	b.last = now
}

// Allow spends a token if there is one, and reports whether it did.
func (b *Bucket) Allow(now float64) bool {
	if b.rate <= 0 {
		return true
	}
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Reserve spends a token even if there is none, and returns how long,
// in seconds, until the debt is earned back: 0 while the bucket holds one.
func (b *Bucket) Reserve(now float64) float64 {
	return b.ReserveN(now, 1)
}

// ReserveN is Reserve for n tokens.
func (b *Bucket) ReserveN(now float64, n int) float64 {
	if b.rate <= 0 {
		return 0
	}
	b.refill(now)
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return -b.tokens / b.rate
}

// Wait is how long, in seconds, until the bucket holds a token again; 0
// while it holds one, and always 0 for a bucket that is off.
func (b *Bucket) Wait(now float64) float64 {
	if b.rate <= 0 {
		return 0
	}
	b.refill(now)
	if b.tokens >= 1 {
		return 0
	}
	return (1 - b.tokens) / b.rate
}

// full reports whether the bucket has refilled to its burst by now, i.e.
// forgetting it changes nothing.
func (b *Bucket) full(now float64) bool {
	b.refill(now)
	return b.tokens >= b.burst
}

// HostBuckets is one token bucket per remote host, each made full on the
// host's first event; safe for concurrent use. A nil *HostBuckets is a
// limiter that is off: it admits everything and nobody owes it.
type HostBuckets struct {
	rate  float64
	burst int

	mu sync.Mutex
	m  map[string]*Bucket
}

// NewHostBuckets returns a table of buckets as NewBucket(rate, burst), or
// nil (every call admits) when rate is not positive.
func NewHostBuckets(rate float64, burst int) *HostBuckets {
	if rate <= 0 {
		return nil
	}
	return &HostBuckets{rate: rate, burst: burst, m: make(map[string]*Bucket)}
}

// Allow spends one of host's tokens; false means it has none left.
func (hb *HostBuckets) Allow(host string, now float64) bool {
	if hb == nil {
		return true
	}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.bucketLocked(host, now).Allow(now)
}

// bucketLocked is host's bucket, made full if it has none.
func (hb *HostBuckets) bucketLocked(host string, now float64) *Bucket {
	b := hb.m[host]
	if b == nil {
		hb.sweepLocked(now)
		nb := NewBucket(hb.rate, hb.burst, now)
		b = &nb
		hb.m[host] = b
	}
	return b
}

// Empty reports, without spending, whether host has no token left.
func (hb *HostBuckets) Empty(host string, now float64) bool {
	if hb == nil {
		return false
	}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	b := hb.m[host]
	if b == nil {
		return false
	}
	b.refill(now)
	return b.tokens < 1
}

// Owe spends one of host's tokens even if it has none: the host owes the
// time until it is earned back (at most a minute; Debt says how long).
func (hb *HostBuckets) Owe(host string, now float64) {
	if hb == nil {
		return
	}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	b := hb.bucketLocked(host, now)
	b.Reserve(now)
	b.tokens = max(b.tokens, -maxDebt*b.rate)
}

// Debt is how long, in seconds, until host's bucket holds a token again;
// 0 while it holds one.
func (hb *HostBuckets) Debt(host string, now float64) float64 {
	if hb == nil {
		return 0
	}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	b := hb.m[host]
	if b == nil {
		return 0
	}
	return b.Wait(now)
}

// sweepLocked forgets refilled buckets once the table is over its bound.
func (hb *HostBuckets) sweepLocked(now float64) {
	if len(hb.m) < maxHostBuckets {
		return
	}
	for h, b := range hb.m {
		if b.full(now) {
			delete(hb.m, h)
		}
	}
}
