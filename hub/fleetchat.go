package hub

// Chats on a fleet (issue 22 item 2). With Config.Chats every chat that is
// not a directed letter — a broadcast, a list, a glob, a role, a project,
// a bare name — goes through etcd: the sender's read goroutine posts it
// (so a sender's chats are written, and therefore relayed, in the order it
// sent them), and every hub's watch (followFleetChats, its own goroutine)
// hands each chat, in revision order, to the matching sockets bound there,
// the sender's echo included, and keeps it in the hub's history. The
// revision is the chat's msg_id, fleet-wide. Who a chat reaches, its
// receipt and its dead letter are judged once, by the sender's hub, from
// its own sockets and the other hubs' rosters. Without Config.Chats nothing
// here runs.

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/delivery"
)

// fleetChatTimeout bounds posting a chat to etcd, and the wait for this
// hub's watch to relay it before the sender's receipt is sent.
var fleetChatTimeout = 5 * time.Second

// fleetChats is how far this hub's watch has relayed the fleet's chats
// (Hub.mu).
type fleetChats struct {
	through int64         // the revision relayed through
	moved   chan struct{} // closed, and replaced, when through moves
}

func (f *fleetChats) movedLocked() chan struct{} {
	if f.moved == nil {
		f.moved = make(chan struct{})
	}
	return f.moved
}

func (f *fleetChats) advanceLocked(rev int64) {
	f.through = max(f.through, rev)
	if f.moved != nil {
		close(f.moved)
		f.moved = nil
	}
}

// followFleetChats rebuilds the history from the chats etcd keeps (at
// most MaxHistory) and follows the fleet's new chats until ctx ends.
func (h *Hub) followFleetChats(ctx context.Context) error {
	return h.cfg.Chats.FollowChats(ctx, h.cfg.MaxHistory, h.relayFleetChat)
}

// relayFleetChat keeps a chat of the fleet in history and hands it to the
// sockets here it reaches. The watch's goroutine, in revision order.
func (h *Hub) relayFleetChat(rev int64, rec []byte) {
	c, err := delivery.DecodeFleetChat(rev, rec)
	h.mu.Lock()
	defer h.mu.Unlock()
	defer h.fleetChats.advanceLocked(rev)
	if err != nil {
		h.log.Warn("hub: a fleet chat record was skipped", "rev", rev, "err", err)
		return
	}
	h.history.RaiseMsgID(rev) // this hub's own msg_ids (channels, letters) stay above
	h.history.AppendLocked(delivery.Entry{MsgID: rev, Sender: c.Sender, Target: c.Target, Public: c.Broadcast, Frame: c.Frame})
	if c.Broadcast {
		h.broadcastLocked(c.Frame, audience{everyone: true}, "chat")
		return
	}
	n := 0
	h.recipientsLocked(strings.TrimSpace(c.Target), c.Sender, func(rs *session) {
		if rs.send(c.Frame) {
			n++
		}
	})
	if rs := h.reg.byName[c.Sender]; rs != nil && rs.send(c.Frame) { // the echo
		n++
	}
	h.m.framesOut.WithLabelValues("chat").Add(float64(n))
}

