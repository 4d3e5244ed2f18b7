package main

// init: write an agent host's MCP configuration (and, for Claude Code, the
// guard hook) into the current project, merging with what is there.

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
	"strconv"
	"strings"
)

const initUsage = `Usage: synapse init claude|codex|cursor [--name NAME] [--uri URI] [--dry-run]

Writes the MCP configuration that makes the agent host start 'synapse mcp'
as agent NAME, in the current project (the git repository's root, else the
current folder), merging with the file's other entries:

  claude   .mcp.json             mcpServers.synapse {command, args}
           .claude/settings.json hooks.PreToolUse: Edit|Write|MultiEdit runs
                                 'synapse guard', which denies an edit of a
                                 file NAME has not claimed
  codex    .codex/config.toml    [mcp_servers.synapse]
  cursor   .cursor/mcp.json      mcpServers.synapse {command, args}

NAME defaults to $SYNAPSE_NAME, else <project folder>/<host> (e.g.
myproject/claude); give each agent running at once its own name. Restart
the host afterwards. It prints what it wrote and how to undo it.

Flags:
`

// integration is one host's configuration file in a project.
type integration struct {
	host string // claude | codex | cursor
	file string // relative to the project root
}

var integrations = []integration{
	{"claude", ".mcp.json"},
	{"codex", filepath.Join(".codex", "config.toml")},
	{"cursor", filepath.Join(".cursor", "mcp.json")},
}

// claudeSettings is where Claude Code reads the project's hooks.
var claudeSettings = filepath.Join(".claude", "settings.json")

// guardMatcher is the PreToolUse matcher of the guard hook.
const guardMatcher = "Edit|Write|MultiEdit"

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
	name := fs.String("name", "", "agent name the host acts as (default $SYNAPSE_NAME, else <project>/<host>)")
	uri := fs.String("uri", "", "hub address to put in the configuration (default: none, so SYNAPSE_URI or the config file decide)")
	dir := fs.String("dir", "", "project folder (default: the current git repository's root)")
	command := fs.String("command", "", "the synapse binary the host runs (default: this one, "+thisBinary()+")")
	dryRun := fs.Bool("dry-run", false, "print what would be written, write nothing")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, "init", "say which host: claude, codex or cursor")
	}
	host := pos[0]
	var in *integration
	for i := range integrations {
		if integrations[i].host == host {
			in = &integrations[i]
		}
	}
	if in == nil {
		return usageError(stderr, "init", "unknown host %q: say claude, codex or cursor", host)
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
	if *name == "" {
		*name = strings.TrimSpace(os.Getenv("SYNAPSE_NAME"))
	}
	if *name == "" {
		*name = filepath.Base(root) + "/" + host
	}
	bin := *command
	if bin == "" {
		bin = thisBinary()
		if !filepath.IsAbs(bin) {
			fmt.Fprintln(stderr, "synapse init: no installed synapse was found (this one is a temporary `go run` build), so the host will run \"synapse\" from its PATH. Install it with 'go install ./cmd/synapse' from the checkout, or pass --command PATH.")
		}
	}
	mcpArgs := []string{"mcp", "--name", *name}
	if *uri != "" {
		mcpArgs = append(mcpArgs, "--uri", *uri)
	}

	var writes []fileWrite
	var err error
	switch host {
	case "claude", "cursor":
		var w fileWrite
		w, err = mergeMCPJSON(filepath.Join(root, in.file), bin, mcpArgs)
		writes = append(writes, w)
		if err == nil && host == "claude" {
			guard := shellJoin(append([]string{bin, "guard", "--name", *name}, uriArg(*uri)...))
			w, err = mergeClaudeHook(filepath.Join(root, claudeSettings), guard)
			writes = append(writes, w)
		}
	case "codex":
		var w fileWrite
		w, err = mergeCodexTOML(filepath.Join(root, in.file), bin, mcpArgs)
		writes = append(writes, w)
	}
	if err != nil {
		fmt.Fprintf(stderr, "synapse init: %v\n", err)
		return exitRefused
	}
	for _, w := range writes {
		rel, _ := filepath.Rel(root, w.path)
		if *dryRun {
			fmt.Fprintf(stdout, "would write %s:\n%s\n", rel, w.data)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(w.path), 0o755); err != nil {
			fmt.Fprintf(stderr, "synapse init: %v\n", err)
			return exitRefused
		}
		if err := os.WriteFile(w.path, w.data, 0o644); err != nil {
			fmt.Fprintf(stderr, "synapse init: cannot write %s: %v\n", w.path, err)
			return exitRefused
		}
		verb := "updated"
		if w.created {
			verb = "created"
		}
		fmt.Fprintf(stdout, "%s %s: %s\n  undo: %s\n", verb, rel, w.what, strings.ReplaceAll(w.undo, w.path, rel))
	}
	if !*dryRun {
		fmt.Fprintf(stdout, "The %s agent is %s. Start the hub ('synapse hub'), then restart %s. Check with 'synapse doctor'.\n", host, *name, hostTitle(host))
	}
	return exitOK
}

