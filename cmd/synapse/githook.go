package main

// git-hook: a pre-commit check that refuses staged files claimed by
// another agent, or under a claim of the committer's that moved on since
// it was granted (fence.go).

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/synapse-hub/synapse/client"
)

const gitHookUsage = `Usage: synapse git-hook install|uninstall|check [flags]

  install    writes the repository's pre-commit hook (.git/hooks/pre-commit,
             or core.hooksPath) running 'synapse git-hook check --name NAME'.
             A hook that is not Synapse's is left alone unless --force.
  uninstall  removes the hook if it is Synapse's.
  check      refuses (exit 1) when a staged file (git diff --cached) is
             covered by a live claim of another agent, or by a claim of
             NAME's that moved on since this checkout recorded its grant
             (re-granted under a newer epoch, or expired or released),
             naming the files and what happened. Files nobody claims pass
             (--strict refuses them, and files under claims of NAME's this
             checkout did not record). When the hub cannot be
             reached it allows the commit with a warning (--fail-open, the
             default). Bypass once with 'git commit --no-verify'.

Run 'synapse git-hook <verb> --help' for its flags.
`

// gitHookMarker identifies a pre-commit hook Synapse wrote.
const gitHookMarker = "# synapse git-hook"

func runGitHook(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, gitHookUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, gitHookUsage)
		return exitOK
	case "install":
		return gitHookInstall(args[1:], stdout, stderr)
	case "uninstall":
		return gitHookUninstall(args[1:], stdout, stderr)
	case "check":
		return gitHookCheck(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "synapse git-hook: unknown verb %q: say install, uninstall or check.\n", args[0])
	return exitUsage
}

// gitOut runs git in dir and returns its trimmed output.
func gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return "", fmt.Errorf("git %s: %s", strings.Join(args, " "), strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimRight(string(out), "\n"), nil
}

// preCommitPath is the repository's pre-commit hook file.
func preCommitPath(dir string) (string, error) {
	p, err := gitOut(dir, "rev-parse", "--git-path", "hooks/pre-commit")
	if err != nil {
		return "", fmt.Errorf("not in a git repository (%v): run this inside the repository", err)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return p, nil
}

const gitHookInstallUsage = `Usage: synapse git-hook install [--name NAME] [--force] [--strict]

Writes the pre-commit hook running 'synapse git-hook check --name NAME'.
`

func gitHookInstall(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("git-hook install", gitHookInstallUsage, "", stderr)
	f.register(fs)
	force := fs.Bool("force", false, "replace a pre-commit hook that is not Synapse's")
	command := fs.String("command", "", "the synapse binary the hook runs (default: this one)")
	strict := fs.Bool("strict", false, "the hook runs 'check --strict': every staged file needs a recorded claim of yours")
	if _, code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if err := f.resolve(); err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
		return exitUsage
	}
	wd, _ := os.Getwd()
	hookPath, err := preCommitPath(wd)
	if err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
		return exitRefused
	}
	if old, err := os.ReadFile(hookPath); err == nil && !strings.Contains(string(old), gitHookMarker) && !*force {
		fmt.Fprintf(stderr, "synapse git-hook: %s exists and is not Synapse's; left alone. Add 'synapse git-hook check --name %s' to it yourself, or pass --force to replace it.\n", hookPath, f.name)
		return exitRefused
	}
	bin := *command
	if bin == "" {
		bin = thisBinary()
	}
	words := []string{bin, "git-hook", "check", "--name", f.name}
	if f.uri != "" {
		words = append(words, "--uri", f.uri)
	}
	if *strict {
		words = append(words, "--strict")
	}
	script := "#!/bin/sh\n" + gitHookMarker + ": refuses staged files another agent has claimed.\n" +
		"# Remove with 'synapse git-hook uninstall'; bypass once with 'git commit --no-verify'.\n" +
		"exec " + shellJoin(words) + "\n"
	if err := os.MkdirAll(filepath.Dir(hookPath), 0o755); err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
		return exitRefused
	}
	if err := os.WriteFile(hookPath, []byte(script), 0o755); err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: cannot write %s: %v\n", hookPath, err)
		return exitRefused
	}
	_ = os.Chmod(hookPath, 0o755)
	fmt.Fprintf(stdout, "installed %s: commits are checked against the claims of agents other than %s.\n  undo: synapse git-hook uninstall\n", hookPath, f.name)
	return exitOK
}

