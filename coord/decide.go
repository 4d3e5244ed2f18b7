package coord

// Decide validates cmd against the state at time now and returns the events
// that carry it out, or a refusal. It does not change the state. It assumes
// what is due at now has expired (Step and Tick see to that).
func (s *State) Decide(cmd Command, now float64) ([]Event, *Refusal) {
	switch c := cmd.(type) {
	case ClaimRequest:
		return s.decideClaim(c, now)
	case ReleaseRequest:
		return s.decideRelease(c, now)
	case UpdateRequest:
		return s.decideUpdate(c, now)
	case CheckpointRequest:
		return s.decideCheckpoint(c, now)
	case HandoffRequest:
		return s.decideHandoff(c, now)
	case WaitRequest:
		return s.decideWait(c, now)
	case Disconnect:
		if tasks := sortedKeys(s.waits[c.Agent]); len(tasks) > 0 {
			return []Event{WaitsDropped{Waiter: c.Agent, Tasks: tasks}}, nil
		}
		return nil, nil
	case OfferResource:
		return s.decideOffer(c, now)
	case DeclareTask:
		return s.decideDeclare(c, now)
	case UpdateBoardTask:
		return s.decideBoardUpdate(c, now)
	case PostProgress:
		return s.decideProgress(c, now)
	case Adopt:
		return s.decideAdopt(c, now)
	case Disown:
		return s.decideDisown(c)
	}
	return nil, refuse(CodeUnknownCommand, "", "Unknown command %T.", cmd)
}

func principalOf(principal, agent string) string {
	if principal == "" {
		return "legacy-agent:" + agent
	}
	return principal
}

func (s *State) decideClaim(r ClaimRequest, now float64) ([]Event, *Refusal) {
	task := strip(r.TaskID)
	paths, globs, files := NormalizeScope(r.Paths, r.Globs, r.Files, s.lim)
	mode := ModeExclusive
	if r.Shared {
		mode = ModeShared
	}
	scope := Scope{Worktree: r.Worktree, Paths: paths, Globs: globs, Files: files, Mode: mode}
	deny := func(ref *Refusal) ([]Event, *Refusal) {
		return []Event{ClaimDenied{Claimant: r.Agent, TaskID: task, Code: ref.Code, Worktree: r.Worktree, Paths: paths}}, ref
	}
	if task == "" {
		return deny(refuse(CodeTaskIDRequired, task, "Task ID is required."))
	}
	existing := s.liveClaim(task, now)
	if existing != nil && existing.Owner != r.Agent { // INV-ME-1
		ref := refuse(CodeLeaseLive, task, "Task '%s' is already claimed by %s.", task, existing.Owner)
		ref.Holder = existing.Owner
		return deny(ref)
	}
	if h := s.index.conflict(scope, r.Agent, task, now); h != nil { // INV-ME-2..4, with globs, files and modes
		return deny(scopeConflict(task, scope, h))
	}
	principal := principalOf(r.Principal, r.Agent)
	renewal := existing != nil && existing.QuotaPrincipal == principal      // INV-LL-4: free even at the cap
	if !renewal && s.principals[principal] >= s.lim.MaxClaimsPerPrincipal { // INV-ME-5
		return deny(refuse(CodeQuotaExceeded, task, "Agent %s principal claim quota holds the maximum %d claims.", r.Agent, s.lim.MaxClaimsPerPrincipal))
	}
	board, boardEvs, ref := s.bindBoardTask(r, task, existing, now)
	if ref != nil {
		return deny(ref)
	}
	c := &Claim{
		TaskID: task, Owner: r.Agent, Note: strip(r.Note), Status: StatusClaimed,
		Worktree: r.Worktree, Paths: paths, Globs: globs, Files: files, Mode: mode, PathIdentity: r.PathIdentity, Git: r.Git,
		QuotaPrincipal: principal, ClaimedAt: now, ExpiresAt: now + s.lim.ClampTTL(r.TTL, r.HasTTL),
		Epoch: s.epoch + 1, // INV-EF-1
	}
	switch {
	case existing != nil:
		// A renewal extends the lease without dropping the work's state
		// (the reference resets it); a finished claim starts over.
		c.Checkpoint = existing.Checkpoint
		if !existing.Status.Terminal() {
			c.Status, c.DataRef, c.Version = existing.Status, existing.DataRef, existing.Version
		}
	default:
		c.Checkpoint = s.retained[task].checkpoint // INV-CR-3: resume from the last checkpoint
	}
	c.BoardTask = board
	return append([]Event{ClaimGranted{Claim: c, Renewal: existing != nil}}, boardEvs...), nil
}

