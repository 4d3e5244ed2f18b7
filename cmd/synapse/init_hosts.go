package main

// What init writes for each agent CLI (docs/agents.md): its MCP server
// entry and its guard hook, each merged into the CLI's own file, and how
// --remove takes exactly those out again.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// initSpec is one init run for one CLI.
type initSpec struct {
	root, bin, name, uri string
	remove               bool
}

// plan is the files init writes (or removes from) for host.
func (sp initSpec) plan(host string) ([]fileWrite, error) {
	guard := sp.guardCommand(host)
	hook := map[string]any{"type": "command", "command": guard, "timeout": hookTimeout}
	server := sp.mcpServer()
	setServer := func(keys ...string) jsonEdit { return sp.setKey(keys, server) }
	var files []struct {
		file  string
		edits []jsonEdit
	}
	add := func(file string, edits ...jsonEdit) {
		files = append(files, struct {
			file  string
			edits []jsonEdit
		}{file, edits})
	}
	var writes []fileWrite
	switch host {
	case "claude":
		add(".mcp.json", setServer("mcpServers", "synapse"))
		add(claudeSettings, sp.setHook([]string{"hooks", "PreToolUse"}, map[string]any{"matcher": guardMatcher, "hooks": []any{hook}}))
	case "codex":
		w, err := sp.mergeCodexTOML()
		if err != nil {
			return nil, err
		}
		writes = append(writes, w)
		add(filepath.Join(".codex", "hooks.json"), sp.setHook([]string{"hooks", "PreToolUse"}, map[string]any{"matcher": "apply_patch|Bash", "hooks": []any{hook}}))
	case "gemini":
		gh := map[string]any{"type": "command", "name": "synapse-guard", "command": guard, "timeout": hookTimeout * 1000} // milliseconds
		add(filepath.Join(".gemini", "settings.json"), setServer("mcpServers", "synapse"),
			sp.setHook([]string{"hooks", "BeforeTool"}, map[string]any{"matcher": "write_file|replace|run_shell_command", "hooks": []any{gh}}))
	case "opencode":
		oc := map[string]any{"type": "local", "command": append([]string{sp.bin}, sp.mcpArgs()...), "enabled": true}
		if sp.uri != "" {
			oc["environment"] = map[string]any{"SYNAPSE_URI": sp.uri}
		}
		add("opencode.json", sp.setKey([]string{"mcp", "synapse"}, oc))
		w, err := sp.openCodePlugin(host)
		if err != nil {
			return nil, err
		}
		writes = append(writes, w)
	case "cursor":
		add(filepath.Join(".cursor", "mcp.json"), setServer("mcpServers", "synapse"))
		add(filepath.Join(".cursor", "hooks.json"), sp.setHook([]string{"hooks", "beforeShellExecution"}, map[string]any{"command": guard, "timeout": hookTimeout}))
	}
	for _, f := range files {
		w, err := sp.editJSON(f.file, f.edits...)
		if err != nil {
			return nil, err
		}
		writes = append(writes, w)
	}
	return writes, nil
}

// jsonEdit changes a JSON object in place and says what it changed.
type jsonEdit func(m map[string]any) string

// editJSON reads a JSON object file, applies the edits and is the write
// of the result (removing: the deletion of a file left with nothing).
func (sp initSpec) editJSON(file string, edits ...jsonEdit) (fileWrite, error) {
	path := filepath.Join(sp.root, file)
	m, created, err := readJSONObject(path)
	if err != nil {
		return fileWrite{}, err
	}
	var what []string
	for _, e := range edits {
		what = append(what, e(m))
	}
	if file == filepath.Join(".cursor", "hooks.json") && !sp.remove {
		if _, ok := m["version"]; !ok {
			m["version"] = 1
		}
	}
	w := strings.Join(what, "; ")
	switch {
	case sp.remove && created:
		return fileWrite{path: path, remove: true}, nil
	case sp.remove && emptyJSON(m):
		return fileWrite{path: path, remove: true, what: w + "; nothing else was in it"}, nil
	case sp.remove:
		return fileWrite{path: path, data: marshalJSON(m), what: w}, nil
	}
	undo := "take these out of " + file + " (or run init with --remove)"
	if created {
		undo = "delete " + path + " (or run init with --remove)"
	}
	return fileWrite{path: path, data: marshalJSON(m), created: created, what: w, undo: undo}, nil
}

