// Package bench measures Synapse in-process: the coordination core now, the
// journal and the wire later. The synapse binary's `bench` command and the
// packages' Go benchmarks share these fixtures.
package bench

import (
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/synapse-hub/synapse/coord"
)

// CoreResult holds the figures `synapse bench core` reports.
type CoreResult struct {
	ScopeCheckNs1k   float64 `json:"scope_check_ns_1k"`
	ScopeCheckNs100k float64 `json:"scope_check_ns_100k"`
	// With globs in the mix (GlobCoreState): a new literal file, a new glob.
	ScopeCheckGlobsNs100k float64 `json:"scope_check_ns_100k_globs"`
	GlobCheckNs100k       float64 `json:"glob_check_ns_100k_globs"`
	MassExpiryMs100k      float64 `json:"mass_expiry_ms_100k"`
	PartialExpiryMs100k   float64 `json:"mass_expiry_ms_100k_of_200k"`
	ApplyEventsPerSec     float64 `json:"apply_events_per_s"`
	HeapBytesPerClaim     float64 `json:"heap_bytes_per_claim"`
	ClaimStepNs100k       float64 `json:"claim_step_ns_100k"`
	Runs                  int     `json:"runs"`
	GoMaxProcs            int     `json:"gomaxprocs"`
	ReferenceScanNs100k   float64 `json:"reference_scope_scan_ns_100k"`
	ScopeCheckSpeedup100  float64 `json:"scope_check_speedup_vs_reference_100k"`
}

// The reference's published figures (PROTOCOL.md §8.2), for ratios.
const (
	referenceScanNs100k = 292085834.0 // non-overlapping claim scan at 100k claims
)

// Fixture start time: any fixed instant works; the core never reads a clock.
const t0 = 1_800_000_000.0

// Worktree is the one worktree fixture claims live in.
const Worktree = "/repo"

// ClaimRequest returns the i-th fixture claim: 2000 agents (one principal
// each, under the 128 cap up to 200k claims) over a tree of 100 packages.
func ClaimRequest(i int) coord.ClaimRequest {
	agent := fmt.Sprintf("proj/agent%04d", i%2000)
	return coord.ClaimRequest{
		Agent: agent, Principal: "auth-token:" + agent,
		TaskID:   fmt.Sprintf("task-%06d", i),
		Worktree: Worktree, Paths: []string{fmt.Sprintf("src/pkg%03d/file%06d.go", i%100, i)},
		TTL: 3600, HasTTL: true,
	}
}

// CoreState returns a state holding n live claims granted at t0, each with
// a one-hour lease.
func CoreState(n int) *coord.State {
	s := coord.New(coord.Limits{})
	for i := range n {
		if o := s.Step(ClaimRequest(i), t0); o.Refusal != nil {
			panic(o.Refusal)
		}
	}
	return s
}

// MixedState returns 2n live claims in one worktree whose leases alternate
// between one and two hours, so a Tick at one hour expires half of them
// scattered through the tree: mass expiry without the whole-worktree
// shortcut.
func MixedState(n int) *coord.State {
	s := coord.New(coord.Limits{})
	for i := range 2 * n {
		r := ClaimRequest(i)
		r.TTL = float64(3600 * (1 + i%2))
		if o := s.Step(r, t0); o.Refusal != nil {
			panic(o.Refusal)
		}
	}
	return s
}

// NewClaim is a claim that conflicts with nothing in CoreState: a fresh
// package by a fresh agent.
func NewClaim(k int) coord.ClaimRequest {
	return coord.ClaimRequest{
		Agent: "proj/newcomer", Principal: "auth-token:newcomer", TaskID: fmt.Sprintf("new-%d", k),
		Worktree: Worktree, Paths: []string{fmt.Sprintf("src/pkg%03d/new%06d.go", k%100, k)},
	}
}

// ScopeCheck measures deciding a new non-overlapping claim against s (the
// decision includes the scope check; nothing is applied).
func ScopeCheck(s *coord.State, iters int) time.Duration {
	return ScopeCheckOf(s, iters, NewClaim)
}

// ScopeCheckOf measures deciding the non-overlapping claims req(k) against s.
func ScopeCheckOf(s *coord.State, iters int, req func(k int) coord.ClaimRequest) time.Duration {
	start := time.Now()
	for k := range iters {
		if _, ref := s.Decide(req(k), t0+1); ref != nil {
			panic(ref)
		}
	}
	return time.Since(start) / time.Duration(iters)
}

// GlobClaimRequest returns the i-th claim of the fixture with globs in the
// mix: per ten claims, seven literal files (as ClaimRequest), one shared
// literal file, one glob over a package's generated subtree
// (src/pkgNNN/genNNNNNN/**/*.go, filed at its literal prefix) and one glob
// at the package node itself (src/pkgNNN/*_NNNNNN_test.go: 100 per package
// node, beside its ~1000 files).
func GlobClaimRequest(i int) coord.ClaimRequest {
	r := ClaimRequest(i)
	switch i % 10 {
	case 7:
		r.Shared = true
	case 8:
		r.Paths, r.Globs = nil, []string{fmt.Sprintf("src/pkg%03d/gen%06d/**/*.go", i%100, i)}
	case 9:
		r.Paths, r.Globs = nil, []string{fmt.Sprintf("src/pkg%03d/*_%06d_test.go", i%100, i)}
	}
	return r
}

// GlobCoreState returns a state holding n live claims of GlobClaimRequest.
func GlobCoreState(n int) *coord.State {
	s := coord.New(coord.Limits{})
	for i := range n {
		if o := s.Step(GlobClaimRequest(i), t0); o.Refusal != nil {
			panic(o.Refusal)
		}
	}
	return s
}

