package bench

import (
	"context"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

// --rate R: worker i of n runs its k-th cycle (k + i/n)/R seconds into the
// phase, so the n workers offer n×R cycles a second spread over each
// period; without a rate every cycle is due at once (saturation).
func TestCycleDue_SpreadsTheWorkersOverEachPeriod(t *testing.T) {
	for _, tc := range []struct {
		i, n, k int
		rate    float64
		want    time.Duration
	}{
		{0, 1, 0, 200, 0},
		{0, 1, 1, 200, 5 * time.Millisecond},
		{0, 1, 200, 200, time.Second}, // 200 cycles in the first second
		{0, 4, 0, 10, 0},
		{1, 4, 0, 10, 25 * time.Millisecond}, // a quarter of a 100 ms period
		{3, 4, 0, 10, 75 * time.Millisecond},
		{3, 4, 2, 10, 275 * time.Millisecond},
		{2, 32, 7, 0, 0}, // saturation
		{0, 0, 3, 10, 0},
	} {
		if got := cycleDue(tc.i, tc.n, tc.k, tc.rate); got != tc.want {
			t.Errorf("cycleDue(%d, %d, %d, %g) = %v, want %v", tc.i, tc.n, tc.k, tc.rate, got, tc.want)
		}
	}
	// Every worker's schedule offers rate cycles a second: its cycle k+R
	// is due one second after its cycle k.
	for i := range 5 {
		if d := cycleDue(i, 5, 57, 20) - cycleDue(i, 5, 37, 20); d != time.Second {
			t.Errorf("worker %d: 20 cycles at 20/s span %v", i, d)
		}
	}
}

// --import: after the cycling phase the first agent declares the tasks
// twice, waiting for each answer and pipelined, and both imports end with
// every declaration answered (a refusal would fail the run, not pass for
// speed).
func TestRunLoad_BoardImportDeclaresEveryTaskBothWays(t *testing.T) {
	uri := hubtest.Start(t, hub.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := RunLoad(ctx, LoadConfig{URI: uri, Agents: 1, Duration: 100 * time.Millisecond, Import: 300})
	if err != nil {
		t.Fatal(err)
	}
	im := res.Import
	if im == nil || im.Tasks != 300 || im.SequentialSeconds <= 0 || im.PipelinedSeconds <= 0 {
		t.Fatalf("board import %+v: want 300 tasks imported both ways", im)
	}
}

// A refused declaration (here the board is full) fails the import.
func TestRunLoad_BoardImportFailsOnARefusal(t *testing.T) {
	limits := coord.DefaultLimits()
	limits.MaxBoardTasks = 10
	uri := hubtest.Start(t, hub.Config{Limits: limits})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := RunLoad(ctx, LoadConfig{URI: uri, Agents: 1, Duration: 100 * time.Millisecond, Import: 20}); err == nil {
		t.Fatal("an import past the board's limit reported success")
	}
}
