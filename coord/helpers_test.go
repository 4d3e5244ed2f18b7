package coord_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// t0 is the wall clock the tests start at.
const t0 = 1_800_000_000.0

// rig drives one State at a test-controlled clock.
type rig struct {
	t   *testing.T
	s   *coord.State
	now float64
}

func newRig(t *testing.T, lim coord.Limits) *rig {
	t.Helper()
	return &rig{t: t, s: coord.New(lim), now: t0}
}

// step runs cmd at the rig's clock.
func (r *rig) step(cmd coord.Command) coord.Outcome { return r.s.Step(cmd, r.now) }

// ok runs cmd and fails the test if it was refused.
func (r *rig) ok(cmd coord.Command) []coord.Event {
	r.t.Helper()
	o := r.step(cmd)
	if o.Refusal != nil {
		r.t.Fatalf("%T refused: %v", cmd, o.Refusal)
	}
	return o.Events
}

// refused runs cmd, asserts it was turned down with code and the exact
// message, and that the refusal changed nothing: the image after equals the
// image once what was due at now had expired. It returns the outcome.
func (r *rig) refused(cmd coord.Command, code coord.Code, msg string) coord.Outcome {
	r.t.Helper()
	r.s.Tick(r.now)
	before := r.s.Image()
	o := r.step(cmd)
	if o.Refusal == nil {
		r.t.Fatalf("%T granted (events %s), want %s %q", cmd, kinds(o.Events), code, msg)
	}
	if o.Refusal.Code != code || o.Refusal.Message != msg {
		r.t.Fatalf("refusal = %s %q, want %s %q", o.Refusal.Code, o.Refusal.Message, code, msg)
	}
	if o.Refusal.Error() != string(code)+": "+msg {
		r.t.Fatalf("Error() = %q", o.Refusal.Error())
	}
	if after := r.s.Image(); !reflect.DeepEqual(before, after) {
		r.t.Fatalf("refusal changed the state:\nbefore %+v\nafter  %+v", before, after)
	}
	return o
}

// claim grants agent a claim on task in the default worktree.
func (r *rig) claim(agent, task string, paths ...string) *coord.Claim {
	r.t.Helper()
	return r.claimIn(agent, task, "", paths...)
}

func (r *rig) claimIn(agent, task, worktree string, paths ...string) *coord.Claim {
	r.t.Helper()
	r.ok(coord.ClaimRequest{Agent: agent, TaskID: task, Worktree: worktree, Paths: paths})
	return r.s.Claim(task)
}

// kinds names events for failure messages and order assertions.
func kinds(evs []coord.Event) string {
	s := ""
	for i, ev := range evs {
		if i > 0 {
			s += ","
		}
		s += ev.Kind()
	}
	return "[" + s + "]"
}

// eventsOf returns the events of type T, in order.
func eventsOf[T coord.Event](evs []coord.Event) []T {
	var out []T
	for _, ev := range evs {
		if e, ok := ev.(T); ok {
			out = append(out, e)
		}
	}
	return out
}

// one returns the only event of type T, failing the test otherwise.
func one[T coord.Event](t *testing.T, evs []coord.Event) T {
	t.Helper()
	es := eventsOf[T](evs)
	if len(es) != 1 {
		var z T
		t.Fatalf("want one %T in %s, got %d", z, kinds(evs), len(es))
	}
	return es[0]
}

func wantKinds(t *testing.T, evs []coord.Event, want string) {
	t.Helper()
	if got := kinds(evs); got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
}

func wantEqual[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s = %s, want %s", what, show(got), show(want))
	}
}

func show(v any) string { return fmt.Sprintf("%#v", v) }
