package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/hub"
)

// hookFixtures is the fixtures' folder, found before a test moves into its
// repository.
var hookFixtures, _ = filepath.Abs(filepath.Join("testdata", "hooks"))

// hookFixture is testdata/hooks/NAME with {{DIR}} and {{FILE}} filled in.
func hookFixture(t *testing.T, name, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(hookFixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer("{{DIR}}", dir, "{{FILE}}", file).Replace(string(b))
}

// runHookBinary runs the real synapse binary as the agent CLI runs a
// hook: the input on stdin, in the project folder, reading stdout.
func runHookBinary(t *testing.T, bin, dir, stdin string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a safety net, not an assertion
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"guard"}, args...)...)
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("guard %v: %v (every CLI reads a non-zero exit as a broken hook)\n%s", args, err, errOut.String())
	}
	return out.String(), errOut.String()
}

// refusal is the reason an agent CLI would show its model for a refused
// call, read the way that CLI reads the guard's stdout ("" = allowed).
func refusal(t *testing.T, agent, out string) string {
	t.Helper()
	if strings.TrimSpace(out) == "" {
		return ""
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%s: the answer is not JSON: %v: %q", agent, err, out)
	}
	switch agent {
	case "claude", "codex":
		h, _ := m["hookSpecificOutput"].(map[string]any)
		if h == nil {
			return ""
		}
		if h["hookEventName"] != "PreToolUse" || h["permissionDecision"] != "deny" {
			t.Fatalf("%s: decision %v", agent, h)
		}
		return h["permissionDecisionReason"].(string)
	case "gemini", "opencode":
		if m["decision"] == "deny" {
			return m["reason"].(string)
		}
		if m["decision"] != "allow" {
			t.Fatalf("%s: decision %v", agent, m)
		}
	case "cursor":
		if m["permission"] == "deny" {
			return m["agent_message"].(string)
		}
		if m["permission"] != "allow" {
			t.Fatalf("cursor: permission %v", m)
		}
	}
	return ""
}

// Each CLI's documented hook input, fed to the real binary as that CLI
// runs it: a write of a file the agent holds a recorded claim on is
// allowed silently, a write of another agent's file is refused in the
// CLI's own answer format, naming the holder (INV-EF-2 on the write path).
func TestGuard_EachCLIsDocumentedHookInput_AllowsOwnRefusesOthers_INV_EF_2(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	dir := inDir(t)
	bin := buildSynapse(t)
	os.MkdirAll(filepath.Join(dir, "src"), 0o755)
	os.MkdirAll(filepath.Join(dir, "docs"), 0o755)
	os.WriteFile(filepath.Join(dir, "src", "a.go"), []byte("old\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "docs", "b.md"), []byte("old\n"), 0o644)
	me := []string{"--uri", uri, "--name", "proj/me"}
	if code, _, errOut := runCmd(append([]string{"claim", "T1", "--paths", "src"}, me...)...); code != 0 {
		t.Fatalf("claim: %s", errOut)
	}
	waitOffline(t, uri, "proj/me")
	other := agent(t, uri, "proj/other")
	if _, err := other.Claim(context.Background(), client.ClaimRequest{TaskID: "T2", Paths: []string{"docs"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ agent, fixture string }{
		{"claude", "claude-write.json"},
		{"claude", "claude-notebookedit.json"},
		{"claude", "claude-bash.json"},
		{"codex", "codex-apply-patch.json"},
		{"codex", "codex-bash.json"},
		{"gemini", "gemini-write-file.json"},
		{"gemini", "gemini-shell.json"},
		{"cursor", "cursor-shell.json"},
		{"opencode", "opencode-edit.json"},
	} {
		args := append([]string{"--agent", tc.agent}, me...)
		out, errOut := runHookBinary(t, bin, dir, hookFixture(t, tc.fixture, dir, "src/a.go"), args...)
		if r := refusal(t, tc.agent, out); r != "" || errOut != "" {
			t.Errorf("%s: a write of a claimed, recorded file: refused %q, stderr %q", tc.fixture, r, errOut)
		}
		out, _ = runHookBinary(t, bin, dir, hookFixture(t, tc.fixture, dir, "docs/b.md"), args...)
		if r := refusal(t, tc.agent, out); !strings.Contains(r, "claimed by proj/other (task T2)") || !strings.Contains(r, "--name proj/me") {
			t.Errorf("%s: a write of another agent's file: refusal %q (stdout %q)", tc.fixture, r, out)
		}
	}
}
