package coord_test

import (
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
