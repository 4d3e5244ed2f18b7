package main

// init: write an agent CLI's MCP configuration and its guard hook into the
// current project, merging with what is there (init_hosts.go has each CLI's
// files), and take them out again.

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const initUsage = `Usage: synapse init claude|codex|gemini|opencode|cursor|--all [--name NAME]
                    [--uri URI] [--remove] [--dry-run]

Writes what makes an agent CLI run 'synapse mcp' as agent NAME and check
each of its writes with 'synapse guard' (docs/agents.md), in the current
project (the git repository's root, else the current folder), merging with
the files' other entries:

  claude    .mcp.json              mcpServers.synapse {command, args, env}
            .claude/settings.json  hooks.PreToolUse: Edit|Write|MultiEdit|
                                   NotebookEdit|Bash runs the guard
  codex     .codex/config.toml     [mcp_servers.synapse] (and .env)
            .codex/hooks.json      hooks.PreToolUse: apply_patch|Bash runs
                                   the guard (Codex runs project hooks only
                                   in a trusted project, once you trust them)
  gemini    .gemini/settings.json  mcpServers.synapse and hooks.BeforeTool:
                                   write_file|replace|run_shell_command
  opencode  opencode.json          mcp.synapse {type local, command, environment}
            .opencode/plugins/synapse-guard.js   tool.execute.before runs
                                   the guard for edit, write, patch, bash
  cursor    .cursor/mcp.json       mcpServers.synapse {command, args, env}
            .cursor/hooks.json     hooks.beforeShellExecution runs the guard

--all does each CLI found on the PATH (claude, codex, gemini, opencode,
cursor-agent) or already configured in the project. The hub URI (--uri) is
written into the server's environment as SYNAPSE_URI, never as an
argument. Running it again changes nothing ("unchanged"); --remove takes
out exactly what it wrote (and a file it created, once nothing else is in
it). NAME defaults to $SYNAPSE_NAME, else <project folder>/<cli> (e.g.
myproject/claude); give each agent running at once its own name. Restart
the CLI afterwards. It prints each change and how to undo it.

Flags:
`

// integration is one host's MCP configuration file in a project (the
// files doctor checks).
type integration struct {
	host string // claude | codex | gemini | cursor
	file string // relative to the project root
}

var integrations = []integration{
	{"claude", ".mcp.json"},
	{"codex", filepath.Join(".codex", "config.toml")},
	{"gemini", filepath.Join(".gemini", "settings.json")},
	{"cursor", filepath.Join(".cursor", "mcp.json")},
}

// initHosts are the CLIs init knows, in order, with the program that says
// one is installed.
var initHosts = []struct{ host, program string }{
	{"claude", "claude"}, {"codex", "codex"}, {"gemini", "gemini"}, {"opencode", "opencode"}, {"cursor", "cursor-agent"},
}

// claudeSettings is where Claude Code reads the project's hooks.
var claudeSettings = filepath.Join(".claude", "settings.json")

// guardMatcher is the PreToolUse matcher of Claude Code's guard hook.
const guardMatcher = "Edit|Write|MultiEdit|NotebookEdit|Bash"

// hookTimeout is the timeout init writes for the guard hook, in seconds:
// above the guard's own --deadline, below every CLI's default.
const hookTimeout = 10

// projectRoot is the git repository's top folder, else dir.
func projectRoot(dir string) string {
	out, err := exec.Command("git", "-C", dir, "rev-parse", "--show-toplevel").Output()
	if err == nil {
		if root := strings.TrimSpace(string(out)); root != "" {
			return root
		}
	}
	return dir
}

// thisBinary is the absolute path of the running synapse binary. Under
// `go run` that is a temporary build that is gone once the command ends,
// so the synapse on the PATH is named instead (or plain "synapse").
func thisBinary() string {
	p, err := os.Executable()
	if err != nil {
		return "synapse"
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	if temporaryBuild(p) {
		if onPath, err := lookPath("synapse"); err == nil {
			return onPath
		}
		return "synapse"
	}
	return p
}

// temporaryBuild reports whether p is a binary `go run` built in a
// temporary folder.
func temporaryBuild(p string) bool {
	return strings.Contains(p, string(filepath.Separator)+"go-build")
}

func runInit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, initUsage); fs.PrintDefaults() }
	name := fs.String("name", "", "agent name the CLI acts as (default $SYNAPSE_NAME, else <project>/<cli>)")
	uri := fs.String("uri", "", "hub address, written as SYNAPSE_URI into the server's environment (default: none, so SYNAPSE_URI or the config file decide)")
	dir := fs.String("dir", "", "project folder (default: the current git repository's root)")
	command := fs.String("command", "", "the synapse binary the CLI runs (default: this one, "+thisBinary()+")")
	dryRun := fs.Bool("dry-run", false, "print what would be written, write nothing")
	remove := fs.Bool("remove", false, "take out what init wrote")
	all := fs.Bool("all", false, "every CLI found on the PATH or configured in the project")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	root := *dir
	if root == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintf(stderr, "synapse init: %v\n", err)
			return exitRefused
		}
		root = projectRoot(wd)
	}
	var hosts []string
	switch {
	case *all && len(pos) == 0:
		hosts = foundHosts(root)
		if len(hosts) == 0 {
			fmt.Fprintln(stderr, "synapse init: --all found no agent CLI on the PATH (claude, codex, gemini, opencode, cursor-agent) nor configured in this project; name one.")
			return exitRefused
		}
	case len(pos) == 1 && !*all:
		hosts = pos
	default:
		return usageError(stderr, "init", "say which CLI: claude, codex, gemini, opencode or cursor (or --all)")
	}
	for _, h := range hosts {
		if hostTitle(h) == "" {
			return usageError(stderr, "init", "unknown CLI %q: say claude, codex, gemini, opencode or cursor", h)
		}
	}
	bin := *command
	if bin == "" {
		bin = thisBinary()
		if !filepath.IsAbs(bin) {
			fmt.Fprintln(stderr, "synapse init: no installed synapse was found (this one is a temporary `go run` build), so the CLI will run \"synapse\" from its PATH. Install it with 'go install ./cmd/synapse' from the checkout, or pass --command PATH.")
		}
	}
	for _, host := range hosts {
		n := *name
		if n == "" {
			n = strings.TrimSpace(os.Getenv("SYNAPSE_NAME"))
		}
		if n == "" {
			n = filepath.Base(root) + "/" + host
		}
		sp := initSpec{root: root, bin: bin, name: n, uri: *uri, remove: *remove}
		writes, err := sp.plan(host)
		if err == nil {
			err = applyWrites(root, writes, *dryRun, stdout)
		}
		if err != nil {
			fmt.Fprintf(stderr, "synapse init: %v\n", err)
			return exitRefused
		}
		switch {
		case *dryRun:
		case *remove:
			fmt.Fprintf(stdout, "Synapse is out of %s's configuration in this project. Restart %s.\n", hostTitle(host), hostTitle(host))
		default:
			fmt.Fprintf(stdout, "The %s agent is %s. Start the hub ('synapse hub'), then restart %s. Check with 'synapse doctor'.\n", host, n, hostTitle(host))
			if host == "codex" {
				fmt.Fprintf(stdout, "Codex reads .codex/ only in a trusted project: trust %s when Codex asks (or add [projects.%q] trust_level = \"trusted\" to ~/.codex/config.toml), then review and trust the new hook in Codex (/hooks).\n", root, root)
			}
		}
	}
	return exitOK
}

