package main

// task declare|update|progress: the shared plan (the board).

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/synapse-hub/synapse/client"
)

const taskUsage = `Usage: synapse task declare|update|progress ID ...

Plans work on the shared task board (see 'synapse board'). The board is
separate from claims: declaring a task does not claim it.

  declare ID --title TEXT [--depends-on ID]... [--project P] [--suggested-owner NAME]
  update ID [--status open|in_progress|blocked|done|cancelled] [--suggested-owner NAME] [--project P]
  progress ID TEXT [--kind note|blocked|assessment|usage|approval]

Run 'synapse task <verb> --help' for its flags.
`

func runTask(args []string, stdout, stderr io.Writer) int {
	verbs := map[string]func([]string, io.Writer, io.Writer) int{
		"declare":  runTaskDeclare,
		"update":   runTaskUpdate,
		"progress": runTaskProgress,
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, taskUsage)
		return exitUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, taskUsage)
		return exitOK
	}
	run, ok := verbs[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "synapse task: unknown verb %q: say declare, update or progress.\n", args[0])
		return exitUsage
	}
	return run(args[1:], stdout, stderr)
}

func printTask(f *clientFlags, stdout io.Writer, verb string, t *client.BoardTask) {
	if f.asJSON {
		printJSON(stdout, t)
		return
	}
	fmt.Fprintf(stdout, "%s '%s' (%s, version %d): %s\n", verb, t.TaskID, t.Status, t.Version, t.Title)
}

const taskDeclareUsage = `Usage: synapse task declare ID --title TEXT [--depends-on ID]... [--project P]

Puts task ID on the board, or re-declares it (title, description,
dependencies and suggested owner are replaced). A dependency cycle is
refused. --expected-version 0 means "only if it does not exist yet".
`

func runTaskDeclare(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	var d client.TaskDeclaration
	var deps stringList
	fs := newFlagSet("task declare", taskDeclareUsage, "", stderr)
	f.register(fs)
	fs.StringVar(&d.Title, "title", "", "what the task is (required)")
	fs.StringVar(&d.Description, "description", "", "more detail")
	fs.Var(&deps, "depends-on", "a task that must be done first (repeatable)")
	fs.StringVar(&d.Project, "project", "", "project the task belongs to")
	fs.StringVar(&d.SuggestedOwner, "suggested-owner", "", "who should take it")
	ev := fs.Int64("expected-version", -1, "refuse unless the task is at this version (0 = create only)")
	fs.StringVar(&d.IdemKey, "idem-key", "", "retry key")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, "task declare", "give exactly one task ID")
	}
	if strings.TrimSpace(d.Title) == "" {
		return usageError(stderr, "task declare", "--title is required")
	}
	d.TaskID, d.DependsOn = pos[0], deps
	if *ev >= 0 {
		d.ExpectedVersion = ev
	}
	c, code := f.start(stderr, "task declare", false, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	t, err := c.TaskDeclare(ctx, d)
	if err != nil {
		return f.failure(stderr, "task declare", err)
	}
	printTask(&f, stdout, "Declared", t)
	return exitOK
}

const taskUpdateUsage = `Usage: synapse task update ID [--status S] [--suggested-owner NAME] [--project P]

Changes a board task. Statuses: open, in_progress, blocked, done, cancelled.
An empty --suggested-owner or --project clears it.
`

func runTaskUpdate(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	u := client.BoardTaskUpdate{}
	fs := newFlagSet("task update", taskUpdateUsage, "", stderr)
	f.register(fs)
	status := fs.String("status", "", "new status")
	owner := fs.String("suggested-owner", "", "who should take it")
	project := fs.String("project", "", "project the task belongs to")
	ev := fs.Int64("expected-version", -1, "refuse unless the task is at this version")
	fs.StringVar(&u.IdemKey, "idem-key", "", "retry key")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, "task update", "give exactly one task ID")
	}
	u.TaskID = pos[0]
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["status"] {
		u.Status = status
	}
	if set["suggested-owner"] {
		u.SuggestedOwner = owner
	}
	if set["project"] {
		u.Project = project
	}
	if *ev >= 0 {
		u.ExpectedVersion = ev
	}
	if u.Status == nil && u.SuggestedOwner == nil && u.Project == nil {
		return usageError(stderr, "task update", "say what to change: --status, --suggested-owner or --project")
	}
	c, code := f.start(stderr, "task update", false, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	t, err := c.TaskUpdate(ctx, u)
	if err != nil {
		return f.failure(stderr, "task update", err)
	}
	printTask(&f, stdout, "Updated", t)
	return exitOK
}

const taskProgressUsage = `Usage: synapse task progress ID TEXT... [--kind note|blocked|assessment|usage|approval]

Posts a progress note on a board task, for everyone to see.
`

func runTaskProgress(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("task progress", taskProgressUsage, "", stderr)
	f.register(fs)
	kind := fs.String("kind", "note", "note, blocked, assessment, usage or approval")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) < 2 {
		return usageError(stderr, "task progress", "give a task ID and the text")
	}
	c, code := f.start(stderr, "task progress", false, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	n, err := c.TaskProgress(ctx, pos[0], strings.Join(pos[1:], " "), *kind)
	if err != nil {
		return f.failure(stderr, "task progress", err)
	}
	if f.asJSON {
		printJSON(stdout, n)
	} else {
		fmt.Fprintf(stdout, "Posted a %s on '%s'.\n", n.Kind, n.TaskID)
	}
	return exitOK
}
