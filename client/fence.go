package client

// Fence is the write-path check of one checkout against the hub's live
// claims and the checkout's Ledger (INV-EF-2 on the write path, docs/claims.md
// "Write-path fencing"): synapse guard and the git pre-commit check run it
// for each file a writer is about to change, and any other writer (an MCP
// server, a script) can run the same rule. It decides; what to tell the
// writer is the caller's.
type Fence struct {
	Claims  []Claim       // the hub's live claims (State.ActiveClaims)
	Records []LeaseRecord // the checkout's ledger (Ledger.Records)
	// Worktree and Root say which claims are this checkout's: those whose
	// worktree is the label Worktree or the repository's absolute Root
	// (git-claim's form).
	Worktree, Root string
	Agent          string // the writer
	// NeedClaim refuses a file no claim covers (the guard); without it
	// such a file is allowed (the pre-commit check of files nobody claims).
	NeedClaim bool
	// Strict also refuses a file covered only by a claim of the writer's
	// that this checkout recorded no grant of, and implies NeedClaim.
	Strict bool
}

// WriteVerdict is the kind of a Fence decision.
type WriteVerdict int

const (
	// WriteAllowed: a claim of the writer's covers the file under the
	// epoch the ledger recorded, or (without NeedClaim) nothing covers it.
	WriteAllowed WriteVerdict = iota
	// WriteUnrecorded: a claim of the writer's covers the file but the
	// checkout recorded no grant of it, so a superseded lease cannot be
	// told from a live one. Allowed, with a warning; refused under Strict.
	WriteUnrecorded
	// WriteSuperseded: the writer's covering claim is live under a newer
	// epoch than the one recorded (the lease lapsed and was re-granted, or
	// was renewed or handed back by another process under this name).
	WriteSuperseded
	// WriteClaimed: another agent's claim covers the file.
	WriteClaimed
	// WriteShared: only a shared (read) claim of the writer's covers it.
	WriteShared
	// WriteGone: no live claim covers the file but a recorded grant of the
	// writer's did: it expired or was released.
	WriteGone
	// WriteUnclaimed: nothing covers the file and nothing was recorded,
	// with NeedClaim or Strict.
	WriteUnclaimed
)

// FenceDecision is what Fence.Check says of one file.
type FenceDecision struct {
	Verdict WriteVerdict
	Allowed bool
	// Claim is the claim the verdict is about: the writer's (Superseded,
	// Unrecorded, Shared) or the other agent's (Claimed).
	Claim *Claim
	// Record is the recorded grant: the stale one (Superseded), or the
	// gone one (Gone, and Claimed when the writer's own claim is gone).
	Record *LeaseRecord
}

// Check decides whether the writer may change rel, a worktree-relative
// path, in this order:
//
//   - a live claim of the writer's covers rel and its epoch is the one the
//     ledger recorded: allowed;
//   - the writer's covering claim is live under a newer epoch than the
//     recorded one: refused, superseded;
//   - a live claim of the writer's covers rel and nothing was recorded for
//     it: allowed with a warning, refused under Strict;
//   - another agent's claim covers rel: refused (Record says whether the
//     writer's own recorded claim on it is gone);
//   - only a shared claim of the writer's covers rel: refused;
//   - no live claim covers rel but a recorded grant of the writer's did:
//     refused, the claim is gone;
//   - nothing covers rel and nothing was recorded: refused with NeedClaim
//     or Strict, else allowed.
func (f *Fence) Check(rel string) FenceDecision {
	mine, mineShared, others := f.Covering(rel)
	var stale *Claim
	var staleRec *LeaseRecord
	for i := range mine {
		r := f.recorded(mine[i].TaskID)
		switch {
		case r != nil && r.Epoch == mine[i].Epoch:
			return FenceDecision{Verdict: WriteAllowed, Allowed: true}
		case r != nil && stale == nil:
			stale, staleRec = &mine[i], r
		}
	}
	if stale != nil {
		return FenceDecision{Verdict: WriteSuperseded, Claim: stale, Record: staleRec}
	}
	if len(mine) > 0 {
		return FenceDecision{Verdict: WriteUnrecorded, Allowed: !f.Strict, Claim: &mine[0]}
	}
	var gone *LeaseRecord
	for i, r := range f.Records {
		if r.Agent == f.Agent && (r.Worktree == f.Worktree || r.Worktree == f.Root) && r.Covers(rel) {
			gone = &f.Records[i]
			break
		}
	}
	switch {
	case len(others) > 0:
		return FenceDecision{Verdict: WriteClaimed, Claim: &others[0], Record: gone}
	case len(mineShared) > 0:
		return FenceDecision{Verdict: WriteShared, Claim: &mineShared[0]}
	case gone != nil:
		return FenceDecision{Verdict: WriteGone, Record: gone}
	case f.NeedClaim || f.Strict:
		return FenceDecision{Verdict: WriteUnclaimed}
	}
	return FenceDecision{Verdict: WriteAllowed, Allowed: true}
}

// recorded is the writer's record of task, nil if none.
func (f *Fence) recorded(task string) *LeaseRecord {
	for i, r := range f.Records {
		if r.Agent == f.Agent && r.TaskID == task {
			return &f.Records[i]
		}
	}
	return nil
}

// Covering splits the claims covering rel into the writer's exclusive ones
// (which let it write), its shared ones (which let it read only) and
// others' of either mode (which forbid the write: a writer beside readers
// breaks a shared claim as surely as one beside another writer). A claim
// applies to this checkout when its worktree is Worktree or Root; it
// covers rel by the hub's rule (Claim.Covers).
func (f *Fence) Covering(rel string) (mine, mineShared, others []Claim) {
	for _, cl := range f.Claims {
		if cl.Worktree != f.Worktree && cl.Worktree != f.Root {
			continue
		}
		if !cl.Covers(rel) {
			continue
		}
		switch {
		case cl.Owner != f.Agent:
			others = append(others, cl)
		case cl.Mode == "shared":
			mineShared = append(mineShared, cl)
		default:
			mine = append(mine, cl)
		}
	}
	return mine, mineShared, others
}
