package access

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Backing is where a Registry keeps its records durably: the hub's
// journal (journal/access.go), a fleet's etcd (cluster/access.go), or
// nothing (a hub without a journal keeps them in memory only). Each call
// commits before the Registry changes, so a failed write changes nothing.
// The Registry calls it without holding the lock its readers take, so a
// slow store (etcd across a network) never stalls a lookup.
type Backing interface {
	// PutCredential inserts or replaces the record with c.ID.
	PutCredential(c Credential) error
	// PutGrant records (granted) or deletes (!granted) a role grant.
	PutGrant(g Grant, granted bool) error
}

// SharedBacking is a Backing every hub of a fleet writes and follows
// (cluster/access.go): what one hub issues, revokes or grants, every hub
// applies (Apply, ApplyGrant) as its follower sees it.
type SharedBacking interface {
	Backing
	// FetchCredential reads the record with id from the store itself, for
	// a token whose credential this hub has not seen yet (issued through
	// another hub a moment ago).
	FetchCredential(id string) (Credential, bool, error)
}

// Grant gives the names matching To a role (synapse role grant ROLE --to
// NAME). Roles an agent asserts in a heartbeat stick only when granted,
// once credentials or access rules are in force.
type Grant struct {
	Role string `json:"role"`
	To   string `json:"to"` // a name pattern (Match)
}

// Registry is a hub's credentials and role grants. Lookups are indexed:
// a token by its digest, a credential by its id, a grant by its exact
// name (patterns with wildcards are few and kept apart). Safe for
// concurrent use; reads take a shared lock.
type Registry struct {
	back Backing

	// wmu serialises writers across their store write, so two changes
	// reach the store and the maps in one order; readers never take it.
	wmu      sync.Mutex
	revoking string // the id a Revoke of ours is writing (Apply: not news)

	mu       sync.RWMutex
	byDigest map[string]*Credential
	byID     map[string]*Credential
	live     int                 // credentials not revoked
	exact    map[string][]string // grants to an exact name → roles
	wild     []Grant             // grants to a pattern with wildcards
}

// NewRegistry returns a Registry holding creds and grants (as loaded from
// back), which writes every change to back first; back may be nil.
func NewRegistry(back Backing, creds []Credential, grants []Grant) *Registry {
	r := &Registry{back: back, byDigest: map[string]*Credential{}, byID: map[string]*Credential{}, exact: map[string][]string{}}
	for _, c := range creds {
		r.putLocked(c)
	}
	for _, g := range grants {
		r.grantLocked(g)
	}
	return r
}

func (r *Registry) putLocked(c Credential) {
	if old := r.byID[c.ID]; old != nil {
		delete(r.byDigest, old.Digest)
		if old.Revoked == 0 {
			r.live--
		}
	}
	p := &c
	r.byID[c.ID] = p
	r.byDigest[c.Digest] = p
	if c.Revoked == 0 {
		r.live++
	}
}

// IssueRequest is what `synapse token issue` asks for.
type IssueRequest struct {
	Pattern string   // names the credential may bind
	Roles   []string // role patterns it grants
	TTL     float64  // seconds; 0 = never expires
	Note    string
}