// container is the object at keys in m, made if missing.
func container(m map[string]any, keys []string) map[string]any {
	for _, k := range keys {
		next, _ := m[k].(map[string]any)
		if next == nil {
			next = map[string]any{}
		}
		m[k] = next
		m = next
	}
	return m
}

// setKey sets (removing: deletes) the value at keys.
func (sp initSpec) setKey(keys []string, value any) jsonEdit {
	return func(m map[string]any) string {
		parent, last := container(m, keys[:len(keys)-1]), keys[len(keys)-1]
		dotted := strings.Join(keys, ".")
		if sp.remove {
			delete(parent, last)
			return "removed " + dotted
		}
		parent[last] = value
		return dotted + " runs " + shellJoin(append([]string{sp.bin}, sp.mcpArgs()...)) + uriNote(sp.uri)
	}
}

// setHook puts entry in the hook list at keys, replacing an earlier guard
// entry (removing: takes the guard's entries out, and the list if empty).
func (sp initSpec) setHook(keys []string, entry map[string]any) jsonEdit {
	return func(m map[string]any) string {
		parent, last := container(m, keys[:len(keys)-1]), keys[len(keys)-1]
		list, _ := parent[last].([]any)
		kept := []any{}
		for _, e := range list {
			if !isGuardEntry(e) {
				kept = append(kept, e)
			}
		}
		dotted := strings.Join(keys, ".")
		if sp.remove {
			if len(kept) == 0 {
				delete(parent, last)
			} else {
				parent[last] = kept
			}
			return "removed the guard from " + dotted
		}
		parent[last] = append(kept, entry)
		if mt, ok := entry["matcher"].(string); ok {
			dotted += " " + mt
		}
		return dotted + " runs the guard"
	}
}

// configured reports whether root already has host's synapse entry.
func (sp initSpec) configured(host string) bool {
	file := map[string]string{"claude": ".mcp.json", "codex": filepath.Join(".codex", "config.toml"), "gemini": filepath.Join(".gemini", "settings.json"),
		"opencode": "opencode.json", "cursor": filepath.Join(".cursor", "mcp.json")}[host]
	b, err := os.ReadFile(filepath.Join(sp.root, file))
	return err == nil && strings.Contains(string(b), "synapse")
}

func (sp initSpec) mcpArgs() []string { return []string{"mcp", "--name", sp.name} }

// mcpServer is the {command, args, env} entry of Claude Code, Gemini CLI
// and Cursor; the hub URI goes in env, where 'synapse mcp' reads
// SYNAPSE_URI, so no client mistakes it for an option of its own.
func (sp initSpec) mcpServer() map[string]any {
	s := map[string]any{"command": sp.bin, "args": sp.mcpArgs()}
	if sp.uri != "" {
		s["env"] = map[string]any{"SYNAPSE_URI": sp.uri}
	}
	return s
}

// guardCommand is the hook command line: the guard for this CLI, as this
// agent, advising the MCP tools init also configures.
func (sp initSpec) guardCommand(host string) string { return shellJoin(sp.guardArgv(host)) }

func (sp initSpec) guardArgv(host string) []string {
	w := []string{sp.bin, "guard", "--agent", host, "--mcp", "--name", sp.name}
	if sp.uri != "" {
		w = append(w, "--uri", sp.uri)
	}
	return w
}

// emptyJSON reports whether v holds nothing but empty objects and lists
// (and the "version" of Cursor's hooks.json).
func emptyJSON(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k != "version" && !emptyJSON(e) {
				return false
			}
		}
		return true
	case []any:
		return len(x) == 0
	}
	return false
}

func uriNote(uri string) string {
	if uri == "" {
		return ""
	}
	return " with SYNAPSE_URI=" + uri
}

// openCodePluginFile is the guard plugin init writes for OpenCode.
var openCodePluginFile = filepath.Join(".opencode", "plugins", "synapse-guard.js")

