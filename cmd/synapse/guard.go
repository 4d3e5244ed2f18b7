package main

// guard: the pre-edit hook of the agent CLIs (guard_agents.go reads each
// one's hook input; guard_shell.go and guard_patch.go the files a shell
// command or a patch writes). It denies a write of a file the calling agent
// holds no live claim on, or holds only under an epoch newer than the one
// it recorded (fence.go).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/client"
)

const guardUsage = `Usage: synapse guard --agent claude|codex|gemini|opencode|cursor --name NAME
                     [--uri URI] [--mcp] [--strict] [--deadline 3s] [--fail-open=true]

The pre-edit hook of an agent CLI ('synapse init AGENT' installs it). It
reads the hook's JSON on stdin the way that CLI sends it, finds the files
the tool call writes, and asks the hub whether NAME may write each of them
(client.Fence, docs/claims.md "Write-path fencing"): NAME must hold a live
claim covering the file under the epoch this checkout recorded. A claim on
"src" covers "src/x.go", a glob its matches, a file itself, a claim
without paths the whole worktree.

What it reads, per --agent (docs/agents.md has each CLI's schema):
  claude    PreToolUse: Edit, Write, MultiEdit (file_path), NotebookEdit
            (notebook_path), Bash (command)
  codex     PreToolUse: apply_patch (the files of the patch text), Bash
            (command)
  gemini    BeforeTool: write_file, replace (file_path), run_shell_command
  opencode  what the plugin 'init opencode' writes sends: edit, write
            (filePath), patch (patchText), bash (command)
  cursor    beforeShellExecution (command)

Of a shell command it reads the files the command names as write targets:
redirections (> >> &> 2>), tee, sed -i, perl -i, mv (sources and target),
cp/ln/install targets, rm, touch, truncate, dd of=, git checkout -- F,
git restore, git rm, git mv, apply_patch, and sh -c / bash -lc scripts
(up to 4 deep). What it cannot tell (a computed name $X or $(...), eval,
xargs, find -exec, an inline python -c, git checkout BRANCH, git reset
--hard, ...) it says: allowed with a warning, refused with --strict. Other
commands write nothing it can see and are allowed.

Answers, always with exit 0, in the CLI's own form:
  yours          allowed, silently
  not yours      refused with a reason naming who holds the file (or that
                 your claim is gone or superseded) and how NAME claims it:
                 with --mcp the synapse MCP server's claim tool, else
                 'synapse claim ... --name NAME' (and --uri when not the
                 default)
  unrecorded     NAME's claim covers it but this checkout recorded no grant:
                 allowed with a warning; --strict refuses
  cannot tell    hook input it cannot parse or larger than --max-input, a
                 patch it cannot read, a command it cannot follow, no
                 answer within --deadline: allowed with a warning;
                 --strict refuses
  hub down       allowed with a warning (--fail-open, the default);
                 --strict or --fail-open=false refuses

Files outside the repository (git rev-parse --show-toplevel of the hook's
cwd) are not guarded. Grants are recorded by 'synapse claim', 'renew',
'lock' and the synapse MCP server in <git dir>/synapse/leases.json
($SYNAPSE_LEASES names another file).
`

// errHookInput is hook input the guard cannot parse.
var errHookInput = errors.New("the hook input is not the JSON the agent CLI sends")

// Guard limits (each a flag).
var (
	// guardDeadline bounds the whole guard, below every CLI's hook timeout
	// (Claude Code 60 s and Gemini CLI 60 s by default, Codex 600 s; init
	// writes 10 s).
	guardDeadline = 3 * time.Second
	// guardMaxInput bounds the hook input read (a Write's content is in it).
	guardMaxInput int64 = 16 << 20
)

// hookDecision is the PreToolUse decision output of Claude Code and Codex.
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

// guardRun is one guard invocation's settings.
type guardRun struct {
	f        clientFlags
	agent    *hookAgent
	worktree string
	failOpen bool
	strict   bool
	mcp      bool
	maxInput int64
	uriGiven bool
	deadline time.Duration
}

