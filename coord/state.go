package coord

import "slices"

// State is the coordination authority: live claims with their scope index
// and expiry heap, retained checkpoints, waits, resource offers and the
// board. Only Apply (and Rollback) change it.
type State struct {
	lim   Limits
	epoch int64 // highest epoch issued (INV-EF-1)

	claims     map[string]*Claim
	index      scopeIndex
	leases     deadlineHeap   // (expiry, task, epoch)
	principals map[string]int // live claims per quota principal (INV-ME-5)

	retained     map[string]retainedCheckpoint // checkpoints of expired claims (INV-CR-3)
	retainSeq    int64
	retainOldest deadlineHeap // (seq, task, seq): which retained checkpoint to forget first

	waits   map[string]map[string]struct{} // waiter → tasks
	waiters map[string]map[string]struct{} // task → waiters

	offers         map[string]*Offer
	offersByAgent  map[string]int
	offerDeadlines deadlineHeap

	tasks map[string]*BoardTask
	notes noteLog
}

type retainedCheckpoint struct {
	checkpoint string
	seq        int64
	ns         string // the namespace of the claim that lapsed (Disown drops its own)
}

// New returns an empty state bounded by lim (zero fields take defaults).
func New(lim Limits) *State {
	return &State{
		lim:           lim.withDefaults(),
		claims:        make(map[string]*Claim),
		index:         newScopeIndex(),
		principals:    make(map[string]int),
		retained:      make(map[string]retainedCheckpoint),
		waits:         make(map[string]map[string]struct{}),
		waiters:       make(map[string]map[string]struct{}),
		offers:        make(map[string]*Offer),
		offersByAgent: make(map[string]int),
		tasks:         make(map[string]*BoardTask),
	}
}

// Limits returns the limits the state enforces.
func (s *State) Limits() Limits { return s.lim }

// Outcome is what one Step did: every event it applied, in order (the
// expirations that were due first, then the command's), and the refusal if
// the command was turned down. A refused command may still carry events:
// expirations, and the audit record of a refused claim.
type Outcome struct {
	Events  []Event
	Refusal *Refusal
	undo    []func()
}

// Step runs cmd at time now: it expires what is due, decides cmd and applies
// the events. The outcome can be rolled back until the next Step.
func (s *State) Step(cmd Command, now float64) Outcome {
	var o Outcome
	s.expire(now, &o)
	evs, ref := s.Decide(cmd, now)
	o.Refusal = ref
	for _, ev := range evs {
		s.apply(ev, &o.undo)
		o.Events = append(o.Events, ev)
	}
	return o
}

// Tick expires every lease and offer due at now (INV-LL-2) and returns the
// events it applied.
func (s *State) Tick(now float64) Outcome {
	var o Outcome
	s.expire(now, &o)
	return o
}

// Rollback undoes an outcome, restoring the state as it was before the Step
// or Tick that produced it. Outcomes must be rolled back newest first
// (INV-JA-2: a batch whose append failed leaves no trace).
func (s *State) Rollback(o *Outcome) {
	for i := len(o.undo) - 1; i >= 0; i-- {
		o.undo[i]()
	}
	o.undo = nil
}

// Apply applies one event without keeping an undo record: the replay path.
func (s *State) Apply(ev Event) { s.apply(ev, nil) }

// NextDeadline returns the earliest time at which a lease or offer may fall
// due, so the owner of the state can Tick then. It may be early, never late.
func (s *State) NextDeadline() (float64, bool) {
	a, okA := s.leases.peek()
	b, okB := s.offerDeadlines.peek()
	switch {
	case okA && okB:
		return min(a.at, b.at), true
	case okA:
		return a.at, true
	case okB:
		return b.at, true
	}
	return 0, false
}

