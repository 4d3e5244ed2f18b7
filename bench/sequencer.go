package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/sequencer"
)

// SequencerResult holds the sequencer figures of `synapse bench journal`:
// durable claim/release mutations through the sequencer and the SQLite
// journal at synchronous=FULL, with group commit.
type SequencerResult struct {
	DurableMutationsPerSec float64 `json:"durable_mutations_per_s"`
	P50CommitMs            float64 `json:"p50_commit_ms"`
	P99CommitMs            float64 `json:"p99_commit_ms"`
	Submitters             int     `json:"submitters"`
	Mutations              int     `json:"mutations"`
	Appends                int64   `json:"appends"`
	MeanBatch              float64 `json:"mean_batch"`
	MaxBatch               int64   `json:"max_batch"`
	Seconds                float64 `json:"seconds"`
	GoMaxProcs             int     `json:"gomaxprocs"`
}

// SequencerOptions tune Sequencer. The zero value works.
type SequencerOptions struct {
	Dir        string        // where the journal file goes (default: a temporary directory, removed after)
	Submitters int           // concurrent clients (default 64)
	Duration   time.Duration // how long to measure (default 3 s)
}

// Sequencer measures durable mutations per second and commit latency: each
// submitter claims its own task and releases it, over and over, every
// Submit waiting for its batch to be committed at FULL sync.
func Sequencer(opts SequencerOptions) (SequencerResult, error) {
	if opts.Submitters <= 0 {
		opts.Submitters = 64
	}
	if opts.Duration <= 0 {
		opts.Duration = 3 * time.Second
	}
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "synapse-bench-journal-")
		if err != nil {
			return SequencerResult{}, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	st, err := journal.Open(filepath.Join(dir, "bench-journal.db"), journal.Options{})
	if err != nil {
		return SequencerResult{}, err
	}
	defer st.Close()
	seq := sequencer.New(coord.New(coord.Limits{}), st, sequencer.Options{Logger: slog.New(slog.DiscardHandler)})
	defer seq.Close()

	if _, _, err := ClaimRelease(seq, opts.Submitters, 10, time.Time{}); err != nil { // warm up
		return SequencerResult{}, err
	}
	before := seq.Stats()
	lat, elapsed, err := ClaimRelease(seq, opts.Submitters, 0, time.Now().Add(opts.Duration))
	if err != nil {
		return SequencerResult{}, err
	}
	after := seq.Stats()
	r := SequencerResult{
		DurableMutationsPerSec: float64(len(lat)) / elapsed.Seconds(),
		P50CommitMs:            Percentile(lat, 50).Seconds() * 1e3,
		P99CommitMs:            Percentile(lat, 99).Seconds() * 1e3,
		Submitters:             opts.Submitters,
		Mutations:              len(lat),
		Appends:                after.Appends - before.Appends,
		MaxBatch:               after.MaxBatch,
		Seconds:                elapsed.Seconds(),
		GoMaxProcs:             runtime.GOMAXPROCS(0),
	}
	if r.Appends > 0 {
		r.MeanBatch = float64(after.Commands-before.Commands) / float64(r.Appends)
	}
	return r, nil
}

// ClaimRelease runs submitters goroutines against s, each claiming its own
// task and releasing it: pairs times, or until the deadline when pairs is 0.
// It returns every Submit's latency (submission to committed reply) and the
// wall time the run took. Any refusal or error stops it with an error.
func ClaimRelease(s *sequencer.Sequencer, submitters, pairs int, deadline time.Time) ([]time.Duration, time.Duration, error) {
	ctx := context.Background()
	lats := make([][]time.Duration, submitters)
	errs := make([]error, submitters)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range submitters {
		wg.Go(func() {
			agent := fmt.Sprintf("bench/agent%03d", i)
			task := fmt.Sprintf("bench-task-%03d", i)
			cmds := [2]coord.Command{
				coord.ClaimRequest{Agent: agent, TaskID: task, Worktree: Worktree, Paths: []string{fmt.Sprintf("src/bench%03d", i)}},
				coord.ReleaseRequest{Agent: agent, TaskID: task},
			}
			lat := make([]time.Duration, 0, max(2*pairs, 1024))
			for k := 0; pairs == 0 || k < pairs; k++ {
				if pairs == 0 && time.Now().After(deadline) {
					break
				}
				for _, cmd := range cmds {
					t := time.Now()
					r, err := s.Submit(ctx, sequencer.Request{Cmd: cmd})
					if err == nil && r.Outcome.Refusal != nil {
						err = r.Outcome.Refusal
					}
					if err != nil {
						errs[i] = fmt.Errorf("bench: %T: %w", cmd, err)
						return
					}
					lat = append(lat, time.Since(t))
				}
			}
			lats[i] = lat
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return nil, elapsed, err
		}
	}
	return slices.Concat(lats...), elapsed, nil
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of ds by the
// nearest-rank method; it sorts ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(float64(len(ds))*p/100+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