// postFleetChat posts chat c, which the fleet's mail does not carry, to etcd;
// every hub's watch relays it. Its reach was judged (c.Part) under Hub.mu
// before; here, after the post, an undelivered directed chat dead-letters
// once, and the receipt follows the sender's echo.
func (s *session) postFleetChat(sender string, c *chatMsg) {
	h := s.h
	s.releaseBeforeWait() // the chat goes through etcd
	rec := delivery.EncodeFleetChat(delivery.FleetChat{Sender: c.Sender, Target: c.Target, Broadcast: c.Broadcast, Directed: c.Directed}, c.Build)
	ctx, cancel := context.WithTimeout(context.Background(), fleetChatTimeout)
	rev, err := h.cfg.Chats.PostChat(ctx, rec)
	cancel()
	if err != nil {
		s.fail(sender, "fleet_unavailable", "The chat was not stored in etcd ("+err.Error()+"), so no hub relayed it. Retry shortly.")
		return
	}
	c.Stamp(rev)
	h.mu.Lock()
	if c.Broadcast {
		h.m.chatBroadcast.Inc()
	} else {
		h.m.chatDirected.Inc()
	}
	if c.Directed && !c.Part.Delivered() {
		h.dead.CountLocked(c.To, c.Sender, c.Now)
	}
	h.mu.Unlock()
	if !h.awaitFleetChat(rev) {
		h.log.Warn("hub: the fleet's chat watch is behind; the receipt may precede the echo", "rev", rev)
	}
	if c.Receipt {
		h.receipts.SendImmediate(sessionConn{s}, &c.Chat)
	}
}

// awaitFleetChat waits until this hub's watch relayed revision rev (the
// sender's echo is enqueued), at most fleetChatTimeout.
func (h *Hub) awaitFleetChat(rev int64) bool {
	timeout := time.NewTimer(fleetChatTimeout)
	defer timeout.Stop()
	for {
		h.mu.Lock()
		if h.fleetChats.through >= rev {
			h.mu.Unlock()
			return true
		}
		moved := h.fleetChats.movedLocked()
		h.mu.Unlock()
		select {
		case <-moved:
		case <-timeout.C:
			return false
		}
	}
}

// fleetReachLocked is the partition of who chat c reaches in the fleet:
// the sockets here (as partitionLocked, or every other bound name for a
// broadcast with a receipt) and the other hubs' agents as their rosters
// say, live as judged there at most a second ago (Hub.mu).
func (h *Hub) fleetReachLocked(c *chatMsg) delivery.Partition {
	p := delivery.Partition{Caps: map[string]string{}}
	switch {
	case !c.Broadcast:
		p = h.partitionLocked(c.To, c.Sender, c.Now)
	case !c.Receipt:
		return p
	default:
		for _, n := range h.reg.onlineLocked() {
			if id := identity(n); n != c.Sender && !slices.Contains(p.Matched, id) {
				p.Matched, p.Live = append(p.Matched, id), append(p.Live, id)
			}
		}
	}
	remote := h.remoteAgentsLocked()
	roles := make(map[string][]string, len(remote))
	for _, a := range remote {
		roles[a.Name] = a.Roles
	}
	for _, a := range remote {
		if a.Name == c.Sender {
			continue
		}
		id, live := identity(a.Name), a.Live || c.Broadcast
		if !c.Broadcast {
			r := a.Roles
			if id != a.Name {
				r = append(slices.Clip(r), roles[id]...)
			}
			if !delivery.IsRecipient(c.To, []string{a.Name, id}, r) {
				continue
			}
		}
		if !slices.Contains(p.Matched, id) {
			p.Matched = append(p.Matched, id)
			p.Caps[id] = "unknown"
		}
		switch {
		case slices.Contains(p.Live, id):
		case live:
			p.Live = append(p.Live, id)
			p.Stale = slices.DeleteFunc(p.Stale, func(n string) bool { return n == id })
		case !slices.Contains(p.Stale, id):
			p.Stale = append(p.Stale, id)
		}
	}
	sort.Strings(p.Matched)
	sort.Strings(p.Live)
	sort.Strings(p.Stale)
	return p
}

// fleetRoleLocked reports whether name is a role some agent of the fleet
// holds, here or on another hub as its roster says: a chat to it goes to
// the role's holders (fleet chats), not to a mailbox of that name
// (Hub.mu).
func (h *Hub) fleetRoleLocked(name string) bool {
	if len(h.reg.byRole[name]) > 0 {
		return true
	}
	for _, a := range h.remoteAgentsLocked() {
		if slices.Contains(a.Roles, name) {
			return true
		}
	}
	return false
}
