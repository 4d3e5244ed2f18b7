package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/bench"
)

const benchSoakUsage = `Usage: synapse bench soak [--duration 10m] [--sample 10s] [--no-db] [--teams 8] [--readers 2] [--churn 8] [--rate 1000] [--tolerance 0.1] [--json]

Runs a mixed fleet against a hub for --duration and fails if the hub's
memory, goroutines, open files or journal keep growing. The hub is this
binary's 'synapse hub', started as a child process on a free loopback port,
with its journal in a temporary folder (removed afterwards) unless --no-db.

The fleet, over real sockets:
  workers   two per team, each team in its own namespace (scoped fan-out):
            claim a task, checkpoint it and update it under its epoch, renew
            it (a fresh epoch), then release it with evidence (an idempotency
            key each) or hand it to the teammate, who releases it under the
            epoch the handoff gave; move a board task, send the teammate a
            directed chat, every 4th cycle post progress, every 8th broadcast
  readers   who, state and board in turn, with the full fan-out
  churners  names that connect, stay 2-4 s and go, in turn: by 'leave'; by
            dropping the socket without a close frame (and binding the name
            again once the hub has seen it go); by 'leave'; by a takeover (a
            second socket binds the name; the hub evicts the first). One
            takeover per name every 4 cycles stays under the hub's takeover
            quarantine (5 within 30 s)
Workers and readers pace themselves to --rate operations/s together.

Every --sample the hub is read: resident memory (VmRSS of /proc/PID/status),
open file descriptors (/proc/PID/fd), goroutines and live heap (its /metrics:
synapse_go_goroutines, synapse_go_heap_live_bytes), connected sockets, the
journal's size (the database and its -wal), and the operations the fleet
completed. A line per sample is printed as it is taken.

The rule. The run is cut into thirds by time; the first is warm-up and not
judged. For RSS, live heap, goroutines and open files:
  allowance = max(tolerance × median(middle third), floor)
  it grew, and the soak fails, when both
    median(last third) − median(middle third) > allowance, and
    the least-squares line through the last third rises > allowance / 2
    across it (still climbing, not a step that levelled off).
  Floors: RSS 8 MiB, heap 4 MiB, goroutines 32, open files 32.
The journal is held to the same rule as the memory (floor 16 MiB): its size
must level off at live state plus what its windows keep, not grow with the
work done. So that the windows pass within the warm-up, the hub runs with
--idempotency-window and --retain all= set to --journal-window (default a
sixth of --duration), compacting online as deployed.
Each third needs at least 3 samples, else the curve is "not judged" (a
short run checks the sampler, not the hub). The fleet must also complete
operations in the last third, and none of its requests or connections may
fail (a refusal is an answer, and counted apart).

Exit 0 when every curve levelled off, 1 when one grew (named, with its
series) or the soak could not run, 2 on bad flags. --json prints one object
with the settings, every sample and every verdict.

Flags:
`

