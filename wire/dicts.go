package wire

import (
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/pyjson"
)

// The entity dicts of the protocol. The journal stores the same dicts
// (PROTOCOL.md §3.1: journal form = wire form + quota_principal), so both
// write them with these functions.

// AppendClaim appends a claim as the reference's claim dict (PROTOCOL.md
// §3.1), the form of state_snapshot's active_claims. The journal's form adds
// quota_principal (withPrincipal); the wire never shows it.
func AppendClaim(b []byte, c *coord.Claim, withPrincipal bool) []byte {
	b = append(b, '{')
	b = pyjson.AppendKey(b, "task_id")
	b = pyjson.AppendString(b, c.TaskID)
	b = pyjson.AppendKey(b, "owner")
	b = pyjson.AppendString(b, c.Owner)
	b = pyjson.AppendKey(b, "note")
	b = pyjson.AppendString(b, c.Note)
	b = pyjson.AppendKey(b, "claimed_at")
	b = pyjson.AppendFloat(b, c.ClaimedAt)
	b = pyjson.AppendKey(b, "lease_expires_at")
	b = pyjson.AppendFloat(b, c.ExpiresAt)
	b = pyjson.AppendKey(b, "status")
	b = pyjson.AppendString(b, c.Status.String())
	b = pyjson.AppendKey(b, "data_ref")
	b = pyjson.AppendString(b, c.DataRef)
	b = pyjson.AppendKey(b, "worktree")
	b = pyjson.AppendString(b, c.Worktree)
	b = pyjson.AppendKey(b, "paths")
	b = pyjson.AppendStrings(b, c.Paths)
	b = pyjson.AppendKey(b, "epoch")
	b = pyjson.AppendInt(b, c.Epoch)
	b = pyjson.AppendKey(b, "version")
	b = pyjson.AppendInt(b, c.Version)
	b = pyjson.AppendKey(b, "checkpoint")
	b = pyjson.AppendString(b, c.Checkpoint)
	b = pyjson.AppendKey(b, "git")
	b = AppendGit(b, c.Git)
	if c.PathIdentity != "" {
		if raw, ok := pyjson.CanonicalRaw([]byte(c.PathIdentity)); ok {
			b = pyjson.AppendKey(b, "path_identity")
			b = append(b, raw...)
		}
	}
	// Globs and the shared mode are additive (issue 14): a claim without
	// them is written as the reference writes it.
	if len(c.Globs) > 0 {
		b = pyjson.AppendKey(b, "globs")
		b = pyjson.AppendStrings(b, c.Globs)
	}
	if c.Mode != coord.ModeExclusive {
		b = pyjson.AppendKey(b, "mode")
		b = pyjson.AppendString(b, c.Mode.String())
	}
	if len(c.Files) > 0 { // additive (issue 19): absent unless the claim names files
		b = pyjson.AppendKey(b, "files")
		b = pyjson.AppendStrings(b, c.Files)
	}
	if c.BoardTask != "" { // a task-bound claim; absent otherwise, as the reference writes it
		b = pyjson.AppendKey(b, "board_task")
		b = pyjson.AppendString(b, c.BoardTask)
	}
	if withPrincipal {
		b = pyjson.AppendKey(b, "quota_principal")
		b = pyjson.AppendString(b, c.QuotaPrincipal)
	}
	return append(b, '}')
}

// AppendGit appends a claim's git context, or null.
func AppendGit(b []byte, g *coord.Git) []byte {
	if g == nil {
		return append(b, "null"...)
	}
	b = append(b, '{')
	b = pyjson.AppendKey(b, "branch")
	b = pyjson.AppendString(b, g.Branch)
	b = pyjson.AppendKey(b, "base")
	b = pyjson.AppendString(b, g.Base)
	b = pyjson.AppendKey(b, "auto_release_on")
	b = pyjson.AppendString(b, g.AutoReleaseOn)
	return append(b, '}')
}

