package main

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/hub"
)

// testClock is a hub clock the test moves by hand: leases lapse when the
// test says so, not when a timer fires.
type testClock struct{ bits atomic.Uint64 }

func newTestClock(t float64) *testClock {
	c := &testClock{}
	c.bits.Store(math.Float64bits(t))
	return c
}
func (c *testClock) now() float64         { return math.Float64frombits(c.bits.Load()) }
func (c *testClock) advance(secs float64) { c.bits.Store(math.Float64bits(c.now() + secs)) }

// commit runs a real `git commit`, which runs the installed pre-commit hook;
// it returns git's combined output and whether the commit was made.
func commit(t *testing.T, msg string) (string, bool) {
	t.Helper()
	cmd := exec.Command("git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", msg)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// stage writes text to file (relative to the repository) and stages it.
func stage(t *testing.T, dir, file, text string) {
	t.Helper()
	p := filepath.Join(dir, file)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, "add", file)
}

// TestWritePath_PreCommitAndGuardRefuseASupersededWriter_INV_EF_2 is the
// story of docs/claims.md, "Write-path fencing", end to end: a real hub over
// a real socket, a real repository, real `git commit`s running the
// installed hook (the synapse binary, a separate process), and the guard.
func TestWritePath_PreCommitAndGuardRefuseASupersededWriter_INV_EF_2(t *testing.T) {
	clock := newTestClock(goldenClock)
	uri := startCLIHub(t, hub.Config{Clock: clock.now})
	dir := inDir(t)
	bin := buildSynapse(t)
	alpha := []string{"--uri", uri, "--name", "proj/alpha"}
	if code, _, errOut := runCmd(append([]string{"git-hook", "install", "--command", bin}, alpha...)...); code != 0 {
		t.Fatalf("install: %s", errOut)
	}
	guardSays := func(file string) string {
		t.Helper()
		code, out, errOut := runGuardWith(claudeHookJSON(dir, "Edit", filepath.Join(dir, file)), alpha...)
		if code != 0 {
			t.Fatalf("guard exit %d: %s", code, errOut)
		}
		return denied(t, out)
	}
	claim := func(args ...string) {
		t.Helper()
		if code, _, errOut := runCmd(append(append([]string{"claim"}, args...), alpha...)...); code != 0 {
			t.Fatalf("claim %v: %s", args, errOut)
		}
		waitOffline(t, uri, "proj/alpha")
	}

	// Granted and recorded: alpha commits and edits its files.
	claim("T1", "--paths", "src", "--ttl", "1m")
	stage(t, dir, "src/a.go", "package a\n")
	if out, ok := commit(t, "first"); !ok {
		t.Fatalf("a commit under a live, recorded claim was refused:\n%s", out)
	}
	if r := guardSays("src/a.go"); r != "" {
		t.Fatalf("guard denied a recorded claim: %s", r)
	}

	// alpha pauses; its lease lapses and bravo takes the task.
	clock.advance(3600)
	bravo := agent(t, uri, "proj/bravo")
	ctx := context.Background()
	if _, err := bravo.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil {
		t.Fatalf("bravo could not take the lapsed task: %v", err)
	}
	stage(t, dir, "src/a.go", "package a // alpha, late\n")
	if out, ok := commit(t, "late"); ok || !strings.Contains(out, "src/a.go: claimed by proj/bravo (task T1); your claim on 'T1'") || !strings.Contains(out, "is gone") {
		t.Fatalf("held by someone else: the commit went through or says the wrong thing (made %v):\n%s", ok, out)
	}
	if r := guardSays("src/a.go"); !strings.Contains(r, "lapsed or was released") || !strings.Contains(r, "claimed by proj/bravo (task T1)") {
		t.Fatalf("guard: %q", r)
	}

	// bravo lets go: nothing covers the file, but alpha's recorded grant did.
	if _, err := bravo.Release(ctx, "T1", client.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, ok := commit(t, "late"); ok || !strings.Contains(out, "your claim on 'T1'") || !strings.Contains(out, "is gone: expired or released") {
		t.Fatalf("gone: made %v:\n%s", ok, out)
	}
	if r := guardSays("src/a.go"); !strings.Contains(r, "is gone") || !strings.Contains(r, "re-check your work") {
		t.Fatalf("guard: %q", r)
	}

	// Another process takes the task under alpha's own name (a restarted
	// agent, a takeover): a newer epoch than the one this checkout recorded.
	other := agent(t, uri, "proj/alpha")
	if _, err := other.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil {
		t.Fatal(err)
	}
	other.Close()
	waitOffline(t, uri, "proj/alpha")
	out, ok := commit(t, "late")
	if ok || !strings.Contains(out, "superseded: your claim on 'T1' is live under epoch") {
		t.Fatalf("superseded: made %v:\n%s", ok, out)
	}
	if r := guardSays("src/a.go"); !strings.Contains(r, "re-granted since you recorded it") || !strings.Contains(r, "synapse claim T1 --paths src --name proj/alpha") {
		t.Fatalf("guard: %q", r)
	}

	// Renewing would launder the newer epoch: refused.
	if code, _, errOut := runCmd(append([]string{"renew", "T1"}, alpha...)...); code != exitRefused || !strings.Contains(errOut, "re-granted since") {
		t.Fatalf("renew of a superseded claim: exit %d: %s", code, errOut)
	}
	waitOffline(t, uri, "proj/alpha")

	// Re-claimed (after re-checking the work): allowed again.
	claim("T1", "--paths", "src")
	if out, ok := commit(t, "after re-claim"); !ok {
		t.Fatalf("refused after re-claiming:\n%s", out)
	}
	if r := guardSays("src/a.go"); r != "" {
		t.Fatalf("guard after re-claiming: %s", r)
	}

	// A file outside every claim: the guard denies it; the default hook lets
	// it through, --strict refuses it.
	if r := guardSays("docs/x.md"); !strings.Contains(r, "hold no claim covering docs/x.md") {
		t.Fatalf("guard, unclaimed: %q", r)
	}
	stage(t, dir, "docs/x.md", "x\n")
	if code, _, errOut := runCmd(append([]string{"git-hook", "check", "--strict"}, alpha...)...); code != exitRefused || !strings.Contains(errOut, "docs/x.md: no claim of yours covers it") {
		t.Fatalf("--strict, unclaimed: exit %d: %s", code, errOut)
	}
	if out, ok := commit(t, "docs"); !ok {
		t.Fatalf("the default hook refused an unclaimed file:\n%s", out)
	}

	// Released through the CLI: the record goes, and the check no longer
	// calls the file's claim gone (nothing of alpha's covers it).
	if code, _, errOut := runCmd(append([]string{"release", "T1"}, alpha...)...); code != 0 {
		t.Fatalf("release: %s", errOut)
	}
	if recs, err := ledgerFor(dir).Records(); err != nil || len(recs) != 0 {
		t.Fatalf("ledger after release: %v %+v", err, recs)
	}
	stage(t, dir, "src/a.go", "package a // after release\n")
	if out, ok := commit(t, "after release"); !ok {
		t.Fatalf("a released, unclaimed file refused by the default hook:\n%s", out)
	}

	// A claim that lapsed (here: released by another process under the same
	// name) leaves a record; releasing it from here drops the record too.
	claim("T2", "--paths", "lib")
	other = agent(t, uri, "proj/alpha")
	if _, err := other.Release(ctx, "T2", client.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	other.Close()
	waitOffline(t, uri, "proj/alpha")
	if code, _, errOut := runCmd(append([]string{"release", "T2"}, alpha...)...); code != exitRefused || !strings.Contains(errOut, "not currently claimed") {
		t.Fatalf("release of a gone claim: exit %d: %s", code, errOut)
	}
	if _, ok, err := ledgerFor(dir).Lookup("proj/alpha", "T2"); ok || err != nil {
		t.Fatalf("the gone claim's record survived its release: %v", err)
	}
}

// TestFenceFile_Rules_INV_EF_2 pins each verdict of the write-path check,
// the same for the guard and the pre-commit check.
func TestFenceFile_Rules_INV_EF_2(t *testing.T) {
	const me, root = "proj/alpha", "/repo"
	live := []client.Claim{
		{TaskID: "MINE", Owner: me, Paths: []string{"src"}, Epoch: 7},
		{TaskID: "OTHERS", Owner: "proj/bravo", Paths: []string{"docs"}, Epoch: 8},
		{TaskID: "UNREC", Owner: me, Paths: []string{"lib"}, Epoch: 9},
		{TaskID: "ELSEWHERE", Owner: me, Worktree: "wt-b", Epoch: 10},
	}
	rec := func(task string, epoch int64, paths ...string) client.LeaseRecord {
		return client.LeaseRecord{Agent: me, TaskID: task, Epoch: epoch, Paths: paths}
	}
	for _, tc := range []struct {
		name      string
		recs      []client.LeaseRecord
		file      string
		needClaim bool // the guard
		strict    bool
		allowed   bool
		want      string // a substring of the short reason, or of the warning when allowed
	}{
		{"recorded epoch is the live one", []client.LeaseRecord{rec("MINE", 7, "src")}, "src/a.go", true, true, true, ""},
		{"live under a newer epoch: superseded", []client.LeaseRecord{rec("MINE", 5, "src")}, "src/a.go", false, false, false, "superseded: your claim on 'MINE' is live under epoch 7, you recorded epoch 5"},
		{"someone else's claim", nil, "docs/a.md", false, false, false, "claimed by proj/bravo (task OTHERS)"},
		{"someone else's claim over my lapsed one", []client.LeaseRecord{rec("OLD", 3, "docs")}, "docs/a.md", false, false, false, "claimed by proj/bravo (task OTHERS); your claim on 'OLD' (epoch 3) is gone"},
		{"recorded, now gone", []client.LeaseRecord{rec("OLD", 3, "pkg")}, "pkg/x.go", false, false, false, "your claim on 'OLD' (epoch 3) is gone"},
		{"mine but never recorded: allowed with a warning", nil, "lib/x.go", true, false, true, "recorded no grant"},
		{"mine but never recorded, --strict", nil, "lib/x.go", true, true, false, "was not recorded in this checkout (--strict)"},
		{"nobody's, pre-commit", nil, "other/x.go", false, false, true, ""},
		{"nobody's, guard", nil, "other/x.go", true, false, false, "no claim of yours covers it"},
		{"nobody's, --strict", nil, "other/x.go", false, true, false, "no claim of yours covers it"},
		{"a record for another agent fences nothing", []client.LeaseRecord{{Agent: "proj/carol", TaskID: "MINE", Epoch: 1, Paths: []string{"src"}}}, "src/a.go", false, false, true, "recorded no grant"},
		{"another worktree's claim covers nothing here", nil, "x.go", false, false, true, ""},
	} {
		fc := fenceCheck{claims: live, recs: tc.recs, root: root, me: me, needClaim: tc.needClaim, strict: tc.strict}
		v := fc.file(tc.file)
		got := v.short
		if v.allowed {
			got = v.warn
		}
		if v.allowed != tc.allowed || !strings.Contains(got, tc.want) || tc.want == "" && got != "" {
			t.Errorf("%s: allowed %v, %q; want allowed %v, %q", tc.name, v.allowed, got, tc.allowed, tc.want)
		}
		if !v.allowed && v.reason == "" {
			t.Errorf("%s: refused without a reason", tc.name)
		}
	}
}

// Every renewal is a fresh epoch: `synapse lock` records each one, so a
// commit made by its command after renewals is the lock holder's own, not a
// superseded writer's (even under --strict, which refuses unrecorded claims).
func TestWritePath_LockRecordsItsRenewals_INV_EF_2(t *testing.T) {
	uri := startCLIHub(t, hub.Config{Clock: realClock, Limits: coord.Limits{MinTTL: 1}})
	dir := inDir(t)
	bin := buildSynapse(t)
	alpha := []string{"--uri", uri, "--name", "proj/alpha"}
	if code, _, errOut := runCmd(append([]string{"git-hook", "install", "--strict", "--command", bin}, alpha...)...); code != 0 {
		t.Fatalf("install: %s", errOut)
	}
	stage(t, dir, "src/a.go", "package a\n")
	ledger := ledgerFor(dir).Path
	// The command waits (10 s at most) until the ledger changes, i.e. until
	// the keeper renewed and recorded a fresh epoch, then commits.
	script := `first=$(cat "$1"); i=0
while [ "$(cat "$1")" = "$first" ]; do i=$((i+1)); [ $i -gt 200 ] && exit 9; sleep 0.05; done
exec git -c user.name=t -c user.email=t@example.com commit -q -m locked`
	code, _, errOut := runCmd(append([]string{"lock", "T1", "--paths", "src", "--ttl", "1s"}, append(alpha, "--", "sh", "-c", script, "sh", ledger)...)...)
	if code != 0 {
		t.Fatalf("lock: exit %d (9: no renewal was recorded):\n%s", code, errOut)
	}
	if log, err := gitOut(dir, "log", "--oneline"); err != nil || !strings.Contains(log, "locked") {
		t.Fatalf("no commit: %v %s", err, log)
	}
	if recs, err := ledgerFor(dir).Records(); err != nil || len(recs) != 0 {
		t.Fatalf("the lock's record outlived it: %v %+v", err, recs)
	}
}

// A claim of NAME's that this checkout never recorded (made through the
// SDK here) cannot be told from a superseded one: the guard allows the edit
// with a warning, and --strict denies it; the pre-commit check likewise.
func TestGuard_UnrecordedClaimWarnsAndStrictDenies_INV_EF_2(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	dir := inDir(t)
	me := agent(t, uri, "proj/alpha")
	if _, err := me.Claim(context.Background(), client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil {
		t.Fatal(err)
	}
	args := []string{"--uri", uri, "--name", "proj/alpha"}
	in := claudeHookJSON(dir, "Edit", filepath.Join(dir, "src/a.go"))
	code, out, errOut := runGuardWith(in, args...)
	if code != 0 || denied(t, out) != "" || !strings.Contains(errOut, "recorded no grant") {
		t.Fatalf("unrecorded: exit %d, %q, stderr %q", code, out, errOut)
	}
	if _, out, _ := runGuardWith(in, append(args, "--strict")...); !strings.Contains(denied(t, out), "recorded no grant") {
		t.Fatalf("unrecorded, --strict: %q", out)
	}
	stage(t, dir, "src/a.go", "package a\n")
	if code, _, errOut := runCmd(append([]string{"git-hook", "check"}, args...)...); code != 0 || !strings.Contains(errOut, "warning") {
		t.Fatalf("pre-commit, unrecorded: exit %d %s", code, errOut)
	}
	if code, _, errOut := runCmd(append([]string{"git-hook", "check", "--strict"}, args...)...); code != exitRefused || !strings.Contains(errOut, "was not recorded in this checkout") {
		t.Fatalf("pre-commit, unrecorded, --strict: exit %d %s", code, errOut)
	}
}
