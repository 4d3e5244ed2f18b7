package coord

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Claim returns the claim on task, or nil. After Tick(now) every claim the
// state holds is live at now.
func (s *State) Claim(task string) *Claim { return s.claims[task] }

// Claims returns every claim, sorted by task id.
func (s *State) Claims() []*Claim { return sortedClone(s.claims) }

// ClaimPointers returns the stored claims in no particular order. It costs
// one pointer copy per claim, so the owner of the state can hand them to
// another goroutine to sort and encode: a stored claim is never modified.
func (s *State) ClaimPointers() []*Claim {
	out := make([]*Claim, 0, len(s.claims))
	for _, c := range s.claims {
		out = append(out, c)
	}
	return out
}

// ClaimCount returns how many claims the state holds.
func (s *State) ClaimCount() int { return len(s.claims) }

// Epoch returns the highest epoch issued so far.
func (s *State) Epoch() int64 { return s.epoch }

// PrincipalClaims returns how many claims a quota principal holds.
func (s *State) PrincipalClaims(principal string) int { return s.principals[principal] }

// RetainedCheckpoint returns the checkpoint kept from an expired claim on
// task, which its next claimant inherits.
func (s *State) RetainedCheckpoint(task string) (string, bool) {
	rc, ok := s.retained[task]
	return rc.checkpoint, ok
}

// Waiters returns who waits for task, sorted.
func (s *State) Waiters(task string) []string { return s.waitersOf(task) }

// WaitsOf returns the tasks agent waits for, sorted.
func (s *State) WaitsOf(agent string) []string { return sortedKeys(s.waits[agent]) }

// Offers returns the resource offers, sorted by key.
func (s *State) Offers() []*Offer { return sortedClone(s.offers) }

// BoardTask returns the board task id, or nil.
func (s *State) BoardTask(id string) *BoardTask { return s.tasks[id] }

// BoardTasks returns the board's tasks sorted by id.
func (s *State) BoardTasks() []*BoardTask { return sortedClone(s.tasks) }

// Ready returns the ids of open tasks whose dependencies are all met, sorted.
func (s *State) Ready() []string { return ReadyOf(s.BoardTasks()) }

// BoardTaskPointers returns the board's tasks in no particular order: one
// pointer copy each, so they can be sorted and encoded on another
// goroutine (a stored task is never modified).
func (s *State) BoardTaskPointers() []*BoardTask {
	out := make([]*BoardTask, 0, len(s.tasks))
	for _, t := range s.tasks {
		out = append(out, t)
	}
	return out
}

// ReadyOf returns the ids of the open tasks of a board whose dependencies
// are all met (each exists and is done or cancelled), sorted.
func ReadyOf(tasks []*BoardTask) []string {
	byID := make(map[string]*BoardTask, len(tasks))
	for _, t := range tasks {
		byID[t.TaskID] = t
	}
	met := func(id string) bool {
		t := byID[id]
		return t != nil && (t.Status == "done" || t.Status == "cancelled")
	}
	var out []string
	for _, t := range tasks {
		if t.Status == "open" && !slices.ContainsFunc(t.DependsOn, func(d string) bool { return !met(d) }) {
			out = append(out, t.TaskID)
		}
	}
	slices.Sort(out)
	return out
}

// Notes returns the progress notes in posting order.
func (s *State) Notes() []*Note { return slices.Clone(s.notes.notes) }

// Image is the state's content in canonical order, free of indexes and
// counters that can be derived: two states with equal images behave the
// same. Snapshots persist it; tests compare it.
type Image struct {
	Epoch    int64
	Claims   []Claim              // sorted by task id
	Retained []RetainedCheckpoint // oldest first
	Waits    []Wait               // sorted by waiter, then task
	Offers   []Offer              // sorted by key
	Tasks    []BoardTask          // sorted by task id
	Notes    []Note               // posting order; IDs are not part of the image
}

// RetainedCheckpoint is the checkpoint of an expired claim, kept for the
// task's next claimant.
type RetainedCheckpoint struct{ TaskID, Checkpoint string }

