package main

import (
	"strings"
	"testing"
)

// The benchmarks themselves are too slow for tests; their flags are not.

func TestBench_UsageNamesBothBenchmarks(t *testing.T) {
	for _, args := range [][]string{{"bench", "--help"}, {"bench", "journal", "--help"}} {
		code, _, errOut := runCmd(args...)
		if code != 0 || !strings.Contains(errOut, "synapse bench core|journal") ||
			!strings.Contains(errOut, "durable_mutations_per_s") || !strings.Contains(errOut, "restart_ms_1m_no_snapshot") {
			t.Errorf("%v: exit %d\n%s", args, code, errOut)
		}
	}
}

func TestBench_BadArgumentsExitTwo(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "synapse bench journal"},
		{[]string{"bench", "disk"}, "synapse bench core"},
		{[]string{"bench", "journal", "--runs", "0"}, "--runs must be at least 1"},
		{[]string{"bench", "journal", "--runs", "x"}, "invalid value"},
		{[]string{"bench", "journal", "--bogus"}, "flag provided but not defined"},
		{[]string{"bench", "journal", "extra"}, "unexpected argument"},
	} {
		code, out, errOut := runCmd(c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}