func guard(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var g guardRun
	fs := newFlagSet("guard", guardUsage, "", stderr)
	g.f.register(fs)
	agent := fs.String("agent", "claude", "the agent CLI whose hook input this is: claude, codex, gemini, opencode or cursor")
	fs.StringVar(&g.worktree, "worktree", "", "the worktree label claims in this checkout use (default: the hub's default one)")
	fs.BoolVar(&g.failOpen, "fail-open", true, "allow edits when the hub cannot be reached (warning); --strict overrides")
	fs.BoolVar(&g.strict, "strict", false, "refuse what the guard cannot check: unrecorded claims, unreadable input, commands it cannot follow, an unreachable hub")
	fs.BoolVar(&g.mcp, "mcp", false, "the agent has the synapse MCP server: advise its tools rather than CLI commands")
	fs.DurationVar(&g.deadline, "deadline", guardDeadline, "answer within this long, whatever happens (keep it below the CLI's hook timeout)")
	fs.Int64Var(&g.maxInput, "max-input", guardMaxInput, "the most bytes of hook input read")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "guard", "unexpected argument %q", pos[0])
	}
	if g.agent = hookAgents[*agent]; g.agent == nil {
		return usageError(stderr, "guard", "unknown --agent %q: say claude, codex, gemini, opencode or cursor", *agent)
	}
	if g.deadline <= 0 || g.maxInput <= 0 {
		return usageError(stderr, "guard", "--deadline and --max-input must be positive")
	}
	g.uriGiven = g.f.uri != "" || os.Getenv("SYNAPSE_URI") != ""
	if err := g.f.resolve(); err != nil {
		fmt.Fprintf(stderr, "synapse guard: %v\n", err)
		return exitUsage
	}
	g.f.timeout = min(g.f.timeout, g.deadline)
	done := make(chan guardAnswer, 1)
	go func() { done <- g.decide(stdin) }()
	var a guardAnswer
	select {
	case a = <-done:
	case <-time.After(g.deadline):
		a = g.cannotCheck(fmt.Sprintf("it had no answer within --deadline %s (hook input that did not end, or a slow hub)", g.deadline))
	}
	g.agent.answer(stdout, stderr, a)
	return exitOK
}

// cannotCheck answers a call the guard cannot check: allowed with a
// warning, refused under --strict.
func (g *guardRun) cannotCheck(why string) guardAnswer {
	if g.strict {
		return guardAnswer{deny: true, reason: "Synapse cannot check this edit: " + why + ". The guard runs with --strict, which refuses what it cannot check; make the edit with a tool it can read (or claim and say which files), then retry."}
	}
	return guardAnswer{warn: "cannot check this call: " + why + "; allowing it"}
}

