package hub

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"time"
)

// Name-ownership leases (PROTOCOL.md §1.7). An agent that registers with a
// truthy `lease` is sent a secret owner_lease; while it is connected, or
// offline for less than LeaseOfflineTTL, nobody may bind its name without
// that secret — not even with `takeover` — and is closed 4016 "name owned".
// Only the secret's SHA-256 is kept. Leases live in memory and on this hub
// only (spec: the name-ownership lease is single-hub).
//
// Owned by Hub.mu, like the rest of the registry.

const (
	// DefaultLeaseOfflineTTL is how long a lease outlives its holder's
	// connection (the spec's DEFAULT_LEASE_OFFLINE_TTL, seconds).
	DefaultLeaseOfflineTTL = 3600 * time.Second
	// NameOwnedCloseCode closes a bind refused by a live lease (the spec's
	// NAME_OWNED_CLOSE_CODE).
	NameOwnedCloseCode = 4016
	// maxNameLeases bounds the leases kept; past it the one offline longest
	// is forgotten.
	maxNameLeases = 65536
)

type nameLease struct {
	digest       [32]byte
	offlineSince float64 // 0 while the holder is connected
}

// live reports whether the lease still protects its name at now.
func (l *nameLease) live(now float64, ttl time.Duration) bool {
	return l.offlineSince == 0 || now-l.offlineSince < ttl.Seconds()
}

// leaseRefusesLocked reports whether a live lease on name refuses this
// bind: the frame does not carry the lease's owner_lease.
func (s *session) leaseRefusesLocked(name, ownerLease string, now float64) bool {
	h := s.h
	l := h.reg.leases[name]
	if l == nil {
		return false
	}
	if !l.live(now, h.cfg.LeaseOfflineTTL) {
		delete(h.reg.leases, name)
		return false
	}
	sum := sha256.Sum256([]byte(ownerLease))
	return subtle.ConstantTimeCompare(sum[:], l.digest[:]) != 1
}

// grantLeaseLocked mints a new owner_lease for the name s just bound and
// sends it privately (lease_granted). A new grant replaces the old secret.
func (s *session) grantLeaseLocked(name string) {
	h := s.h
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return
	}
	tok := base64.RawURLEncoding.EncodeToString(secret[:]) // Python's token_urlsafe(32)
	if len(h.reg.leases) >= maxNameLeases && h.reg.leases[name] == nil {
		h.reg.evictOldestLeaseLocked()
	}
	h.reg.leases[name] = &nameLease{digest: sha256.Sum256([]byte(tok))}
	s.send(s.frame("lease_granted", name, "Name lease granted for '"+name+"'.").
		Str("owner_lease", tok).Str("lease_name", name).Bytes())
}

// leaseOnlineLocked marks name's lease as held by a connected session.
func (r *registry) leaseOnlineLocked(name string) {
	if l := r.leases[name]; l != nil {
		l.offlineSince = 0
	}
}

// leaseOfflineLocked starts the offline clock of name's lease.
func (r *registry) leaseOfflineLocked(name string, now float64) {
	if l := r.leases[name]; l != nil {
		l.offlineSince = now
	}
}

// evictOldestLeaseLocked forgets the lease offline longest.
func (r *registry) evictOldestLeaseLocked() {
	oldest, at := "", 0.0
	for n, l := range r.leases {
		if l.offlineSince != 0 && (oldest == "" || l.offlineSince < at) {
			oldest, at = n, l.offlineSince
		}
	}
	if oldest != "" {
		delete(r.leases, oldest)
	}
}
