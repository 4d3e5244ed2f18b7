package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/bench"
	"github.com/synapse-hub/synapse/internal/testbin"
)

// runCrashLoop runs `synapse bench crashloop --json` with args and returns
// its result, and its stdout and stderr.
func runCrashLoop(t *testing.T, args ...string) (res bench.CrashLoopResult, out, errOut *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(testbin.Synapse(t), append([]string{"bench", "crashloop", "--json"}, args...)...)
	out, errOut = &bytes.Buffer{}, &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench crashloop: %v\n%s", err, errOut.String())
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	return res, out, errOut
}

// Two SIGKILLs of a real hub under a small fleet, then a clean stop: every
// start is measured, the file grows, and nothing acknowledged is lost
// (INV-JA-1: an acknowledged claim survives a SIGKILL).
func TestBenchCrashLoop_KillsARealHubAndLosesNothing_INV_JA_1(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub child through two SIGKILLs")
	}
	res, out, errOut := runCrashLoop(t, "--kills", "2", "--agents", "3", "--life", "700ms")
	if len(res.Restarts) != 4 {
		t.Fatalf("%d starts; want the first, two after a SIGKILL and one after the clean stop\n%s", len(res.Restarts), out.String())
	}
	for i, want := range []string{"start", "sigkill", "sigkill", "clean stop"} {
		x := res.Restarts[i]
		if x.After != want || x.BannerMS <= 0 || x.AnswerMS < x.BannerMS || x.Journal == "" {
			t.Errorf("start %d: %+v; want after %q, a banner time, an answer time after it, the journal line", i, x, want)
		}
	}
	if last := res.Restarts[3]; last.OpsAck <= 0 || last.Seq <= 0 || last.FilesMB <= 0 {
		t.Errorf("the fleet or the measures read nothing: %+v", last)
	}
	if len(res.Problems) != 0 {
		t.Errorf("the checker found acknowledged claims lost: %v", res.Problems)
	}
	if !strings.Contains(errOut.String(), "banner ms") {
		t.Errorf("no progress table on stderr with --json:\n%s", errOut.String())
	}
}

func TestBenchCrashLoop_BadFlagsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "crashloop", "--kills", "0"},
		{"bench", "crashloop", "--life", "0s"},
		{"bench", "crashloop", "extra"},
	} {
		if code, out, _ := runCmd(args...); code != 2 || out != "" {
			t.Errorf("%v: exit %d, stdout %q; want 2 and nothing", args, code, out)
		}
	}
}

// Restart stays flat across a crash loop of a real hub (issue 24,
// INV-RR-1): however many records earlier lives left, every start replays
// at most about --snapshot-every of them, while the history grows to many
// times that. Rows replayed, not milliseconds, so a busy machine cannot
// make it flaky. (That lives shorter than the interval add up is pinned by
// sequencer's TestSnapshot_RecordsOfEarlierLivesCount_INV_RR_1.)
func TestBenchCrashLoop_ReplayStaysBoundedWhateverTheHistory_INV_RR_1(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub child through six SIGKILLs")
	}
	const every = 300
	res, _, errOut := runCrashLoop(t, "--kills", "6", "--agents", "3", "--life", "800ms",
		"--hub-arg=--snapshot-every="+strconv.Itoa(every), "--hub-arg=--idempotency-window=2s", "--hub-arg=--retain=all=2s")
	last := res.Restarts[len(res.Restarts)-1]
	if last.Seq < 4*every {
		t.Fatalf("the loop wrote %d records in all; want several --snapshot-every (%d) for the bound to mean anything\n%s", last.Seq, every, errOut.String())
	}
	for _, x := range res.Restarts {
		// A snapshot is taken at the end of the batch that reaches the
		// count: a batch's worth past it at most.
		if x.Events > 2*every {
			t.Errorf("start %d (%s) replayed %d events of %d; want at most %d\n%s", x.N, x.After, x.Events, x.Seq, 2*every, errOut.String())
		}
	}
	if len(res.Problems) != 0 {
		t.Errorf("acknowledged claims lost: %v", res.Problems)
	}
}
