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

// --rate is the offered load; --cycle-rate, its old name, still works and
// must agree with it when both are given.
func TestBenchLoad_RateAndItsOldName(t *testing.T) {
	for _, tc := range []struct {
		rate, cycle       float64
		setRate, setCycle bool
		want              float64
		ok                bool
	}{
		{0, 0, false, false, 0, true},
		{200, 0, true, false, 200, true},
		{0, 20, false, true, 20, true},
		{20, 20, true, true, 20, true},
		{20, 30, true, true, 0, false},
		{-1, 0, true, false, 0, false},
	} {
		got, err := offeredRate(tc.rate, tc.cycle, tc.setRate, tc.setCycle)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("offeredRate(%+v) = %v, %v; want %v, ok %v", tc, got, err, tc.want, tc.ok)
		}
	}
	var out, errb strings.Builder
	if code := run([]string{"bench", "load", "--rate", "10", "--cycle-rate", "20"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "disagree") {
		t.Fatalf("--rate 10 --cycle-rate 20: exit %d, %q; want 2 and why", code, errb.String())
	}
}

// --attackers-nice runs the attackers' process under nice(1), so that all
// its threads have that nice value; 0 runs it as it is.
func TestBenchLoad_AttackersNiceRunsThemUnderNice(t *testing.T) {
	plain := attackCommand("/bin/synapse", "ws://h", []string{"validflood"}, 200, 1024, 0)
	if plain[0] != "/bin/synapse" || strings.Join(plain[1:3], " ") != "bench attack" {
		t.Fatalf("without a nice value: %q", plain)
	}
	niced := attackCommand("/bin/synapse", "ws://h", []string{"validflood", "bound"}, 200, 1024, 19)
	if strings.Join(niced[:4], " ") != "nice -n 19 /bin/synapse" || !strings.Contains(strings.Join(niced, " "), "--kinds validflood,bound --sockets 200") {
		t.Fatalf("with nice 19: %q", niced)
	}
}
