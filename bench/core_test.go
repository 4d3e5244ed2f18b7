package bench

import (
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// The fixtures must be what the figures say they are.

func TestLogSource_IsClaimReleaseOverAThousandLiveTasks(t *testing.T) {
	src, s := NewLogSource(), coord.New(coord.Limits{})
	var claims, releases int
	for range 30 {
		for _, ev := range src.Next(10_000) {
			switch ev.(type) {
			case coord.ClaimGranted:
				claims++
			case coord.Released:
				releases++
			default:
				t.Fatalf("unexpected event %T in the log", ev)
			}
			s.Apply(ev)
		}
		if n := s.ClaimCount(); n > 1000 {
			t.Fatalf("%d live claims: releases no longer follow claims", n)
		}
	}
	if releases < claims-1000 {
		t.Fatalf("%d claims but only %d releases", claims, releases)
	}
}

func TestCoreFixtures_HoldWhatTheyClaim(t *testing.T) {
	if n := CoreState(5000).ClaimCount(); n != 5000 {
		t.Fatalf("CoreState(5000) holds %d claims", n)
	}
	s := MixedState(2000)
	if o := s.Tick(t0 + 3600); len(o.Events) != 2000 || s.ClaimCount() != 2000 {
		t.Fatalf("MixedState: tick expired %d events, %d left; want 2000 and 2000", len(o.Events), s.ClaimCount())
	}
	s = CoreState(1000)
	if _, ref := s.Decide(NewClaim(7), t0+1); ref != nil {
		t.Fatalf("NewClaim conflicts with the fixture: %v", ref)
	}
}