// Wait is one agent waiting for one task.
type Wait struct{ Waiter, TaskID string }

// Image returns a copy of the state's content.
func (s *State) Image() Image { return s.Capture().Image() }

// Capture is the state's content as the immutable values the state stores,
// gathered in one pass without sorting or copying a claim. The owner of the
// state takes it between batches (a few ms at 100k claims) and builds the
// Image elsewhere: stored claims, offers, tasks and notes are never changed
// in place, so the capture shares nothing the owner will write.
type Capture struct {
	epoch    int64
	claims   []*Claim
	retained []RetainedCheckpoint // oldest first
	waits    []Wait
	offers   []*Offer
	tasks    []*BoardTask
	notes    []*Note
}

// Capture takes the state's content (see Capture).
func (s *State) Capture() *Capture {
	c := &Capture{
		epoch:  s.epoch,
		claims: make([]*Claim, 0, len(s.claims)),
		offers: make([]*Offer, 0, len(s.offers)),
		tasks:  make([]*BoardTask, 0, len(s.tasks)),
		notes:  slices.Clone(s.notes.notes),
	}
	for _, cl := range s.claims {
		c.claims = append(c.claims, cl)
	}
	type rc struct {
		task string
		retainedCheckpoint
	}
	rcs := make([]rc, 0, len(s.retained))
	for t, r := range s.retained {
		rcs = append(rcs, rc{t, r})
	}
	slices.SortFunc(rcs, func(a, b rc) int { return int(a.seq - b.seq) })
	for _, r := range rcs {
		c.retained = append(c.retained, RetainedCheckpoint{r.task, r.checkpoint})
	}
	for w, tasks := range s.waits {
		for t := range tasks {
			c.waits = append(c.waits, Wait{w, t})
		}
	}
	for _, o := range s.offers {
		c.offers = append(c.offers, o)
	}
	for _, t := range s.tasks {
		c.tasks = append(c.tasks, t)
	}
	return c
}

// Image sorts and copies the capture into canonical order. It may run on
// any goroutine.
func (c *Capture) Image() Image {
	img := Image{Epoch: c.epoch, Retained: c.retained}
	slices.SortFunc(c.claims, func(a, b *Claim) int { return strings.Compare(a.TaskID, b.TaskID) })
	if len(c.claims) > 0 {
		img.Claims = make([]Claim, len(c.claims))
		for i, cl := range c.claims {
			img.Claims[i] = *cl
		}
	}
	slices.SortFunc(c.waits, func(a, b Wait) int {
		if a.Waiter != b.Waiter {
			return strings.Compare(a.Waiter, b.Waiter)
		}
		return strings.Compare(a.TaskID, b.TaskID)
	})
	img.Waits = c.waits
	slices.SortFunc(c.offers, func(a, b *Offer) int { return strings.Compare(a.Key(), b.Key()) })
	for _, o := range c.offers {
		img.Offers = append(img.Offers, *o)
	}
	slices.SortFunc(c.tasks, func(a, b *BoardTask) int { return strings.Compare(a.TaskID, b.TaskID) })
	for _, t := range c.tasks {
		img.Tasks = append(img.Tasks, *t)
	}
	for _, n := range c.notes {
		cp := *n
		cp.ID = 0
		img.Notes = append(img.Notes, cp)
	}
	return img
}

// ErrBadImage wraps every reason Image.Check refuses an image.
var ErrBadImage = errors.New("coord: bad image")

