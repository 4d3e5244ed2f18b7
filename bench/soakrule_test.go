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

func TestJudgePerOp_JournalMustGrowAtAConstantCostPerOp(t *testing.T) {
	ops := func(s float64) float64 { return 1000 * s }
	tm, opsV := series(ops, 0)
	constant := make([]float64, len(tm))
	growing := make([]float64, len(tm))
	for i, s := range tm {
		constant[i] = 4<<20 + 300*opsV[i] + float64(i%3)*50_000 // 300 B/op, a WAL that wobbles
		growing[i] = 4<<20 + 300*opsV[i] + 2*s*s*s              // each op costs more than the last
	}
	if tr := JudgePerOp("journal_bytes_per_op", tm, constant, opsV, 0.5, 32); tr.Verdict != Levelled {
		t.Errorf("constant cost: %s (%s)", tr.Verdict, tr.Reason)
	}
	if tr := JudgePerOp("journal_bytes_per_op", tm, growing, opsV, 0.5, 32); tr.Verdict != Grew {
		t.Errorf("growing cost: %s (%s)", tr.Verdict, tr.Reason)
	}
	stalled := make([]float64, len(tm)) // no ops at all
	if tr := JudgePerOp("journal_bytes_per_op", tm, constant, stalled, 0.5, 32); tr.Verdict != NotJudged {
		t.Errorf("no ops: %s (%s)", tr.Verdict, tr.Reason)
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
