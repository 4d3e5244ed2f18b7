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
	for _, feat := range []string{"glob_scopes", "shared_claims", "file_scopes"} {
		if !slices.Contains(Features, feat) {
			t.Errorf("welcome.features %v lack %s", Features, feat)
		}
	}
}

// Scopes are sets of files, over real sockets (issue 19, feature
// file_scopes; INV-ME-2): with p/a holding the Go files under src, p/b is
// granted the text files there and the file src/a/readme.md, which the
// glob does not match; the readme as a literal path (a subtree, where a Go
// file could lie) and a Go file are refused, naming the holder's glob. The
// grant, the state snapshot and /api/state carry the files; a claim that
// sends no files is written as the reference writes it.
func TestClaimScope_FilesAndDisjointGlobsOverTheWire_INV_ME_2(t *testing.T) {
	th := startHub(t, Config{})
	a, b := th.join("p/a"), th.join("p/b")
	a.send(f("claim", "sender", "p/a", "task_id", "GO", "globs", []string{"src/**/*.go"}))
	if g := a.expect("claim_granted"); g["files"] != nil {
		t.Fatalf("a grant without files names them: %v", g)
	}
	b.sync("p/b")

	b.send(f("claim", "sender", "p/b", "task_id", "TXT", "globs", []string{"src/**/*.txt"}))
	if g := b.expect("claim_granted"); fmt.Sprint(g["globs"]) != "[src/**/*.txt]" {
		t.Fatalf("grant %v", g)
	}
	b.send(f("claim", "sender", "p/b", "task_id", "README", "files", []string{"./src/a/readme.md"}))
	g := b.expect("claim_granted")
	if fmt.Sprint(g["files"]) != "[src/a/readme.md]" || fmt.Sprint(g["paths"]) != "[]" || g["globs"] != nil {
		t.Fatalf("the file's grant %v", g)
	}
	for _, send := range []map[string]any{
		f("claim", "sender", "p/b", "task_id", "LIT", "paths", []string{"src/a/readme.md"}),
		f("claim", "sender", "p/b", "task_id", "GOFILE", "files", []string{"src/a/x.go"}),
	} {
		b.send(send)
		d := b.expect("claim_denied")
		if d["reason_code"] != "SCOPE_CONFLICT" || d["holder"] != "p/a" || d["conflict_pattern"] != "src/**/*.go" || d["conflict_mode"] != "exclusive" {
			t.Fatalf("%v: refusal %v", send, d)
		}
	}
	a.send(f("claim", "sender", "p/a", "task_id", "SAME", "files", []string{"src/a/readme.md"}))
	if d := a.expect("claim_denied"); d["conflict_task"] != "README" || d["conflict_pattern"] != "src/a/readme.md" {
		t.Fatalf("a held file does not refuse itself: %v", d)
	}

	a.send(f("state_request", "sender", "p/a"))
	snap, _ := a.expect("state_snapshot")["snapshot"].(map[string]any)
	claims, _ := snap["active_claims"].([]any)
	files := map[string]string{}
	for _, c := range claims {
		m := c.(map[string]any)
		files[fmt.Sprint(m["task_id"])] = fmt.Sprint(m["files"])
	}
	if len(claims) != 3 || files["README"] != "[src/a/readme.md]" || files["GO"] != "<nil>" {
		t.Fatalf("state snapshot claims %v", claims)
	}
	for _, c := range th.state(nil).Claims {
		if want := c.TaskID == "README"; want != slices.Equal(c.Files, []string{"src/a/readme.md"}) {
			t.Fatalf("/api/state claim %+v", c)
		}
	}
}
