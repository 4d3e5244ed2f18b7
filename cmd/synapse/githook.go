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

const gitHookUsage = `Usage: synapse git-hook install|uninstall|check|post-commit|post-merge [flags]

  install      writes the repository's hooks (.git/hooks, or core.hooksPath;
               one set serves every linked worktree):
                 pre-commit   'synapse git-hook check --name NAME' ($SYNAPSE_NAME
                              when the committer's environment sets it)
                 post-commit  'synapse git-hook post-commit'
                 post-merge   'synapse git-hook post-merge'
               A hook already there that is not Synapse's keeps running: it
               is moved aside (HOOK.pre-synapse) and Synapse's hook runs it
               first (a failing pre-commit still stops the commit).
               --remove undoes it and puts back what was there.
  uninstall    the same as 'install --remove'.
  check        refuses (exit 1) when a staged file (git diff --cached) is
               covered by a live claim of another agent, or by a claim of
               NAME's that moved on since this checkout recorded its grant
               (re-granted under a newer epoch, or expired or released),
               naming the files and what happened. Files nobody claims pass
               (--strict refuses them, and files under claims of NAME's this
               checkout did not record). When the hub cannot be
               reached it allows the commit with a warning (--fail-open, the
               default). Bypass once with 'git commit --no-verify'.
  post-commit  releases the claims recorded in this checkout with
               'claim --release-on commit' once the commit changed their
               files and none of their files is left uncommitted.
  post-merge   releases the claims recorded with 'claim --release-on merge'
               in any worktree of the repository once a merge here brought
               their work in (docs/claims.md, "Release on commit").

Run 'synapse git-hook <verb> --help' for its flags.
`

// gitHookMarker identifies a hook Synapse wrote.
const gitHookMarker = "# synapse git-hook"

// chainedSuffix names the hook that was there before Synapse's, which
// Synapse's hook runs first and --remove puts back.
const chainedSuffix = ".pre-synapse"

// gitHooks are the hooks install writes, each with what it runs after the
// binary and what it is for.
var gitHooks = []struct{ name, verb, what string }{
	{"pre-commit", "check", "refuses staged files another agent has claimed"},
	{"post-commit", "post-commit", "releases claims taken with --release-on commit once their files are committed"},
	{"post-merge", "post-merge", "releases claims taken with --release-on merge once their work is merged"},
}

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
		return gitHookInstall(append([]string{"--remove"}, args[1:]...), stdout, stderr)
	case "check":
		return gitHookCheck(args[1:], stdout, stderr)
	case "post-commit":
		return gitHookPostCommit(args[1:], stdout, stderr)
	case "post-merge":
		return gitHookPostMerge(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "synapse git-hook: unknown verb %q: say install, uninstall, check, post-commit or post-merge.\n", args[0])
	return exitUsage
}

// gitOut runs git in dir and returns its trimmed output.
func gitOut(dir string, args ...string) (string, error) { return gitRun(nil, dir, args...) }