// AppendOffer appends a resource offer as the reference's dict.
func AppendOffer(b []byte, o *coord.Offer) []byte {
	b = append(b, '{')
	b = pyjson.AppendKey(b, "agent")
	b = pyjson.AppendString(b, o.Agent)
	b = pyjson.AppendKey(b, "kind")
	b = pyjson.AppendString(b, o.Kind)
	b = pyjson.AppendKey(b, "name")
	b = pyjson.AppendString(b, o.Name)
	b = pyjson.AppendKey(b, "capacity")
	b = pyjson.AppendInt(b, int64(o.Capacity))
	b = pyjson.AppendKey(b, "meta")
	b = AppendObject(b, o.Meta)
	b = pyjson.AppendKey(b, "offered_at")
	b = pyjson.AppendFloat(b, o.OfferedAt)
	return append(b, '}')
}

// AppendObject embeds opaque JSON object text; "" or text that is not a JSON
// object is written as {} (the reference's default meta).
func AppendObject(b []byte, raw string) []byte {
	if raw != "" {
		if c, ok := pyjson.CanonicalRaw([]byte(raw)); ok && len(c) > 0 && c[0] == '{' {
			return append(b, c...)
		}
	}
	return append(b, "{}"...)
}

// AppendTask appends a board task as the reference's dict; causalParent,
// when not "", is embedded as the journal keeps it.
func AppendTask(b []byte, t *coord.BoardTask, causalParent string) []byte {
	b = append(b, '{')
	b = pyjson.AppendKey(b, "task_id")
	b = pyjson.AppendString(b, t.TaskID)
	b = pyjson.AppendKey(b, "title")
	b = pyjson.AppendString(b, t.Title)
	b = pyjson.AppendKey(b, "description")
	b = pyjson.AppendString(b, t.Description)
	b = pyjson.AppendKey(b, "depends_on")
	b = pyjson.AppendStrings(b, t.DependsOn)
	b = pyjson.AppendKey(b, "status")
	b = pyjson.AppendString(b, t.Status)
	b = pyjson.AppendKey(b, "suggested_owner")
	b = pyjson.AppendString(b, t.SuggestedOwner)
	b = pyjson.AppendKey(b, "project")
	b = pyjson.AppendString(b, t.Project)
	b = pyjson.AppendKey(b, "version")
	b = pyjson.AppendInt(b, t.Version)
	b = pyjson.AppendKey(b, "created_by")
	b = pyjson.AppendString(b, t.CreatedBy)
	b = pyjson.AppendKey(b, "created_at")
	b = pyjson.AppendFloat(b, t.CreatedAt)
	b = pyjson.AppendKey(b, "updated_at")
	b = pyjson.AppendFloat(b, t.UpdatedAt)
	if t.Owner != "" { // held by a task-bound claim; absent otherwise
		b = pyjson.AppendKey(b, "owner")
		b = pyjson.AppendString(b, t.Owner)
		b = pyjson.AppendKey(b, "owner_claim")
		b = pyjson.AppendString(b, t.OwnerClaim)
	}
	if causalParent != "" {
		if c, ok := pyjson.CanonicalRaw([]byte(causalParent)); ok {
			b = pyjson.AppendKey(b, "causal_parent")
			b = append(b, c...)
		}
	}
	return append(b, '}')
}

// AppendNote appends a progress note as the reference's dict.
func AppendNote(b []byte, n *coord.Note) []byte {
	b = append(b, '{')
	b = pyjson.AppendKey(b, "task_id")
	b = pyjson.AppendString(b, n.TaskID)
	b = pyjson.AppendKey(b, "author")
	b = pyjson.AppendString(b, n.Author)
	b = pyjson.AppendKey(b, "kind")
	b = pyjson.AppendString(b, n.Kind)
	b = pyjson.AppendKey(b, "text")
	b = pyjson.AppendString(b, n.Text)
	b = pyjson.AppendKey(b, "posted_at")
	b = pyjson.AppendFloat(b, n.PostedAt)
	return append(b, '}')
}