func uriArg(uri string) []string {
	if uri == "" {
		return nil
	}
	return []string{"--uri", uri}
}

func hostTitle(host string) string {
	return map[string]string{"claude": "Claude Code", "codex": "Codex", "cursor": "Cursor"}[host]
}

// fileWrite is one file init writes.
type fileWrite struct {
	path    string
	data    []byte
	created bool
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

// mergeMCPJSON sets mcpServers.synapse in a Claude Code / Cursor file.
func mergeMCPJSON(path, bin string, args []string) (fileWrite, error) {
	m, created, err := readJSONObject(path)
	if err != nil {
		return fileWrite{}, err
	}
	servers, _ := m["mcpServers"].(map[string]any)
	if servers == nil {
		servers = map[string]any{}
	}
	servers["synapse"] = map[string]any{"command": bin, "args": args}
	m["mcpServers"] = servers
	undo := `remove "synapse" from "mcpServers" in ` + filepath.Base(path)
	if created {
		undo = "delete " + path
	}
	return fileWrite{path: path, data: marshalJSON(m), created: created,
		what: "mcpServers.synapse runs " + shellJoin(append([]string{bin}, args...)), undo: undo}, nil
}

// mergeClaudeHook adds (or replaces) the guard's PreToolUse hook.
func mergeClaudeHook(path, command string) (fileWrite, error) {
	m, created, err := readJSONObject(path)
	if err != nil {
		return fileWrite{}, err
	}
	hooks, _ := m["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
	}
	pre, _ := hooks["PreToolUse"].([]any)
	entry := map[string]any{"matcher": guardMatcher, "hooks": []any{map[string]any{"type": "command", "command": command}}}
	replaced := false
	for i, e := range pre {
		if isGuardEntry(e) {
			pre[i], replaced = entry, true
		}
	}
	if !replaced {
		pre = append(pre, entry)
	}
	hooks["PreToolUse"] = pre
	m["hooks"] = hooks
	undo := `remove the PreToolUse entry running "synapse guard" from ` + claudeSettings
	if created {
		undo = "delete " + path
	}
	return fileWrite{path: path, data: marshalJSON(m), created: created,
		what: "PreToolUse " + guardMatcher + " runs " + command, undo: undo}, nil
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
	return false
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

// mergeCodexTOML replaces (or appends) the [mcp_servers.synapse] table,
// leaving the rest of the file as it was.
func mergeCodexTOML(path, bin string, args []string) (fileWrite, error) {
	old, err := os.ReadFile(path)
	created := errors.Is(err, os.ErrNotExist)
	if err != nil && !created {
		return fileWrite{}, err
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	table := fmt.Sprintf("%s\ncommand = %s\nargs = [%s]\n", codexSection, strconv.Quote(bin), strings.Join(quoted, ", "))
	var out []string
	lines := strings.Split(strings.TrimRight(string(old), "\n"), "\n")
	if len(old) == 0 {
		lines = nil
	}
	skipping, placed := false, false
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") {
			mine := t == codexSection || strings.HasPrefix(t, "[mcp_servers.synapse.")
			if mine && !placed {
				out = append(out, strings.TrimRight(table, "\n"))
				placed = true
			}
			skipping = mine
			if mine {
				continue
			}
		}
		if !skipping {
			out = append(out, l)
		}
	}
	if !placed {
		if len(out) > 0 && strings.TrimSpace(out[len(out)-1]) != "" {
			out = append(out, "")
		}
		out = append(out, strings.TrimRight(table, "\n"))
	}
	undo := "remove the " + codexSection + " table from " + filepath.Join(".codex", "config.toml")
	if created {
		undo = "delete " + path
	}
	return fileWrite{path: path, data: []byte(strings.Join(out, "\n") + "\n"), created: created,
		what: codexSection + " runs " + shellJoin(append([]string{bin}, args...)), undo: undo}, nil
}

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
