package sequencer_test

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/bench"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/sequencer"
)

// BenchmarkDurableClaimRelease drives the sequencer with 64 concurrent
// submitters doing claim+release on the real journal at FULL sync (the
// claim family is Full, INV-JA-4); `synapse bench journal` reports the same
// figures through bench.Sequencer.
func BenchmarkDurableClaimRelease(b *testing.B) {
	const submitters = 64
	st, err := journal.Open(filepath.Join(b.TempDir(), "journal.db"), journal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	s := sequencer.New(coord.New(coord.Limits{}), st, sequencer.Options{Logger: slog.New(slog.DiscardHandler)})
	defer s.Close()

	pairs := max(b.N/(2*submitters), 1)
	b.ResetTimer()
	before := s.Stats()
	lat, elapsed, err := bench.ClaimRelease(s, submitters, pairs, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	after := s.Stats()
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "mutations/s")
	b.ReportMetric(bench.Percentile(lat, 99).Seconds()*1e3, "p99_commit_ms")
	if n := after.Appends - before.Appends; n > 0 {
		b.ReportMetric(float64(after.Commands-before.Commands)/float64(n), "cmds/append")
	}
}