// gitRun runs git in dir with env (nil: this process's) and returns its
// trimmed output, or an error with git's own words.
func gitRun(env []string, dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = env
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

// hookPath is the repository's hook file of that name.
func hookPath(dir, name string) (string, error) {
	p, err := gitOut(dir, "rev-parse", "--git-path", "hooks/"+name)
	if err != nil {
		return "", fmt.Errorf("not in a git repository (%v): run this inside the repository", err)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return p, nil
}

// preCommitPath is the repository's pre-commit hook file.
func preCommitPath(dir string) (string, error) { return hookPath(dir, "pre-commit") }

// gitHookInstalled reports whether the repository dir is in has
// Synapse's hook of that name.
func gitHookInstalled(dir, name string) bool {
	p, err := hookPath(dir, name)
	if err != nil {
		return false
	}
	b, err := os.ReadFile(p)
	return err == nil && strings.Contains(string(b), gitHookMarker)
}

const gitHookInstallUsage = `Usage: synapse git-hook install [--name NAME] [--strict] [--force] [--remove]

Writes the pre-commit, post-commit and post-merge hooks (see 'synapse
git-hook --help'). A hook already there that is not Synapse's is moved to
HOOK.pre-synapse and run first by Synapse's, so it keeps working; --force
stops running it (it is still kept). Installing again rewrites Synapse's
hooks and keeps what they chain. --remove removes Synapse's hooks and puts
back the ones they chained, byte for byte.
`

func gitHookInstall(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("git-hook install", gitHookInstallUsage, "", stderr)
	f.register(fs)
	force := fs.Bool("force", false, "do not run a hook that was there before Synapse's (it is kept as HOOK.pre-synapse)")
	command := fs.String("command", "", "the synapse binary the hooks run (default: this one)")
	strict := fs.Bool("strict", false, "the pre-commit hook runs 'check --strict': every staged file needs a recorded claim of yours")
	remove := fs.Bool("remove", false, "remove Synapse's hooks and restore the hooks they chained")
	if _, code, ok := parseArgs(fs, args); !ok {
		return code
	}
	wd, _ := os.Getwd()
	paths := make([]string, len(gitHooks))
	for i, h := range gitHooks {
		p, err := hookPath(wd, h.name)
		if err != nil {
			fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
			return exitRefused
		}
		paths[i] = p
	}
	if *remove {
		return gitHookRemove(paths, stdout, stderr)
	}
	if err := f.resolve(); err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
		return exitUsage
	}
	// Decide every hook before writing any, so a refusal changes nothing.
	for _, p := range paths {
		old, err := os.ReadFile(p)
		if err == nil && !strings.Contains(string(old), gitHookMarker) {
			if _, err := os.Lstat(p + chainedSuffix); err == nil {
				fmt.Fprintf(stderr, "synapse git-hook: %s is not Synapse's, and %s (a hook Synapse chained earlier) is still there; nothing changed. Merge the two by hand, or remove one of them, then install again.\n", p, p+chainedSuffix)
				return exitRefused
			}
		}
	}
	bin := *command
	if bin == "" {
		bin = thisBinary()
	}
	if err := os.MkdirAll(filepath.Dir(paths[0]), 0o755); err != nil {
		fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
		return exitRefused
	}
	for i, h := range gitHooks {
		p := paths[i]
		if old, err := os.ReadFile(p); err == nil && !strings.Contains(string(old), gitHookMarker) {
			if err := os.Rename(p, p+chainedSuffix); err != nil {
				fmt.Fprintf(stderr, "synapse git-hook: cannot move %s aside: %v\n", p, err)
				return exitRefused
			}
			fmt.Fprintf(stdout, "kept %s as %s%s.\n", p, p+chainedSuffix, map[bool]string{true: " (not run: --force)", false: "; it runs first"}[*force])
		}
		words := []string{bin, "git-hook", h.verb}
		if *strict && h.verb == "check" {
			words = append(words, "--strict")
		}
		if f.uri != client.DefaultURI {
			words = append(words, "--uri", f.uri)
		}
		if f.ca != "" {
			words = append(words, "--ca", absPath(f.ca))
		}
		script := gitHookScript(h.name, h.what, p+chainedSuffix, words, f.name, *force)
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			fmt.Fprintf(stderr, "synapse git-hook: cannot write %s: %v\n", p, err)
			return exitRefused
		}
		_ = os.Chmod(p, 0o755)
		fmt.Fprintf(stdout, "installed %s: %s.\n", p, h.what)
	}
	fmt.Fprintf(stdout, "Commits are checked against the claims of agents other than %s.\n  undo: synapse git-hook install --remove\n", f.name)
	return exitOK
}

// gitHookScript is one hook: the chained hook first (when not --force),
// then Synapse's command. A chained pre-commit that fails stops the
// commit; the post hooks' exit codes git ignores. The pre-commit check
// runs as $SYNAPSE_NAME when the committer's environment names one, else
// as the name given at install: one set of hooks serves every linked
// worktree, and each may be another agent's.
func gitHookScript(name, what, chained string, words []string, agent string, force bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n%s: %s.\n", gitHookMarker, what)
	b.WriteString("# Remove with 'synapse git-hook install --remove' (it restores the hook that was here); bypass once with --no-verify.\n")
	if !force {
		fmt.Fprintf(&b, "chained=%s\n", shellJoin([]string{chained}))
		if name == "pre-commit" {
			b.WriteString("if [ -x \"$chained\" ]; then \"$chained\" \"$@\" || exit $?; fi\n")
		} else {
			b.WriteString("if [ -x \"$chained\" ]; then \"$chained\" \"$@\"; fi\n")
		}
	}
	if name == "pre-commit" {
		b.WriteString("exec " + shellJoin(words) + " --name \"${SYNAPSE_NAME:-" + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`").Replace(agent) + "}\"\n")
	} else {
		b.WriteString("exec " + shellJoin(words) + " \"$@\"\n")
	}
	return b.String()
}

// gitHookRemove removes Synapse's hooks at paths and puts back the hooks
// they chained; a hook that is not Synapse's is left alone.
func gitHookRemove(paths []string, stdout, stderr io.Writer) int {
	code := exitOK
	for _, p := range paths {
		old, err := os.ReadFile(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			fmt.Fprintf(stdout, "no hook at %s.\n", p)
			continue
		case err != nil:
			fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
			code = exitRefused
			continue
		case !strings.Contains(string(old), gitHookMarker):
			fmt.Fprintf(stderr, "synapse git-hook: %s is not Synapse's; left alone.\n", p)
			code = exitRefused
			continue
		}
		if err := os.Remove(p); err != nil {
			fmt.Fprintf(stderr, "synapse git-hook: %v\n", err)
			code = exitRefused
			continue
		}
		if _, err := os.Lstat(p + chainedSuffix); err == nil {
			if err := os.Rename(p+chainedSuffix, p); err != nil {
				fmt.Fprintf(stderr, "synapse git-hook: removed %s but cannot put back %s: %v\n", p, p+chainedSuffix, err)
				code = exitRefused
				continue
			}
			fmt.Fprintf(stdout, "removed %s and put back the hook that was there.\n", p)
			continue
		}
		fmt.Fprintf(stdout, "removed %s.\n", p)
	}
	return code
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
