package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

func TestClaim_GrantedGolden(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	code, out, errOut := runCmd("claim", "T1", "--paths", "src/core", "--paths", "docs/a.md", "--uri", uri, "--name", "proj/alpha")
	want := `Claimed 'T1' as proj/alpha (epoch 1).
  lease:    until 2026-06-28T13:00:00Z (in 1h0m0s); renew with 'synapse renew T1'
  paths:    src/core, docs/a.md
`
	if code != 0 || out != want {
		t.Fatalf("exit %d\n--- got\n%s--- want\n%s--- stderr\n%s", code, out, want, errOut)
	}
}

func TestClaim_RefusedGoldenExitsOne(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	if code, _, errOut := runCmd("claim", "T1", "--paths", "src", "--uri", uri, "--name", "proj/alpha"); code != 0 {
		t.Fatal(errOut)
	}
	code, out, errOut := runCmd("claim", "T1", "--uri", uri, "--name", "proj/bravo")
	want := `synapse claim: Task 'T1' is already claimed by proj/alpha.
Wait for it with 'synapse wait T1', or ask proj/alpha with 'synapse send proj/alpha TEXT'.
`
	if code != exitRefused || out != "" || errOut != want {
		t.Fatalf("exit %d stdout %q\n--- got\n%s--- want\n%s", code, out, errOut, want)
	}
	code, _, errOut = runCmd("claim", "T2", "--paths", "src/main.go", "--uri", uri, "--name", "proj/bravo")
	want = `synapse claim: Task 'T2' file scope conflicts with 'T1' held by proj/alpha.
Narrow --paths, wait with 'synapse wait T1', or ask proj/alpha with 'synapse send proj/alpha TEXT'.
`
	if code != exitRefused || errOut != want {
		t.Fatalf("exit %d\n--- got\n%s--- want\n%s", code, errOut, want)
	}
}