// Issue mints a credential for req at now and returns its one-time token
// (shown once; only its digest is kept).
func (r *Registry) Issue(req IssueRequest, now float64) (string, Credential, error) {
	req.Pattern = strings.TrimSpace(req.Pattern)
	if err := checkName(ErrBadPattern, req.Pattern); err != nil {
		return "", Credential{}, err
	}
	roles := make([]string, 0, len(req.Roles))
	for _, role := range req.Roles {
		role = strings.TrimSpace(role)
		if err := checkName(ErrBadRole, role); err != nil {
			return "", Credential{}, err
		}
		roles = append(roles, role)
	}
	slices.Sort(roles)
	if req.TTL < 0 {
		return "", Credential{}, fmt.Errorf("access: ttl %v: give 0 (never) or a positive number of seconds", req.TTL)
	}
	id, token, err := NewToken()
	if err != nil {
		return "", Credential{}, err
	}
	c := Credential{ID: id, Digest: Digest(token), Pattern: req.Pattern, Roles: slices.Compact(roles),
		Created: now, Note: strings.TrimSpace(req.Note)}
	if req.TTL > 0 {
		c.Expires = now + req.TTL
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.back != nil {
		if err := r.back.PutCredential(c); err != nil {
			return "", Credential{}, fmt.Errorf("access: store credential: %w", err)
		}
	}
	r.mu.Lock()
	r.putLocked(c)
	r.mu.Unlock()
	return token, c, nil
}

// Authenticate returns the credential of token if it may connect at now:
// ErrUnknownCredential for a token no credential has, ErrRevoked or
// ErrExpired for one that was. One hash and one map lookup, whatever the
// number of credentials.
func (r *Registry) Authenticate(token string, now float64) (*Credential, error) {
	d := Digest(token)
	r.mu.RLock()
	c := r.byDigest[d]
	r.mu.RUnlock()
	if c == nil {
		c = r.fetch(token, d)
	}
	if c == nil {
		return nil, ErrUnknownCredential
	}
	if err := c.Check(now); err != nil {
		return c, err
	}
	return c, nil
}

// fetch asks a shared store for a token's credential this hub has not
// seen (issued through another hub; its follower has not caught up): the
// id is in the token, the digest must match. nil if there is none, or the
// store cannot say (the token is then refused as unknown).
func (r *Registry) fetch(token, digest string) *Credential {
	sb, ok := r.back.(SharedBacking)
	if !ok {
		return nil
	}
	id, _, ok := strings.Cut(strings.TrimPrefix(token, TokenPrefix), "_")
	if !ok || !IsCredentialToken(token) || id == "" {
		return nil
	}
	c, found, err := sb.FetchCredential(id)
	if err != nil || !found || c.Digest != digest {
		return nil
	}
	r.Apply(c)
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byDigest[digest]
}

// FleetWide reports whether the registry's store is shared by every hub of
// a fleet: a credential it does not hold then does not exist anywhere.
func (r *Registry) FleetWide() bool {
	_, ok := r.back.(SharedBacking)
	return ok
}

// Apply puts a record another hub wrote (its follower saw it in the
// shared store) without writing it back. It reports whether the record
// revokes a credential this registry held live, so the hub closes that
// credential's sockets; a revocation this registry is writing itself is
// not news (Revoke's caller closes them).
func (r *Registry) Apply(c Credential) (newlyRevoked bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.byID[c.ID]
	if old != nil && old.Revoked > 0 && c.Revoked == 0 {
		return false // a revocation is final: a stale record never undoes it
	}
	newlyRevoked = old != nil && old.Revoked == 0 && c.Revoked > 0 && r.revoking != c.ID
	r.putLocked(c)
	return newlyRevoked
}

// ApplyGrant records (granted) or removes a grant another hub wrote,
// without writing it back.
func (r *Registry) ApplyGrant(g Grant, granted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if granted {
		r.grantLocked(g)
	} else {
		r.ungrantLocked(g)
	}
}

// Revoke marks the credential id revoked at now and returns its record;
// revoking it again is not an error. The hub then closes its sockets.
func (r *Registry) Revoke(id string, now float64) (Credential, error) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if _, ok := r.Get(id); !ok {
		r.Lookup(id) // issued through another hub a moment ago: its record is in the shared store
	}
	r.mu.Lock()
	old := r.byID[id]
	var c Credential
	if old != nil {
		c = *old
	}
	r.revoking = id
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.revoking = ""
		r.mu.Unlock()
	}()
	if old == nil {
		return Credential{}, fmt.Errorf("%w %q: `synapse token list` shows the ids", ErrUnknownCredential, id)
	}
	if c.Revoked > 0 {
		return c, nil
	}
	c.Revoked = now
	if r.back != nil {
		if err := r.back.PutCredential(c); err != nil {
			return Credential{}, fmt.Errorf("access: store revocation: %w", err)
		}
	}
	r.mu.Lock()
	r.putLocked(c)
	r.mu.Unlock()
	return c, nil
}

// Get returns the credential with id.
func (r *Registry) Get(id string) (Credential, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c := r.byID[id]
	if c == nil {
		return Credential{}, false
	}
	return *c, true
}

