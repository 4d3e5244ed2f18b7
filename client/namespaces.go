package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// The namespace ownership of a federated hub (additive verb ns_request,
// welcome feature "namespaces"). The types mirror the JSON of the hub's
// federation.Status and federation.Observation rather than importing
// them: the SDK depends on the wire shape only, not on the hub's
// federation machinery (links, peer servers, the log watch) or on
// package wire, and a program that embeds the client stays as small as
// it is today.

// FeatureNamespaces is the welcome feature of hubs that answer ns_request.
const FeatureNamespaces = "namespaces"

// Ownership outcomes of a namespace (NamespaceRoute.Outcome).
const (
	OwnershipLocal       = "local"       // the hub asked owns it and decides its claims
	OwnershipRemote      = "remote"      // another hub owns it; claims are forwarded there
	OwnershipUngoverned  = "ungoverned"  // no owner in the map: nothing is granted
	OwnershipPartitioned = "partitioned" // contested by a hub besides its owner: nothing is granted
)

// NamespaceStatus is a hub's view of the federation: its ownership map as
// it resolves it now, its peer links, the contested namespaces and what it
// observes of its peers (advisory).
type NamespaceStatus struct {
	HubID string `json:"hub_id"`
	// Governed says claims are routed by an ownership map. A hub that is
	// not grants every claim locally.
	Governed bool `json:"governed"`
	// Namespaces are the namespaces the map names and those the hub's
	// agents use, sorted; empty on a hub that is not governed.
	Namespaces []NamespaceRoute `json:"namespaces"`
	Peers      []PeerLink       `json:"peers"`
	// Contested are the namespaces in contest now (Reachable unset).
	Contested       []NamespaceRoute `json:"contested"`
	Forwarded       int64            `json:"forwarded"`        // forwards this hub sent
	Served          int64            `json:"served"`           // forwards this hub served as owner
	ForwardFailures int64            `json:"forward_failures"` // forwards that failed
	// Warning is set when the hub has peers but no ownership map: it gives
	// no cross-host mutual exclusion (INV-MH-4).
	Warning string `json:"warning,omitempty"`
	// Members are the live hubs of a fleet on etcd, and LeaseDeadline this
	// hub's lease deadline (unix seconds); empty on other hubs.
	Members       []string `json:"members,omitempty"`
	LeaseDeadline float64  `json:"lease_deadline,omitempty"`

	// ObservedClaims and ObservedBoard are what the hub's log watches
	// fold from its peers (advisory: they grant nothing). They are kept
	// as JSON until the hub fixes their shape.
	ObservedClaims []json.RawMessage `json:"observed_claims"`
	ObservedBoard  []json.RawMessage `json:"observed_board"`
	// Quarantined maps a peer whose log changed under the watch to why.
	Quarantined map[string]string `json:"quarantined_peers,omitempty"`

	// Raw is the snapshot as the hub sent it, fields this client does not
	// know included.
	Raw json.RawMessage `json:"-"`
}

// NamespaceRoute is one namespace and how the hub resolves it.
type NamespaceRoute struct {
	Namespace  string   `json:"namespace"` // "" is the namespace of bare names
	Outcome    string   `json:"outcome"`   // local | remote | ungoverned | partitioned
	OwnerHubID string   `json:"owner_hub_id,omitempty"`
	Contesting []string `json:"contesting,omitempty"`
	Epoch      int64    `json:"epoch,omitempty"` // the namespace's fencing token (etcd: owner key revision)
	Phase      string   `json:"phase,omitempty"` // a planned move's phase (etcd)
	// Reachable says the owner can be reached now: always for a local
	// namespace, the link's state for a remote one, never otherwise.
	Reachable bool `json:"reachable"`
}

// PeerLink is the hub's link to one peer hub.
type PeerLink struct {
	Peer      string  `json:"peer"`
	URI       string  `json:"uri"`
	Reachable bool    `json:"reachable"`
	Mode      string  `json:"mode"`            // multiplexed, reference or down
	Since     float64 `json:"since,omitempty"` // unix seconds the link came up or went down
	RTTMillis float64 `json:"rtt_ms,omitempty"`
	LastError string  `json:"last_error,omitempty"`
	ClaimPeer bool    `json:"claim_peer"` // claims of its namespaces are forwarded there
	Watched   bool    `json:"watched"`    // its log is pulled
}

// PeersUp counts the peers whose link is up.
func (s *NamespaceStatus) PeersUp() int {
	n := 0
	for _, p := range s.Peers {
		if p.Reachable {
			n++
		}
	}
	return n
}

// Route returns how the hub resolves ns, or nil when the snapshot does not
// list it.
func (s *NamespaceStatus) Route(ns string) *NamespaceRoute {
	for i := range s.Namespaces {
		if s.Namespaces[i].Namespace == ns {
			return &s.Namespaces[i]
		}
	}
	return nil
}

// Namespaces asks the hub how it resolves namespace ownership: its map,
// its peers and the contests. A hub without the "namespaces" feature is
// not asked; the call returns an *UnsupportedError (ErrUnsupported).
func (c *Client) Namespaces(ctx context.Context) (*NamespaceStatus, error) {
	if w := c.Welcome(); !w.HasFeature(FeatureNamespaces) {
		return nil, &UnsupportedError{Call: "Namespaces", Feature: FeatureNamespaces, HubID: w.HubID}
	}
	f, err := c.reply(ctx, c.envelope("ns_request", ""), "", "ns_snapshot", matchType("ns_snapshot"))
	if err != nil {
		return nil, err
	}
	raw := f.Field("federation")
	if raw == nil {
		return nil, fmt.Errorf("client: decode ns_snapshot: no federation field")
	}
	s := NamespaceStatus{Raw: raw}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("client: decode ns_snapshot: %w", err)
	}
	return &s, nil
}

// Moved is the answer to Move and Drain: where each namespace went, and how
// long the hub took.
type Moved struct {
	Moves   map[string]string `json:"moves"` // namespace → its new owner hub
	Elapsed time.Duration     `json:"-"`
}

// Move asks the fleet (hubs on etcd) to hand namespace ns to hub to, and
// returns once to serves it. Requests in ns meanwhile wait (the hubs tell
// them to retry shortly); nothing is refused as a conflict.
func (c *Client) Move(ctx context.Context, ns, to string) (*Moved, error) {
	m := c.envelope("ns_move", "")
	m["namespace"], m["to"] = ns, to
	return c.move(ctx, m)
}

// Drain moves every namespace owned by hub to the other hubs of the fleet
// (before maintenance) and says where each went.
func (c *Client) Drain(ctx context.Context, hub string) (*Moved, error) {
	m := c.envelope("ns_drain", "")
	m["hub"] = hub
	return c.move(ctx, m)
}

func (c *Client) move(ctx context.Context, m map[string]any) (*Moved, error) {
	match := func(f Frame) (bool, bool) {
		ok := f.Type == "ns_moved" || f.Type == "error"
		return ok, ok
	}
	f, err := c.reply(ctx, m, "", "ns_moved", match)
	if err != nil {
		return nil, err
	}
	var mv Moved
	if err := f.DecodeField("moves", &mv.Moves); err != nil {
		return nil, fmt.Errorf("client: decode ns_moved: %w", err)
	}
	mv.Elapsed = time.Duration(f.Int("elapsed_ms")) * time.Millisecond
	return &mv, nil
}
