package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/synapse-hub/synapse/bench"
)

const benchCrashLoopUsage = `Usage: synapse bench crashloop [--kills 30] [--agents 16] [--life 4s] [--hub-bin PATH] [--db FILE] [--hub-arg FLAG]... [--json]

Runs 'synapse hub --db FILE' as a child process and, --kills times, lets
--agents agents work against it for --life, SIGKILLs it and starts it again
on the same file; then stops it cleanly (SIGINT) and starts it once more.
It measures what a hub that crashes often costs its operator: how long each
restart takes and how large the journal has grown (issue 24).

Each agent cycles claim → update → release on tasks and files of its own,
every call with an idempotency key; a call the kill cut off is sent again
under the same key once the hub is back, so it is answered from its stored
response if it had committed. Before the agents go on after a restart, a
checker reads the state and lists every acknowledged claim the hub no
longer holds at its acknowledged epoch (nothing should be).

For each start it prints: the kill it follows, the operations acknowledged
so far, the database and all of the journal's files (the -wal, -shm and
snapshots) in MiB, the time from exec to the "listening" banner and to a
client's answer, and from the hub's "journal:" line its own recovery time,
the snapshot it started from and the events it replayed. Then the first,
median, max and last restart after a SIGKILL.

--hub-bin runs another build as the hub (the "before" of a change: build
main with 'go build -o /tmp/before ./cmd/synapse'); only its hub flags and
banner are used. --hub-arg passes a flag to every hub (repeat it; e.g.
--hub-arg=--idempotency-window=30s). --db keeps the journal at FILE
(created if missing, kept afterwards); without it a temporary folder is
used and removed. --json prints one object with every start.

Exit 0 when the checker found nothing lost, 1 when it did or the loop could
not run, 2 on bad flags.

Flags:
`

func runBenchCrashLoop(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench crashloop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchCrashLoopUsage); fs.PrintDefaults() }
	kills := fs.Int("kills", 30, "SIGKILLs of the hub")
	agents := fs.Int("agents", 16, "agents cycling claim, update and release")
	life := fs.Duration("life", 4*time.Second, "how long each hub process serves before it is killed")
	hubBin := fs.String("hub-bin", "", "the synapse binary to run as the hub (default: this one)")
	db := fs.String("db", "", "the journal file, kept afterwards (default: a temporary one, removed)")
	var hubArgs stringList
	fs.Var(&hubArgs, "hub-arg", "a flag for every 'synapse hub' (repeatable)")
	asJSON := fs.Bool("json", false, "print one JSON object with every start")
	pos, code, ok := parseArgs(fs, args)
	switch {
	case !ok:
		return code
	case len(pos) > 0:
		return usageError(stderr, "bench crashloop", "unexpected argument %q", pos[0])
	case *kills < 1 || *agents < 1 || *life <= 0:
		return usageError(stderr, "bench crashloop", "--kills and --agents must be at least 1, --life positive")
	}
	bin := *hubBin
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "synapse bench crashloop:", err)
			return 1
		}
		bin = self
	}
	path := *db
	if path == "" {
		dir, err := os.MkdirTemp("", "synapse-crashloop-")
		if err != nil {
			fmt.Fprintln(stderr, "synapse bench crashloop:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "hub.db")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(stderr, "synapse bench crashloop:", err)
		return 1
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	progress := stdout
	if *asJSON {
		progress = stderr
	}
	fmt.Fprintf(progress, "bench crashloop: %d agents, %d kills, %s per life, hub %s, journal %s\n", *agents, *kills, *life, bin, path)
	fmt.Fprintf(progress, "%5s  %-10s  %9s  %8s  %9s  %9s  %9s  %9s  %10s  %9s\n",
		"start", "after", "ops", "db MiB", "files MiB", "banner ms", "answer ms", "replay ms", "snapshot", "replayed")
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	res, err := bench.RunCrashLoop(ctx, bench.CrashLoopConfig{
		HubBin: bin, DB: path, Port: port, HubArgs: hubArgs, Kills: *kills, Agents: *agents, Life: *life,
		Progress: func(x bench.CrashRestart) {
			fmt.Fprintf(progress, "%5d  %-10s  %9d  %8.1f  %9.1f  %9.0f  %9.0f  %9.0f  %10d  %9d\n",
				x.N, x.After, x.OpsAck, x.DBMB, x.FilesMB, x.BannerMS, x.AnswerMS, x.ReplayMS, x.SnapshotSeq, x.Events)
		},
	})
	if err != nil {
		fmt.Fprintln(stderr, "synapse bench crashloop:", err)
		return 1
	}
	if *asJSON {
		printJSON(stdout, res)
	} else {
		s := res.Summary()
		fmt.Fprintf(stdout, "restart after SIGKILL: first %.0f ms, median %.0f ms, max %.0f ms, last %.0f ms; files %.1f MiB at the last (max %.1f)\n",
			s.FirstMS, s.MedianMS, s.MaxMS, s.LastMS, s.LastFilesMB, s.MaxFilesMB)
		fmt.Fprintf(stdout, "%d operations acknowledged, %d calls sent again after a kill, %d refused\n", res.OpsAck, res.Retried, res.Refused)
	}
	if len(res.Problems) > 0 {
		for _, p := range res.Problems {
			fmt.Fprintln(stderr, "synapse bench crashloop: LOST:", p)
		}
		return 1
	}
	fmt.Fprintln(progress, "bench crashloop: nothing acknowledged was lost")
	return 0
}
