package coord

import (
	"math"
	"strconv"
	"strings"
)

// Evidence is the closeout evidence a release may carry (PROTOCOL.md §2.5).
type Evidence struct {
	Evidence           []string
	Artifacts          []string
	KnownFailures      []string
	ChangedFiles       []string
	GeneratedArtifacts []string
	Approvals          []string
	Confidence         string
	Freshness          float64 // seconds; used only when HasFreshness
	HasFreshness       bool
}

// Receipt is the hub's advisory assessment of a release. The hub never claims
// the evidence is verified: the best it says is "unverified".
type Receipt struct {
	TaskID   string
	Owner    string
	Evidence Evidence
	Status   string   // degraded | unsupported | needs_freshness | stale | unverified
	Reasons  []string // why, in the order the checks ran
}

// Evidence caps (the reference's).
const (
	maxEvidenceItems = 50
	maxEvidenceChars = 500
	staleAfter       = 3600.0
)

func capList(in []string) []string {
	out := make([]string, 0, min(len(in), maxEvidenceItems))
	for _, s := range in {
		if len(out) == maxEvidenceItems {
			break
		}
		out = append(out, truncate(s, maxEvidenceChars))
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// cut on a rune boundary
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// present reports whether any evidence field was supplied at all.
func (e *Evidence) present() bool {
	return e != nil && (len(e.Evidence)+len(e.Artifacts)+len(e.KnownFailures)+len(e.ChangedFiles)+
		len(e.GeneratedArtifacts)+len(e.Approvals) > 0 || e.Confidence != "" || e.HasFreshness)
}

// assess computes the epistemic status of a release receipt, in the
// reference's order: degraded, unsupported, needs_freshness, stale,
// otherwise unverified.
func assess(task, owner string, in *Evidence) *Receipt {
	var e Evidence
	if in != nil {
		e = Evidence{
			Evidence: capList(in.Evidence), Artifacts: capList(in.Artifacts),
			KnownFailures: capList(in.KnownFailures), ChangedFiles: capList(in.ChangedFiles),
			GeneratedArtifacts: capList(in.GeneratedArtifacts), Approvals: capList(in.Approvals),
			Confidence: truncate(in.Confidence, maxEvidenceChars),
			Freshness:  in.Freshness, HasFreshness: in.HasFreshness && in.Freshness >= 0 && !math.IsInf(in.Freshness, 0),
		}
	}
	r := &Receipt{TaskID: task, Owner: owner, Evidence: e}
	positive := len(e.Evidence)+len(e.Artifacts)+len(e.ChangedFiles)+len(e.GeneratedArtifacts)+len(e.Approvals) > 0
	switch {
	case len(e.KnownFailures) > 0:
		r.Status, r.Reasons = "degraded", []string{"known failures reported"}
	case !positive:
		r.Status, r.Reasons = "unsupported", []string{"no positive evidence, artifact, changed file, generated artifact, or approval"}
	case !e.HasFreshness:
		r.Status, r.Reasons = "needs_freshness", []string{"positive evidence present", "evidence freshness not supplied"}
	case e.Freshness > staleAfter:
		r.Status, r.Reasons = "stale", []string{"positive evidence present", "evidence older than 3600 seconds"}
	default:
		r.Status, r.Reasons = "unverified", []string{"positive evidence present", "fresh evidence present but unverified"}
	}
	return r
}

// NoteText is the progress note a release with evidence posts, in the
// reference's format: "release receipt: evidence=a, b; ...".
func (r *Receipt) NoteText() string {
	var b strings.Builder
	b.WriteString("release receipt: ")
	parts := make([]string, 0, 10)
	add := func(k string, vs []string) {
		if len(vs) > 0 {
			parts = append(parts, k+"="+strings.Join(vs, ", "))
		}
	}
	add("evidence", r.Evidence.Evidence)
	add("artifacts", r.Evidence.Artifacts)
	add("known_failures", r.Evidence.KnownFailures)
	add("changed_files", r.Evidence.ChangedFiles)
	add("generated_artifacts", r.Evidence.GeneratedArtifacts)
	add("approvals", r.Evidence.Approvals)
	if r.Evidence.Confidence != "" {
		parts = append(parts, "confidence="+r.Evidence.Confidence)
	}
	if r.Evidence.HasFreshness {
		parts = append(parts, "freshness_seconds="+PyFloat(r.Evidence.Freshness))
	}
	parts = append(parts, "epistemic_status="+r.Status, "epistemic_reasons="+strings.Join(r.Reasons, ", "))
	b.WriteString(strings.Join(parts, "; "))
	return b.String()
}

// PyFloat formats f as Python's repr(float) does: the shortest round-trip
// digits, ".0" on integral values, exponent form below 1e-4 and from 1e16.
func PyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
