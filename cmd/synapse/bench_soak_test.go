package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/bench"
	"github.com/synapse-hub/synapse/internal/testbin"
)

// A few seconds of soak against a real hub child: the sampler must read
// real values and the fleet must get work done. Too short to judge the
// curves (that rule is tested on synthetic series in bench).
func TestBenchSoak_SamplesARealHub(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub and a fleet for 4 s")
	}
	cmd := exec.Command(testbin.Synapse(t), "bench", "soak", "--duration", "4s", "--sample", "1s", "--teams", "2", "--churn", "2", "--rate", "200", "--json")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench soak: %v\n%s", err, errOut.String())
	}
	var res bench.SoakResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	if !res.Pass || len(res.Samples) < 4 || len(res.Trends) != 5 {
		t.Fatalf("pass %v, %d samples, %d trends; want a pass, at least 4 samples, 5 trends\n%s", res.Pass, len(res.Samples), len(res.Trends), out.String())
	}
	last := res.Samples[len(res.Samples)-1]
	if last.RSSKB <= 0 || last.FDs <= 0 || last.Goroutines <= 0 || last.HeapObjectBytes <= 0 || last.JournalBytes <= 0 || last.Connected <= 0 {
		t.Errorf("the sampler read zeros: %+v", last)
	}
	if last.Ops <= 0 || last.Connects <= 0 {
		t.Errorf("the fleet did nothing: %+v", last)
	}
	if last.Errors != 0 {
		t.Errorf("%d fleet errors, the first: %s", last.Errors, res.FirstError)
	}
	if !strings.Contains(errOut.String(), "ops") {
		t.Errorf("no progress line on stderr with --json:\n%s", errOut.String())
	}
}

func TestBenchSoak_BadFlagsExitTwo(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "soak", "--duration", "1s", "--sample", "2s"}, "--sample at most --duration"},
		{[]string{"bench", "soak", "--teams", "0"}, "--teams must be at least 1"},
		{[]string{"bench", "soak", "extra"}, "unexpected argument"},
	} {
		code, out, errOut := runCmd(c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
	if code, _, errOut := runCmd("bench", "soak", "--help"); code != 0 || !strings.Contains(errOut, "median(last third)") {
		t.Errorf("--help: exit %d, the rule missing:\n%s", code, errOut)
	}
}
