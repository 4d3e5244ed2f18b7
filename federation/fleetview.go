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

// FleetChanges is a FleetView that also streams the fleet's claim and
// board changes as etcd commits them (package cluster's Owners), so that
// every hub's dashboard shows every hub's writes live (issue 22).
type FleetChanges interface {
	// FollowChanges hands sink every change of any namespace's claims and
	// board tasks from now on, from one goroutine, in etcd's revision
	// order, each once a fleet read can see it; it starts following the
	// fleet's records if nothing does (none did yet, or the following
	// stopped for want of a reader), and goes on while sink is Listening.
	// It is called as each stream opens, with the same sink, and never
	// blocks.
	FollowChanges(sink ChangeSink)
}

// ChangeSink takes the fleet's changes (FleetChanges).
type ChangeSink interface {
	// Listening reports whether anyone reads changes now: while it says
	// false none is decoded. It must not block.
	Listening() bool
	// Changed takes changes as the core events their owner committed
	// (ClaimGranted, HandedOff, TaskUpdated, CheckpointSaved, Released,
	// ClaimExpired, TaskPosted), derived from the records before and
	// after, in revision order. It must not block.
	Changed(evs []coord.Event)
	// Lost says changes were missed (the watch's revision was compacted
	// and every record was read afresh): what was handed before no longer
	// adds up to the fleet's state. It must not block.
	Lost()
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
