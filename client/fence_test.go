package client

import "testing"

// The write-path rule (INV-EF-2 on the write path): a writer may change a
// file only under a live exclusive claim of its own whose epoch is the one
// its checkout recorded; each other case has its own verdict, so the guard
// and the pre-commit check can say what to do.
func TestFence_EachCaseHasItsVerdict_INV_EF_2(t *testing.T) {
	const me, other = "p/me", "p/other"
	claims := []Claim{
		{TaskID: "OK", Owner: me, Worktree: "/w", Paths: []string{"ok"}, Epoch: 2},
		{TaskID: "NEW", Owner: me, Worktree: "/w", Paths: []string{"new"}, Epoch: 5},
		{TaskID: "UNREC", Owner: me, Worktree: "/w", Globs: []string{"unrec/*.go"}, Epoch: 1},
		{TaskID: "THEIRS", Owner: other, Worktree: "/w", Files: []string{"theirs.md"}, Epoch: 1},
		{TaskID: "READ", Owner: me, Worktree: "/w", Paths: []string{"read"}, Mode: "shared", Epoch: 1},
		{TaskID: "ELSEWHERE", Owner: other, Worktree: "/other", Paths: []string{"ok"}, Epoch: 1},
	}
	recs := []LeaseRecord{
		{Agent: me, TaskID: "OK", Worktree: "/w", Paths: []string{"ok"}, Epoch: 2},
		{Agent: me, TaskID: "NEW", Worktree: "/w", Paths: []string{"new"}, Epoch: 4},
		{Agent: me, TaskID: "LOST", Worktree: "/w", Paths: []string{"lost", "theirs.md"}, Epoch: 3},
	}
	for _, tc := range []struct {
		rel              string
		need, strict     bool
		verdict          WriteVerdict
		allowed          bool
		claimTask, recTo string
	}{
		{rel: "ok/a.go", verdict: WriteAllowed, allowed: true},
		{rel: "new/a.go", verdict: WriteSuperseded, claimTask: "NEW", recTo: "NEW"},
		{rel: "unrec/a.go", verdict: WriteUnrecorded, allowed: true, claimTask: "UNREC"},
		{rel: "unrec/a.go", strict: true, verdict: WriteUnrecorded, claimTask: "UNREC"},
		{rel: "unrec/a.md", verdict: WriteAllowed, allowed: true},
		{rel: "unrec/a.md", need: true, verdict: WriteUnclaimed},
		{rel: "unrec/a.md", strict: true, verdict: WriteUnclaimed},
		{rel: "theirs.md", verdict: WriteClaimed, claimTask: "THEIRS", recTo: "LOST"},
		{rel: "read/x", verdict: WriteShared, claimTask: "READ"},
		{rel: "lost/x", verdict: WriteGone, recTo: "LOST"},
	} {
		f := Fence{Claims: claims, Records: recs, Worktree: "/w", Root: "/repo", Agent: me, NeedClaim: tc.need, Strict: tc.strict}
		d := f.Check(tc.rel)
		if d.Verdict != tc.verdict || d.Allowed != tc.allowed {
			t.Errorf("%s (need %v strict %v): verdict %d allowed %v; want %d %v", tc.rel, tc.need, tc.strict, d.Verdict, d.Allowed, tc.verdict, tc.allowed)
			continue
		}
		if got := taskOf(d.Claim); got != tc.claimTask {
			t.Errorf("%s: claim %q; want %q", tc.rel, got, tc.claimTask)
		}
		if got := recTask(d.Record); got != tc.recTo {
			t.Errorf("%s: record %q; want %q", tc.rel, got, tc.recTo)
		}
	}
}

func taskOf(c *Claim) string {
	if c == nil {
		return ""
	}
	return c.TaskID
}

func recTask(r *LeaseRecord) string {
	if r == nil {
		return ""
	}
	return r.TaskID
}
