package bench

// soakrule.go decides whether a soak's resource curve levelled off. It is
// pure: series in, verdict out, so the rule is tested on synthetic curves.

import (
	"fmt"
	"slices"
)

// Verdicts of a Trend.
const (
	Levelled  = "levelled"   // within its allowance, or no longer climbing
	Grew      = "grew"       // grew past its allowance and still climbing: a leak
	NotJudged = "not judged" // too few samples in the middle or last third
)

// minThirdSamples is the fewest samples the middle and the last third each
// need before a curve is judged.
const minThirdSamples = 3

// Trend is one resource's verdict over a soak. The run is cut into thirds
// by time: the first is warm-up and ignored; the middle third's median is
// the baseline; the last third is where a leak shows.
type Trend struct {
	Resource string  `json:"resource"`
	Verdict  string  `json:"verdict"`
	Middle   float64 `json:"middle_median"` // median of the middle third
	Last     float64 `json:"last_median"`   // median of the last third
	// Allowance is the growth tolerated: max(tolerance × Middle, floor).
	Allowance float64 `json:"allowance"`
	// Rise is what the least-squares line through the last third climbs
	// across it (slope × its duration): how much it is still growing.
	Rise   float64 `json:"last_third_rise"`
	Reason string  `json:"reason"`
}

// JudgeGrowth applies the soak's rule to one resource sampled at times t
// (seconds from the start, increasing) with values v: it grew, and fails,
// when
//
//	median(last third) − median(middle third) > allowance, and
//	the last third's least-squares rise       > allowance / 2
//
// with allowance = max(tolerance × median(middle third), floor). The first
// condition says it grew beyond noise after the warm-up; the second that it
// has not stopped: a resource that stepped up once (a cache filling, a
// buffer pool growing to the load) and then stayed flat passes.
func JudgeGrowth(resource string, t, v []float64, tolerance, floor float64) Trend {
	tr := Trend{Resource: resource, Verdict: NotJudged}
	mid, last := thirds(t)
	if last-mid < minThirdSamples || len(t)-last < minThirdSamples {
		tr.Reason = fmt.Sprintf("%d samples: too few to judge (at least %d in the middle and the last third)", len(t), minThirdSamples)
		return tr
	}
	tr.Middle, tr.Last = median(slices.Clone(v[mid:last])), median(slices.Clone(v[last:])) // median sorts
	tr.Allowance = max(tolerance*tr.Middle, floor)
	tr.Rise = slope(t[last:], v[last:]) * (t[len(t)-1] - t[last])
	grew := tr.Last-tr.Middle > tr.Allowance
	climbing := tr.Rise > tr.Allowance/2
	tr.Verdict = Levelled
	switch {
	case grew && climbing:
		tr.Verdict = Grew
		tr.Reason = fmt.Sprintf("median %.4g → %.4g (+%.4g, allowed %.4g) and still climbing: %+.4g across the last third", tr.Middle, tr.Last, tr.Last-tr.Middle, tr.Allowance, tr.Rise)
	case grew:
		tr.Reason = fmt.Sprintf("median %.4g → %.4g (+%.4g, allowed %.4g) but flat in the last third (%+.4g)", tr.Middle, tr.Last, tr.Last-tr.Middle, tr.Allowance, tr.Rise)
	default:
		tr.Reason = fmt.Sprintf("median %.4g → %.4g (%+.4g, allowed %.4g)", tr.Middle, tr.Last, tr.Last-tr.Middle, tr.Allowance)
	}
	return tr
}

// thirds returns the index of the first sample of the middle third and of
// the last third of t, cut by time.
func thirds(t []float64) (mid, last int) {
	if len(t) == 0 {
		return 0, 0
	}
	span := t[len(t)-1] - t[0]
	mid = len(t)
	for i, x := range t {
		if x-t[0] >= span/3 {
			mid = i
			break
		}
	}
	last = len(t)
	for i, x := range t {
		if x-t[0] >= 2*span/3 {
			last = i
			break
		}
	}
	return mid, last
}

// slope is the least-squares slope of v against t (0 for fewer than two
// distinct times).
func slope(t, v []float64) float64 {
	n := float64(len(t))
	if n < 2 {
		return 0
	}
	var st, sv float64
	for i := range t {
		st, sv = st+t[i], sv+v[i]
	}
	mt, mv := st/n, sv/n
	var num, den float64
	for i := range t {
		num += (t[i] - mt) * (v[i] - mv)
		den += (t[i] - mt) * (t[i] - mt)
	}
	if den == 0 {
		return 0
	}
	return num / den
}
