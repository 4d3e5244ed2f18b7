package wire

import "testing"

// PROTOCOL.md §1, Sidecars: X-rx and X-pane-rx serve X; nothing else does.
func TestSidecars_NameAndIdentity_PROTOCOL_1(t *testing.T) {
	if got := Sidecars("p/a"); got != [2]string{"p/a-rx", "p/a-pane-rx"} {
		t.Fatalf("Sidecars = %v", got)
	}
	for name, id := range map[string]string{
		"p/a-rx": "p/a", "p/a-pane-rx": "p/a", "p/a": "p/a", "-rx": "-rx", "p/a-rx-rx": "p/a-rx", "p/a-pane": "p/a-pane",
	} {
		if got := Identity(name); got != id {
			t.Errorf("Identity(%q) = %q; want %q", name, got, id)
		}
	}
	for _, tc := range []struct {
		name, id string
		want     bool
	}{
		{"p/a", "p/a", true}, {"p/a-rx", "p/a", true}, {"p/a-pane-rx", "p/a", true},
		{"p/ab-rx", "p/a", false}, {"p/a-rx", "p/a-rx", true}, {"p/b-rx", "p/a", false}, {"p/a-pane", "p/a", false},
	} {
		if got := SidecarOf(tc.name, tc.id); got != tc.want {
			t.Errorf("SidecarOf(%q, %q) = %v; want %v", tc.name, tc.id, got, tc.want)
		}
	}
}
