package coord

import (
	"slices"
	"strings"
)

// A hub that serves namespaces on a fleet (package cluster) gains and
// loses whole namespaces: Adopt installs one's authoritative claims, read
// from where they are durable, and Disown drops them when another hub
// takes the namespace over. Both go through Step, so they are ordered with
// every other command and can be rolled back like one.

// Adopt installs the live claims of a namespace this hub now owns, and an
// epoch floor every later epoch must exceed (INV-EF-1 across owners).
type Adopt struct {
	Namespace  string
	Claims     []*Claim
	Tasks      []*BoardTask // the namespace's board tasks (declared by its agents)
	EpochFloor int64
	// Retained are the checkpoints of the namespace's lapsed claims, by
	// task, for their next claimants (INV-CR-3).
	Retained map[string]string
}

// Disown drops every claim held by an agent of Namespace (the part of the
// owner's name before its first '/'), and every board task one of its
// agents declared: another hub owns them now. Nothing is retained and no
// waiter is woken: they live on, elsewhere.
type Disown struct{ Namespace string }

func (Adopt) command()  {}
func (Disown) command() {}

// Adopted is a namespace's claims installed by Adopt.
type Adopted struct {
	Namespace  string
	Claims     []*Claim
	Tasks      []*BoardTask
	EpochFloor int64
	Retained   map[string]string // by task, sorted when applied
}

// Disowned is a namespace's claims dropped by Disown.
type Disowned struct {
	Namespace string
	Tasks     []string // claims' task ids
	Board     []string // board task ids
	Retained  []string // tasks whose lapsed claim's checkpoint is retained here
}

func (Adopted) Kind() string            { return "adopted" }
func (Disowned) Kind() string           { return "disowned" }
func (Adopted) Durability() Durability  { return Volatile } // the namespace's store is its journal
func (Disowned) Durability() Durability { return Volatile }

// NamespaceOf is the namespace of an agent name: the part before its first
// '/', "" for a bare name.
func NamespaceOf(name string) string {
	ns, _, found := strings.Cut(name, "/")
	if !found {
		return ""
	}
	return ns
}

func (s *State) decideAdopt(c Adopt, now float64) ([]Event, *Refusal) {
	live := make([]*Claim, 0, len(c.Claims))
	retained := make(map[string]string, len(c.Retained))
	for task, cp := range c.Retained {
		retained[task] = cp
	}
	for _, cl := range c.Claims {
		switch {
		case cl == nil:
		case cl.Live(now):
			live = append(live, cl)
			delete(retained, cl.TaskID)
		case cl.Checkpoint != "":
			// It lapsed while nobody owned the namespace, or before its
			// owner's sweep was written: its checkpoint waits for the next
			// claimant as if it had lapsed here (INV-CR-3).
			retained[cl.TaskID] = cl.Checkpoint
		}
	}
	if r := s.AdoptConflict(c.Namespace, live, now); r != nil {
		return nil, r
	}
	adopted := Adopted{Namespace: c.Namespace, Claims: live, Tasks: c.Tasks, EpochFloor: c.EpochFloor, Retained: retained}
	// What this hub still holds of the namespace from an earlier stint (a
	// Disown that was refused with the batch it was in) goes first: the
	// namespace is installed exactly as its store has it, with no phantom
	// claim, board task or checkpoint of its own (found by the fleet
	// harness).
	if evs, _ := s.decideDisown(Disown{Namespace: c.Namespace}); len(evs) > 0 {
		return append(evs, adopted), nil
	}
	return []Event{adopted}, nil
}

// AdoptConflict is why Adopt of ns with claims would be refused at now, or
// nil. A hub keys claims by task id alone (as one hub does: a task id is
// the hub's, not a namespace's), so a live claim of ns whose task id a
// live claim of another namespace served here holds cannot be installed
// beside it: it would replace that acknowledged grant, and the task could
// then be granted to a second owner (INV-ME-1). The namespace is not
// adopted, and nothing changes: it fails closed, as a contested namespace
// does, until the other claim ends (docs/scale-out.md).
func (s *State) AdoptConflict(ns string, claims []*Claim, now float64) *Refusal {
	for _, cl := range claims {
		if cl == nil || !cl.Live(now) {
			continue
		}
		if other := s.claims[cl.TaskID]; other != nil && other.Live(now) && NamespaceOf(other.Owner) != ns {
			r := refuse(CodeTaskIDInUse, cl.TaskID, "namespace %q cannot be served here: its task %q is held by %s of namespace %q on this hub; task ids are per hub (docs/scale-out.md)",
				ns, cl.TaskID, other.Owner, NamespaceOf(other.Owner))
			r.Holder = other.Owner
			return r
		}
	}
	return nil
}

func (s *State) decideDisown(c Disown) ([]Event, *Refusal) {
	var tasks []string
	for task, cl := range s.claims {
		if NamespaceOf(cl.Owner) == c.Namespace {
			tasks = append(tasks, task)
		}
	}
	var board []string
	for id, t := range s.tasks {
		if NamespaceOf(t.CreatedBy) == c.Namespace {
			board = append(board, id)
		}
	}
	// Its retained checkpoints go too: the namespace's next owner has them
	// (a fleet keeps them in etcd), and one kept here would be resumed,
	// stale, by a claimant after the namespace came back.
	var retained []string
	for task, rc := range s.retained {
		if rc.ns == c.Namespace {
			retained = append(retained, task)
		}
	}
	if len(tasks) == 0 && len(board) == 0 && len(retained) == 0 {
		return nil, nil
	}
	slices.Sort(tasks)
	slices.Sort(board)
	slices.Sort(retained)
	return []Event{Disowned{Namespace: c.Namespace, Tasks: tasks, Board: board, Retained: retained}}, nil
}

func (s *State) applyAdopted(e Adopted, push func(func())) {
	for _, c := range e.Claims {
		s.applyClaim(c, push)
	}
	for _, t := range e.Tasks {
		s.putTask(t, push)
	}
	tasks := make([]string, 0, len(e.Retained))
	for task := range e.Retained {
		if s.claims[task] == nil {
			tasks = append(tasks, task)
		}
	}
	slices.Sort(tasks) // a deterministic order for the retained cap
	for _, task := range tasks {
		s.retain(task, e.Retained[task], e.Namespace, push)
	}
	if e.EpochFloor > s.epoch {
		prev := s.epoch
		s.epoch = e.EpochFloor
		push(func() { s.epoch = prev })
	}
}

func (s *State) applyDisowned(e Disowned, push func(func())) {
	for _, task := range e.Tasks {
		if prev := s.claims[task]; prev != nil {
			s.putClaim(task, nil)
			push(func() { s.putClaim(task, prev) })
		}
	}
	for _, id := range e.Board {
		if prev := s.tasks[id]; prev != nil {
			delete(s.tasks, id)
			push(func() { s.tasks[id] = prev })
		}
	}
	for _, task := range e.Retained {
		if prev := s.retainedOf(task); prev.ok {
			s.dropRetained(task)
			push(func() { s.restoreRetained(task, prev) })
		}
	}
}

// putTask stores a board task, undoably (Adopt).
func (s *State) putTask(t *BoardTask, push func(func())) {
	id := t.TaskID
	prev := s.tasks[id]
	s.tasks[id] = t
	push(func() {
		if prev == nil {
			delete(s.tasks, id)
		} else {
			s.tasks[id] = prev
		}
	})
}
