package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/hub"
)

// claudeHookJSON is what Claude Code sends a PreToolUse hook on stdin.
func claudeHookJSON(cwd, tool, file string) string {
	input := map[string]any{"file_path": file, "old_string": "a", "new_string": "b"}
	switch tool {
	case "Write":
		input = map[string]any{"file_path": file, "content": "package x\n"}
	case "MultiEdit":
		input = map[string]any{"file_path": file, "edits": []any{map[string]any{"old_string": "a", "new_string": "b"}}}
	}
	b, _ := json.Marshal(map[string]any{
		"session_id":      "eb5b0174-0555-4601-804e-672d68069c89",
		"transcript_path": "/home/u/.claude/projects/p/eb5b0174.jsonl",
		"cwd":             cwd,
		"permission_mode": "default",
		"hook_event_name": "PreToolUse",
		"tool_name":       tool,
		"tool_input":      input,
	})
	return string(b)
}

// runGuardWith runs the guard with stdin.
func runGuardWith(stdin string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := guard(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// denied decodes a deny decision; "" when the output is empty (allowed).
func denied(t *testing.T, out string) string {
	t.Helper()
	if out == "" {
		return ""
	}
	var d hookDecision
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("not the decision JSON: %v: %s", err, out)
	}
	h := d.HookSpecificOutput
	if h.PermissionDecision == "" {
		return "" // allowed, with a warning (systemMessage)
	}
	if h.HookEventName != "PreToolUse" || h.PermissionDecision != "deny" || h.PermissionDecisionReason == "" {
		t.Fatalf("decision %+v", h)
	}
	return h.PermissionDecisionReason
}

func TestGuard_AllowsClaimedDeniesUnclaimedAndOthers(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	dir := inDir(t)
	os.MkdirAll(filepath.Join(dir, "src", "pkg"), 0o755)
	me := agent(t, uri, "proj/claude-1")
	other := agent(t, uri, "proj/codex-1")
	ctx := context.Background()
	if _, err := me.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src/pkg"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"docs/a.md"}}); err != nil {
		t.Fatal(err)
	}
	args := []string{"--uri", uri, "--name", "proj/claude-1"}
	for _, tc := range []struct {
		tool, file string
		want       string // "" = allowed, else a substring of the reason
	}{
		{"Edit", filepath.Join(dir, "src/pkg/x.go"), ""},                                                 // a claim on a folder covers its files
		{"MultiEdit", filepath.Join(dir, "src/pkg/y/z.go"), ""},                                          // and deeper ones
		{"Write", "src/pkg/new.go", ""},                                                                  // relative to cwd, not yet existing
		{"Edit", filepath.Join(dir, "src/pkgx.go"), "synapse claim edit-src-pkgx-go --file src/pkgx.go"}, // the file alone,
		{"Write", filepath.Join(dir, "docs/a.md"), "claimed by proj/codex-1 (task T2)"},
		{"Edit", "/etc/hosts", ""}, // outside the repository: not guarded
		{"Read", filepath.Join(dir, "docs/a.md"), ""},
	} {
		code, out, errOut := runGuardWith(claudeHookJSON(dir, tc.tool, tc.file), args...)
		if code != 0 {
			t.Fatalf("%s %s: exit %d: %s", tc.tool, tc.file, code, errOut)
		}
		reason := denied(t, out)
		if tc.want == "" && reason != "" || tc.want != "" && !strings.Contains(reason, tc.want) {
			t.Errorf("%s %s: reason %q, want %q", tc.tool, tc.file, reason, tc.want)
		}
	}
	// The deny reason of someone else's file says how to reach them.
	_, out, _ := runGuardWith(claudeHookJSON(dir, "Edit", filepath.Join(dir, "docs/a.md")), args...)
	if r := denied(t, out); !strings.Contains(r, "synapse send proj/codex-1") || !strings.Contains(r, "synapse wait T2") {
		t.Errorf("reason %q", r)
	}
}

func TestGuard_WholeWorktreeClaimAndWorktreeLabels(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	dir := inDir(t)
	me := agent(t, uri, "proj/claude-1")
	if _, err := me.Claim(context.Background(), client.ClaimRequest{TaskID: "ALL", Worktree: "wt-a"}); err != nil {
		t.Fatal(err)
	}
	in := claudeHookJSON(dir, "Edit", filepath.Join(dir, "any/where.go"))
	if _, out, _ := runGuardWith(in, "--uri", uri, "--name", "proj/claude-1", "--worktree", "wt-a"); denied(t, out) != "" {
		t.Fatalf("a whole-worktree claim should cover everything in its worktree: %s", out)
	}
	if _, out, _ := runGuardWith(in, "--uri", uri, "--name", "proj/claude-1"); denied(t, out) == "" {
		t.Fatal("a claim in another worktree covered this one")
	}
	if _, out, _ := runGuardWith(in, "--uri", uri, "--name", "proj/other", "--worktree", "wt-a"); !strings.Contains(denied(t, out), "claimed by proj/claude-1 (task ALL)") {
		t.Fatalf("someone else's whole-worktree claim: %s", out)
	}
}

