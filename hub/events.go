package hub

import (
	"strings"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/wire"
)

// onCommit publishes a committed batch (sequencer.Options.OnCommit). It
// runs on the sequencer goroutine after the commit, in commit order: each
// frame is encoded once and the same bytes are enqueued on every socket it
// concerns. Enqueueing never blocks.
func (h *Hub) onCommit(evs []coord.Event) {
	now := h.now()
	h.activeClaims.Store(int64(h.state.ClaimCount()))
	h.m.commitEvents.Observe(float64(len(evs)))
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range evs {
		if _, ok := ev.(coord.ClaimGranted); ok {
			h.m.claimsGranted.Inc()
		}
		var frames []wire.EventFrame
		if k := renderKey(ev); k != nil {
			if b, ok := h.rendered[k]; ok {
				frames = wire.EventFrames(ev, now, h.cfg.HubID)
				if len(frames) == 1 {
					frames[0].Bytes = b
				}
			}
		}
		if frames == nil {
			frames = wire.EventFrames(ev, now, h.cfg.HubID)
		}
		for i := range frames {
			if o := &frames[i]; o.To != "" {
				h.sendToLocked(o.To, o.Bytes, o.Type)
			} else {
				h.broadcastLocked(o.Bytes, audienceOf(o), o.Type)
			}
		}
	}
	clear(h.rendered)
	if h.fleetFeed == nil { // on a fleet the fleet's watch publishes them (fleetfeed.go)
		h.feed.Committed(evs)
	}
}

// render is every keyed request's sequencer.Request.Render: it encodes the
// request's frames now, keeps them for onCommit, and returns the frame the
// requester sees — the one an idempotent retry gets back.
func (h *Hub) render(o coord.Outcome) []byte {
	now := h.now()
	var primary, progress []byte
	for _, ev := range o.Events {
		k := renderKey(ev)
		if k == nil {
			continue
		}
		frames := wire.EventFrames(ev, now, h.cfg.HubID)
		if len(frames) != 1 {
			continue
		}
		h.rendered[k] = frames[0].Bytes
		if _, isNote := ev.(coord.ProgressPosted); isNote {
			if progress == nil {
				progress = frames[0].Bytes
			}
		} else if primary == nil {
			primary = frames[0].Bytes
		}
	}
	if primary == nil {
		primary = progress
	}
	if primary == nil {
		return []byte("null")
	}
	return primary
}

// renderKey identifies an event across Render and OnCommit by the entity
// it carries; nil for events that are never a request's reply.
func renderKey(ev coord.Event) any {
	switch e := ev.(type) {
	case coord.ClaimGranted:
		return e.Claim
	case coord.TaskUpdated:
		return e.Claim
	case coord.CheckpointSaved:
		return e.Claim
	case coord.HandedOff:
		return e.Claim
	case coord.Released:
		if e.Receipt != nil {
			return e.Receipt
		}
	case coord.ResourceOffered:
		return e.Offer
	case coord.TaskPosted:
		return e.Task
	case coord.ProgressPosted:
		return e.Note
	}
	return nil
}

// claimAudience is who a claim event concerns under scoped fan-out: the
// agents involved and their namespaces, and the task's own namespace.
func claimAudience(task string, agents ...string) audience {
	a := audience{namespaces: []string{coord.NamespaceOf(task)}}
	for _, n := range agents {
		a.names = append(a.names, identity(n))
		a.namespaces = append(a.namespaces, coord.NamespaceOf(identity(n)))
	}
	if !strings.Contains(task, "/") {
		a.namespaces = a.namespaces[1:] // a bare task id has no namespace of its own
	}
	return a
}

// audienceOf is who a broadcast reaches under scoped fan-out.
func audienceOf(f *wire.EventFrame) audience {
	aud := claimAudience(f.Task, f.Agents...)
	aud.namespaces = append(aud.namespaces, f.Namespaces...)
	aud.names = append(aud.names, f.Names...)
	return aud
}
