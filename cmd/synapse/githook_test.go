package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/hub"
)

func git(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func TestGitHookCheck_RefusesStagedFilesClaimedByOthers(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	dir := inDir(t)
	os.MkdirAll(filepath.Join(dir, "src"), 0o755)
	for _, f := range []string{"src/a.go", "src/b.go", "README.md"} {
		os.WriteFile(filepath.Join(dir, f), []byte("x\n"), 0o644)
	}
	other := agent(t, uri, "proj/codex-1")
	if _, err := other.Claim(context.Background(), client.ClaimRequest{TaskID: "T2", Paths: []string{"src/a.go"}}); err != nil {
		t.Fatal(err)
	}
	me := []string{"--uri", uri, "--name", "proj/claude-1"}

	git(t, "add", "README.md", "src/b.go")
	if code, _, errOut := runCmd(append([]string{"git-hook", "check"}, me...)...); code != 0 {
		t.Fatalf("unclaimed files refused: %d %s", code, errOut)
	}
	git(t, "add", "src/a.go")
	code, _, errOut := runCmd(append([]string{"git-hook", "check"}, me...)...)
	if code != exitRefused || !strings.Contains(errOut, "src/a.go: claimed by proj/codex-1 (task T2)") || strings.Contains(errOut, "src/b.go") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// The holder itself may commit.
	if code, _, errOut := runCmd("git-hook", "check", "--uri", uri, "--name", "proj/codex-1"); code != 0 {
		t.Fatalf("holder refused: %s", errOut)
	}
	// Hub down: allowed with a warning.
	if code, _, errOut := runCmd("git-hook", "check", "--uri", "ws://127.0.0.1:1", "--name", "x", "--connect-timeout", "1s"); code != 0 || !strings.Contains(errOut, "--fail-open") {
		t.Fatalf("hub down: %d %s", code, errOut)
	}
}

func TestGitHookInstall_WritesTheHookAndKeepsAForeignOne(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	dir := inDir(t)
	hook := filepath.Join(dir, ".git", "hooks", "pre-commit")
	os.MkdirAll(filepath.Dir(hook), 0o755)
	os.WriteFile(hook, []byte("#!/bin/sh\nmake lint\n"), 0o755)
	bin := buildSynapse(t)
	code, out, errOut := runCmd("git-hook", "install", "--name", "proj/claude-1", "--uri", uri, "--force", "--command", bin)
	if readFile(t, hook+chainedSuffix) != "#!/bin/sh\nmake lint\n" {
		t.Fatal("the foreign hook was not kept")
	}
	if code != 0 || !strings.Contains(out, "undo: synapse git-hook install --remove") {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	script := readFile(t, hook)
	if !strings.Contains(script, gitHookMarker) || !strings.Contains(script, "git-hook check --uri "+uri+` --name "${SYNAPSE_NAME:-proj/claude-1}"`) {
		t.Fatalf("hook:\n%s", script)
	}
	// The installed hook really blocks a commit of someone else's file.
	other := agent(t, uri, "proj/codex-1")
	if _, err := other.Claim(context.Background(), client.ClaimRequest{TaskID: "T2", Paths: []string{"x.go"}}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "x.go"), []byte("x\n"), 0o644)
	git(t, "add", "x.go")
	cmd := exec.Command("git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "x")
	cmd.Env = append(os.Environ(), "SYNAPSE_CONFIG="+filepath.Join(dir, "none.json"))
	out2, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out2), "claimed by proj/codex-1") {
		t.Fatalf("commit went through: %v\n%s", err, out2)
	}
	if code, out, _ := runCmd("git-hook", "uninstall"); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("uninstall: %d %s", code, out)
	}
}
