package bench

import (
	"context"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

// --hostile: the flood runs through the cycling phase and the good agent's
// cycles still complete; the flood's frames are counted, and the hub's
// pacing (a burst of 2 here) leaves them unread rather than ending them.
func TestRunLoad_HostileFloodRunsBesideTheAgents(t *testing.T) {
	uri := hubtest.Start(t, hub.Config{MalformedBurst: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := RunLoad(ctx, LoadConfig{URI: uri, Agents: 1, Hostile: 3, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cycles == 0 || res.Hostile != 3 || res.HostileFrames < 3 {
		t.Fatalf("cycles %d, hostile %d sent %d frames: want cycles beside a running flood", res.Cycles, res.Hostile, res.HostileFrames)
	}
	if res.HostileClosed != 0 {
		t.Fatalf("the hub closed %d flooding sockets; pacing keeps them open", res.HostileClosed)
	}
}

// A flood frame is malformed JSON of each kind: garbage, nesting past the
// decoder's limit, and a large frame.
func TestFloodFrame_CyclesItsKinds(t *testing.T) {
	seen := map[int]bool{}
	for k := range 16 {
		seen[len(floodFrame(k))] = true
	}
	if len(seen) != 3 || len(floodFrame(15)) < 64<<10 {
		t.Fatalf("frame sizes %v: want three kinds, the 16th of 64 KiB", seen)
	}
}