// openCodePlugin is the plugin that runs the guard before each OpenCode
// tool call and throws (which blocks the call, the message going to the
// model) when it refuses.
func (sp initSpec) openCodePlugin(host string) (fileWrite, error) {
	path := filepath.Join(sp.root, openCodePluginFile)
	_, err := os.Stat(path)
	created := errors.Is(err, os.ErrNotExist)
	if sp.remove {
		if created {
			return fileWrite{path: path, remove: true}, nil
		}
		return fileWrite{path: path, remove: true, what: "the guard plugin"}, nil
	}
	argv := sp.guardArgv(host)
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = strconv.Quote(a)
	}
	src := fmt.Sprintf(`// Written by 'synapse init opencode': runs 'synapse guard' before each tool
// call and blocks the call when the guard refuses it (docs/agents.md).
// Remove with 'synapse init opencode --remove'.
import { spawnSync } from "node:child_process"

const GUARD = [%s]
const TOOLS = new Set(["edit", "write", "multiedit", "patch", "apply_patch", "bash"])

export const SynapseGuard = async ({ directory }) => ({
  "tool.execute.before": async (input, output) => {
    if (!TOOLS.has(input.tool)) return
    const r = spawnSync(GUARD[0], GUARD.slice(1), {
      input: JSON.stringify({ tool: input.tool, args: output.args, cwd: directory }),
      encoding: "utf8",
      timeout: %d,
    })
    if (r.error || r.status !== 0) {
      console.error("synapse guard did not answer:", r.error ?? r.stderr)
      return
    }
    const answer = JSON.parse(r.stdout || "{}")
    if (answer.decision === "deny") throw new Error(answer.reason)
    if (answer.systemMessage) console.error(answer.systemMessage)
  },
})
`, strings.Join(quoted, ", "), hookTimeout*1000)
	return fileWrite{path: path, data: []byte(src), created: created, what: "tool.execute.before runs " + sp.guardCommand(host),
		undo: "delete " + path + " (or run init with --remove)"}, nil
}

// mergeCodexTOML replaces (or appends, or with remove takes out) the
// [mcp_servers.synapse] table and its .env, leaving the rest as it was.
func (sp initSpec) mergeCodexTOML() (fileWrite, error) {
	path := filepath.Join(sp.root, ".codex", "config.toml")
	old, err := os.ReadFile(path)
	created := errors.Is(err, os.ErrNotExist)
	if err != nil && !created {
		return fileWrite{}, err
	}
	quoted := make([]string, 0, 3)
	for _, a := range sp.mcpArgs() {
		quoted = append(quoted, strconv.Quote(a))
	}
	table := fmt.Sprintf("%s\ncommand = %s\nargs = [%s]\n", codexSection, strconv.Quote(sp.bin), strings.Join(quoted, ", "))
	if sp.uri != "" {
		table += fmt.Sprintf("\n[mcp_servers.synapse.env]\nSYNAPSE_URI = %s\n", strconv.Quote(sp.uri))
	}
	if sp.remove {
		table = ""
	}
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
			if mine && !placed && table != "" {
				out = append(out, strings.TrimRight(table, "\n"), "")
			}
			placed = placed || mine
			skipping = mine
			if mine {
				continue
			}
		}
		if !skipping {
			out = append(out, l)
		}
	}
	for len(out) > 0 && strings.TrimSpace(out[len(out)-1]) == "" {
		out = out[:len(out)-1]
	}
	if !placed && table != "" {
		if len(out) > 0 {
			out = append(out, "")
		}
		out = append(out, strings.TrimRight(table, "\n"))
	}
	rel := filepath.Join(".codex", "config.toml")
	if sp.remove {
		if created {
			return fileWrite{path: path, remove: true}, nil
		}
		if len(out) == 0 {
			return fileWrite{path: path, remove: true, what: "removed " + codexSection + "; nothing else was in it"}, nil
		}
		return fileWrite{path: path, data: []byte(strings.Join(out, "\n") + "\n"), what: "removed " + codexSection}, nil
	}
	undo := "remove the " + codexSection + " table from " + rel + " (or run init with --remove)"
	if created {
		undo = "delete " + path + " (or run init with --remove)"
	}
	return fileWrite{path: path, data: []byte(strings.Join(out, "\n") + "\n"), created: created,
		what: codexSection + " runs " + shellJoin(append([]string{sp.bin}, sp.mcpArgs()...)) + uriNote(sp.uri), undo: undo}, nil
}
