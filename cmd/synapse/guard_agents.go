package main

// The guard's face to each agent CLI: how its hook input names the files
// a tool call writes, and how it wants an answer. Each follows that CLI's
// own hook schema (docs/agents.md names the source and version of each).

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// guardCall is what one hook input asks: which files the tool call
// writes, and what the guard cannot tell about it.
type guardCall struct {
	cwd    string
	tool   string
	files  []string // as the tool names them: absolute, or relative to cwd
	unsure []string // why the guard cannot tell every file it writes
}

// guardAnswer is the guard's decision on one call.
type guardAnswer struct {
	deny   bool
	reason string // refused: what happened and what to do
	warn   string // allowed, but say this
}

// hookAgent is one agent CLI's hook protocol.
type hookAgent struct {
	name  string // the --agent value
	title string
	// parse reads the hook input; a call writing nothing has no files.
	parse func(raw []byte) (guardCall, error)
	// answer writes the decision the way the CLI reads it (exit 0 always:
	// every one of them reads a non-zero exit as a broken hook).
	answer func(stdout, stderr io.Writer, a guardAnswer)
}

var hookAgents = map[string]*hookAgent{
	"claude":   {name: "claude", title: "Claude Code", parse: parseClaude, answer: answerPreToolUse},
	"codex":    {name: "codex", title: "Codex", parse: parseCodex, answer: answerPreToolUse},
	"gemini":   {name: "gemini", title: "Gemini CLI", parse: parseGemini, answer: answerDecision},
	"opencode": {name: "opencode", title: "OpenCode", parse: parseOpenCode, answer: answerDecision},
	"cursor":   {name: "cursor", title: "Cursor", parse: parseCursor, answer: answerCursor},
}

// preToolUseInput is the PreToolUse hook input of Claude Code and Codex
// (they share the shape; Codex's tool_name is "apply_patch" or "Bash").
type preToolUseInput struct {
	SessionID     string         `json:"session_id"`
	Cwd           string         `json:"cwd"`
	HookEventName string         `json:"hook_event_name"`
	ToolName      string         `json:"tool_name"`
	ToolInput     map[string]any `json:"tool_input"`
}

// decodeHook decodes a hook's JSON object, naming what was wrong.
func decodeHook(raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%w: %v", errHookInput, err)
	}
	return nil
}

func parseClaude(raw []byte) (guardCall, error) {
	var in preToolUseInput
	if err := decodeHook(raw, &in); err != nil {
		return guardCall{}, err
	}
	c := guardCall{cwd: in.Cwd, tool: in.ToolName}
	switch in.ToolName {
	case "Edit", "Write", "MultiEdit":
		c.files = stringField(in.ToolInput, "file_path")
	case "NotebookEdit":
		c.files = stringField(in.ToolInput, "notebook_path")
	case "Bash":
		shellCall(&c, in.ToolInput["command"])
	}
	return c, nil
}

func parseCodex(raw []byte) (guardCall, error) {
	var in preToolUseInput
	if err := decodeHook(raw, &in); err != nil {
		return guardCall{}, err
	}
	c := guardCall{cwd: in.Cwd, tool: in.ToolName}
	switch in.ToolName {
	case "apply_patch":
		patch, _ := in.ToolInput["command"].(string)
		files, err := patchFiles(patch)
		if err != nil {
			c.unsure = append(c.unsure, err.Error())
		}
		c.files = files
	case "Bash", "shell", "local_shell", "exec_command", "unified_exec":
		cmd := in.ToolInput["command"]
		if cmd == nil {
			cmd = in.ToolInput["cmd"]
		}
		shellCall(&c, cmd)
	}
	return c, nil
}

// geminiInput is Gemini CLI's BeforeTool hook input.
type geminiInput struct {
	Cwd           string         `json:"cwd"`
	HookEventName string         `json:"hook_event_name"`
	ToolName      string         `json:"tool_name"`
	ToolInput     map[string]any `json:"tool_input"`
}

func parseGemini(raw []byte) (guardCall, error) {
	var in geminiInput
	if err := decodeHook(raw, &in); err != nil {
		return guardCall{}, err
	}
	c := guardCall{cwd: in.Cwd, tool: in.ToolName}
	switch in.ToolName {
	case "write_file", "replace", "edit":
		c.files = stringField(in.ToolInput, "file_path")
	case "run_shell_command":
		for _, k := range []string{"dir_path", "directory"} {
			if d, _ := in.ToolInput[k].(string); d != "" {
				c.cwd = absFrom(c.cwd, d)
			}
		}
		shellCall(&c, in.ToolInput["command"])
	}
	return c, nil
}

// openCodeInput is what the plugin 'synapse init opencode' writes sends
// for each tool.execute.before: the hook's input.tool and output.args,
// and the plugin's directory.
type openCodeInput struct {
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
	Cwd  string         `json:"cwd"`
}