func (s *State) expire(now float64, o *Outcome) {
	emit := func(ev Event) {
		s.apply(ev, &o.undo)
		o.Events = append(o.Events, ev)
	}
	var dropped []*Claim
	for {
		d, ok := s.leases.peek()
		if !ok || d.at > now {
			break
		}
		s.leases.pop()
		c := s.claims[d.key]
		if !leaseEntryFor(c, d) {
			continue // a stale entry: the lease was renewed, moved or dropped
		}
		s.unregisterClaim(c)
		dropped = append(dropped, c)
		o.Events = append(o.Events, ClaimExpired{TaskID: d.key, Epoch: d.gen, Checkpoint: c.Checkpoint})
		if c.Checkpoint != "" {
			s.retain(c.TaskID, c.Checkpoint, NamespaceOf(c.Owner), func(f func()) { o.undo = append(o.undo, f) })
		}
		if ws := s.waitersOf(d.key); len(ws) > 0 {
			emit(WaitReady{TaskID: d.key, Waiters: ws, Reason: "expiry"})
		}
		for _, ev := range s.releaseBoardTask(c, "", true, now) { // the board task is ready again
			emit(ev)
		}
	}
	if len(dropped) > 0 {
		s.index.removeAll(dropped)
		// One undo entry restores every dropped claim. It commutes with the
		// retained-checkpoint and wait entries pushed in between, which touch
		// neither claims nor the index.
		o.undo = append(o.undo, func() {
			for i := len(dropped) - 1; i >= 0; i-- {
				s.putClaim(dropped[i].TaskID, dropped[i])
			}
		})
	}
	for {
		d, ok := s.offerDeadlines.peek()
		if !ok || d.at > now {
			break
		}
		s.offerDeadlines.pop()
		if o := s.offers[d.key]; o != nil && s.offerValid(d) {
			emit(ResourceExpired{Key: d.key, OfferedAt: o.OfferedAt})
		}
	}
}

func (s *State) leaseValid(d deadline) bool { return leaseEntryFor(s.claims[d.key], d) }

// leaseEntryFor reports whether heap entry d is the deadline of claim c.
// Both the epoch and the expiry must match: a rolled-back grant leaves its
// entry behind and its epoch free, so a later claim may carry the same
// epoch with another expiry.
func leaseEntryFor(c *Claim, d deadline) bool {
	return c != nil && c.Epoch == d.gen && c.ExpiresAt == d.at
}

func (s *State) offerValid(d deadline) bool {
	o := s.offers[d.key]
	return o != nil && o.OfferedAt+s.lim.ResourceTTL == d.at
}