// NewGlobClaim is a glob claim that conflicts with nothing in
// GlobCoreState: a fresh subtree of a package.
func NewGlobClaim(k int) coord.ClaimRequest {
	r := NewClaim(k)
	r.Paths, r.Globs = nil, []string{fmt.Sprintf("src/pkg%03d/new%06d/**/*.go", k%100, k)}
	return r
}

// LogSource generates the claim/release events of a busy hub — about 1000
// live tasks, each claimed then released — chunk by chunk, as a journal
// replay streams them.
type LogSource struct {
	gen *coord.State
	i   int
}

// NewLogSource returns a generator at the start of the log.
func NewLogSource() *LogSource { return &LogSource{gen: coord.New(coord.Limits{})} }

// Next returns at least n further events. Every claim is released 1000
// claims later, so about 1000 stay live.
func (l *LogSource) Next(n int) []coord.Event {
	evs := make([]coord.Event, 0, n+2)
	for len(evs) < n {
		now := t0 + float64(l.i)*1e-3
		evs = append(evs, l.gen.Step(ClaimRequest(l.i%100_000), now).Events...)
		if l.i >= 1000 {
			r := ClaimRequest((l.i - 1000) % 100_000)
			evs = append(evs, l.gen.Step(coord.ReleaseRequest{Agent: r.Agent, TaskID: r.TaskID}, now).Events...)
		}
		l.i++
	}
	return evs
}

// ApplyRate applies n generated events to a fresh state and returns events
// per second. Only the applies are timed; the log streams through in chunks
// of 10,000 so its own memory does not weigh on the measurement.
func ApplyRate(n int) float64 {
	src, s := NewLogSource(), coord.New(coord.Limits{})
	var spent time.Duration
	for done := 0; done < n; {
		chunk := src.Next(min(10_000, n-done))
		start := time.Now()
		for _, ev := range chunk {
			s.Apply(ev)
		}
		spent += time.Since(start)
		done += len(chunk)
	}
	return float64(n) / spent.Seconds()
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// Core runs every core benchmark `runs` times and reports medians. progress,
// if not nil, is told what runs.
func Core(runs int, progress func(string)) CoreResult {
	say := func(s string) {
		if progress != nil {
			progress(s)
		}
	}
	r := CoreResult{Runs: runs, GoMaxProcs: runtime.GOMAXPROCS(0), ReferenceScanNs100k: referenceScanNs100k}
	var sc1k, sc100k, scGlobs, globCheck, step, expiry, partial, apply, heap []float64

	say("building 1k and 100k claim fixtures")
	s1k, s100k := CoreState(1000), CoreState(100_000)
	for range runs {
		sc1k = append(sc1k, float64(ScopeCheck(s1k, 20000).Nanoseconds()))
		sc100k = append(sc100k, float64(ScopeCheck(s100k, 20000).Nanoseconds()))
	}
	say("scope checks at 100k with globs in the mix")
	sGlobs := GlobCoreState(100_000)
	for range runs {
		scGlobs = append(scGlobs, float64(ScopeCheck(sGlobs, 20000).Nanoseconds()))
		globCheck = append(globCheck, float64(ScopeCheckOf(sGlobs, 20000, NewGlobClaim).Nanoseconds()))
	}
	sGlobs = nil
	say("claim step at 100k")
	for run := range runs {
		const n = 5000
		start := time.Now()
		for k := range n {
			o := s100k.Step(NewClaim(1_000_000+run*n+k), t0+1)
			if o.Refusal != nil {
				panic(o.Refusal)
			}
			s100k.Rollback(&o)
		}
		step = append(step, float64(time.Since(start).Nanoseconds())/n)
	}

	say("mass expiry of 100k claims")
	for range runs {
		s := CoreState(100_000)
		start := time.Now()
		o := s.Tick(t0 + 3600)
		expiry = append(expiry, float64(time.Since(start).Nanoseconds())/1e6)
		if s.ClaimCount() != 0 || len(o.Events) < 100_000 {
			panic("mass expiry left claims behind")
		}
		s = MixedState(100_000)
		start = time.Now()
		o = s.Tick(t0 + 3600)
		partial = append(partial, float64(time.Since(start).Nanoseconds())/1e6)
		if s.ClaimCount() != 100_000 || len(o.Events) != 100_000 {
			panic("partial expiry expired the wrong claims")
		}
	}

	say("applying 1,000,000 events")
	for range runs {
		apply = append(apply, ApplyRate(1_000_000))
	}

	say("heap per claim at 100k")
	for range runs {
		heap = append(heap, HeapPerClaim(100_000))
	}

	r.ScopeCheckNs1k, r.ScopeCheckNs100k = median(sc1k), median(sc100k)
	r.ScopeCheckGlobsNs100k, r.GlobCheckNs100k = median(scGlobs), median(globCheck)
	r.ClaimStepNs100k = median(step)
	r.MassExpiryMs100k = median(expiry)
	r.PartialExpiryMs100k = median(partial)
	r.ApplyEventsPerSec = median(apply)
	r.HeapBytesPerClaim = median(heap)
	r.ScopeCheckSpeedup100 = referenceScanNs100k / r.ScopeCheckNs100k
	return r
}

// HeapPerClaim measures the live heap a state of n claims holds per claim.
func HeapPerClaim(n int) float64 {
	reqs := make([]coord.ClaimRequest, n) // built first: request strings are the caller's
	for i := range reqs {
		reqs[i] = ClaimRequest(i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := coord.New(coord.Limits{})
	for _, r := range reqs {
		s.Step(r, t0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	runtime.KeepAlive(reqs)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}
