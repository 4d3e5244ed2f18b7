package wire

import (
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/pyjson"
)

// EventFrame is one frame a committed coord event puts on the wire: a
// private frame To one agent, or a broadcast, which the hub's scoped
// fan-out sends to the sockets concerned: the Task's namespace, the Agents
// it names and theirs, and any further Namespaces and Names.
type EventFrame struct {
	Bytes      []byte
	Type       string
	To         string   // a private frame's one recipient; "" for a broadcast
	Task       string   // the task a broadcast concerns; "" for none
	Agents     []string // the agents it names (owner first), each with its namespace
	Namespaces []string // further namespaces it concerns (a board task's project)
	Names      []string // further agents it names, without their namespaces
}

// EventFrames encodes the frames a committed event puts on the wire
// (PROTOCOL.md §2.4–2.11; texts as the traces show them), stamped at now
// by hub id: none for expiries, dropped waits and denials' audit records
// (the reference expires leases silently).
func EventFrames(ev coord.Event, now float64, id string) []EventFrame {
	switch e := ev.(type) {
	case coord.ClaimGranted:
		c := e.Claim
		f := NewFrame("claim_granted", "all", "Task '"+c.TaskID+"' claimed by "+c.Owner+".", now, id).
			Str("task_id", c.TaskID).Str("owner", c.Owner).Str("note", c.Note).
			Float("lease_expires_at", c.ExpiresAt).Str("status", c.Status.String()).
			Str("worktree", c.Worktree).Strs("paths", c.Paths).Int("epoch", c.Epoch).
			Int("version", c.Version).Str("checkpoint", c.Checkpoint).
			Append("git", func(b []byte) []byte { return AppendGit(b, c.Git) })
		pathIdentity(f, c)
		scopeExtras(f, c)
		if c.BoardTask != "" {
			f.Str("board_task", c.BoardTask) // additive: a task-bound claim
		}
		return []EventFrame{{Bytes: f.Bytes(), Type: "claim_granted", Task: c.TaskID, Agents: []string{c.Owner}}}
	case coord.Released:
		f := NewFrame("release_granted", "all", "Task '"+e.TaskID+"' released by "+e.Owner+".", now, id).
			Str("task_id", e.TaskID).Str("owner", e.Owner)
		if e.Receipt != nil {
			f.Append("receipt", func(b []byte) []byte { return appendReceipt(b, e.Receipt) })
		}
		return []EventFrame{{Bytes: f.Bytes(), Type: "release_granted", Task: e.TaskID, Agents: []string{e.Owner}}}
	case coord.ProgressPosted:
		n := e.Note
		payload := "Progress from " + n.Author
		if e.Receipt {
			payload = "Release receipt from " + n.Author
		}
		b := NewFrame("ledger_progress_posted", "all", payload, now, id).
			Append("note", func(b []byte) []byte { return AppendNote(b, n) }).Bytes()
		return []EventFrame{{Bytes: b, Type: "ledger_progress_posted", Task: n.TaskID, Agents: []string{n.Author}}}
	case coord.HandedOff:
		c := e.Claim
		f := NewFrame("handoff_granted", "all", "Task '"+c.TaskID+"' handed from "+e.From+" to "+c.Owner+".", now, id).
			Str("task_id", c.TaskID).Str("owner", c.Owner).Str("previous_owner", e.From).
			Str("note", c.Note).Str("status", c.Status.String()).Str("worktree", c.Worktree).
			Strs("paths", c.Paths)
		pathIdentity(f, c)
		scopeExtras(f, c)
		f.Int("epoch", c.Epoch).Int("version", c.Version).Float("lease_expires_at", c.ExpiresAt).
			Str("checkpoint", c.Checkpoint)
		return []EventFrame{{Bytes: f.Bytes(), Type: "handoff_granted", Task: c.TaskID, Agents: []string{c.Owner, e.From}}}
	case coord.TaskUpdated:
		c := e.Claim
		b := NewFrame("task_updated", "all", "Task '"+c.TaskID+"' updated by "+c.Owner+".", now, id).
			Str("task_id", c.TaskID).Str("owner", c.Owner).Str("status", c.Status.String()).
			Str("data_ref", c.DataRef).Int("version", c.Version).Bytes()
		return []EventFrame{{Bytes: b, Type: "task_updated", Task: c.TaskID, Agents: []string{c.Owner}}}
	case coord.CheckpointSaved:
		c := e.Claim
		b := NewFrame("checkpoint_saved", c.Owner, "Checkpoint saved for '"+c.TaskID+"' by "+c.Owner+".", now, id).
			Str("task_id", c.TaskID).Int("version", c.Version).Bytes()
		return []EventFrame{{Bytes: b, Type: "checkpoint_saved", To: c.Owner}}
	case coord.WaitAdded:
		b := NewFrame("wait_granted", e.Waiter, "Waiting for '"+e.TaskID+"' held by "+e.Holder+".", now, id).
			Str("task_id", e.TaskID).Str("holder", e.Holder).Bytes()
		return []EventFrame{{Bytes: b, Type: "wait_granted", To: e.Waiter}}
	case coord.WaitReady:
		frames := make([]EventFrame, 0, len(e.Waiters))
		for _, w := range e.Waiters {
			b := NewFrame("wait_ready", w, "Task '"+e.TaskID+"' is free ("+e.Reason+").", now, id).
				Str("task_id", e.TaskID).Str("reason", e.Reason).Bytes()
			frames = append(frames, EventFrame{Bytes: b, Type: "wait_ready", To: w})
		}
		return frames
	case coord.ResourceOffered:
		o := e.Offer
		b := NewFrame("resource_offered", "all", "Resource offered by "+o.Agent, now, id).
			Str("agent", o.Agent).Str("kind", o.Kind).Str("name", o.Name).Str("key", o.Key()).Bytes()
		return []EventFrame{{Bytes: b, Type: "resource_offered", Task: "", Agents: []string{o.Agent}}}
	case coord.TaskPosted:
		t := e.Task
		typ, payload := "ledger_task_posted", "Task '"+t.TaskID+"' declared by "+e.By+"."
		switch {
		case e.Update:
			typ, payload = "ledger_task_updated", "Task '"+t.TaskID+"' plan updated."
		case e.Redeclared:
			payload = "Task '" + t.TaskID + "' re-declared by " + e.By + "."
		}
		b := NewFrame(typ, "all", payload, now, id).
			Append("task", func(b []byte) []byte { return AppendTask(b, t, "") }).Bytes()
		out := EventFrame{Bytes: b, Type: typ, Task: t.TaskID, Agents: []string{e.By}}
		if t.Project != "" {
			out.Namespaces = []string{t.Project}
		}
		if t.SuggestedOwner != "" {
			out.Names = []string{t.SuggestedOwner}
		}
		return []EventFrame{out}
	}
	return nil
}

// scopeExtras writes a claim's globs, shared mode and files (features
// glob_scopes, shared_claims, file_scopes) when it has them: a plain
// claim's frame is the reference's.
func scopeExtras(f *Frame, c *coord.Claim) {
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

func pathIdentity(f *Frame, c *coord.Claim) {
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
	f := Object().Str("task_id", r.TaskID).Str("owner", r.Owner).Bool("released", true).
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