// apply changes the state by ev. When undo is not nil it appends what
// reverses the change.
func (s *State) apply(ev Event, undo *[]func()) {
	push := func(f func()) {
		if undo != nil {
			*undo = append(*undo, f)
		}
	}
	switch e := ev.(type) {
	case ClaimGranted:
		s.applyClaim(e.Claim, push)
		if s.hasWait(e.Claim.Owner, e.Claim.TaskID) {
			s.removeWait(e.Claim.Owner, e.Claim.TaskID)
			push(func() { s.addWait(e.Claim.Owner, e.Claim.TaskID) })
		}
	case TaskUpdated:
		s.applyClaim(e.Claim, push)
	case CheckpointSaved:
		s.applyClaim(e.Claim, push)
	case HandedOff:
		s.applyClaim(e.Claim, push)
	case Released:
		prev, prevR := s.claims[e.TaskID], s.retainedOf(e.TaskID)
		s.putClaim(e.TaskID, nil)
		s.dropRetained(e.TaskID)
		push(func() { s.putClaim(e.TaskID, prev); s.restoreRetained(e.TaskID, prevR) })
	case ClaimExpired:
		if c := s.claims[e.TaskID]; c != nil && c.Epoch == e.Epoch {
			s.expireClaim(c, undo)
			push(func() { s.putClaim(c.TaskID, c) })
		}
	case ClaimDenied:
		// Audit evidence only: it never creates or changes a lease (INV-RR-3).
	case WaitAdded:
		if !s.hasWait(e.Waiter, e.TaskID) {
			s.addWait(e.Waiter, e.TaskID)
			push(func() { s.removeWait(e.Waiter, e.TaskID) })
		}
	case WaitReady:
		for _, w := range e.Waiters {
			if s.hasWait(w, e.TaskID) {
				s.removeWait(w, e.TaskID)
				push(func() { s.addWait(w, e.TaskID) })
			}
		}
	case WaitsDropped:
		for _, t := range e.Tasks {
			if s.hasWait(e.Waiter, t) {
				s.removeWait(e.Waiter, t)
				push(func() { s.addWait(e.Waiter, t) })
			}
		}
	case ResourceOffered:
		key := e.Offer.Key()
		prev := s.offers[key]
		s.putOffer(key, e.Offer)
		push(func() { s.putOffer(key, prev) })
	case ResourceExpired:
		prev := s.offers[e.Key]
		if prev == nil || prev.OfferedAt != e.OfferedAt {
			return
		}
		s.putOffer(e.Key, nil)
		push(func() { s.putOffer(e.Key, prev) })
	case TaskPosted:
		id := e.Task.TaskID
		prev := s.tasks[id]
		s.tasks[id] = e.Task
		push(func() {
			if prev == nil {
				delete(s.tasks, id)
			} else {
				s.tasks[id] = prev
			}
		})
	case ProgressPosted:
		n := *e.Note
		n.ID = s.notes.seq + 1
		s.notes.seq = n.ID
		dropped := s.notes.add(&n, s.lim)
		push(func() {
			s.notes.remove(&n)
			for _, d := range dropped {
				s.notes.insert(d)
			}
			s.notes.seq = n.ID - 1
		})
	case Adopted:
		s.applyAdopted(e, push)
	case Disowned:
		s.applyDisowned(e, push)
	default:
		panic("coord: apply of unknown event " + ev.Kind())
	}
}

// expireClaim drops the expired claim c, retaining its checkpoint for the
// task's next claimant (INV-LL-2, INV-CR-3).
// The caller records how to restore c itself.
func (s *State) expireClaim(c *Claim, undo *[]func()) {
	s.dropClaim(c)
	if c.Checkpoint != "" {
		s.retain(c.TaskID, c.Checkpoint, NamespaceOf(c.Owner), func(f func()) {
			if undo != nil {
				*undo = append(*undo, f)
			}
		})
	}
}

// applyClaim stores c as the claim on its task: the upsert that claim,
// task_update, checkpoint and handoff events share, live and on replay.
func (s *State) applyClaim(c *Claim, push func(func())) {
	if slices.Contains(c.Paths, "") || slices.Contains(c.Globs, "") || slices.Contains(c.Files, "") { // the root among paths: the whole worktree
		c = c.clone()
		c.Paths, c.Globs, c.Files = nil, nil, nil
	}
	prev, prevR, prevEpoch := s.claims[c.TaskID], s.retainedOf(c.TaskID), s.epoch
	s.putClaim(c.TaskID, c)
	s.dropRetained(c.TaskID) // the claim carries the checkpoint it inherited
	s.epoch = max(s.epoch, c.Epoch)
	push(func() {
		s.putClaim(c.TaskID, prev)
		s.restoreRetained(c.TaskID, prevR)
		s.epoch = prevEpoch
	})
}

// putClaim makes c the claim on task (nil removes it), keeping the scope
// index, the principal counts and the expiry heap in step.
func (s *State) putClaim(task string, c *Claim) {
	old := s.claims[task]
	if old != nil {
		s.dropClaim(old)
	}
	if c == nil {
		return
	}
	s.claims[task] = c
	s.index.insert(c)
	s.principals[c.QuotaPrincipal]++
	if old != nil && old.Epoch == c.Epoch && old.ExpiresAt == c.ExpiresAt {
		return // an update within the lease: its heap entry still stands
	}
	s.leases.push(deadline{at: c.ExpiresAt, key: task, gen: c.Epoch})
	s.leases.compact(len(s.claims), s.leaseValid)
}

