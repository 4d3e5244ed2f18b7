package bench

import (
	"math"
	"testing"
)

// series samples f every 10 s for 10 minutes, with a deterministic wobble of
// ±wobble (a sawtooth, as a GC'd heap or churning sockets give).
func series(f func(sec float64) float64, wobble float64) (t, v []float64) {
	for i := 0; i <= 60; i++ {
		sec := float64(i * 10)
		t = append(t, sec)
		v = append(v, f(sec)+wobble*float64(i%5-2)/2)
	}
	return t, v
}

func TestJudgeGrowth_FailsOnGrowthThatDoesNotLevelOff(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func(float64) float64
	}{
		{"linear leak, 100 KiB/s", func(s float64) float64 { return 30_000 + 100*s }},
		{"slow leak after a flat start, 60 KiB/s", func(s float64) float64 { return 30_000 + 60*max(0, s-200) }},
		{"accelerating", func(s float64) float64 { return 30_000 + 0.2*s*s }},
	} {
		tm, v := series(c.f, 2_000)
		if tr := JudgeGrowth("rss_kb", tm, v, 0.10, 8<<10); tr.Verdict != Grew {
			t.Errorf("%s: %s (%s), want %s", c.name, tr.Verdict, tr.Reason, Grew)
		}
	}
}

func TestJudgeGrowth_PassesOnCurvesThatLevelOff(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func(float64) float64
	}{
		{"flat", func(float64) float64 { return 30_000 }},
		{"warm-up then flat", func(s float64) float64 { return 30_000 + 20_000*(1-math.Exp(-s/40)) }},
		{"a step in the middle third, flat after", func(s float64) float64 {
			if s < 300 {
				return 30_000
			}
			return 45_000
		}},
		{"slow growth within the allowance", func(s float64) float64 { return 100_000 + 5*s }},
	} {
		tm, v := series(c.f, 2_000)
		if tr := JudgeGrowth("rss_kb", tm, v, 0.10, 8<<10); tr.Verdict != Levelled {
			t.Errorf("%s: %s (%s), want %s", c.name, tr.Verdict, tr.Reason, Levelled)
		}
	}
}

func TestJudgeGrowth_TooFewSamplesAreNotJudged(t *testing.T) {
	tm, v := []float64{0, 1, 2, 3, 4}, []float64{1, 2, 3, 4, 5000}
	if tr := JudgeGrowth("goroutines", tm, v, 0.10, 32); tr.Verdict != NotJudged {
		t.Errorf("%s (%s), want %s", tr.Verdict, tr.Reason, NotJudged)
	}
}

// The journal must level off (issue 24): one growing at a constant cost
// per operation — what the soak used to accept — grows without bound and
// fails; one that climbs to live state plus its windows and stays there,
// wobbling by a snapshot or a WAL, passes.
func TestJudgeGrowth_JournalMustLevelOffNotGrowPerOp(t *testing.T) {
	tm, _ := series(func(float64) float64 { return 0 }, 0)
	perOp := make([]float64, len(tm))
	plateau := make([]float64, len(tm))
	for i, s := range tm {
		ops := 1000 * s
		perOp[i] = 4<<20 + 300*ops + float64(i%3)*50_000                 // 300 B/op forever
		plateau[i] = 4<<20 + 300*min(ops, 60_000) + float64(i%3)*(4<<20) // the window fills, then rows go as they come
	}
	if tr := JudgeGrowth("journal_bytes", tm, perOp, 0.10, soakFloorJournalBytes); tr.Verdict != Grew {
		t.Errorf("constant cost per op: %s (%s), want %s", tr.Verdict, tr.Reason, Grew)
	}
	if tr := JudgeGrowth("journal_bytes", tm, plateau, 0.10, soakFloorJournalBytes); tr.Verdict != Levelled {
		t.Errorf("plateau: %s (%s), want %s", tr.Verdict, tr.Reason, Levelled)
	}
}

func TestSoakResult_FailsNamingTheResourceThatGrew(t *testing.T) {
	r := SoakResult{Tolerance: 0.10, Journal: true}
	for i := 0; i <= 30; i++ {
		r.Samples = append(r.Samples, SoakSample{Seconds: float64(10 * i), RSSKB: 30_000, HeapLiveBytes: 8 << 20,
			Goroutines: 40 + 10*int64(i), FDs: 45, JournalBytes: 1 << 20 * int64(i+1), Ops: 1000 * int64(i)})
	}
	r.judge()
	if r.Pass || len(r.Failures) != 1 || r.Failures[0][:len("goroutines:")] != "goroutines:" {
		t.Fatalf("pass %v, failures %q; want one, for goroutines", r.Pass, r.Failures)
	}
}

func TestSoakResult_FailsOnFleetErrorsAndAStalledFleet(t *testing.T) {
	r := SoakResult{Tolerance: 0.10, FirstError: "soakc/c1: dial: connection refused"}
	for i := 0; i <= 30; i++ {
		ops := int64(min(i, 20)) * 1000 // nothing after 200 s
		r.Samples = append(r.Samples, SoakSample{Seconds: float64(10 * i), RSSKB: 30_000, Goroutines: 40, FDs: 45, Ops: ops, Errors: 3})
	}
	r.judge()
	if r.Pass || len(r.Failures) != 2 {
		t.Fatalf("pass %v, failures %q; want the stall and the errors", r.Pass, r.Failures)
	}
}