// Check reports whether img could have been taken from a State: what
// FromImage needs to rebuild that state and its indexes exactly. Claims,
// offers and board tasks are sorted and unique by their keys, retained
// checkpoints unique by task; a claim has a task id, a known status, finite
// times, an epoch no higher than the image's (INV-EF-1: the next grant must
// not reissue it), and holds the whole worktree as no paths rather than as
// a root path "" among them (the index files that under no directory, so a
// path claim would not see it: INV-ME-4); a held board task names both its
// holder and the holding claim, or neither. A snapshot decoder runs it on
// every image it reads, so a corrupt body is refused rather than restored.
func (img *Image) Check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadImage, fmt.Sprintf(format, args...))
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	for i := range img.Claims {
		c := &img.Claims[i]
		switch {
		case c.TaskID == "":
			return bad("claim %d has no task id", i)
		case i > 0 && img.Claims[i-1].TaskID >= c.TaskID:
			return bad("claim %q is out of order or repeated", c.TaskID)
		case c.Status > StatusFailed:
			return bad("claim %q has status %d", c.TaskID, c.Status)
		case !finite(c.ClaimedAt) || !finite(c.ExpiresAt):
			return bad("claim %q has a time that is not finite", c.TaskID)
		case c.Epoch < 0 || c.Epoch > img.Epoch:
			return bad("claim %q has epoch %d outside [0, %d]", c.TaskID, c.Epoch, img.Epoch)
		case c.Version < 0:
			return bad("claim %q has version %d", c.TaskID, c.Version)
		case slices.Contains(c.Paths, "") || slices.Contains(c.Globs, "") || slices.Contains(c.Files, ""):
			return bad("claim %q names the root among its paths, globs or files", c.TaskID)
		case c.Mode > ModeShared:
			return bad("claim %q has mode %d", c.TaskID, c.Mode)
		}
	}
	seen := make(map[string]bool, len(img.Retained))
	for _, r := range img.Retained {
		if seen[r.TaskID] {
			return bad("checkpoint of %q retained twice", r.TaskID)
		}
		seen[r.TaskID] = true
	}
	for i := range img.Offers {
		if i > 0 && img.Offers[i-1].Key() >= img.Offers[i].Key() {
			return bad("offer %q is out of order or repeated", img.Offers[i].Key())
		}
	}
	for i := range img.Tasks {
		if i > 0 && img.Tasks[i-1].TaskID >= img.Tasks[i].TaskID {
			return bad("board task %q is out of order or repeated", img.Tasks[i].TaskID)
		}
		if (img.Tasks[i].Owner == "") != (img.Tasks[i].OwnerClaim == "") {
			return bad("board task %q names a holder without its claim, or a claim without its holder", img.Tasks[i].TaskID)
		}
	}
	return nil
}

// FromImage rebuilds a state from an image, with its indexes.
func FromImage(lim Limits, img Image) *State {
	s := New(lim)
	// Sized once: a 100k-claim image otherwise rehashes its maps ~17 times.
	s.claims = make(map[string]*Claim, len(img.Claims))
	s.tasks = make(map[string]*BoardTask, len(img.Tasks))
	s.epoch = img.Epoch
	for i := range img.Claims {
		c := img.Claims[i]
		s.putClaim(c.TaskID, &c)
	}
	for _, r := range img.Retained {
		s.retainSeq++
		s.restoreRetained(r.TaskID, retainedState{retainedCheckpoint{r.Checkpoint, s.retainSeq, ""}, true}) // a fleet hub restores no image
	}
	for _, w := range img.Waits {
		s.addWait(w.Waiter, w.TaskID)
	}
	for i := range img.Offers {
		o := img.Offers[i]
		s.putOffer(o.Key(), &o)
	}
	for i := range img.Tasks {
		t := img.Tasks[i]
		s.tasks[t.TaskID] = &t
	}
	for i := range img.Notes {
		n := img.Notes[i]
		s.notes.seq++
		n.ID = s.notes.seq
		s.notes.insert(&n)
	}
	return s
}

// String renders a claim for logs: "T1 owner=a epoch=3 v=0 wt=/repo [src/x]".
func (c *Claim) String() string {
	s := c.TaskID + " owner=" + c.Owner + " status=" + c.Status.String() + " wt=" + c.Worktree + " [" + strings.Join(c.Paths, ",") + "]"
	if len(c.Globs) > 0 {
		s += " globs=[" + strings.Join(c.Globs, ",") + "]"
	}
	if len(c.Files) > 0 {
		s += " files=[" + strings.Join(c.Files, ",") + "]"
	}
	if c.Mode != ModeExclusive {
		s += " " + c.Mode.String()
	}
	return s
}
