package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/hub"
)

// What the guard cannot check it answers in the CLI's own form, never
// with a crash, a non-zero exit or a hang: allowed with a warning by
// default, refused with --strict.
func TestGuard_BadInputAllowsWithAWarningAndStrictRefuses(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	dir := inDir(t)
	patch := func(p string) string {
		return `{"cwd":"` + dir + `","hook_event_name":"PreToolUse","tool_name":"apply_patch","tool_input":{"command":` + jsonString(p) + `}}`
	}
	bash := func(c string) string {
		return `{"cwd":"` + dir + `","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":` + jsonString(c) + `}}`
	}
	for _, tc := range []struct {
		name, agent, stdin, why string
		extra                   []string
	}{
		{"unparsable, claude", "claude", "not json", "not the JSON", nil},
		{"unparsable, codex", "codex", `{"tool_name": 7}`, "not the JSON", nil},
		{"unparsable, gemini", "gemini", "[", "not the JSON", nil},
		{"unparsable, opencode", "opencode", "", "not the JSON", nil},
		{"unparsable, cursor", "cursor", "{", "not the JSON", nil},
		{"too large", "claude", claudeHookJSON(dir, "Write", filepath.Join(dir, "a.go")), "larger than --max-input 64 bytes", []string{"--max-input", "64"}},
		{"unreadable patch", "codex", patch("diff --git a/x b/x\n"), "the patch cannot be read", nil},
		{"a command it cannot follow", "codex", bash(`eval "$(generate)"`), "builds at run time", nil},
		{"a tool input that is not a command", "claude", `{"cwd":"` + dir + `","tool_name":"Bash","tool_input":{"command":42}}`, "not a string", nil},
	} {
		args := append([]string{"--agent", tc.agent, "--uri", uri, "--name", "proj/me"}, tc.extra...)
		code, out, errOut := runGuardWith(tc.stdin, args...)
		if code != 0 || refusal(t, tc.agent, out) != "" || !strings.Contains(errOut, tc.why) || !strings.Contains(out, "cannot check") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want allowed with a warning saying %q", tc.name, code, out, errOut, tc.why)
		}
		code, out, _ = runGuardWith(tc.stdin, append(args, "--strict")...)
		if r := refusal(t, tc.agent, out); code != 0 || !strings.Contains(r, tc.why) || !strings.Contains(r, "--strict") {
			t.Errorf("%s, --strict: exit %d, refusal %q", tc.name, code, r)
		}
	}
}

// Hook input that never ends (and so a hub it never gets to ask) is
// answered when --deadline passes, not when the CLI's hook timeout kills
// the guard.
func TestGuard_AnswersAtItsDeadlineWhenTheInputNeverEnds(t *testing.T) {
	dir := inDir(t)
	for _, strict := range []bool{false, true} {
		r, w := io.Pipe()
		defer w.Close()
		args := []string{"--agent", "gemini", "--name", "proj/me", "--deadline", "200ms"}
		if strict {
			args = append(args, "--strict")
		}
		var out, errOut strings.Builder
		code := guard(args, r, &out, &errOut)
		why := refusal(t, "gemini", out.String())
		if !strict {
			why = errOut.String()
		}
		if code != 0 || !strings.Contains(why, "no answer within --deadline 200ms") {
			t.Errorf("strict=%v: exit %d, stdout %q, stderr %q", strict, code, out.String(), errOut.String())
		}
	}
	_ = dir
}

// A guard with nonsense flags is the installer's mistake, said plainly.
func TestGuard_RefusesUnknownAgentAndNonPositiveLimits(t *testing.T) {
	inDir(t)
	for _, args := range [][]string{{"--agent", "vim"}, {"--deadline", "0s"}, {"--max-input", "0"}} {
		if code, _, errOut := runGuardWith("{}", args...); code != exitUsage || errOut == "" {
			t.Errorf("%v: exit %d %q", args, code, errOut)
		}
	}
}

func jsonString(s string) string {
	var b strings.Builder
	printJSON(&b, s)
	return strings.TrimSpace(b.String())
}