// decide reads the hook input and decides; it writes nothing.
func (g *guardRun) decide(stdin io.Reader) guardAnswer {
	raw, err := io.ReadAll(io.LimitReader(stdin, g.maxInput+1))
	switch {
	case err != nil:
		return g.cannotCheck(fmt.Sprintf("reading the hook input failed (%v)", err))
	case int64(len(raw)) > g.maxInput:
		return g.cannotCheck(fmt.Sprintf("the hook input is larger than --max-input %d bytes", g.maxInput))
	}
	call, err := g.agent.parse(raw)
	if err != nil {
		return g.cannotCheck(fmt.Sprintf("%v; is this running as a %s hook with --agent %s?", err, g.agent.title, g.agent.name))
	}
	cwd := cwdOr(call.cwd)
	root, ledger := guardRepo(cwd)
	var rels []string
	seen := map[string]bool{}
	for _, file := range call.files {
		if rel, inside := repoRelative(root, absFrom(cwd, file)); inside && !seen[rel] && rel != "." {
			seen[rel] = true
			rels = append(rels, rel)
		}
	}
	unsure := strings.Join(call.unsure, "; ")
	if len(rels) == 0 {
		if unsure != "" {
			return g.cannotCheck(unsure)
		}
		return guardAnswer{} // writes nothing in the repository
	}
	what := strings.Join(rels, ", ")
	st, takesFiles, err := liveClaims(&g.f)
	if err != nil {
		if g.failOpen && !g.strict {
			return guardAnswer{warn: fmt.Sprintf("cannot ask the hub at %s (%v); allowing the write of %s (--fail-open). Start it with 'synapse hub'.", g.f.uri, err, what)}
		}
		return guardAnswer{deny: true, reason: fmt.Sprintf("Synapse cannot reach the hub at %s to check your claim on %s (%v). Start it with `synapse hub`, then retry.", g.f.uri, what, err)}
	}
	var recs []client.LeaseRecord
	var warns []string
	if ledger != nil {
		if recs, err = ledger.Records(); err != nil {
			warns = append(warns, fmt.Sprintf("%v; checking without the recorded grants", err))
		}
	}
	fc := fenceCheck{claims: st.ActiveClaims, recs: recs, worktree: g.worktree, root: root, me: g.f.name, needClaim: true, strict: g.strict, mcp: g.mcp}
	if g.uriGiven && g.f.uri != client.DefaultURI {
		fc.uri = g.f.uri
	}
	if takesFiles {
		fc.fileFlag = "--file" // the edited file is claimed alone, not as a folder
	}
	var refused []fenceVerdict
	var refusedRels []string
	for _, rel := range rels {
		v := fc.file(rel)
		switch {
		case !v.allowed:
			refused, refusedRels = append(refused, v), append(refusedRels, rel)
		case v.warn != "":
			warns = append(warns, "allowing the write of "+rel+": "+v.warn)
		}
	}
	switch {
	case len(refused) == 1 && len(rels) == 1:
		return guardAnswer{deny: true, reason: refused[0].reason}
	case len(refused) > 0:
		var b strings.Builder
		fmt.Fprintf(&b, "This %s writes %d file(s) you may not write now:", cmp.Or(call.tool, "call"), len(refused))
		for i, v := range refused {
			fmt.Fprintf(&b, " %s (%s);", refusedRels[i], v.short)
		}
		b.WriteString(" " + refused[0].reason)
		return guardAnswer{deny: true, reason: b.String()}
	case unsure != "":
		a := g.cannotCheck(unsure + " (the files it names, " + what + ", are yours)")
		if a.warn != "" && len(warns) > 0 {
			a.warn += "; " + strings.Join(warns, "; ")
		}
		return a
	}
	return guardAnswer{warn: strings.Join(warns, "; ")}
}

// cwdOr is dir, or the current directory when the hook gave none.
func cwdOr(dir string) string {
	if dir == "" {
		dir, _ = os.Getwd()
	}
	return dir
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

// findRepo is the repository root above dir and its git dir, read from
// the file system as git does (a .git folder, or a linked worktree's .git
// file naming its git dir): two git processes fewer before every edit.
// ok is false when it finds none or cannot read it; then ask git.
func findRepo(dir string) (root, gitDir string, ok bool) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		p := filepath.Join(d, ".git")
		fi, err := os.Stat(p)
		switch {
		case err == nil && fi.IsDir():
			return d, p, true
		case err == nil:
			b, err := os.ReadFile(p)
			g, found := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
			if err != nil || !found {
				return "", "", false
			}
			return d, absFrom(d, g), true
		}
		if filepath.Dir(d) == d {
			return "", "", false
		}
	}
}

// guardRepo is the project root and lease ledger of the checkout cwd is in.
func guardRepo(cwd string) (string, *client.Ledger) {
	root, gitDir, ok := findRepo(cwd)
	if !ok {
		return projectRoot(cwd), ledgerFor(cwd)
	}
	if p := os.Getenv("SYNAPSE_LEASES"); p != "" {
		return root, &client.Ledger{Path: p}
	}
	return root, &client.Ledger{Path: filepath.Join(gitDir, "synapse", "leases.json")}
}
