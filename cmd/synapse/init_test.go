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

// Each CLI's init merges the MCP server (hub URI in env, never an
// argument) and the guard hook into the CLI's files beside what is there,
// changes nothing when run again, and --remove leaves the files as they
// were (deleting those it created).
func TestInit_EachCLI_MergesIsIdempotentAndRemoves(t *testing.T) {
	dir := inDir(t)
	before := map[string]string{
		".mcp.json":             `{"mcpServers": {"other": {"command": "x", "args": []}}, "keep": true}`,
		".claude/settings.json": `{"permissions": {"allow": ["Bash(ls)"]}, "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "lint"}]}]}}`,
		".codex/config.toml":    "model = \"o3\"\n",
		".gemini/settings.json": `{"theme": "dark"}`,
		"opencode.json":         `{"$schema": "https://opencode.ai/config.json"}`,
	}
	for f, c := range before {
		os.MkdirAll(filepath.Dir(f), 0o755)
		os.WriteFile(f, []byte(c), 0o644)
	}
	files := map[string][]string{
		"claude":   {".mcp.json", ".claude/settings.json"},
		"codex":    {".codex/config.toml", ".codex/hooks.json"},
		"gemini":   {".gemini/settings.json"},
		"opencode": {"opencode.json", ".opencode/plugins/synapse-guard.js"},
		"cursor":   {".cursor/mcp.json", ".cursor/hooks.json"},
	}
	for _, host := range []string{"claude", "codex", "gemini", "opencode", "cursor"} {
		args := []string{"init", host, "--name", "proj/" + host + "-1", "--uri", "ws://127.0.0.1:9999", "--command", "/opt/synapse"}
		code, out, errOut := runCmd(args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", host, code, errOut)
		}
		all := ""
		for _, f := range files[host] {
			all += readFile(t, f)
		}
		guard := "/opt/synapse guard --agent " + host + " --mcp --name proj/" + host + "-1 --uri ws://127.0.0.1:9999"
		if host == "opencode" {
			guard = `"/opt/synapse", "guard", "--agent", "opencode", "--mcp", "--name", "proj/opencode-1", "--uri", "ws://127.0.0.1:9999"`
		}
		if !strings.Contains(all, guard) || !strings.Contains(all, "SYNAPSE_URI") || strings.Contains(all, `"mcp", "--name", "proj/`+host+`-1", "--uri"`) {
			t.Errorf("%s: the guard (%s) or SYNAPSE_URI missing, or --uri an MCP argument:\n%s", host, guard, all)
		}
		if c := before[files[host][0]]; c != "" && !strings.Contains(all, strings.Fields(strings.Trim(c, "{"))[0]) {
			t.Errorf("%s: the file's other entries are gone:\n%s", host, all)
		}
		if host == "codex" && !strings.Contains(out, "trusted") {
			t.Errorf("codex: init does not say the project must be trusted: %s", out)
		}
		if _, again, _ := runCmd(args...); strings.Count(again, "unchanged") != len(files[host]) {
			t.Errorf("%s: a second init changed something:\n%s", host, again)
		}
	}
	if got := readFile(t, ".claude/settings.json"); strings.Count(got, "synapse guard") != 1 || !strings.Contains(got, `"lint"`) || !strings.Contains(got, guardMatcher) {
		t.Errorf("claude hooks: %s", got)
	}
	for host, fs := range files {
		if code, out, errOut := runCmd("init", host, "--remove", "--name", "proj/"+host+"-1", "--command", "/opt/synapse"); code != 0 {
			t.Fatalf("%s --remove: exit %d: %s %s", host, code, out, errOut)
		}
		for _, f := range fs {
			got, err := os.ReadFile(f)
			switch c, had := before[f]; {
			case !had && err == nil:
				t.Errorf("%s --remove: %s, which init created, is still there:\n%s", host, f, got)
			case had && (err != nil || strings.Contains(string(got), "synapse")):
				t.Errorf("%s --remove: %s: %v\n%s (was %s)", host, f, err, got, c)
			}
		}
	}
	if got := readFile(t, ".claude/settings.json"); !strings.Contains(got, `"lint"`) || !strings.Contains(got, "Bash(ls)") {
		t.Errorf("--remove took more than the guard: %s", got)
	}
	_ = dir
}

func TestInit_CodexKeepsTheRestOfTheTOML(t *testing.T) {
	dir := inDir(t)
	os.MkdirAll(".codex", 0o755)
	os.WriteFile(".codex/config.toml", []byte("model = \"o3\"\n\n[mcp_servers.synapse]\ncommand = \"old\"\nargs = []\n\n[mcp_servers.synapse.env]\nX = \"1\"\n\n[mcp_servers.other]\ncommand = \"y\"\n"), 0o644)
	if code, _, errOut := runCmd("init", "codex", "--name", "proj/codex-1", "--uri", "ws://127.0.0.1:9999", "--command", "/opt/synapse"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `model = "o3"

[mcp_servers.synapse]
command = "/opt/synapse"
args = ["mcp", "--name", "proj/codex-1"]

[mcp_servers.synapse.env]
SYNAPSE_URI = "ws://127.0.0.1:9999"

[mcp_servers.other]
command = "y"
`
	got := readFile(t, filepath.Join(dir, ".codex", "config.toml"))
	if got != want {
		t.Errorf("--- got\n%s--- want\n%s", got, want)
	}
	if cmd, args := codexServer(want); cmd != "/opt/synapse" || len(args) != 3 {
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
	if code, _, errOut := runCmd("init", "vim"); code != exitUsage || !strings.Contains(errOut, "claude, codex, gemini, opencode or cursor") {
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

// --all does the CLIs on the PATH and those already configured here, and
// says so when there are none.
func TestInit_AllFindsCLIsOnThePathAndConfigured(t *testing.T) {
	inDir(t)
	bin := t.TempDir()
	t.Setenv("PATH", bin)
	if code, _, errOut := runCmd("init", "--all", "--command", "/opt/synapse"); code != exitRefused || !strings.Contains(errOut, "found no agent CLI") {
		t.Fatalf("nothing found: exit %d %s", code, errOut)
	}
	os.WriteFile(filepath.Join(bin, "gemini"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(".mcp.json", []byte(`{"mcpServers": {"synapse": {"command": "/opt/synapse"}}}`), 0o644)
	code, out, errOut := runCmd("init", "--all", "--dry-run", "--name", "proj/a", "--command", "/opt/synapse")
	if code != 0 || !strings.Contains(out, ".claude/settings.json") || !strings.Contains(out, ".gemini/settings.json") || strings.Contains(out, ".codex") {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
}