// owned returns the live claim on task held by agent, or the refusal the
// reference gives when there is none. notFound is the refusal for a task
// with no live claim; ownerFmt formats "owned by someone else".
func (s *State) owned(task, agent string, hasEpoch bool, epoch int64, now float64, notFound *Refusal, ownerFmt string) (*Claim, *Refusal) {
	if task == "" {
		return nil, refuse(CodeTaskIDRequired, task, "Task ID is required.")
	}
	c := s.liveClaim(task, now)
	if c == nil {
		return nil, notFound
	}
	if c.Owner != agent {
		ref := refuse(CodeNotOwner, task, ownerFmt, task, c.Owner, agent)
		ref.Owner = c.Owner
		return nil, ref
	}
	if hasEpoch && epoch != c.Epoch { // INV-EF-2
		ref := refuse(CodeEpochStale, task, "Task '%s' epoch is stale (current %d).", task, c.Epoch)
		ref.Owner = c.Owner
		return nil, ref
	}
	return c, nil
}

// scopeConflict is the refusal of scope sc by the holder h. It keeps the
// reference's sentence when two exclusive literal scopes meet, and names
// the holder's entry and mode when a glob, a file or a shared claim is
// involved.
func scopeConflict(task string, sc Scope, h *Claim) *Refusal {
	entry := conflictEntry(sc, h)
	literal := len(sc.Globs) == 0 && len(h.Globs) == 0 && len(sc.Files) == 0 && len(h.Files) == 0
	if literal && sc.Mode == ModeExclusive && h.Mode == ModeExclusive {
		ref := refuse(CodeScopeConflict, task, "Task '%s' file scope conflicts with '%s' held by %s.", task, h.TaskID, h.Owner)
		ref.Holder, ref.ConflictTask = h.Owner, h.TaskID
		return ref
	}
	what := "'" + entry + "'"
	if entry == "" {
		what = "the whole worktree"
	}
	ref := refuse(CodeScopeConflict, task, "Task '%s' file scope conflicts with '%s' held by %s (%s %s).", task, h.TaskID, h.Owner, h.Mode, what)
	ref.Holder, ref.ConflictTask, ref.ConflictPattern, ref.ConflictMode = h.Owner, h.TaskID, entry, h.Mode.String()
	return ref
}

func notClaimed(task string) *Refusal {
	return refuse(CodeNotClaimed, task, "Task '%s' is not currently claimed.", task)
}

func notFound(task string) *Refusal {
	return refuse(CodeTaskNotFound, task, "Task '%s' not found.", task)
}

func (s *State) decideRelease(r ReleaseRequest, now float64) ([]Event, *Refusal) {
	task := strip(r.TaskID)
	c, ref := s.owned(task, r.Agent, r.HasEpoch, r.Epoch, now, notClaimed(task), "Task '%s' is owned by %s, not %s.")
	if ref != nil {
		return nil, ref
	}
	if !validOutcome(r.Outcome) {
		return nil, refuse(CodeOutcomeInvalid, task, "Release outcome '%s' is not done or failed.", r.Outcome)
	}
	receipt := assess(task, r.Agent, r.Evidence)
	evs := []Event{Released{TaskID: task, Owner: r.Agent, Epoch: c.Epoch, Receipt: receipt}}
	if r.Evidence.present() {
		evs = append(evs, ProgressPosted{Note: &Note{TaskID: task, Author: r.Agent, Kind: "assessment", Text: receipt.NoteText(), PostedAt: now}, Receipt: true})
	}
	evs = append(evs, s.releaseBoardTask(c, r.Outcome, false, now)...) // after the receipt note, which follows release_granted on the wire
	if ws := s.waitersOf(task); len(ws) > 0 {
		evs = append(evs, WaitReady{TaskID: task, Waiters: ws, Reason: "release"})
	}
	return evs, nil
}

