package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/synapse-hub/synapse/bench"
	"github.com/synapse-hub/synapse/journal"
)

const benchUsage = `Usage: synapse bench core|journal [--json] [--runs N]
       synapse bench load [flags]   (a hub over real sockets: 'synapse bench load --help')
       synapse bench soak [flags]   (a mixed fleet for minutes, failing on growth: 'synapse bench soak --help')
       synapse bench crashloop [flags]  (a hub SIGKILLed and restarted under load: 'synapse bench crashloop --help')

Runs in-process benchmarks and prints the median of N runs. Progress goes to
stderr; --json prints one JSON object on stdout for scripts.

synapse bench core: the coordination core, in memory (about 30 s).

  scope_check_ns_1k / _100k  deciding a new, non-overlapping claim with 1k / 100k
                             live claims in one worktree (the reference publishes ~0.29 s at 100k,
                             on another machine)
  scope_check_ns_100k_globs  the same at 100k with globs in the mix (docs/claims.md): 10% shared,
                             20% globs, 100 of them at the new file's package node
  glob_check_ns_100k_globs   deciding a new glob (src/pkgNNN/newNNNNNN/**/*.go) there
  claim_step_ns_100k         a whole claim step (expire, decide, apply) at 100k
  mass_expiry_ms_100k        expiring 100,000 leases at once (every claim of the worktree)
  mass_expiry_ms_100k_of_200k  expiring 100,000 of 200,000 leases, scattered through the tree
  apply_events_per_s         replaying a log of 1,000,000 claim/release events
  heap_bytes_per_claim       live heap per live claim at 100k

synapse bench journal: the durable SQLite journal, in a temporary directory
removed afterwards (under a minute at --runs 3, a 1M-event fixture included).
fsync cost is the disk's: set TMPDIR to a directory on the hub's disk.

  durable_mutations_per_s    claim+release through the sequencer, 64 concurrent
                             submitters, every commit at synchronous=FULL
  p50_commit_ms / p99_commit_ms  Submit to committed reply, same run
  append_records_per_s_batch{1,64,512}_full  raw journal appends at FULL
  replay_events_per_s        replaying a 1,000,000-event journal (100k claims)
  restart_ms_1m              open + replay + expire, from a snapshot 10,000 events
                             before the end
  restart_ms_1m_no_snapshot  the same, replaying the whole log
  snapshot_stall_ms_100k     the sequencer loop's stall per snapshot at 100k claims
                             (State.Capture; sorting, encoding, writing happen off the loop)
  snapshot_image_ms_100k     building that snapshot's image off the loop

Flags:
`

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchUsage); fs.PrintDefaults() }
	what := ""
	if len(args) > 0 {
		what = args[0]
	}
	switch what {
	case "load":
		return runBenchLoad(args[1:], stdout, stderr)
	case "soak":
		return runBenchSoak(args[1:], stdout, stderr)
	case "crashloop":
		return runBenchCrashLoop(args[1:], stdout, stderr)
	case "echo-server": // bench load --floor's child: not for users
		return runEchoServer(args[1:], stderr)
	case "attack": // bench load --hostile's child: not for users
		return runAttack(args[1:], stdout, stderr)
	case "core", "journal":
	case "-h", "--help", "help":
		fs.Usage()
		return 0
	default:
		fmt.Fprintln(stderr, "synapse bench: say what to measure: 'synapse bench core', 'synapse bench journal', 'synapse bench load', 'synapse bench soak' or 'synapse bench crashloop'.")
		return 2
	}
	asJSON := fs.Bool("json", false, "print one JSON object for scripts")
	defaultRuns := 5
	if what == "journal" {
		defaultRuns = 3
	}
	runs := fs.Int("runs", defaultRuns, "runs per figure; the median is reported (core: 5, journal: 3)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "synapse bench %s: unexpected argument %q; flags are --json and --runs N.\n", what, fs.Arg(0))
		return 2
	}
	if *runs < 1 {
		fmt.Fprintln(stderr, "synapse bench: --runs must be at least 1.")
		return 2
	}
	progress := func(s string) { fmt.Fprintln(stderr, "bench:", s) }
	if what == "journal" {
		return runBenchJournal(*runs, *asJSON, progress, stdout, stderr)
	}
	r := bench.Core(*runs, progress)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(stderr, "synapse bench:", err)
			return 1
		}
		return 0
	}
	rows := []struct {
		name, value, target string
		ok                  bool
	}{
		{"scope check, 1k claims", fmt.Sprintf("%.0f ns", r.ScopeCheckNs1k), "", true},
		{"scope check, 100k claims", fmt.Sprintf("%.0f ns", r.ScopeCheckNs100k), "< 10,000 ns", r.ScopeCheckNs100k < 10_000},
		{"scope check, 100k w/ globs", fmt.Sprintf("%.0f ns", r.ScopeCheckGlobsNs100k), "", true},
		{"glob check, 100k w/ globs", fmt.Sprintf("%.0f ns", r.GlobCheckNs100k), "", true},
		{"claim step, 100k claims", fmt.Sprintf("%.0f ns", r.ClaimStepNs100k), "", true},
		{"mass expiry, 100k", fmt.Sprintf("%.1f ms", r.MassExpiryMs100k), "< 50 ms", r.MassExpiryMs100k < 50},
		{"expiry, 100k of 200k", fmt.Sprintf("%.1f ms", r.PartialExpiryMs100k), "", true},
		{"apply events", fmt.Sprintf("%.2f M/s", r.ApplyEventsPerSec/1e6), ">= 2 M/s", r.ApplyEventsPerSec >= 2e6},
		{"heap per claim, 100k", fmt.Sprintf("%.0f B", r.HeapBytesPerClaim), "< 600 B", r.HeapBytesPerClaim < 600},
	}
	fmt.Fprintf(stdout, "%-26s %14s  %-12s\n", "figure (median of runs)", "value", "target")
	for _, row := range rows {
		mark := ""
		if row.target != "" {
			mark = "ok"
			if !row.ok {
				mark = "MISSED"
			}
		}
		fmt.Fprintf(stdout, "%-26s %14s  %-12s %s\n", row.name, row.value, row.target, mark)
	}
	fmt.Fprintf(stdout, "\nscope check is %.0fx faster than the reference's scan at 100k claims (%d runs, GOMAXPROCS=%d)\n",
		r.ScopeCheckSpeedup100, r.Runs, r.GoMaxProcs)
	return 0
}

