package federation

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// Outcome is what resolving a namespace gave (PROTOCOL.md §6.1). The
// values are the reference's, exactly.
type Outcome string

// Outcomes of Resolve.
const (
	// Local: this hub owns the namespace and decides its claims.
	Local Outcome = "local"
	// Remote: another hub owns it; a request is forwarded there or refused.
	Remote Outcome = "remote"
	// Ungoverned: no owner is configured; nothing is granted (INV-CR-4,
	// INV-MH-3).
	Ungoverned Outcome = "ungoverned"
	// Partitioned: a hub other than the owner asserts the namespace; every
	// grant is refused until the contest ends (INV-CR-4).
	Partitioned Outcome = "partitioned"
	// Moving: the namespace's authority is changing hands (a planned move,
	// a failover, a hub warming it or fenced): retry shortly. Never a
	// conflict (etcd mode; not a reference outcome).
	Moving Outcome = "moving"
)

// Wildcard in an ownership map names the owner of every namespace the map
// does not list. Without it the map is deny-by-default.
const Wildcard = "*"

// Resolution is a namespace's route as this hub sees it now.
type Resolution struct {
	Namespace  string   `json:"namespace"`
	Outcome    Outcome  `json:"outcome"`
	Owner      string   `json:"owner_hub_id,omitempty"` // "" when ungoverned
	Contesting []string `json:"contesting,omitempty"`   // sorted; set when partitioned
	// RetryAfter is how long to wait before retrying a Moving namespace.
	RetryAfter time.Duration `json:"retry_after_ms,omitempty"`
	// Epoch is the namespace's fencing token when known (etcd: the owner
	// key's ModRevision).
	Epoch int64 `json:"epoch,omitempty"`
	// Phase is the phase of a planned move under way (etcd), "" otherwise.
	Phase string `json:"phase,omitempty"`
}

// Grants reports whether a grant may be decided here.
func (r Resolution) Grants() bool { return r.Outcome == Local }

// Ownership is a static namespace → owner map (--namespace-owner), resolved
// from the point of view of one hub. It is immutable once built.
type Ownership struct {
	local  string
	owners map[string]string
}

// Errors of building an ownership map.
var (
	ErrBadOwnerSpec = errors.New("federation: bad --namespace-owner")
	ErrNoHubID      = errors.New("federation: a hub id is required with an ownership map (--hub-id)")
)

// NewOwnership builds the map of hub local from NS=HUB_ID specs. A
// namespace may be listed twice only with the same owner; "*" names the
// owner of every unlisted namespace.
func NewOwnership(local string, specs []string) (*Ownership, error) {
	if strings.TrimSpace(local) == "" {
		return nil, ErrNoHubID
	}
	o := &Ownership{local: local, owners: make(map[string]string, len(specs))}
	for _, spec := range specs {
		ns, owner, err := ParseOwnerSpec(spec)
		if err != nil {
			return nil, err
		}
		if prev, ok := o.owners[ns]; ok && prev != owner {
			return nil, fmt.Errorf("%w: namespace %q is given two owners, %q and %q", ErrBadOwnerSpec, ns, prev, owner)
		}
		o.owners[ns] = owner
	}
	return o, nil
}

// ParseOwnerSpec reads one NS=HUB_ID. A namespace is a project prefix: no
// '/', no spaces; "*" is the wildcard.
func ParseOwnerSpec(spec string) (ns, owner string, err error) {
	ns, owner, ok := strings.Cut(strings.TrimSpace(spec), "=")
	ns, owner = strings.TrimSpace(ns), strings.TrimSpace(owner)
	switch {
	case !ok || ns == "" || owner == "":
		return "", "", fmt.Errorf("%w: %q is not NS=HUB_ID (for example proj=syn-east)", ErrBadOwnerSpec, spec)
	case strings.ContainsAny(ns, "/ \t") || strings.ContainsAny(owner, " \t="):
		return "", "", fmt.Errorf("%w: %q: a namespace is the part of an agent name before its first '/' and holds no spaces; a hub id holds no spaces", ErrBadOwnerSpec, spec)
	}
	return ns, owner, nil
}

// ReadOwnerFile reads NS=HUB_ID lines (blank lines and # comments skipped),
// for maps too long for flags (--namespace-owner-file).
func ReadOwnerFile(path string) ([]string, error) {
	return readSpecFile(path)
}

func readSpecFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var specs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		specs = append(specs, line)
	}
	return specs, sc.Err()
}

// LocalHub is the id this map resolves for.
func (o *Ownership) LocalHub() string { return o.local }

// Owner is the configured owner of ns ("" when ungoverned).
func (o *Ownership) Owner(ns string) string {
	if owner, ok := o.owners[ns]; ok {
		return owner
	}
	return o.owners[Wildcard]
}

// Resolve routes ns given the hubs currently asserting it (from the peers'
// declarations and their observed logs): not in the map → ungoverned; any
// asserting hub other than the owner and this hub → partitioned; owner is
// this hub → local; otherwise remote (PROTOCOL.md §6.1).
func (o *Ownership) Resolve(ns string, asserting []string) Resolution {
	owner := o.Owner(ns)
	if owner == "" {
		return Resolution{Namespace: ns, Outcome: Ungoverned}
	}
	var contesting []string
	for _, h := range asserting {
		if h != owner && h != o.local {
			contesting = append(contesting, h)
		}
	}
	if len(contesting) > 0 {
		sort.Strings(contesting)
		return Resolution{Namespace: ns, Outcome: Partitioned, Owner: owner, Contesting: slices.Compact(contesting)}
	}
	if owner == o.local {
		return Resolution{Namespace: ns, Outcome: Local, Owner: owner}
	}
	return Resolution{Namespace: ns, Outcome: Remote, Owner: owner}
}

// Owned lists the namespaces this map gives to this hub ("*" included when
// the wildcard does), sorted: what the hub declares to its peers.
func (o *Ownership) Owned() []string {
	var out []string
	for ns, owner := range o.owners {
		if owner == o.local {
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out
}

// Namespaces lists every namespace the map names, sorted.
func (o *Ownership) Namespaces() []string {
	out := make([]string, 0, len(o.owners))
	for ns := range o.owners {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}