func TestGuard_HubDownFailsOpenByDefault(t *testing.T) {
	dir := inDir(t)
	in := claudeHookJSON(dir, "Edit", filepath.Join(dir, "a.go"))
	args := []string{"--uri", "ws://127.0.0.1:1", "--name", "proj/x", "--connect-timeout", "1s"}
	code, out, errOut := runGuardWith(in, args...)
	if code != 0 || denied(t, out) != "" || !strings.Contains(out, "systemMessage") || !strings.Contains(errOut, "--fail-open") {
		t.Fatalf("exit %d out %q err %q", code, out, errOut)
	}
	code, out, _ = runGuardWith(in, append(args, "--fail-open=false")...)
	if code != 0 || !strings.Contains(denied(t, out), "cannot reach the hub") {
		t.Fatalf("fail closed: exit %d %s", code, out)
	}
	code, out, _ = runGuardWith(in, append(args, "--strict")...)
	if code != 0 || !strings.Contains(denied(t, out), "cannot reach the hub") {
		t.Fatalf("--strict: exit %d %s", code, out)
	}
}

// The write-path checks read a claim's scope by the hub's rule, globs and
// modes included: a glob claim lets its owner write its matches only (not
// the whole worktree), another agent's shared claim forbids the write, and
// the writer's own shared claim lets it read, not write (INV-ME-2, INV-EF-2).
func TestFenceFile_GlobsAndShared_INV_ME_2_INV_EF_2(t *testing.T) {
	me := "proj/me"
	claims := []client.Claim{
		{TaskID: "G", Owner: me, Worktree: "/w", Globs: []string{"src/**/*.go"}, Epoch: 5},
		{TaskID: "R", Owner: "proj/other", Worktree: "/w", Paths: []string{"docs"}, Mode: "shared", Epoch: 6},
		{TaskID: "L", Owner: me, Worktree: "/w", Paths: []string{"lib"}, Mode: "shared", Epoch: 7},
		{TaskID: "P", Owner: me, Worktree: "/w", Paths: []string{"pkg"}, Epoch: 8},
		{TaskID: "F", Owner: me, Worktree: "/w", Files: []string{"src/a/notes.txt"}, Epoch: 9},
		{TaskID: "O", Owner: "proj/other", Worktree: "/w", Files: []string{"src/a/other.txt"}, Epoch: 10},
	}
	recs := []client.LeaseRecord{
		{Agent: me, TaskID: "G", Worktree: "/w", Globs: []string{"src/**/*.go"}, Epoch: 5},
		{Agent: me, TaskID: "L", Worktree: "/w", Paths: []string{"lib"}, Epoch: 7},
		{Agent: me, TaskID: "P", Worktree: "/w", Paths: []string{"pkg"}, Epoch: 8},
		{Agent: me, TaskID: "F", Worktree: "/w", Files: []string{"src/a/notes.txt"}, Epoch: 9},
	}
	for _, tc := range []struct {
		rel   string
		allow bool
		short string
	}{
		{"src/a/b.go", true, ""},
		{"src/b.go", true, ""},
		{"src/a/b.md", false, "no claim of yours covers it"},
		{"README.md", false, "no claim of yours covers it"},
		{"docs/x.md", false, "claimed by proj/other"},
		{"lib/y.go", false, "shared (read only)"},
		{"pkg/z.go", true, ""},
		{"src/a/notes.txt", true, ""}, // a file claim covers itself
		{"src/a/notes.txt.bak", false, "no claim of yours covers it"},
		{"src/a/other.txt", false, "claimed by proj/other"},
		{"src/a/x.go/y.md", false, "no claim of yours covers it"}, // a glob covers its matches, not below them
	} {
		fc := fenceCheck{claims: claims, recs: recs, worktree: "/w", root: "/w", me: me, needClaim: true}
		v := fc.file(tc.rel)
		if v.allowed != tc.allow || !strings.Contains(v.short, tc.short) {
			t.Errorf("%s: allowed %v (%q), want %v (%q)", tc.rel, v.allowed, v.short, tc.allow, tc.short)
		}
	}
	if !recs[0].Covers("src/x/y.go") || recs[0].Covers("src/x/y.md") || recs[0].Covers("src/x/y.go/z.md") {
		t.Error("a lease record's globs are not read by the hub's rule")
	}
	if !recs[3].Covers("src/a/notes.txt") || recs[3].Covers("src/a") {
		t.Error("a lease record's files are not read by the hub's rule")
	}
	// The claim the guard suggests for an unclaimed file names it alone on
	// a hub that takes files; a re-claim names the scope's files.
	fc := fenceCheck{claims: claims, recs: recs, worktree: "/w", root: "/w", me: me, needClaim: true, fileFlag: "--file"}
	if v := fc.file("src/a/b.md"); !strings.Contains(v.reason, "synapse claim edit-src-a-b-md --file src/a/b.md") {
		t.Errorf("the suggested claim: %s", v.reason)
	}
	fc.recs = []client.LeaseRecord{{Agent: me, TaskID: "GONE", Worktree: "/w", Files: []string{"a.md"}, Globs: []string{"b/*.md"}, Epoch: 3}}
	if v := fc.file("a.md"); !strings.Contains(v.reason, "synapse claim GONE --glob 'b/*.md' --file a.md") {
		t.Errorf("the re-claim of a gone claim: %s", v.reason)
	}
}
