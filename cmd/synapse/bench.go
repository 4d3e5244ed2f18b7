package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/synapse-hub/synapse/bench"
)

const benchUsage = `Usage: synapse bench core [--json] [--runs N]

Runs the in-process micro-benchmarks of the coordination core and prints the
median of N runs:

  scope_check_ns_1k / _100k  deciding a new, non-overlapping claim with 1k / 100k
                             live claims in one worktree (reference: ~0.29 s at 100k)
  claim_step_ns_100k         a whole claim step (expire, decide, apply) at 100k
  mass_expiry_ms_100k        expiring 100,000 leases at once (every claim of the worktree)
  mass_expiry_ms_100k_of_200k  expiring 100,000 of 200,000 leases, scattered through the tree
  apply_events_per_s         replaying a log of 1,000,000 claim/release events
  heap_bytes_per_claim       live heap per live claim at 100k

Flags:
`

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchUsage); fs.PrintDefaults() }
	if len(args) == 0 || args[0] != "core" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fs.Usage()
			return 0
		}
		fmt.Fprintln(stderr, "synapse bench: say what to measure: 'synapse bench core'.")
		return 2
	}
	asJSON := fs.Bool("json", false, "print one JSON object for scripts")
	runs := fs.Int("runs", 5, "runs per figure; the median is reported")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *runs < 1 {
		fmt.Fprintln(stderr, "synapse bench: --runs must be at least 1.")
		return 2
	}
	progress := func(s string) { fmt.Fprintln(stderr, "bench:", s) }
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
