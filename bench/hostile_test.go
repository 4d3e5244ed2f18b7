package bench

import (
	"context"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

// --hostile: a quiet phase, then each kind's phase beside its sockets; the
// good agent's cycles complete in every phase, each phase reports its
// ratio to the quiet one, and what the hub did (here: pacing past a burst
// of 2, closing oversized frames 1009, refusing wrong tokens 4010); the
// bound baseline sends its registrations and nothing more.
func TestRunLoad_HostilePhasesRunBesideTheAgents(t *testing.T) {
	uri := hubtest.Start(t, hub.Config{MalformedBurst: 2, Token: "s3cret"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kinds, err := ParseHostileKinds("malformed,oversized,bruteforce,takeover,validflood,bound")
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunLoad(ctx, LoadConfig{URI: uri, Token: "s3cret", Agents: 1, Hostile: 3, HostileKinds: kinds, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cycles == 0 || len(res.Hostile) != 6 {
		t.Fatalf("quiet cycles %d, %d hostile phases: want cycles and six phases", res.Cycles, len(res.Hostile))
	}
	for _, h := range res.Hostile {
		if h.Cycles == 0 || h.Sockets != 3 || h.Sent == 0 || h.P99Ratio == 0 {
			t.Fatalf("phase %+v: want cycles beside frames sent, and a ratio to quiet", h)
		}
	}
	if m := res.Hostile[0]; m.Hub["synapse_malformed_paced_total"] == 0 {
		t.Fatalf("malformed phase: hub counters %v, want pacing", m.Hub)
	}
	if o := res.Hostile[1]; o.Ends["1009"] == 0 {
		t.Fatalf("oversized phase: ends %v, want 1009", o.Ends)
	}
	if b := res.Hostile[2]; b.Ends["4010"] == 0 || b.Hub["synapse_auth_failures_total"] == 0 {
		t.Fatalf("bruteforce phase: ends %v, hub %v: want 4010 and failures counted", b.Ends, b.Hub)
	}
	if b := res.Hostile[5]; b.Sent != 3 || b.Dials != 3 {
		t.Fatalf("bound phase: %d sent on %d sockets, want each socket's registration only", b.Sent, b.Dials)
	}
}

func TestParseHostileKinds(t *testing.T) {
	p, err := ParseHostileKinds("mix, slowreader")
	if err != nil || len(p) != 2 || len(p[0]) != len(HostileKinds) || p[1][0] != "slowreader" {
		t.Fatalf("%v %v", p, err)
	}
	if b, err := ParseHostileKinds("bound"); err != nil || len(b) != 1 || b[0][0] != "bound" {
		t.Fatalf("the bound baseline: %v %v", b, err)
	}
	if _, err := ParseHostileKinds("garbage"); err == nil {
		t.Fatal("an unknown kind was accepted")
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
