package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// inDir runs the test in a fresh git repository folder.
func inDir(t *testing.T) string {
	t.Helper()
	isolate(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", dir, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	t.Chdir(dir)
	return dir
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestInit_ClaudeMergesMCPJSONAndAddsTheGuardHook(t *testing.T) {
	dir := inDir(t)
	os.WriteFile(".mcp.json", []byte(`{"mcpServers": {"other": {"command": "x", "args": []}}, "keep": true}`), 0o644)
	os.MkdirAll(".claude", 0o755)
	os.WriteFile(".claude/settings.json", []byte(`{"permissions": {"allow": ["Bash(ls)"]}, "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "lint"}]}]}}`), 0o644)
	code, out, errOut := runCmd("init", "claude", "--name", "proj/claude-1", "--command", "/usr/local/bin/synapse")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	wantOut := `updated .mcp.json: mcpServers.synapse runs /usr/local/bin/synapse mcp --name proj/claude-1
  undo: remove "synapse" from "mcpServers" in .mcp.json
updated .claude/settings.json: PreToolUse Edit|Write|MultiEdit runs /usr/local/bin/synapse guard --name proj/claude-1
  undo: remove the PreToolUse entry running "synapse guard" from .claude/settings.json
The claude agent is proj/claude-1. Start the hub ('synapse hub'), then restart Claude Code. Check with 'synapse doctor'.
`
	if out != wantOut {
		t.Errorf("--- got\n%s--- want\n%s", out, wantOut)
	}
	wantMCP := `{
  "keep": true,
  "mcpServers": {
    "other": {
      "args": [],
      "command": "x"
    },
    "synapse": {
      "args": [
        "mcp",
        "--name",
        "proj/claude-1"
      ],
      "command": "/usr/local/bin/synapse"
    }
  }
}
`
	if got := readFile(t, filepath.Join(dir, ".mcp.json")); got != wantMCP {
		t.Errorf(".mcp.json\n--- got\n%s--- want\n%s", got, wantMCP)
	}
	wantSettings := `{
  "hooks": {
    "PreToolUse": [
      {
        "hooks": [
          {
            "command": "lint",
            "type": "command"
          }
        ],
        "matcher": "Bash"
      },
      {
        "hooks": [
          {
            "command": "/usr/local/bin/synapse guard --name proj/claude-1",
            "type": "command"
          }
        ],
        "matcher": "Edit|Write|MultiEdit"
      }
    ]
  },
  "permissions": {
    "allow": [
      "Bash(ls)"
    ]
  }
}
`
	if got := readFile(t, filepath.Join(dir, ".claude", "settings.json")); got != wantSettings {
		t.Errorf("settings.json\n--- got\n%s--- want\n%s", got, wantSettings)
	}
	// Running it again (another name) replaces the entries, not duplicates.
	if code, _, errOut := runCmd("init", "claude", "--name", "proj/claude-2", "--command", "/usr/local/bin/synapse"); code != 0 {
		t.Fatal(errOut)
	}
	got := readFile(t, filepath.Join(dir, ".claude", "settings.json"))
	if strings.Count(got, "synapse guard") != 1 || !strings.Contains(got, "proj/claude-2") || !strings.Contains(got, `"lint"`) {
		t.Errorf("second init:\n%s", got)
	}
}

func TestInit_CodexKeepsTheRestOfTheTOML(t *testing.T) {
	dir := inDir(t)
	os.MkdirAll(".codex", 0o755)
	os.WriteFile(".codex/config.toml", []byte("model = \"o3\"\n\n[mcp_servers.synapse]\ncommand = \"old\"\nargs = []\n\n[mcp_servers.synapse.env]\nX = \"1\"\n\n[mcp_servers.other]\ncommand = \"y\"\n"), 0o644)
	if code, _, errOut := runCmd("init", "codex", "--name", "proj/codex-1", "--uri", "ws://127.0.0.1:9999", "--command", "/opt/synapse"); code != 0 {
		t.Fatal(errOut)
	}
	want := `model = "o3"

[mcp_servers.synapse]
command = "/opt/synapse"
args = ["mcp", "--name", "proj/codex-1", "--uri", "ws://127.0.0.1:9999"]
[mcp_servers.other]
command = "y"
`
	if got := readFile(t, filepath.Join(dir, ".codex", "config.toml")); got != want {
		t.Errorf("--- got\n%s--- want\n%s", got, want)
	}
	if cmd, args := codexServer(want); cmd != "/opt/synapse" || len(args) != 5 {
		t.Errorf("codexServer read %q %v", cmd, args)
	}
}

func TestInit_CursorCreatesTheFileAndDryRunWritesNothing(t *testing.T) {
	dir := inDir(t)
	code, out, _ := runCmd("init", "cursor", "--name", "proj/cursor-1", "--command", "/opt/synapse", "--dry-run")
	if code != 0 || !strings.HasPrefix(out, "would write .cursor/mcp.json:\n") {
		t.Fatalf("exit %d: %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, ".cursor")); err == nil {
		t.Fatal("--dry-run wrote a file")
	}
	if code, out, _ := runCmd("init", "cursor", "--name", "proj/cursor-1", "--command", "/opt/synapse"); code != 0 || !strings.Contains(out, "undo: delete .cursor/mcp.json") {
		t.Fatalf("exit %d: %s", code, out)
	}
	want := `{
  "mcpServers": {
    "synapse": {
      "args": [
        "mcp",
        "--name",
        "proj/cursor-1"
      ],
      "command": "/opt/synapse"
    }
  }
}
`
	if got := readFile(t, filepath.Join(dir, ".cursor", "mcp.json")); got != want {
		t.Errorf("--- got\n%s--- want\n%s", got, want)
	}
}

func TestInit_DefaultNameAndErrors(t *testing.T) {
	dir := inDir(t)
	code, out, _ := runCmd("init", "cursor", "--command", "/opt/synapse", "--dry-run")
	if code != 0 || !strings.Contains(out, filepath.Base(dir)+"/cursor") {
		t.Fatalf("default name: %s", out)
	}
	if code, _, errOut := runCmd("init", "vim"); code != exitUsage || !strings.Contains(errOut, "claude, codex or cursor") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	os.WriteFile(".mcp.json", []byte("{not json"), 0o644)
	if code, _, errOut := runCmd("init", "claude", "--command", "/opt/synapse"); code != exitRefused || !strings.Contains(errOut, "not a JSON object") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// Under `go run` the running binary is a temporary build: init must not
// write its path into the host's configuration.
func TestInit_TemporaryBuildIsNotWrittenDown(t *testing.T) {
	for _, p := range []string{"/tmp/go-build123/b001/exe/synapse", "/root/.cache/go-build/ab/synapse"} {
		if !temporaryBuild(p) {
			t.Errorf("%s not recognised as a go run build", p)
		}
	}
	if temporaryBuild("/usr/local/bin/synapse") {
		t.Error("an installed binary taken for a temporary build")
	}
}