func gitHookUninstall(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, "Usage: synapse git-hook uninstall\n\nRemoves the pre-commit hook if Synapse wrote it.\n")
		return exitOK
	}
	wd, _ := os.Getwd()
	hookPath, err := preCommitPath(wd)
	if err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
		return exitRefused
	}
	old, err := os.ReadFile(hookPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(stdout, "no pre-commit hook at %s.\n", hookPath)
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
		return exitRefused
	case !strings.Contains(string(old), gitHookMarker):
		fmt.Fprintf(stderr, "synapse git-hook: %s is not Synapse's; left alone.\n", hookPath)
		return exitRefused
	}
	if err := os.Remove(hookPath); err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
		return exitRefused
	}
	fmt.Fprintf(stdout, "removed %s.\n", hookPath)
	return exitOK
}

const gitHookCheckUsage = `Usage: synapse git-hook check [--name NAME] [--worktree W] [--fail-open=true] [--strict]

Refuses (exit 1) when a staged file is covered by another agent's live
claim, or by a claim of NAME's that was re-granted under a newer epoch,
expired or was released since this checkout recorded its grant
(<git dir>/synapse/leases.json, written by 'synapse claim', 'renew', 'lock'
and the synapse MCP server). The pre-commit hook runs it.
`

func gitHookCheck(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("git-hook check", gitHookCheckUsage, "", stderr)
	f.register(fs)
	worktree := fs.String("worktree", "", "the worktree label claims in this checkout use")
	failOpen := fs.Bool("fail-open", true, "allow the commit when the hub cannot be reached (warning on stderr)")
	strict := fs.Bool("strict", false, "also refuse staged files no recorded claim of yours covers")
	if _, code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if err := f.resolve(); err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
		return exitUsage
	}
	wd, _ := os.Getwd()
	root, err := gitOut(wd, "rev-parse", "--show-toplevel")
	if err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: not in a git repository (%v)\n", err)
		return exitUsage
	}
	staged, err := gitOut(root, "diff", "--cached", "--name-only", "-z")
	if err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
		return exitRefused
	}
	var files []string
	for _, p := range strings.Split(staged, "\x00") {
		if p != "" {
			files = append(files, p)
		}
	}
	if len(files) == 0 {
		return exitOK
	}
	st, _, err := liveClaims(&f)
	if err != nil {
		if *failOpen {
			fmt.Fprintf(stderr, "synapse git-hook: cannot ask the hub at %s (%v); not checking claims (--fail-open).\n", f.uri, err)
			return exitOK
		}
		fmt.Fprintf(stderr, "synapse git-hook: cannot ask the hub at %s (%v). Start it with 'synapse hub', or commit with --no-verify.\n", f.uri, err)
		return exitUnreachable
	}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	var recs []client.LeaseRecord
	if l := ledgerFor(root); l != nil {
		if recs, err = l.Records(); err != nil {
			fmt.Fprintf(stderr, "synapse git-hook: %v; checking without the recorded grants.\n", err)
		}
	}
	fc := fenceCheck{claims: st.ActiveClaims, recs: recs, worktree: *worktree, root: root, me: f.name, strict: *strict}
	var blocked, warned []string
	for _, file := range files {
		v := fc.file(file)
		switch {
		case !v.allowed:
			blocked = append(blocked, fmt.Sprintf("  %s: %s", file, v.short))
		case v.warn != "":
			warned = append(warned, fmt.Sprintf("  %s: %s", file, v.warn))
		}
	}
	if len(warned) > 0 {
		fmt.Fprintf(stderr, "synapse git-hook: warning: %d staged file(s) are under claims of yours this checkout did not record (--strict refuses them):\n%s\n", len(warned), strings.Join(warned, "\n"))
	}
	if len(blocked) == 0 {
		return exitOK
	}
	fmt.Fprintf(stderr, "synapse git-hook: commit refused: %d staged file(s) are not yours to write now:\n%s\n", len(blocked), strings.Join(blocked, "\n"))
	fmt.Fprintf(stderr, "Claimed by others: unstage them (git restore --staged FILE), or ask the holder ('synapse send HOLDER TEXT') and wait ('synapse wait TASK').\n"+
		"Superseded or gone: your lease moved on while you worked; re-claim with 'synapse claim TASK --paths ...', re-check your work against the current files, then commit.\n"+
		"Bypass once with 'git commit --no-verify'.\n")
	return exitRefused
}
