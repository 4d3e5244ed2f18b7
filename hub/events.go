package hub

import (
	"strings"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

// eventFrame is one frame an event produces: a broadcast (to == "") with the
// audience scoped sockets filter on, or a private frame to one name.
type eventFrame struct {
	b   []byte
	typ string
	to  string
	aud audience
}

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
		var frames []eventFrame
		if k := renderKey(ev); k != nil {
			if b, ok := h.rendered[k]; ok {
				frames = h.framesFor(ev, now)
				if len(frames) == 1 {
					frames[0].b = b
				}
			}
		}
		if frames == nil {
			frames = h.framesFor(ev, now)
		}
		for _, o := range frames {
			if o.to != "" {
				h.sendToLocked(o.to, o.b, o.typ)
			} else {
				h.broadcastLocked(o.b, o.aud, o.typ)
			}
		}
	}
	clear(h.rendered)
	h.feed.Committed(evs)
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
		frames := h.framesFor(ev, now)
		if len(frames) != 1 {
			continue
		}
		h.rendered[k] = frames[0].b
		if _, isNote := ev.(coord.ProgressPosted); isNote {
			if progress == nil {
				progress = frames[0].b
			}
		} else if primary == nil {
			primary = frames[0].b
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

// framesFor encodes the frames of one event (PROTOCOL.md §2.4–2.11; texts
// as the traces show them).
func (h *Hub) framesFor(ev coord.Event, now float64) []eventFrame {
	id := h.cfg.HubID
	switch e := ev.(type) {
	case coord.ClaimGranted:
		c := e.Claim
		f := wire.NewFrame("claim_granted", "all", "Task '"+c.TaskID+"' claimed by "+c.Owner+".", now, id).
			Str("task_id", c.TaskID).Str("owner", c.Owner).Str("note", c.Note).
			Float("lease_expires_at", c.ExpiresAt).Str("status", c.Status.String()).
			Str("worktree", c.Worktree).Strs("paths", c.Paths).Int("epoch", c.Epoch).
			Int("version", c.Version).Str("checkpoint", c.Checkpoint).
			Append("git", func(b []byte) []byte { return wire.AppendGit(b, c.Git) })
		pathIdentity(f, c)
		scopeExtras(f, c)
		if c.BoardTask != "" {
			f.Str("board_task", c.BoardTask) // additive: a task-bound claim
		}
		return []eventFrame{{b: f.Bytes(), typ: "claim_granted", aud: claimAudience(c.TaskID, c.Owner)}}
	case coord.Released:
		f := wire.NewFrame("release_granted", "all", "Task '"+e.TaskID+"' released by "+e.Owner+".", now, id).
			Str("task_id", e.TaskID).Str("owner", e.Owner)
		if e.Receipt != nil {
			f.Append("receipt", func(b []byte) []byte { return appendReceipt(b, e.Receipt) })
		}
		return []eventFrame{{b: f.Bytes(), typ: "release_granted", aud: claimAudience(e.TaskID, e.Owner)}}
	case coord.ProgressPosted:
		n := e.Note
		payload := "Progress from " + n.Author
		if e.Receipt {
			payload = "Release receipt from " + n.Author
		}
		b := wire.NewFrame("ledger_progress_posted", "all", payload, now, id).
			Append("note", func(b []byte) []byte { return wire.AppendNote(b, n) }).Bytes()
		return []eventFrame{{b: b, typ: "ledger_progress_posted", aud: claimAudience(n.TaskID, n.Author)}}
	case coord.HandedOff:
		c := e.Claim
		f := wire.NewFrame("handoff_granted", "all", "Task '"+c.TaskID+"' handed from "+e.From+" to "+c.Owner+".", now, id).
			Str("task_id", c.TaskID).Str("owner", c.Owner).Str("previous_owner", e.From).
			Str("note", c.Note).Str("status", c.Status.String()).Str("worktree", c.Worktree).
			Strs("paths", c.Paths)
		pathIdentity(f, c)
		scopeExtras(f, c)
		f.Int("epoch", c.Epoch).Int("version", c.Version).Float("lease_expires_at", c.ExpiresAt).
			Str("checkpoint", c.Checkpoint)
		return []eventFrame{{b: f.Bytes(), typ: "handoff_granted", aud: claimAudience(c.TaskID, c.Owner, e.From)}}
	case coord.TaskUpdated:
		c := e.Claim
		b := wire.NewFrame("task_updated", "all", "Task '"+c.TaskID+"' updated by "+c.Owner+".", now, id).
			Str("task_id", c.TaskID).Str("owner", c.Owner).Str("status", c.Status.String()).
			Str("data_ref", c.DataRef).Int("version", c.Version).Bytes()
		return []eventFrame{{b: b, typ: "task_updated", aud: claimAudience(c.TaskID, c.Owner)}}
	case coord.CheckpointSaved:
		c := e.Claim
		b := wire.NewFrame("checkpoint_saved", c.Owner, "Checkpoint saved for '"+c.TaskID+"' by "+c.Owner+".", now, id).
			Str("task_id", c.TaskID).Int("version", c.Version).Bytes()
		return []eventFrame{{b: b, typ: "checkpoint_saved", to: c.Owner}}
	case coord.WaitAdded:
		b := wire.NewFrame("wait_granted", e.Waiter, "Waiting for '"+e.TaskID+"' held by "+e.Holder+".", now, id).
			Str("task_id", e.TaskID).Str("holder", e.Holder).Bytes()
		return []eventFrame{{b: b, typ: "wait_granted", to: e.Waiter}}
	case coord.WaitReady:
		frames := make([]eventFrame, 0, len(e.Waiters))
		for _, w := range e.Waiters {
			b := wire.NewFrame("wait_ready", w, "Task '"+e.TaskID+"' is free ("+e.Reason+").", now, id).
				Str("task_id", e.TaskID).Str("reason", e.Reason).Bytes()
			frames = append(frames, eventFrame{b: b, typ: "wait_ready", to: w})
		}
		return frames
	case coord.ResourceOffered:
		o := e.Offer
		b := wire.NewFrame("resource_offered", "all", "Resource offered by "+o.Agent, now, id).
			Str("agent", o.Agent).Str("kind", o.Kind).Str("name", o.Name).Str("key", o.Key()).Bytes()
		return []eventFrame{{b: b, typ: "resource_offered", aud: claimAudience("", o.Agent)}}
	case coord.TaskPosted:
		t := e.Task
		typ, payload := "ledger_task_posted", "Task '"+t.TaskID+"' declared by "+e.By+"."
		switch {
		case e.Update:
			typ, payload = "ledger_task_updated", "Task '"+t.TaskID+"' plan updated."
		case e.Redeclared:
			payload = "Task '" + t.TaskID + "' re-declared by " + e.By + "."
		}
		b := wire.NewFrame(typ, "all", payload, now, id).
			Append("task", func(b []byte) []byte { return wire.AppendTask(b, t, "") }).Bytes()
		aud := claimAudience(t.TaskID, e.By)
		if t.Project != "" {
			aud.namespaces = append(aud.namespaces, t.Project)
		}
		if t.SuggestedOwner != "" {
			aud.names = append(aud.names, t.SuggestedOwner)
		}
		return []eventFrame{{b: b, typ: typ, aud: aud}}
	}
	// Expiries, dropped waits, denials' audit records: nothing on the wire
	// (the reference expires leases silently).
	return nil
}

// scopeExtras writes a claim's globs, shared mode and files (features
// glob_scopes, shared_claims, file_scopes) when it has them: a plain
// claim's frame is the reference's.
func scopeExtras(f *wire.Frame, c *coord.Claim) {
	if len(c.Globs) > 0 {
		f.Strs("globs", c.Globs)
	}
	if c.Mode != coord.ModeExclusive {
		f.Str("mode", c.Mode.String())
	}
	if len(c.Files) > 0 {
		f.Strs("files", c.Files)
	}
}

func pathIdentity(f *wire.Frame, c *coord.Claim) {
	if c.PathIdentity == "" {
		return
	}
	if raw, ok := pyjson.CanonicalRaw([]byte(c.PathIdentity)); ok {
		f.Raw("path_identity", raw)
	}
}

// appendReceipt writes a release receipt as the reference does (§2.5).
func appendReceipt(b []byte, r *coord.Receipt) []byte {
	e := &r.Evidence
	f := wire.Object().Str("task_id", r.TaskID).Str("owner", r.Owner).Bool("released", true).
		Strs("evidence", e.Evidence).Strs("artifacts", e.Artifacts).
		Strs("known_failures", e.KnownFailures).Strs("changed_files", e.ChangedFiles).
		Strs("generated_artifacts", e.GeneratedArtifacts).Strs("approvals", e.Approvals).
		Str("epistemic_status", r.Status).Strs("epistemic_reasons", r.Reasons)
	if e.Confidence != "" {
		f.Str("confidence", e.Confidence)
	}
	if e.HasFreshness {
		f.Float("freshness_seconds", e.Freshness)
	}
	return append(b, f.Bytes()...)
}
