package hub

import (
	"fmt"
	"slices"
	"testing"
)

// Glob scopes and shared claims over real sockets (issue 14, features
// glob_scopes and shared_claims): announced in welcome, echoed in grants
// and state, and refusals that name the holder, its pattern and its mode.
func TestClaimScope_GlobsAndSharedOverTheWire(t *testing.T) {
	cases := []struct {
		name   string
		setup  []map[string]any // sent by p/b
		send   map[string]any   // sent by p/a
		want   string
		fields map[string]any
	}{
		{"glob claim granted echoes its globs", nil,
			f("claim", "task_id", "T1", "globs", []string{"src/**/*.go"}), "claim_granted",
			map[string]any{"globs": "[src/**/*.go]", "paths": "[]", "mode": "<nil>"}},
		{"shared claim granted echoes its mode", nil,
			f("claim", "task_id", "T1", "paths", []string{"docs"}, "mode", "shared"), "claim_granted",
			map[string]any{"mode": "shared", "globs": "<nil>"}},
		{"shared readers coexist", []map[string]any{f("claim", "sender", "p/b", "task_id", "T0", "globs", []string{"docs/*.md"}, "mode", "shared")},
			f("claim", "task_id", "T1", "paths", []string{"docs/a.md"}, "mode", "shared"), "claim_granted",
			map[string]any{"task_id": "T1", "mode": "shared"}},
		{"a writer is refused beside a reader, naming its pattern", []map[string]any{f("claim", "sender", "p/b", "task_id", "T0", "globs", []string{"docs/*.md"}, "mode", "shared")},
			f("claim", "task_id", "T1", "paths", []string{"docs/a.md"}), "claim_denied",
			map[string]any{"reason_code": "SCOPE_CONFLICT", "holder": "p/b", "conflict_task": "T0", "conflict_pattern": "docs/*.md", "conflict_mode": "shared",
				"payload": "Task 'T1' file scope conflicts with 'T0' held by p/b (shared 'docs/*.md')."}},
		{"a glob is refused over a writer's file", []map[string]any{f("claim", "sender", "p/b", "task_id", "T0", "paths", []string{"src/x.go"})},
			f("claim", "task_id", "T1", "globs", []string{"src/*.go"}), "claim_denied",
			map[string]any{"reason_code": "SCOPE_CONFLICT", "holder": "p/b", "conflict_pattern": "src/x.go", "conflict_mode": "exclusive"}},
		{"disjoint globs coexist", []map[string]any{f("claim", "sender", "p/b", "task_id", "T0", "globs", []string{"src/**/*.go"})},
			f("claim", "task_id", "T1", "globs", []string{"docs/**"}), "claim_granted",
			map[string]any{"task_id": "T1"}},
		{"literal refusals stay the reference's", []map[string]any{f("claim", "sender", "p/b", "task_id", "T0", "paths", []string{"src"})},
			f("claim", "task_id", "T1", "paths", []string{"src/a.go"}), "claim_denied",
			map[string]any{"payload": "Task 'T1' file scope conflicts with 'T0' held by p/b.", "conflict_pattern": "<nil>", "conflict_mode": "<nil>"}},
		{"an unknown mode is malformed", nil,
			f("claim", "task_id", "T1", "mode", "reading"), "error",
			map[string]any{"payload": "Malformed frame: 'mode' must be 'exclusive' or 'shared'."}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			th := startHub(t, Config{})
			a := th.join("p/a")
			b := th.join("p/b")
			for _, s := range c.setup {
				b.send(s)
				b.sync("p/b")
				a.sync("p/a")
			}
			a.send(c.send)
			got := a.expect(c.want)
			for k, v := range c.fields {
				if g := fmt.Sprint(got[k]); g != fmt.Sprint(v) {
					t.Errorf("%s.%s = %s, want %v (frame %v)", c.want, k, g, v, got)
				}
			}
		})
	}
}

func TestClaimScope_FeaturesAnnouncedAndStateEchoes(t *testing.T) {
	th := startHub(t, Config{})
	a := th.join("p/a")
	a.send(f("claim", "task_id", "T1", "globs", []string{"src/**/*.go"}, "mode", "shared"))
	a.expect("claim_granted")
	a.send(f("state_request"))
	st := a.expect("state_snapshot")
	snap, _ := st["snapshot"].(map[string]any)
	claims, _ := snap["active_claims"].([]any)
	if len(claims) != 1 {
		t.Fatalf("state snapshot %v", st["snapshot"])
	}
	c := claims[0].(map[string]any)
	if fmt.Sprint(c["globs"]) != "[src/**/*.go]" || c["mode"] != "shared" {
		t.Fatalf("state claim %v lacks its globs or mode", c)
	}
	for _, feat := range []string{"glob_scopes", "shared_claims"} {
		if !slices.Contains(Features, feat) {
			t.Errorf("welcome.features %v lack %s", Features, feat)
		}
	}
}