func (s *State) decideUpdate(r UpdateRequest, now float64) ([]Event, *Refusal) {
	task := strip(r.TaskID)
	c, ref := s.owned(task, r.Agent, r.HasEpoch, r.Epoch, now, notFound(task), "Task '%s' owned by %s, not %s.")
	if ref != nil {
		return nil, ref
	}
	if r.HasExpectedVersion && r.ExpectedVersion != c.Version { // INV-EF-3
		return nil, refuse(CodeVersionConflict, task, "Task '%s' version conflict (current %d).", task, c.Version)
	}
	next := c.Status
	if r.Status != "" {
		st, ok := ParseStatus(r.Status)
		switch {
		case !ok:
			return nil, refuse(CodeUnknownStatus, task, "Task '%s' cannot transition %s -> %s.", task, c.Status, r.Status)
		case !c.Status.CanTransition(st):
			return nil, refuse(CodeIllegalTransition, task, "Task '%s' cannot transition %s -> %s.", task, c.Status, st)
		}
		next = st
	}
	n := c.clone()
	n.Status = next
	if note := strip(r.Note); note != "" {
		n.Note = note
	}
	if r.DataRef != "" {
		n.DataRef = r.DataRef
	}
	n.Version++
	return []Event{TaskUpdated{Claim: n}}, nil
}

func (s *State) decideCheckpoint(r CheckpointRequest, now float64) ([]Event, *Refusal) {
	task := strip(r.TaskID)
	c, ref := s.owned(task, r.Agent, r.HasEpoch, r.Epoch, now, notFound(task), "Task '%s' owned by %s, not %s.")
	if ref != nil {
		return nil, ref
	}
	n := c.clone()
	n.Checkpoint = r.Checkpoint
	n.Version++
	return []Event{CheckpointSaved{Claim: n}}, nil
}

func (s *State) decideHandoff(r HandoffRequest, now float64) ([]Event, *Refusal) {
	task, to := strip(r.TaskID), strip(r.To)
	if task == "" {
		return nil, refuse(CodeTaskIDRequired, task, "Task ID is required.")
	}
	if to == "" {
		return nil, refuse(CodeTargetRequired, task, "Handoff target is required.")
	}
	c, ref := s.owned(task, r.Agent, false, 0, now, notClaimed(task), "Task '%s' is owned by %s, not %s.")
	if ref != nil {
		return nil, ref
	}
	if to == r.Agent {
		return nil, refuse(CodeAlreadyOwner, task, "Task '%s' is already owned by %s.", task, to)
	}
	if r.HasEpoch && r.Epoch != c.Epoch { // INV-EF-2
		ref := refuse(CodeEpochStale, task, "Task '%s' epoch is stale (current %d).", task, c.Epoch)
		ref.Owner = c.Owner
		return nil, ref
	}
	if !r.ToOnline {
		return nil, refuse(CodeTargetOffline, task, "Handoff target '%s' is not online.", to)
	}
	principal := principalOf(r.ToPrincipal, to)
	if principal != c.QuotaPrincipal && s.principals[principal] >= s.lim.MaxClaimsPerPrincipal { // INV-ME-5
		return nil, refuse(CodeQuotaExceeded, task, "Agent %s holds the maximum %d claims.", to, s.lim.MaxClaimsPerPrincipal)
	}
	if h := s.index.conflict(c.Scope(), to, task, now); h != nil { // INV-CR-2 with INV-ME-2
		return nil, scopeConflict(task, c.Scope(), h)
	}
	n := c.clone()
	n.Owner, n.QuotaPrincipal = to, principal
	if note := strip(r.Note); note != "" {
		n.Note = note
	}
	n.Epoch, n.Version = s.epoch+1, 0                            // INV-EF-1, INV-EF-3
	n.ClaimedAt, n.ExpiresAt = now, now+s.lim.ClampTTL(0, false) // a full default lease, inside the window (INV-LL-3)
	text := "handed off to " + to
	if note := strip(r.Note); note != "" {
		text += ": " + note
	}
	evs := []Event{
		ProgressPosted{Note: &Note{TaskID: task, Author: r.Agent, Kind: "note", Text: text, PostedAt: now}},
		HandedOff{Claim: n, From: r.Agent},
	}
	evs = append(evs, s.handOffBoardTask(c, to, now)...)
	if s.hasWait(to, task) {
		evs = append(evs, WaitReady{TaskID: task, Waiters: []string{to}, Reason: "handoff"})
	}
	return evs, nil
}