func TestClaim_JSONHasTheDocumentedFields(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	code, out, errOut := runCmd("claim", "T1", "--paths", "a", "--ttl", "10m", "--note", "n", "--json", "--uri", uri, "--name", "proj/alpha")
	if code != 0 {
		t.Fatal(errOut)
	}
	var got claimJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := claimJSON{Granted: true, TaskID: "T1", Owner: "proj/alpha", Epoch: 1, Status: "claimed", Paths: []string{"a"}, Note: "n",
		LeaseExpiresAt: goldenClock + 600, LeaseExpires: "2026-06-28T12:10:00Z", TTLSeconds: 600}
	if g, w := mustJSON(got), mustJSON(want); g != w {
		t.Fatalf("got  %s\nwant %s", g, w)
	}
	code, out, _ = runCmd("claim", "T1", "--json", "--uri", uri, "--name", "proj/bravo")
	var ref map[string]any
	if err := json.Unmarshal([]byte(out), &ref); err != nil || code != exitRefused {
		t.Fatalf("exit %d: %v: %s", code, err, out)
	}
	if ref["granted"] != false || ref["code"] != "LEASE_LIVE" || ref["holder"] != "proj/alpha" || ref["task_id"] != "T1" {
		t.Fatalf("refusal JSON %s", out)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestReleaseRenewUpdateCheckpointHandoff(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	as := func(name string, args ...string) (int, string, string) {
		return runCmd(append(args, "--uri", uri, "--name", name)...)
	}
	if code, _, e := as("proj/alpha", "claim", "T1", "--paths", "x"); code != 0 {
		t.Fatal(e)
	}
	if code, out, e := as("proj/alpha", "renew", "T1", "--ttl", "5m"); code != 0 || !strings.Contains(out, "Renewed 'T1' as proj/alpha (epoch 2)") || !strings.Contains(out, "in 5m0s") {
		t.Fatalf("renew: %d %s %s", code, out, e)
	}
	if code, _, e := as("proj/bravo", "renew", "T1"); code != exitRefused || !strings.Contains(e, "owned by proj/alpha") {
		t.Fatalf("renew by another: %d %s", code, e)
	}
	if code, out, e := as("proj/alpha", "update", "T1", "--status", "working", "--data-ref", "pr/1"); code != 0 || out != "Updated 'T1': status working, version 1.\n" {
		t.Fatalf("update: %d %q %s", code, out, e)
	}
	if code, _, e := as("proj/alpha", "update", "T1", "--status", "claimed"); code != exitRefused || !strings.Contains(e, "cannot transition") {
		t.Fatalf("illegal update: %d %s", code, e)
	}
	if code, out, e := as("proj/alpha", "checkpoint", "T1", "step", "2", "--json"); code != 0 || strings.TrimSpace(out) != `{"task_id":"T1","version":2}` {
		t.Fatalf("checkpoint: %d %s %s", code, out, e)
	}
	waitOffline(t, uri, "proj/bravo") // bravo's renew command above has just closed its socket
	if code, _, e := as("proj/alpha", "handoff", "T1", "proj/bravo"); code != exitRefused || !strings.Contains(e, "not online") {
		t.Fatalf("handoff to offline: %d %s", code, e)
	}
	agent(t, uri, "proj/bravo")
	if code, out, e := as("proj/alpha", "handoff", "T1", "proj/bravo", "--json"); code != 0 || !strings.Contains(out, `"owner":"proj/bravo"`) || !strings.Contains(out, `"previous_owner":"proj/alpha"`) {
		t.Fatalf("handoff: %d %s %s", code, out, e)
	}
	if code, _, e := as("proj/alpha", "release", "T1"); code != exitRefused || !strings.Contains(e, "owned by proj/bravo") {
		t.Fatalf("release by the old owner: %d %s", code, e)
	}
}

func TestRelease_JSONReceipt(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	runCmd("claim", "T1", "--uri", uri, "--name", "proj/alpha")
	code, out, e := runCmd("release", "T1", "--evidence", "go test ok", "--known-failure", "lint", "--json", "--uri", uri, "--name", "proj/alpha")
	var got struct {
		Released bool           `json:"released"`
		TaskID   string         `json:"task_id"`
		Owner    string         `json:"owner"`
		Receipt  client.Receipt `json:"receipt"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("exit %d %v: %s %s", code, err, out, e)
	}
	if !got.Released || got.TaskID != "T1" || got.Owner != "proj/alpha" || got.Receipt.EpistemicStatus != "degraded" || got.Receipt.KnownFailures[0] != "lint" {
		t.Fatalf("release JSON %s", out)
	}
}

// wait returns when the holder releases: the hub wakes it.
func TestWait_ReturnsWhenReleased(t *testing.T) {
	uri := startCLIHub(t, hub.Config{Clock: func() float64 { return float64(time.Now().UnixNano()) / 1e9 }})
	alpha := agent(t, uri, "proj/alpha")
	ctx := context.Background()
	if _, err := alpha.Claim(ctx, client.ClaimRequest{TaskID: "T1"}); err != nil {
		t.Fatal(err)
	}
	// The wait is registered once the hub has answered it; watch for the
	// line that says so, then release.
	errR, errW := ioPipe()
	done := make(chan [3]any, 1)
	go func() {
		var out strings.Builder
		code := run([]string{"wait", "T1", "--timeout", "20s", "--uri", uri, "--name", "proj/bravo"}, &out, errW)
		errW.Close()
		done <- [3]any{code, out.String()}
	}()
	line, err := readLine(errR)
	if err != nil || line != "Waiting for 'T1' held by proj/alpha..." {
		t.Fatalf("stderr %q %v", line, err)
	}
	go drain(errR)
	if _, err := alpha.Release(ctx, "T1", client.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r[0] != 0 || r[1] != "'T1' is free (release). Claim it with 'synapse claim T1'.\n" {
		t.Fatalf("wait: %v %q", r[0], r[1])
	}
	if code, out, _ := runCmd("wait", "T9", "--json", "--uri", uri, "--name", "proj/bravo"); code != 0 || !strings.Contains(out, `"free":true`) {
		t.Fatalf("wait on a free task: %d %s", code, out)
	}
}

func TestWait_TimeoutExitsFour(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	runCmd("claim", "T1", "--uri", uri, "--name", "proj/alpha")
	code, _, e := runCmd("wait", "T1", "--timeout", "50ms", "--uri", uri, "--name", "proj/bravo")
	if code != exitTimeout || !strings.Contains(e, "still held") {
		t.Fatalf("exit %d %s", code, e)
	}
}

// lock runs the command, exits with its code, and releases the claim with
// the exit status as evidence.
func TestLock_RunsTheCommandAndReleasesWithItsStatus(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	watcher := hubtest.Watcher(t, uri, "proj/watcher", client.FanoutNamespace)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	releases := watcher.Subscribe(ctx, func(f client.Frame) bool { return f.Type == "release_granted" })

	code, out, e := runCmd("lock", "T1", "--paths", "src", "--uri", uri, "--name", "proj/alpha", "--", "sh", "-c", "echo working; exit 3")
	if code != 3 || out != "working\n" {
		t.Fatalf("exit %d stdout %q stderr %s", code, out, e)
	}
	f := <-releases
	var r client.Receipt
	if err := f.DecodeField("receipt", &r); err != nil || len(r.KnownFailures) != 1 || r.KnownFailures[0] != "`sh -c echo working; exit 3` exited 3" || r.EpistemicStatus != "degraded" {
		t.Fatalf("release %s", f.Raw)
	}
	if st, err := watcher.State(ctx); err != nil || st.Claim("T1") != nil {
		t.Fatalf("the claim outlived lock: %+v %v", st, err)
	}

	code, _, e = runCmd("lock", "T2", "--uri", uri, "--name", "proj/alpha", "--", "true")
	if code != 0 {
		t.Fatalf("lock true: %d %s", code, e)
	}
	f = <-releases
	if err := f.DecodeField("receipt", &r); err != nil || len(r.Evidence) != 1 || r.Evidence[0] != "`true` exited 0" {
		t.Fatalf("release %s", f.Raw)
	}
	if code, _, _ := runCmd("lock", "T3", "--uri", uri, "--name", "proj/alpha", "--", "/nonexistent/cmd"); code != 127 {
		t.Fatalf("a command that cannot start: exit %d", code)
	}
}

func TestLock_RefusedWithoutWaitExitsOne(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	runCmd("claim", "T1", "--uri", uri, "--name", "proj/alpha")
	code, out, e := runCmd("lock", "T1", "--wait-timeout", "0", "--uri", uri, "--name", "proj/bravo", "--", "echo", "never")
	if code != exitRefused || out != "" || !strings.Contains(e, "already claimed by proj/alpha") {
		t.Fatalf("exit %d %q %s", code, out, e)
	}
}

func TestClaim_GlobsAndSharedGolden(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	code, out, errOut := runCmd("claim", "R1", "--glob", "docs/*.md", "--glob", "src/**/*_test.go", "--shared", "--uri", uri, "--name", "proj/alpha")
	want := `Claimed 'R1' as proj/alpha (epoch 1).
  lease:    until 2026-06-28T13:00:00Z (in 1h0m0s); renew with 'synapse renew R1'
  globs:    docs/*.md, src/**/*_test.go
  mode:     shared (others may read beside you; no one may write)
`
	if code != 0 || out != want {
		t.Fatalf("exit %d\n--- got\n%s--- want\n%s--- stderr\n%s", code, out, want, errOut)
	}
	if code, _, errOut := runCmd("claim", "R2", "--paths", "docs/a.md", "--shared", "--uri", uri, "--name", "proj/bravo"); code != 0 {
		t.Fatalf("a second reader was refused: %s", errOut)
	}
	code, _, errOut = runCmd("claim", "W1", "--paths", "src/x/y_test.go", "--uri", uri, "--name", "proj/bravo")
	want = `synapse claim: Task 'W1' file scope conflicts with 'R1' held by proj/alpha (shared 'src/**/*_test.go').
Narrow --paths, --glob or --file (proj/alpha holds 'src/**/*_test.go' shared), wait with 'synapse wait R1', or ask proj/alpha with 'synapse send proj/alpha TEXT'.
`
	if code != exitRefused || errOut != want {
		t.Fatalf("exit %d\n--- got\n%s--- want\n%s", code, errOut, want)
	}
	code, out, _ = runCmd("claim", "W2", "--glob", "docs/**", "--json", "--uri", uri, "--name", "proj/carol")
	var ref claimJSON
	if err := json.Unmarshal([]byte(out), &ref); err != nil || code != exitRefused || ref.ConflictMode != "shared" || ref.ConflictPattern == "" {
		t.Fatalf("exit %d: %v: %s", code, err, out)
	}
}

// Scopes are sets of files (INV-ME-2): --file claims a file alone, and a
// --paths entry that is an existing regular file of the checkout is sent
// as a file, so it is granted beside another agent's glob of Go files; a
// folder, or a path that does not exist yet, stays a path (a subtree,
// where a Go file could lie) and is refused.
func TestClaim_FileFlagAndDetectedFiles_INV_ME_2(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	dir := inDir(t)
	os.MkdirAll(filepath.Join(dir, "src", "a"), 0o755)
	os.WriteFile(filepath.Join(dir, "src", "a", "readme.md"), []byte("x\n"), 0o644)
	alpha, bravo := []string{"--uri", uri, "--name", "proj/alpha"}, []string{"--uri", uri, "--name", "proj/bravo"}
	if code, _, errOut := runCmd(append([]string{"claim", "GO", "--glob", "src/**/*.go"}, alpha...)...); code != 0 {
		t.Fatal(errOut)
	}
	code, out, errOut := runCmd(append([]string{"claim", "README", "--paths", "src/a/readme.md"}, bravo...)...)
	if code != 0 || !strings.Contains(out, "  files:    src/a/readme.md\n") || strings.Contains(out, "paths:") {
		t.Fatalf("an existing file under --paths: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCmd(append([]string{"claim", "NEW", "--file", "src/b/new.md", "--json"}, bravo...)...)
	var got claimJSON
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || !slices.Equal(got.Files, []string{"src/b/new.md"}) || len(got.Paths) != 0 {
		t.Fatalf("--file of a file not yet written: exit %d %v\n%s%s", code, err, out, errOut)
	}
	for _, p := range []string{"src/a", "src/c/missing.md"} {
		code, _, errOut = runCmd(append([]string{"claim", "T", "--paths", p}, bravo...)...)
		if code != exitRefused || !strings.Contains(errOut, "conflicts with 'GO' held by proj/alpha (exclusive 'src/**/*.go')") {
			t.Fatalf("--paths %s: exit %d: %s", p, code, errOut)
		}
	}
	// The ledger records the file, and the pre-commit check reads it: the
	// readme may be committed by bravo.
	if r, ok, err := ledgerFor(dir).Lookup("proj/bravo", "README"); err != nil || !ok || !slices.Equal(r.Files, []string{"src/a/readme.md"}) {
		t.Fatalf("ledger record %+v %v %v", r, ok, err)
	}
	git(t, "add", "src/a/readme.md")
	if code, _, errOut := runCmd(append([]string{"git-hook", "check", "--strict"}, bravo...)...); code != 0 {
		t.Fatalf("the file's holder may not commit it: %d %s", code, errOut)
	}
}
