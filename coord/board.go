package coord

import (
	"slices"
	"strings"
)

// LedgerStatus values of a board task (PROTOCOL.md §3.9).
var ledgerStatuses = []string{"open", "in_progress", "blocked", "done", "cancelled"}

// Progress note kinds.
var progressKinds = []string{"note", "blocked", "assessment", "usage", "approval"}

// BoardTask is a task on the board. Like claims, a stored *BoardTask is never
// modified; a change stores a new one.
type BoardTask struct {
	TaskID         string
	Title          string
	Description    string
	DependsOn      []string
	Status         string
	SuggestedOwner string
	Project        string // "" = unscoped
	Version        int64  // 1 at creation, +1 per accepted write
	CreatedBy      string
	CreatedAt      float64
	UpdatedAt      float64

	// Owner is the agent whose task-bound claim holds the task in progress,
	// and OwnerClaim that claim's task id; both "" when no claim holds it
	// (taskbound.go).
	Owner      string
	OwnerClaim string
}

// Note is a progress note. ID orders notes; it is assigned when the note is
// applied and is not part of the wire or journal form.
type Note struct {
	ID       int64
	TaskID   string
	Author   string
	Kind     string
	Text     string
	PostedAt float64
}

// wouldCycle reports whether giving task the dependencies deps closes a
// cycle through tasks already on the board. Unknown tasks end a walk.
func (s *State) wouldCycle(task string, deps []string) bool {
	seen := make(map[string]bool)
	stack := slices.Clone(deps)
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if id == task {
			return true
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		if t := s.tasks[id]; t != nil {
			stack = append(stack, t.DependsOn...)
		}
	}
	return false
}

// cleanDeps strips, de-duplicates and drops self and blank dependencies.
func cleanDeps(task string, deps []string) []string {
	out := make([]string, 0, len(deps))
	for _, d := range deps {
		d = strip(d)
		if d == "" || d == task || slices.Contains(out, d) {
			continue
		}
		out = append(out, d)
	}
	return out
}

// noteLog keeps progress notes in posting order under three caps: in total,
// per author and per task. The oldest note goes first.
type noteLog struct {
	notes    []*Note // ascending ID
	seq      int64
	byAuthor map[string]int
	byTask   map[string]int
}

func (l *noteLog) count(n *Note, d int) {
	if l.byAuthor == nil {
		l.byAuthor, l.byTask = make(map[string]int), make(map[string]int)
	}
	bump := func(m map[string]int, k string) {
		if m[k] += d; m[k] == 0 {
			delete(m, k)
		}
	}
	bump(l.byAuthor, n.Author)
	bump(l.byTask, n.TaskID)
}

func (l *noteLog) insert(n *Note) {
	i, _ := slices.BinarySearchFunc(l.notes, n.ID, func(x *Note, id int64) int { return int(x.ID - id) })
	l.notes = slices.Insert(l.notes, i, n)
	l.count(n, +1)
}

func (l *noteLog) remove(n *Note) {
	i := slices.Index(l.notes, n)
	l.notes = slices.Delete(l.notes, i, i+1)
	l.count(n, -1)
}

// add appends n and enforces the caps; it returns the notes it dropped.
func (l *noteLog) add(n *Note, lim Limits) (dropped []*Note) {
	l.insert(n)
	dropOldest := func(match func(*Note) bool) {
		for _, o := range l.notes {
			if match(o) {
				l.remove(o)
				dropped = append(dropped, o)
				return
			}
		}
	}
	if l.byTask[n.TaskID] > lim.MaxNotesPerTask {
		dropOldest(func(o *Note) bool { return o.TaskID == n.TaskID })
	}
	if l.byAuthor[n.Author] > lim.MaxNotesPerAuthor {
		dropOldest(func(o *Note) bool { return o.Author == n.Author })
	}
	if len(l.notes) > lim.MaxNotesTotal {
		dropOldest(func(*Note) bool { return true })
	}
	return dropped
}

func validLedgerStatus(s string) bool { return slices.Contains(ledgerStatuses, s) }

func validProgressKind(k string) bool { return slices.Contains(progressKinds, strings.TrimSpace(k)) }