func runBenchSoak(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchSoakUsage); fs.PrintDefaults() }
	duration := fs.Duration("duration", 10*time.Minute, "how long the fleet runs")
	sample := fs.Duration("sample", 10*time.Second, "how often the hub is sampled")
	noDB := fs.Bool("no-db", false, "the hub keeps no journal (memory only)")
	teams := fs.Int("teams", 8, "namespaces of two working agents each")
	readers := fs.Int("readers", 2, "agents asking who, state and board")
	churn := fs.Int("churn", 8, "names that keep connecting and disconnecting (some by takeover)")
	rate := fs.Float64("rate", 1000, "operations per second of the workers and readers together (0: as fast as they go)")
	tolerance := fs.Float64("tolerance", 0.10, "growth allowed from the middle to the last third, as a fraction of the middle third's median")
	asJSON := fs.Bool("json", false, "print one JSON object: settings, samples, verdicts")
	journalWindow := fs.Duration("journal-window", 0, "the hub's --idempotency-window and --retain all= (default: a sixth of --duration, so the windows pass within the warm-up third)")
	pprofAddr := fs.String("pprof", "", "the hub serves Go's profiler at this loopback `ADDR` (synapse hub --pprof): to see what grew, compare heap profiles taken apart (go tool pprof -base)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "synapse bench soak: unexpected argument %q\n", fs.Arg(0))
		return 2
	case *duration <= 0 || *sample <= 0 || *sample > *duration:
		fmt.Fprintln(stderr, "synapse bench soak: --duration and --sample must be positive, --sample at most --duration")
		return 2
	case *teams < 1 || *readers < 0 || *churn < 0 || *rate < 0 || *tolerance < 0:
		fmt.Fprintln(stderr, "synapse bench soak: --teams must be at least 1; --readers, --churn, --rate and --tolerance not negative")
		return 2
	}
	if *journalWindow <= 0 {
		*journalWindow = max(*duration/6, time.Second)
	}
	extra := []string{"--idempotency-window=" + journalWindow.String(), "--retain=all=" + journalWindow.String()}
	if *pprofAddr != "" {
		extra = append(extra, "--pprof", *pprofAddr)
	}
	h, err := startHubChild(2**teams+*readers+2**churn, "", true, !*noDB, extra...) // the hub paced as deployed
	if err != nil {
		fmt.Fprintln(stderr, "synapse bench soak:", err)
		return 1
	}
	defer h.stop()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	progress := stdout
	if *asJSON {
		progress = stderr
	}
	fmt.Fprintf(progress, "bench soak: %d workers in %d teams, %d readers, %d churners, %.0f ops/s, journal %v, %s sampled every %s\n",
		2**teams, *teams, *readers, *churn, *rate, !*noDB, *duration, *sample)
	var prev bench.SoakSample
	res, err := bench.RunSoak(ctx, bench.SoakConfig{
		URI: h.uri, HubPID: h.pid, MetricsURL: h.metricsURL, JournalPath: h.dbPath,
		Duration: *duration, Sample: *sample, Teams: *teams, Readers: *readers, Churners: *churn,
		Rate: *rate, Tolerance: *tolerance,
		Progress: func(s bench.SoakSample) {
			perS := 0.0
			if dt := s.Seconds - prev.Seconds; dt > 0 {
				perS = float64(s.Ops-prev.Ops) / dt
			}
			prev = s
			fmt.Fprintf(progress, "%6.0fs  rss %6.1f MiB  heap %6.1f MiB  goroutines %4d  fds %4d  sockets %3d  journal %7.1f MiB  ops %9d (%4.0f/s)  refused %d  errors %d  churn %d (%d takeovers)\n",
				s.Seconds, float64(s.RSSKB)/1024, float64(s.HeapLiveBytes)/(1<<20), s.Goroutines, s.FDs, s.Connected,
				float64(s.JournalBytes)/(1<<20), s.Ops, perS, s.Refusals, s.Errors, s.Connects, s.Takeovers)
		},
	})
	if errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "synapse bench soak: interrupted after %d samples: no verdict\n", len(res.Samples))
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "synapse bench soak:", err)
		return 1
	}
	if *asJSON {
		printJSON(stdout, res)
	} else {
		for _, tr := range res.Trends {
			fmt.Fprintf(stdout, "%-22s %-10s %s\n", tr.Resource, tr.Verdict, tr.Reason)
		}
		if res.FirstError != "" {
			fmt.Fprintf(stdout, "first fleet error: %s\n", res.FirstError)
		}
	}
	if !res.Pass {
		for _, f := range res.Failures {
			resource, _, _ := strings.Cut(f, ":")
			fmt.Fprintf(stderr, "synapse bench soak: FAIL: %s; curve: %s\n", f, soakCurve(res.Samples, resource))
		}
		return 1
	}
	judged := 0
	for _, tr := range res.Trends {
		if tr.Verdict != bench.NotJudged {
			judged++
		}
	}
	fmt.Fprintf(progress, "bench soak: pass: %d of %d curves judged, none grew (%d samples, %d ops)\n",
		judged, len(res.Trends), len(res.Samples), res.Samples[len(res.Samples)-1].Ops)
	return 0
}

// soakCurve renders one resource's series as "t=value" pairs.
func soakCurve(samples []bench.SoakSample, resource string) string {
	pick := map[string]func(bench.SoakSample) int64{
		"rss_kb":          func(s bench.SoakSample) int64 { return s.RSSKB },
		"heap_live_bytes": func(s bench.SoakSample) int64 { return s.HeapLiveBytes },
		"goroutines":      func(s bench.SoakSample) int64 { return s.Goroutines },
		"open_fds":        func(s bench.SoakSample) int64 { return s.FDs },
		"journal_bytes":   func(s bench.SoakSample) int64 { return s.JournalBytes },
		"fleet":           func(s bench.SoakSample) int64 { return s.Ops },
	}[resource]
	if pick == nil {
		return "-"
	}
	var b strings.Builder
	for i, s := range samples {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.0fs=%d", s.Seconds, pick(s))
	}
	return b.String()
}
