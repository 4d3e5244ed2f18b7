package bench

import (
	"context"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

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
