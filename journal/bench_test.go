package journal_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/bench"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/sequencer"
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

// What a commit waits while the journal compacts online (issue 24: at most
// one batch, ≤ 5 ms p99): single-record appends at FULL while a backlog of
// 200,000 covered rows is dropped in the background, against the same
// appends with compaction off. Run with -benchtime=2000x so the appends
// fall inside the compaction.
func BenchmarkAppendWhileCompacting(b *testing.B) {
	for _, batch := range []int{0, journal.DefaultCompactBatch, 128} {
		b.Run(fmt.Sprintf("compact-batch=%d", batch), func(b *testing.B) {
			st, err := journal.Open(filepath.Join(b.TempDir(), "j.db"), journal.Options{CompactBatch: batch})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			fill := &journal.Batch{TS: 1}
			for k := range 1000 {
				fill.Records = append(fill.Records, bench.JournalRecord(k))
			}
			for range 200 {
				if _, err := st.Append(context.Background(), fill); err != nil {
					b.Fatal(err)
				}
			}
			seq, _ := st.LastSeq()
			img := coord.New(coord.Limits{}).Image()
			for _, s := range []int64{seq - 1, seq} { // two snapshots: the older one is the floor
				if err := st.WriteSnapshot(s, img, 1); err != nil {
					b.Fatal(err)
				}
			}
			one := &journal.Batch{TS: 2, Records: []journal.Record{bench.JournalRecord(0)}}
			var lat []time.Duration
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if _, err := st.Append(context.Background(), one); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(st.CompactedRows()), "rows-compacted")
		})
	}
}

// The restart issue 24 promises with the defaults: 100k live claims, and
// the most a hub's defaults leave after the newest snapshot
// (sequencer.DefaultSnapshotEvery records): open + snapshot + that tail,
// ≤ 300 ms.
func BenchmarkRestart100kClaims_DefaultSnapshotTail(b *testing.B) {
	path := filepath.Join(b.TempDir(), "100k.db")
	_, now, err := bench.FillJournal(path, 200_000, 100_000, sequencer.DefaultSnapshotEvery)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := bench.Restart(path, now, true); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/restart")
}