func (s *State) decideWait(r WaitRequest, now float64) ([]Event, *Refusal) {
	task := strip(r.TaskID)
	if task == "" {
		return nil, refuse(CodeTaskIDRequired, task, "Task ID is required.")
	}
	c := s.liveClaim(task, now)
	if c == nil {
		return nil, refuse(CodeNotClaimed, task, "Task '%s' is not claimed; nothing to wait for.", task)
	}
	if c.Owner == r.Agent {
		return nil, refuse(CodeAlreadyHolder, task, "You already hold '%s'.", task)
	}
	if s.reaches(c.Owner, r.Agent, now) {
		ref := refuse(CodeDeadlock, task, "Waiting for '%s' held by %s would deadlock.", task, c.Owner)
		ref.Holder = c.Owner
		return nil, ref
	}
	if !s.hasWait(r.Agent, task) && len(s.waits[r.Agent]) >= s.lim.MaxWaitsPerAgent {
		return nil, refuse(CodeWaitLimit, task, "Agent %s already waits on the maximum %d tasks.", r.Agent, s.lim.MaxWaitsPerAgent)
	}
	return []Event{WaitAdded{Waiter: r.Agent, TaskID: task, Holder: c.Owner}}, nil
}

// reaches reports whether agent from waits, directly or through a chain of
// holders, for something target holds: adding target → from would close a
// cycle.
func (s *State) reaches(from, target string, now float64) bool {
	seen := map[string]bool{from: true}
	queue := []string{from}
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		for t := range s.waits[a] {
			c := s.liveClaim(t, now)
			if c == nil {
				continue
			}
			if c.Owner == target {
				return true
			}
			if !seen[c.Owner] {
				seen[c.Owner] = true
				queue = append(queue, c.Owner)
			}
		}
	}
	return false
}

func (s *State) decideOffer(r OfferResource, now float64) ([]Event, *Refusal) {
	kind, name := strip(r.Kind), strip(r.Name)
	if kind == "" || name == "" {
		return nil, refuse(CodeResourceInvalid, "", "resource offer requires kind+name")
	}
	o := &Offer{Agent: r.Agent, Kind: kind, Name: name, Capacity: max(r.Capacity, 1), Meta: r.Meta, OfferedAt: now}
	if s.offers[o.Key()] == nil && s.offersByAgent[r.Agent] >= s.lim.MaxOffersPerAgent {
		return nil, refuse(CodeResourceQuota, "", "resource offer quota exceeded")
	}
	return []Event{ResourceOffered{Offer: o}}, nil
}

func boardVersionConflict(task string, expected, have int64) *Refusal {
	return refuse(CodeVersionConflict, task, "Task '%s' version conflict: expected v%d, board has v%d.", task, expected, have)
}