// journalBenchResult is what `synapse bench journal --json` prints: the
// medians of bench.Sequencer and of the journal's append, replay and
// restart figures (bench/journal.go), plus the snapshot stall.
type journalBenchResult struct {
	DurableMutationsPerSec float64 `json:"durable_mutations_per_s"`
	P50CommitMs            float64 `json:"p50_commit_ms"`
	P99CommitMs            float64 `json:"p99_commit_ms"`
	MeanBatch              float64 `json:"mean_batch"`
	Submitters             int     `json:"submitters"`
	AppendPerSecBatch1     float64 `json:"append_records_per_s_batch1_full"`
	AppendPerSecBatch64    float64 `json:"append_records_per_s_batch64_full"`
	AppendPerSecBatch512   float64 `json:"append_records_per_s_batch512_full"`
	ReplayEventsPerSec     float64 `json:"replay_events_per_s"`
	RestartMs1M            float64 `json:"restart_ms_1m"`
	RestartMs1MNoSnapshot  float64 `json:"restart_ms_1m_no_snapshot"`
	SnapshotStallMs        float64 `json:"snapshot_stall_ms_100k"`
	SnapshotImageMs        float64 `json:"snapshot_image_ms_100k"`
	SnapshotClaims         int     `json:"snapshot_claims"`
	SnapshotBytes          int     `json:"snapshot_bytes"`
	JournalEvents          int     `json:"journal_events"`
	FileBytes              int64   `json:"file_bytes"`
	FixtureSeconds         float64 `json:"fixture_s"`
	Runs                   int     `json:"runs"`
	GoMaxProcs             int     `json:"gomaxprocs"`
}

