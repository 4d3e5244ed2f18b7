package main

// guard: Claude Code's PreToolUse hook. It denies an edit of a file the
// calling agent holds no live claim on, or holds only under an epoch newer
// than the one it recorded (fence.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/synapse-hub/synapse/client"
)

const guardUsage = `Usage: synapse guard --name NAME [--worktree W] [--fail-open=true] [--strict]

A Claude Code PreToolUse hook for Edit, Write and MultiEdit ('synapse init
claude' installs it). It reads the hook's JSON on stdin, maps tool_input's
file_path to a path relative to the repository root (git rev-parse
--show-toplevel, else the hook's cwd) and asks the hub whether NAME holds a
live claim covering it: a claim on "src" covers "src/x.go", a glob its
matches ('src/**/*.go' covers "src/a/x.go", not "src/a/x.md"), a file
itself, a claim without paths covers the whole worktree. The claim it
suggests for an unclaimed file names that file alone (--file).

  held           exit 0, silently: the edit goes ahead
  superseded     NAME holds the claim, but under a newer epoch than the one
                 this checkout recorded when NAME was granted it (the lease
                 lapsed and was re-granted, or renewed by another process
                 under the same name): denied, with what to do (re-claim,
                 then re-check the work)
  gone           the claim this checkout recorded covering the file has
                 expired or been released: denied
  not recorded   NAME holds the claim but this checkout recorded no grant
                 of it (claimed by a tool that keeps no ledger): allowed
                 with a warning on stderr; --strict denies it
  not held       prints Claude Code's decision JSON with permissionDecision
                 "deny" and a reason naming the command that claims the file
                 (and who holds it, if someone else does); exit 0
  hub down       --fail-open (the default) allows the edit with a warning on
                 stderr, so a stopped hub never blocks work; --fail-open=false
                 denies it

Files outside the repository are not guarded. Grants are recorded by
'synapse claim', 'renew' and 'lock' and the synapse MCP server in
<git dir>/synapse/leases.json ($SYNAPSE_LEASES names another file); see
docs/claims.md, "Write-path fencing".
`

// hookInput is what Claude Code sends a PreToolUse hook on stdin.
type hookInput struct {
	SessionID      string         `json:"session_id"`
	TranscriptPath string         `json:"transcript_path"`
	Cwd            string         `json:"cwd"`
	HookEventName  string         `json:"hook_event_name"`
	ToolName       string         `json:"tool_name"`
	ToolInput      map[string]any `json:"tool_input"`
}

// hookDecision is Claude Code's PreToolUse decision output.
type hookDecision struct {
	HookSpecificOutput struct {
		HookEventName            string `json:"hookEventName"`
		PermissionDecision       string `json:"permissionDecision"`
		PermissionDecisionReason string `json:"permissionDecisionReason"`
	} `json:"hookSpecificOutput"`
}

func runGuard(args []string, stdout, stderr io.Writer) int {
	return guard(args, os.Stdin, stdout, stderr)
}

func guard(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("guard", guardUsage, "", stderr)
	f.register(fs)
	worktree := fs.String("worktree", "", "the worktree label claims in this checkout use (default: the hub's default one)")
	failOpen := fs.Bool("fail-open", true, "allow edits when the hub cannot be reached (warning on stderr)")
	strict := fs.Bool("strict", false, "also deny an edit under a claim of yours whose grant this checkout did not record")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "guard", "unexpected argument %q", pos[0])
	}
	var in hookInput
	if err := json.NewDecoder(io.LimitReader(stdin, 16<<20)).Decode(&in); err != nil {
		fmt.Fprintf(stderr, "synapse guard: cannot read the hook's JSON on stdin (%v); is this running as a Claude Code PreToolUse hook?\n", err)
		return exitUsage
	}
	file := hookFile(in)
	if file == "" || !editTools[in.ToolName] {
		return exitOK // not a file edit
	}
	cwd := in.Cwd
	if cwd == "" {
		cwd, _ = os.Getwd()
	}
	if !filepath.IsAbs(file) {
		file = filepath.Join(cwd, file)
	}
	root := projectRoot(cwd)
	rel, inside := repoRelative(root, file)
	if !inside {
		return exitOK
	}
	if err := f.resolve(); err != nil {
		fmt.Fprintf(stderr, "synapse guard: %v\n", err)
		return exitUsage
	}
	st, takesFiles, err := liveClaims(&f)
	if err != nil {
		if *failOpen {
			fmt.Fprintf(stderr, "synapse guard: cannot ask the hub at %s (%v); allowing the edit of %s (--fail-open). Start it with 'synapse hub'.\n", f.uri, err, rel)
			return exitOK
		}
		deny(stdout, fmt.Sprintf("Synapse cannot reach the hub at %s to check your claim on %s (%v). Start it with `synapse hub`, then retry.", f.uri, rel, err))
		return exitOK
	}
	var recs []client.LeaseRecord
	if l := ledgerFor(cwd); l != nil {
		if recs, err = l.Records(); err != nil {
			fmt.Fprintf(stderr, "synapse guard: %v; checking without the recorded grants.\n", err)
		}
	}
	fc := fenceCheck{claims: st.ActiveClaims, recs: recs, worktree: *worktree, root: root, me: f.name, needClaim: true, strict: *strict}
	if takesFiles {
		fc.fileFlag = "--file" // the edited file is claimed alone, not as a folder
	}
	v := fc.file(rel)
	switch {
	case !v.allowed:
		deny(stdout, v.reason)
	case v.warn != "":
		fmt.Fprintf(stderr, "synapse guard: allowing the edit of %s: %s\n", rel, v.warn)
	}
	return exitOK
}

// editTools are the Claude Code tools the guard checks.
var editTools = map[string]bool{"Edit": true, "Write": true, "MultiEdit": true, "NotebookEdit": true}

// hookFile is the file a tool call edits ("" when it is not an edit).
func hookFile(in hookInput) string {
	for _, k := range []string{"file_path", "notebook_path", "path"} {
		if s, ok := in.ToolInput[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// repoRelative is file relative to root with '/' separators; false when
// it lies outside root.
func repoRelative(root, file string) (string, bool) {
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	// The file may not exist yet (Write): resolve its folder.
	dir, base := filepath.Split(filepath.Clean(file))
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		file = filepath.Join(d, base)
	}
	rel, err := filepath.Rel(root, file)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// liveClaims reads the hub's claims under a throw-away name, and whether
// the hub takes files (feature file_scopes).
func liveClaims(f *clientFlags) (*client.State, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	c, err := f.dial(ctx, queryName(f.name), false)
	if err != nil {
		return nil, false, err
	}
	defer c.Close()
	cctx, ccancel := f.callCtx()
	defer ccancel()
	st, err := c.State(cctx)
	return st, c.HasFeature("file_scopes"), err
}

// suggestTask is a task id to suggest for claiming rel.
func suggestTask(rel string) string {
	t := strings.NewReplacer("/", "-", ".", "-", " ", "-").Replace(rel)
	return "edit-" + strings.Trim(t, "-")
}

func deny(stdout io.Writer, reason string) {
	var d hookDecision
	d.HookSpecificOutput.HookEventName = "PreToolUse"
	d.HookSpecificOutput.PermissionDecision = "deny"
	d.HookSpecificOutput.PermissionDecisionReason = reason
	printJSON(stdout, d)
}