// dropClaim removes the stored claim c from the state and its indexes.
func (s *State) dropClaim(c *Claim) {
	s.index.remove(c)
	s.unregisterClaim(c)
}

// unregisterClaim removes c from the claims map and its principal's count,
// leaving the scope index to the caller.
func (s *State) unregisterClaim(c *Claim) {
	if n := s.principals[c.QuotaPrincipal] - 1; n == 0 {
		delete(s.principals, c.QuotaPrincipal)
	} else {
		s.principals[c.QuotaPrincipal] = n
	}
	delete(s.claims, c.TaskID)
}

type retainedState struct {
	rc retainedCheckpoint
	ok bool
}

func (s *State) retainedOf(task string) retainedState {
	rc, ok := s.retained[task]
	return retainedState{rc, ok}
}

func (s *State) dropRetained(task string) { delete(s.retained, task) }

func (s *State) restoreRetained(task string, r retainedState) {
	if !r.ok {
		delete(s.retained, task)
		return
	}
	s.retained[task] = r.rc
	s.retainOldest.push(deadline{at: float64(r.rc.seq), key: task, gen: r.rc.seq})
}

// retain keeps the checkpoint of an expired claim for the task's next
// claimant, forgetting the oldest retained one past the cap.
func (s *State) retain(task, checkpoint, ns string, push func(func())) {
	prev, prevSeq := s.retainedOf(task), s.retainSeq
	s.retainSeq++
	s.restoreRetained(task, retainedState{retainedCheckpoint{checkpoint, s.retainSeq, ns}, true})
	push(func() { s.restoreRetained(task, prev); s.retainSeq = prevSeq })
	for len(s.retained) > s.lim.MaxRetainedCheckpoints {
		d := s.retainOldest.pop()
		if old := s.retainedOf(d.key); old.ok && old.rc.seq == d.gen {
			s.dropRetained(d.key)
			push(func() { s.restoreRetained(d.key, old) })
		}
	}
	s.retainOldest.compact(len(s.retained), func(d deadline) bool {
		rc, ok := s.retained[d.key]
		return ok && rc.seq == d.gen
	})
}

func (s *State) putOffer(key string, o *Offer) {
	if old := s.offers[key]; old != nil {
		if s.offersByAgent[old.Agent]--; s.offersByAgent[old.Agent] == 0 {
			delete(s.offersByAgent, old.Agent)
		}
		delete(s.offers, key)
	}
	if o == nil {
		return
	}
	s.offers[key] = o
	s.offersByAgent[o.Agent]++
	s.offerDeadlines.push(deadline{at: o.OfferedAt + s.lim.ResourceTTL, key: key})
	s.offerDeadlines.compact(len(s.offers), s.offerValid)
}

func (s *State) hasWait(waiter, task string) bool {
	_, ok := s.waits[waiter][task]
	return ok
}

func (s *State) addWait(waiter, task string) {
	link(s.waits, waiter, task)
	link(s.waiters, task, waiter)
}

func (s *State) removeWait(waiter, task string) {
	unlink(s.waits, waiter, task)
	unlink(s.waiters, task, waiter)
}

func link(m map[string]map[string]struct{}, a, b string) {
	set := m[a]
	if set == nil {
		set = make(map[string]struct{}, 1)
		m[a] = set
	}
	set[b] = struct{}{}
}

func unlink(m map[string]map[string]struct{}, a, b string) {
	delete(m[a], b)
	if len(m[a]) == 0 {
		delete(m, a)
	}
}

func (s *State) waitersOf(task string) []string {
	return sortedKeys(s.waiters[task])
}

// liveClaim returns the claim on task if it is live at now.
func (s *State) liveClaim(task string, now float64) *Claim {
	if c := s.claims[task]; c != nil && c.Live(now) {
		return c
	}
	return nil
}

func sortedClone[T any](m map[string]T) []T {
	out := make([]T, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}