func parseOpenCode(raw []byte) (guardCall, error) {
	var in openCodeInput
	if err := decodeHook(raw, &in); err != nil {
		return guardCall{}, err
	}
	c := guardCall{cwd: in.Cwd, tool: in.Tool}
	switch in.Tool {
	case "edit", "write", "multiedit":
		c.files = stringField(in.Args, "filePath")
	case "patch", "apply_patch":
		patch, _ := in.Args["patchText"].(string)
		files, err := patchFiles(patch)
		if err != nil {
			c.unsure = append(c.unsure, err.Error())
		}
		c.files = files
	case "bash":
		if d, _ := in.Args["workdir"].(string); d != "" {
			c.cwd = absFrom(c.cwd, d)
		}
		shellCall(&c, in.Args["command"])
	}
	return c, nil
}

// cursorInput is Cursor's beforeShellExecution hook input.
type cursorInput struct {
	HookEventName  string   `json:"hook_event_name"`
	Command        string   `json:"command"`
	Cwd            string   `json:"cwd"`
	WorkspaceRoots []string `json:"workspace_roots"`
}

func parseCursor(raw []byte) (guardCall, error) {
	var in cursorInput
	if err := decodeHook(raw, &in); err != nil {
		return guardCall{}, err
	}
	c := guardCall{cwd: in.Cwd, tool: in.HookEventName}
	if c.cwd == "" && len(in.WorkspaceRoots) > 0 {
		c.cwd = in.WorkspaceRoots[0]
	}
	if in.HookEventName == "beforeShellExecution" {
		shellCall(&c, in.Command)
	}
	return c, nil
}

// shellCall adds what a shell tool's command writes: a string is a shell
// command line; an argv array is run as it is (["bash", "-lc", script]
// is the script).
func shellCall(c *guardCall, command any) {
	var line string
	switch v := command.(type) {
	case string:
		line = v
	case []any:
		words := make([]string, 0, len(v))
		for _, w := range v {
			s, ok := w.(string)
			if !ok {
				c.unsure = append(c.unsure, "its command is not a list of strings")
				return
			}
			words = append(words, s)
		}
		line = shellJoin(words)
	case nil:
		c.unsure = append(c.unsure, "it names no command")
		return
	default:
		c.unsure = append(c.unsure, fmt.Sprintf("its command is a %T, not a string", v))
		return
	}
	s := scanShell(line, cwdOr(c.cwd))
	c.files = append(c.files, s.targets...)
	c.unsure = append(c.unsure, s.unsure...)
}

func stringField(m map[string]any, key string) []string {
	if s, _ := m[key].(string); s != "" {
		return []string{s}
	}
	return nil
}

// answerPreToolUse answers Claude Code and Codex: a refusal is
// hookSpecificOutput.permissionDecision "deny" with the reason (shown to
// the model); a warning is systemMessage (shown to the user) and stderr.
func answerPreToolUse(stdout, stderr io.Writer, a guardAnswer) {
	switch {
	case a.deny:
		deny(stdout, a.reason)
	case a.warn != "":
		fmt.Fprintf(stderr, "synapse guard: %s\n", a.warn)
		printJSON(stdout, map[string]string{"systemMessage": "synapse guard: " + a.warn})
	}
}

// answerDecision answers Gemini CLI's BeforeTool (and the OpenCode
// plugin): {"decision": "deny", "reason": ...} refuses, the reason going
// to the model; a warning is systemMessage.
func answerDecision(stdout, stderr io.Writer, a guardAnswer) {
	switch {
	case a.deny:
		printJSON(stdout, map[string]string{"decision": "deny", "reason": a.reason})
	case a.warn != "":
		fmt.Fprintf(stderr, "synapse guard: %s\n", a.warn)
		printJSON(stdout, map[string]string{"decision": "allow", "systemMessage": "synapse guard: " + a.warn})
	default:
		printJSON(stdout, map[string]string{"decision": "allow"})
	}
}

// answerCursor answers Cursor's beforeShellExecution: permission "allow"
// or "deny", with agent_message for the model and user_message for the
// person.
func answerCursor(stdout, stderr io.Writer, a guardAnswer) {
	switch {
	case a.deny:
		printJSON(stdout, map[string]string{"permission": "deny", "agent_message": a.reason, "user_message": "synapse guard: " + firstSentence(a.reason)})
	case a.warn != "":
		fmt.Fprintf(stderr, "synapse guard: %s\n", a.warn)
		printJSON(stdout, map[string]string{"permission": "allow", "user_message": "synapse guard: " + a.warn})
	default:
		printJSON(stdout, map[string]string{"permission": "allow"})
	}
}

func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i > 0 {
		return s[:i+1]
	}
	return s
}
