package federation

import (
	"context"

	"github.com/synapse-hub/synapse/coord"
)

// FleetView is what a fleet shares beyond ownership: the state every hub
// reads so that a query answers for the whole fleet, not for the hub it
// was asked on (issue 22). Package cluster implements it on etcd.
type FleetView interface {
	// Snapshot reads every namespace's claims and board tasks at one
	// revision, no older than etcd's when it began: it sees every write
	// acknowledged before it began, on any hub. It never waits on any
	// hub's sequencer.
	Snapshot(ctx context.Context) (FleetSnapshot, error)
	// Agents lists the agents bound on the other live hubs, as each last
	// published its roster (at most RosterEvery plus a watch round old).
	Agents() []FleetAgent
	// PublishAgents replaces this hub's published roster; it writes only
	// when the roster (or the hub's lease) changed.
	PublishAgents(ctx context.Context, agents []FleetAgent) error
}

// FleetSnapshot is the fleet's authority state at one etcd revision.
type FleetSnapshot struct {
	Revision int64
	Claims   []*coord.Claim
	Tasks    []*coord.BoardTask
}

// FleetAgent is one agent bound on a hub of the fleet.
type FleetAgent struct {
	Name     string   `json:"name"`
	Hub      string   `json:"hub_id"`
	LastSeen float64  `json:"last_seen"`
	Roles    []string `json:"roles,omitempty"`
	// Live says the hub it is on judged it live when it published: a
	// reaction within 90 s, or a sidecar seen within 20 s (a delivery
	// receipt's "delivered", PROTOCOL.md §2.2 step 8).
	Live bool `json:"live,omitempty"`
}
