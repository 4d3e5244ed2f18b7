package hub

// The dashboard's event stream on a fleet (issue 22): when Config.Fleet
// streams the fleet's changes (federation.FleetChanges, package cluster's
// mirror), /api/events on every hub carries every namespace's claim and
// board events, in etcd's revision order, from that watch, in place of
// this hub's own commits (which reach it through the same watch, a round
// later). Presence, activity, refusals, dead letters and mailbox events
// stay this hub's. The watch starts at the first stream, and stops a
// while after the last stream and read ended: a hub nobody watches does
// not follow the fleet's records for it.

import "github.com/synapse-hub/synapse/coord"

// fleetSink is the hub's dashboard feed as the fleet's change sink. Its
// methods run on the mirror's goroutine, holding no lock of the hub's.
type fleetSink struct{ h *Hub }

func (s fleetSink) Listening() bool           { return s.h.feed.Listening() }
func (s fleetSink) Changed(evs []coord.Event) { s.h.feed.Committed(evs) }
func (s fleetSink) Lost()                     { s.h.feed.Restart() } // the browsers reconnect and reload

// streamOpened is the feed's Opened hook on a fleet: a stream starts
// following the fleet's changes unless they are followed already (the
// following stops a while after the last stream and read end).
func (h *Hub) streamOpened() { h.fleetFeed.FollowChanges(fleetSink{h}) }
