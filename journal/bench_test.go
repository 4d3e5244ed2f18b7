package journal_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/synapse-hub/synapse/bench"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

func benchmarkAppend(b *testing.B, size int) {
	st, err := journal.Open(filepath.Join(b.TempDir(), "j.db"), journal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	batch := &journal.Batch{TS: 1}
	for k := range size {
		batch.Records = append(batch.Records, bench.JournalRecord(k))
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := st.Append(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
}

// Append throughput at synchronous=FULL (every record durable).
func BenchmarkAppendFull_Batch1(b *testing.B)   { benchmarkAppend(b, 1) }
func BenchmarkAppendFull_Batch64(b *testing.B)  { benchmarkAppend(b, 64) }
func BenchmarkAppendFull_Batch512(b *testing.B) { benchmarkAppend(b, 512) }

// A 1M-event journal (100k claims, then updates, checkpoints and notes),
// with a snapshot 10,000 events before its end; built once per run.
var fixture struct {
	path string
	now  float64
}

func journalFixture(b *testing.B) (string, float64) {
	if fixture.path == "" {
		dir := b.TempDir() // removed with the first benchmark that built it; rebuilt if needed
		path := filepath.Join(dir, "1m.db")
		_, now, err := bench.FillJournal(path, 1_000_000, 100_000, 10_000)
		if err != nil {
			b.Fatal(err)
		}
		fixture.path, fixture.now = path, now
		b.Cleanup(func() { fixture.path = "" })
	}
	return fixture.path, fixture.now
}

func BenchmarkReplay1M(b *testing.B) {
	path, now := journalFixture(b)
	st, err := journal.Open(path, journal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	b.ResetTimer()
	var events int
	for b.Loop() {
		rec, err := journal.Replay(st, coord.Limits{}, now, journal.ReplayOptions{NoSnapshot: true})
		if err != nil || rec.Degraded() {
			b.Fatal(err)
		}
		events += rec.Events
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

func benchmarkRestart(b *testing.B, snapshot bool) {
	path, now := journalFixture(b)
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := bench.Restart(path, now, snapshot); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/restart")
}

// Restart = open + replay of a 1M-event journal, from nothing or from the
// snapshot (plus its 10,000-event tail).
func BenchmarkRestart1M_NoSnapshot(b *testing.B) { benchmarkRestart(b, false) }
func BenchmarkRestart1M_Snapshot(b *testing.B)   { benchmarkRestart(b, true) }
