package coord_test

import (
	"fmt"
	"testing"

	"github.com/synapse-hub/synapse/bench"
	"github.com/synapse-hub/synapse/coord"
)

// Go benchmarks of the core; `synapse bench core` reports the same figures.

func BenchmarkScopeCheck100k(b *testing.B) {
	s := bench.CoreState(100_000)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s.Decide(bench.NewClaim(i), 1_800_000_001)
	}
}

func BenchmarkMassExpiry100k(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		s := bench.CoreState(100_000)
		b.StartTimer()
		s.Tick(1_800_000_000 + 3600)
	}
}

func BenchmarkApplyEvents(b *testing.B) {
	log := bench.NewLogSource().Next(200_000)
	b.ResetTimer()
	for b.Loop() {
		s := coord.New(coord.Limits{})
		for _, ev := range log {
			s.Apply(ev)
		}
	}
	b.ReportMetric(float64(len(log)*b.N)/b.Elapsed().Seconds(), "events/s")
}

// What a state_request costs the sequencer's loop at 100k claims: the hub
// gathers the stored pointers there and sorts and encodes elsewhere.
func BenchmarkClaimPointers100k(b *testing.B) {
	s := bench.CoreState(100_000)
	b.ResetTimer()
	for b.Loop() {
		s.ClaimPointers()
	}
}

// The sorted listing it replaced on the loop.
func BenchmarkClaimsSorted100k(b *testing.B) {
	s := bench.CoreState(100_000)
	b.ResetTimer()
	for b.Loop() {
		s.Claims()
	}
}

// globState is 100k live claims in one worktree with globs in the mix: per
// ten claims, seven literal files, one shared literal file, one glob over a
// package's generated subtree (src/pkgNNN/genNNNN/**/*.go, filed at its
// literal prefix) and one glob at the package itself (src/pkgNNN/*_test.go,
// 100 of them per package node).
func globState(b *testing.B) *coord.State {
	b.Helper()
	s := coord.New(coord.Limits{})
	for i := range 100_000 {
		r := bench.ClaimRequest(i)
		switch i % 10 {
		case 7:
			r.Shared = true
		case 8:
			r.Paths, r.Globs = nil, []string{fmt.Sprintf("src/pkg%03d/gen%06d/**/*.go", i%100, i)}
		case 9:
			r.Paths, r.Globs = nil, []string{fmt.Sprintf("src/pkg%03d/*_%06d_test.go", i%100, i)}
		}
		if o := s.Step(r, 1_800_000_000); o.Refusal != nil {
			b.Fatal(o.Refusal)
		}
	}
	return s
}

// BenchmarkScopeCheckGlobs100k is the scope check at 100k live claims with
// globs in the mix (issue 14): a new literal file (its package node holds
// 1000 literal children and 100 globs, each checked exactly), a new glob in
// a fresh subtree, a glob over a package's files (it walks the package's
// ~1100 children along its automaton), and a shared read of a package
// (only exclusive entries are looked at). None of them conflicts.
func BenchmarkScopeCheckGlobs100k(b *testing.B) {
	s := globState(b)
	const now = 1_800_000_001
	for _, tc := range []struct {
		name string
		req  func(k int) coord.ClaimRequest
	}{
		{"literal", bench.NewClaim},
		{"glob-fresh-subtree", func(k int) coord.ClaimRequest {
			r := bench.NewClaim(k)
			r.Paths, r.Globs = nil, []string{fmt.Sprintf("src/pkg%03d/new%06d/**/*.go", k%100, k)}
			return r
		}},
		{"glob-package-files", func(k int) coord.ClaimRequest {
			r := bench.NewClaim(k)
			r.Paths, r.Globs = nil, []string{fmt.Sprintf("src/pkg%03d/*.md", k%100)}
			return r
		}},
		{"shared-literal", func(k int) coord.ClaimRequest {
			r := bench.NewClaim(k)
			r.Shared = true
			return r
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, ref := s.Decide(tc.req(i), now); ref != nil {
					b.Fatal(ref)
				}
			}
		})
	}
}