// Lookup is Get, asking a shared store on a miss (a credential issued
// through another hub a moment ago, not yet seen here). It is how the
// owner of a forwarded frame finds the forwarder's credential.
func (r *Registry) Lookup(id string) (Credential, bool) {
	if c, ok := r.Get(id); ok {
		return c, true
	}
	sb, ok := r.back.(SharedBacking)
	if !ok {
		return Credential{}, false
	}
	c, found, err := sb.FetchCredential(id)
	if err != nil || !found {
		return Credential{}, false
	}
	r.Apply(c)
	return r.Get(id)
}

// List returns every credential, oldest first.
func (r *Registry) List() []Credential {
	r.mu.RLock()
	out := make([]Credential, 0, len(r.byID))
	for _, c := range r.byID {
		out = append(out, *c)
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Credential) int {
		return cmp.Or(cmp.Compare(a.Created, b.Created), strings.Compare(a.ID, b.ID))
	})
	return out
}

// Live is how many credentials are not revoked.
func (r *Registry) Live() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.live
}

// Grant records g (granting it again is not an error).
func (r *Registry) Grant(g Grant) error {
	g.Role, g.To = strings.TrimSpace(g.Role), strings.TrimSpace(g.To)
	if err := checkName(ErrBadRole, g.Role); err != nil {
		return err
	}
	if err := checkName(ErrBadPattern, g.To); err != nil {
		return err
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.mu.RLock()
	has := r.hasGrantLocked(g)
	r.mu.RUnlock()
	if has {
		return nil
	}
	if r.back != nil {
		if err := r.back.PutGrant(g, true); err != nil {
			return fmt.Errorf("access: store grant: %w", err)
		}
	}
	r.mu.Lock()
	r.grantLocked(g)
	r.mu.Unlock()
	return nil
}

// RevokeGrant removes g; ErrUnknownGrant if there is none.
func (r *Registry) RevokeGrant(g Grant) error {
	g.Role, g.To = strings.TrimSpace(g.Role), strings.TrimSpace(g.To)
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.mu.RLock()
	has := r.hasGrantLocked(g)
	r.mu.RUnlock()
	if !has {
		return fmt.Errorf("%w: %s to %s (`synapse role list` shows the grants)", ErrUnknownGrant, g.Role, g.To)
	}
	if r.back != nil {
		if err := r.back.PutGrant(g, false); err != nil {
			return fmt.Errorf("access: delete grant: %w", err)
		}
	}
	r.mu.Lock()
	r.ungrantLocked(g)
	r.mu.Unlock()
	return nil
}

func (r *Registry) ungrantLocked(g Grant) {
	if isWild(g.To) {
		r.wild = slices.DeleteFunc(r.wild, func(w Grant) bool { return w == g })
	} else if roles := slices.DeleteFunc(r.exact[g.To], func(s string) bool { return s == g.Role }); len(roles) > 0 {
		r.exact[g.To] = roles
	} else {
		delete(r.exact, g.To)
	}
}

func isWild(p string) bool { return strings.ContainsAny(p, "*?") }

func (r *Registry) hasGrantLocked(g Grant) bool {
	if isWild(g.To) {
		return slices.Contains(r.wild, g)
	}
	return slices.ContainsFunc(r.exact[g.To], func(role string) bool { return role == g.Role })
}

func (r *Registry) grantLocked(g Grant) {
	if r.hasGrantLocked(g) {
		return
	}
	if isWild(g.To) {
		r.wild = append(r.wild, g)
		return
	}
	r.exact[g.To] = append(r.exact[g.To], g.Role)
}

// Grants returns every role grant, sorted by role then name.
func (r *Registry) Grants() []Grant {
	r.mu.RLock()
	out := slices.Clone(r.wild)
	for to, roles := range r.exact {
		for _, role := range roles {
			out = append(out, Grant{Role: role, To: to})
		}
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Grant) int { return cmp.Or(strings.Compare(a.Role, b.Role), strings.Compare(a.To, b.To)) })
	return out
}

// Granted reports whether name holds role by a grant (role patterns in a
// grant match as in Match).
func (r *Registry) Granted(name, role string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if slices.ContainsFunc(r.exact[name], func(p string) bool { return Match(p, role) }) {
		return true
	}
	return slices.ContainsFunc(r.wild, func(g Grant) bool { return Match(g.To, name) && Match(g.Role, role) })
}
