package delivery

import (
	"slices"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// fakeDirectory is a registry reduced to what delivery reads: each bound
// name and the roles it holds.
type fakeDirectory map[string][]string

func (d fakeDirectory) Bound(name string) bool { _, ok := d[name]; return ok }

func (d fakeDirectory) IdentityRoles(id string) []string {
	var roles []string
	for _, n := range []string{id, id + "-rx", id + "-pane-rx"} {
		roles = append(roles, d[n]...)
	}
	return roles
}

func (d fakeDirectory) InProject(p string) map[string]struct{} {
	return d.names(func(n string, _ []string) bool { return coord.NamespaceOf(n) == p })
}

func (d fakeDirectory) WithRole(r string) map[string]struct{} {
	return d.names(func(_ string, roles []string) bool { return slices.Contains(roles, r) })
}

func (d fakeDirectory) names(keep func(string, []string) bool) map[string]struct{} {
	var set map[string]struct{}
	for n, roles := range d {
		if keep(n, roles) {
			if set == nil {
				set = map[string]struct{}{}
			}
			set[n] = struct{}{}
		}
	}
	return set
}

func (d fakeDirectory) Names() []string {
	var out []string
	for n := range d {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

type quietEvents struct{}

func (quietEvents) Listening() bool         { return false }
func (quietEvents) MailboxChanged(string)   {}
func (quietEvents) DeadLettered(DeadLetter) {}

// trickyDirectory is what the hub's trickyRegistry (hub/recipients_test.go)
// leaves bound: names whose sidecar, project and role matches are easy to
// get wrong, after a role change (t/kept), a takeover by a socket that
// holds no role yet (t/old) and a leave (t/left).
func trickyDirectory() fakeDirectory {
	return fakeDirectory{
		"p/a": nil, "p/a-rx": nil, "p/a-pane-rx": {"p/pane-side"}, "p/a-rx-rx": nil,
		"p/b": {"p/reviewer", "q"}, "p/b-rx": {"p/rx-only"},
		"q/c": {"p/reviewer"}, "q/c-pane": {"p/pane"}, "q/c-pane-rx": nil, // q/c-pane-rx serves q/c
		"solo": {"solo-role"}, "solo-rx": nil, "r/x/y": nil, "-rx": nil, "all": nil,
		"t/old": nil, "t/kept": {"t/r2"},
	}
}

// TestMailbox_LiteralTargetCountsWhatTheScanCounts_INV_DG_3 pins that the
// pending projection counts a literal directed chat for exactly the known
// identities CountsLocked accepts (PROTOCOL.md §4.6: named exactly, or
// online and reached by project or role), though it no longer asks every
// known identity.
func TestMailbox_LiteralTargetCountsWhatTheScanCounts_INV_DG_3(t *testing.T) {
	dir := trickyDirectory()
	known := []string{"p/a", "p/a-rx", "p/a-pane", "p/b", "q/c", "q/c-pane", "solo", "t/old", "t/kept", "t/left", "offline/x", "-rx", ""}
	for seq, target := range []string{"p/a", "p", "q", "p/reviewer", "p/rx-only", "p/pane", "p/pane-side", "solo-role", "t/r2", "offline/x", "p/a,q/c", "new/id", "p/[ab]", "?/c"} {
		p := NewProjection(dir, quietEvents{})
		for _, id := range known {
			p.ids[id] = &mbox{wmKnown: true, valid: true}
		}
		p.OnChatLocked(int64(seq+1), "solo", target)
		for id, e := range p.ids {
			want := int64(0)
			if p.CountsLocked(target, "solo", id) {
				want = 1
			}
			if got := e.pending(dir.Bound(id)); got != want {
				t.Errorf("chat to %q: %q pending %d, want %d", target, id, got, want)
			}
		}
	}
}