func runBenchJournal(runs int, asJSON bool, progress func(string), stdout, stderr io.Writer) int {
	dir, err := os.MkdirTemp("", "synapse-bench-journal-")
	if err != nil {
		fmt.Fprintf(stderr, "synapse bench journal: temporary directory: %v (set TMPDIR to a writable disk)\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	r, err := measureJournal(dir, runs, progress)
	if err != nil {
		fmt.Fprintf(stderr, "synapse bench journal: %v\n", err)
		return 1
	}
	if asJSON {
		if err := json.NewEncoder(stdout).Encode(r); err != nil {
			fmt.Fprintln(stderr, "synapse bench journal:", err)
			return 1
		}
		return 0
	}
	rows := [][2]string{
		{"durable mutations", fmt.Sprintf("%.0f /s", r.DurableMutationsPerSec)},
		{"commit p50 / p99", fmt.Sprintf("%.2f / %.2f ms", r.P50CommitMs, r.P99CommitMs)},
		{"append FULL, batch 1", fmt.Sprintf("%.0f rec/s", r.AppendPerSecBatch1)},
		{"append FULL, batch 64", fmt.Sprintf("%.0f rec/s", r.AppendPerSecBatch64)},
		{"append FULL, batch 512", fmt.Sprintf("%.0f rec/s", r.AppendPerSecBatch512)},
		{"replay", fmt.Sprintf("%.0f ev/s", r.ReplayEventsPerSec)},
		{"restart 1M, snapshot", fmt.Sprintf("%.0f ms", r.RestartMs1M)},
		{"restart 1M, no snapshot", fmt.Sprintf("%.0f ms", r.RestartMs1MNoSnapshot)},
		{"snapshot stall on the loop", fmt.Sprintf("%.1f ms", r.SnapshotStallMs)},
		{"snapshot image, off the loop", fmt.Sprintf("%.1f ms", r.SnapshotImageMs)},
	}
	fmt.Fprintf(stdout, "%-26s %18s\n", "figure (median of runs)", "value")
	for _, row := range rows {
		fmt.Fprintf(stdout, "%-26s %18s\n", row[0], row[1])
	}
	fmt.Fprintf(stdout, "\nmutations: claim+release, %d submitters, every commit at synchronous=FULL, mean batch %.1f\n",
		r.Submitters, r.MeanBatch)
	fmt.Fprintf(stdout, "journal: %d events, %s; snapshot of %d claims, %s (%d runs, GOMAXPROCS=%d)\n",
		r.JournalEvents, mb(r.FileBytes), r.SnapshotClaims, mb(int64(r.SnapshotBytes)), r.Runs, r.GoMaxProcs)
	return 0
}

// measureJournal runs every figure runs times in dir and keeps the medians.
// The 1M-event fixture is built once and restarted from runs times.
func measureJournal(dir string, runs int, progress func(string)) (journalBenchResult, error) {
	r := journalBenchResult{Runs: runs, GoMaxProcs: runtime.GOMAXPROCS(0)}
	var mut, p50, p99, batch, ap1, ap64, ap512 []float64
	for i := range runs {
		progress(fmt.Sprintf("run %d/%d: claim+release through the sequencer at FULL, 64 submitters, 3 s", i+1, runs))
		sub := filepath.Join(dir, fmt.Sprintf("sequencer-%d", i))
		if err := os.Mkdir(sub, 0o700); err != nil {
			return r, err
		}
		s, err := bench.Sequencer(bench.SequencerOptions{Dir: sub})
		os.RemoveAll(sub)
		if err != nil {
			return r, fmt.Errorf("sequencer: %w", err)
		}
		mut, p50, p99, batch = append(mut, s.DurableMutationsPerSec), append(p50, s.P50CommitMs), append(p99, s.P99CommitMs), append(batch, s.MeanBatch)
		r.Submitters = s.Submitters
		progress(fmt.Sprintf("run %d/%d: raw appends at FULL, batches of 1, 64, 512", i+1, runs))
		for _, c := range []struct {
			size, records int
			out           *[]float64
		}{{1, 500, &ap1}, {64, 64 * 200, &ap64}, {512, 512 * 100, &ap512}} {
			v, err := bench.AppendRate(dir, c.size, c.records)
			if err != nil {
				return r, fmt.Errorf("append: %w", err)
			}
			*c.out = append(*c.out, v)
		}
	}
	r.DurableMutationsPerSec, r.P50CommitMs, r.P99CommitMs, r.MeanBatch = median(mut), median(p50), median(p99), median(batch)
	r.AppendPerSecBatch1, r.AppendPerSecBatch64, r.AppendPerSecBatch512 = median(ap1), median(ap64), median(ap512)

	const events, claims, tail = 1_000_000, 100_000, 10_000
	path := filepath.Join(dir, "replay.db")
	progress("building the 1M-event fixture (100k claims, snapshot 10,000 events before the end); takes a while")
	start := time.Now()
	stop := watchSize(path, progress)
	_, now, err := bench.FillJournal(path, events, claims, tail)
	stop()
	if err != nil {
		return r, fmt.Errorf("fixture: %w", err)
	}
	r.FixtureSeconds = time.Since(start).Seconds()
	progress(fmt.Sprintf("fixture built in %.0f s", r.FixtureSeconds))
	var replay, noSnap, withSnap, stall, image []float64
	for i := range runs {
		progress(fmt.Sprintf("run %d/%d: restart without snapshot (replays all 1M events)", i+1, runs))
		d, rec, err := bench.Restart(path, now, false)
		if err != nil {
			return r, fmt.Errorf("restart: %w", err)
		}
		noSnap = append(noSnap, ms(d))
		replay = append(replay, float64(rec.Events)/d.Seconds())
		r.JournalEvents = rec.Events
		progress(fmt.Sprintf("run %d/%d: restart from the snapshot", i+1, runs))
		if d, rec, err = bench.Restart(path, now, true); err != nil {
			return r, fmt.Errorf("restart: %w", err)
		}
		withSnap = append(withSnap, ms(d))
		r.SnapshotClaims = rec.State.ClaimCount()
		runtime.GC() // measure the capture alone, not the replay's garbage
		t := time.Now()
		capture := rec.State.Capture()
		stall = append(stall, ms(time.Since(t)))
		t = time.Now()
		capture.Image()
		image = append(image, ms(time.Since(t)))
	}
	r.ReplayEventsPerSec, r.RestartMs1MNoSnapshot, r.RestartMs1M = median(replay), median(noSnap), median(withSnap)
	r.SnapshotStallMs, r.SnapshotImageMs = median(stall), median(image)
	db, wal := fileSizes(path)
	r.FileBytes = db + wal
	st, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		return r, err
	}
	defer st.Close()
	snaps, err := st.Snapshots()
	if err == nil && len(snaps) > 0 {
		r.SnapshotBytes = snaps[0].Size
	}
	return r, err
}

// watchSize reports the fixture's growth every 5 s until stop is called.
func watchSize(path string, progress func(string)) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				db, wal := fileSizes(path)
				progress(fmt.Sprintf("  fixture: %s written", mb(db+wal)))
			}
		}
	}()
	return func() { close(done); <-finished }
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