func (s *State) decideDeclare(r DeclareTask, now float64) ([]Event, *Refusal) {
	task := strip(r.TaskID)
	if task == "" {
		return nil, refuse(CodeTaskIDRequired, task, "Task ID is required.")
	}
	title := strip(r.Title)
	if title == "" {
		return nil, refuse(CodeTitleRequired, task, "Task title is required.")
	}
	deps := cleanDeps(task, r.DependsOn)
	if s.wouldCycle(task, deps) {
		return nil, refuse(CodeDependencyCycle, task, "Task '%s' dependencies would form a cycle.", task)
	}
	prev := s.tasks[task]
	var have int64
	if prev != nil {
		have = prev.Version
	}
	if r.HasExpectedVersion && r.ExpectedVersion != have {
		return nil, boardVersionConflict(task, r.ExpectedVersion, have)
	}
	project := strip(r.Project)
	if prev != nil && prev.Project != "" && project != "" && project != prev.Project {
		return nil, refuse(CodeProjectConflict, task, "Task '%s' project conflict: already scoped to '%s', cannot re-scope to '%s'.", task, prev.Project, project)
	}
	if prev == nil && len(s.tasks) >= s.lim.MaxBoardTasks {
		return nil, refuse(CodeBoardFull, task, "The board holds the maximum %d tasks.", s.lim.MaxBoardTasks)
	}
	t := &BoardTask{
		TaskID: task, Title: title, Description: r.Description, DependsOn: deps,
		Status: "open", SuggestedOwner: strip(r.SuggestedOwner), Project: project,
		Version: 1, CreatedBy: r.Agent, CreatedAt: now, UpdatedAt: now,
	}
	if prev != nil {
		t.Status, t.CreatedBy, t.CreatedAt, t.Version = prev.Status, prev.CreatedBy, prev.CreatedAt, prev.Version+1
		t.Owner, t.OwnerClaim = prev.Owner, prev.OwnerClaim // a re-declaration does not free a held task
		if project == "" {
			t.Project = prev.Project
		}
	}
	return []Event{TaskPosted{Task: t, By: r.Agent, Redeclared: prev != nil, CausalParent: r.CausalParent}}, nil
}

func (s *State) decideBoardUpdate(r UpdateBoardTask, now float64) ([]Event, *Refusal) {
	task := strip(r.TaskID)
	if task == "" {
		return nil, refuse(CodeTaskIDRequired, task, "Task ID is required.")
	}
	prev := s.tasks[task]
	if prev == nil {
		return nil, refuse(CodeBoardTaskNotFound, task, "Task '%s' is not on the board.", task)
	}
	t := *prev
	if r.Status != nil && strip(*r.Status) != "" {
		st := strip(*r.Status)
		if !validLedgerStatus(st) {
			return nil, refuse(CodeUnknownLedgerStatus, task, "Unknown ledger status '%s'.", st)
		}
		t.Status = st
	}
	if r.HasExpectedVersion && r.ExpectedVersion != prev.Version {
		return nil, boardVersionConflict(task, r.ExpectedVersion, prev.Version)
	}
	if r.SuggestedOwner != nil {
		t.SuggestedOwner = strip(*r.SuggestedOwner)
	}
	if r.Project != nil {
		t.Project = strip(*r.Project)
	}
	t.Version++
	t.UpdatedAt = now
	return []Event{TaskPosted{Task: &t, By: r.Agent, Update: true, CausalParent: r.CausalParent}}, nil
}

func (s *State) decideProgress(r PostProgress, now float64) ([]Event, *Refusal) {
	task := strip(r.TaskID)
	if task == "" {
		return nil, refuse(CodeTaskIDRequired, task, "Task ID is required.")
	}
	kind := strip(r.Kind)
	if kind == "" {
		kind = "note"
	}
	if !validProgressKind(kind) {
		return nil, refuse(CodeUnknownProgressKind, task, "Unknown progress kind '%s'.", kind)
	}
	return []Event{ProgressPosted{Note: &Note{TaskID: task, Author: r.Agent, Kind: kind, Text: r.Text, PostedAt: now}}}, nil
}