// foundHosts are the CLIs on the PATH or already configured in root.
func foundHosts(root string) []string {
	var out []string
	for _, h := range initHosts {
		sp := initSpec{root: root}
		if _, err := lookPath(h.program); err == nil || sp.configured(h.host) {
			out = append(out, h.host)
		}
	}
	return out
}

// applyWrites writes (or prints) each change and how to undo it.
func applyWrites(root string, writes []fileWrite, dryRun bool, stdout io.Writer) error {
	for _, w := range writes {
		rel, _ := filepath.Rel(root, w.path)
		old, err := os.ReadFile(w.path)
		existed := err == nil
		switch {
		case w.remove && !existed, !w.remove && existed && bytes.Equal(old, w.data):
			fmt.Fprintf(stdout, "unchanged %s\n", rel)
			continue
		case dryRun && w.remove:
			fmt.Fprintf(stdout, "would delete %s\n", rel)
			continue
		case dryRun:
			fmt.Fprintf(stdout, "would write %s:\n%s\n", rel, w.data)
			continue
		case w.remove:
			if err := os.Remove(w.path); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "deleted %s: %s\n", rel, w.what)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(w.path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(w.path, w.data, 0o644); err != nil {
			return fmt.Errorf("cannot write %s: %w", w.path, err)
		}
		verb := "updated"
		if w.created {
			verb = "created"
		}
		fmt.Fprintf(stdout, "%s %s: %s\n", verb, rel, w.what)
		if w.undo != "" {
			fmt.Fprintf(stdout, "  undo: %s\n", strings.ReplaceAll(w.undo, w.path, rel))
		}
	}
	return nil
}

func hostTitle(host string) string {
	return map[string]string{"claude": "Claude Code", "codex": "Codex", "gemini": "Gemini CLI", "opencode": "OpenCode", "cursor": "Cursor"}[host]
}

// fileWrite is one file init writes (or, with remove, deletes).
type fileWrite struct {
	path    string
	data    []byte
	created bool
	remove  bool
	what    string // what changed
	undo    string // how to undo it
}

// readJSONObject reads a JSON object file; a missing file is empty.
func readJSONObject(path string) (map[string]any, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]any{}, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return map[string]any{}, false, nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, false, fmt.Errorf("%s is not a JSON object (%v): fix it or move it away, then run init again", path, err)
	}
	return m, false, nil
}

func marshalJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	return buf.Bytes()
}

// isGuardEntry reports whether a PreToolUse entry runs `synapse guard`.
func isGuardEntry(e any) bool {
	em, _ := e.(map[string]any)
	hs, _ := em["hooks"].([]any)
	for _, h := range hs {
		hm, _ := h.(map[string]any)
		if c, _ := hm["command"].(string); isGuardCommand(c) {
			return true
		}
	}
	c, _ := em["command"].(string) // Cursor's entries are the hook itself
	return isGuardCommand(c)
}

// isGuardCommand reports whether a hook command line is "BIN guard ...".
func isGuardCommand(c string) bool {
	rest := strings.TrimSpace(c)
	if strings.HasPrefix(rest, "'") { // a quoted binary path
		if end := strings.Index(rest[1:], "'"); end >= 0 {
			rest = rest[end+2:]
		}
	} else if _, after, ok := strings.Cut(rest, " "); ok {
		rest = after
	} else {
		return false
	}
	w := strings.Fields(rest)
	return len(w) > 0 && w[0] == "guard"
}

// codexSection is the header of the Synapse server in Codex's config.
const codexSection = "[mcp_servers.synapse]"

// shellJoin quotes words for a POSIX shell when they need it.
func shellJoin(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if w != "" && !strings.ContainsAny(w, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
			out[i] = w
			continue
		}
		out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
