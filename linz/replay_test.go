package linz

import (
	"encoding/json"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestReplay re-checks a history written on a violation, task by task, and
// prints where each illegal task's longest linearization stops and the
// operations it could not place next:
//
//	LINZ_REPLAY=/tmp/linz-violation-123/history.json go test ./linz/ -run Replay -v
func TestReplay(t *testing.T) {
	path := os.Getenv("LINZ_REPLAY")
	if path == "" {
		t.Skip("set LINZ_REPLAY to a history.json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw []struct {
		ClientId     int
		Input        Input
		Output       Output
		Call, Return int64
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	ops := make([]porcupine.Operation, len(raw))
	for i, r := range raw {
		ops[i] = porcupine.Operation{ClientId: r.ClientId, Input: r.Input, Output: r.Output, Call: r.Call, Return: r.Return}
	}
	m := Model.ToModel()
	for _, part := range m.Partition(ops) {
		res, info := porcupine.CheckOperationsVerbose(m, part, checkTimeout)
		task := part[0].Input.(Input).Task
		t.Logf("%s: %s, %d operations", task, res, len(part))
		if res != porcupine.Illegal {
			continue
		}
		t.Fail()
		lins := info.PartialLinearizationsOperations()[0]
		sort.Slice(lins, func(i, j int) bool { return len(lins[i]) > len(lins[j]) })
		lin := lins[0]
		placed := map[int64]bool{}
		for _, op := range lin {
			placed[op.Call] = true
		}
		t0 := lin[len(lin)-1].Call // times below are ms from the last placed call
		ms := func(ns int64) int64 { return (ns - t0) / 1e6 }
		for _, op := range lin[max(0, len(lin)-10):] {
			t.Logf("  placed   %6d..%6d %s", ms(op.Call), ms(op.Return), m.DescribeOperation(op.Input, op.Output))
		}
		sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
		shown := 0
		for _, op := range part {
			if placed[op.Call] || op.Call < t0-int64(3*time.Second) || shown == 10 {
				continue
			}
			shown++
			t.Logf("  unplaced %6d..%6d %s", ms(op.Call), ms(op.Input.(Input).Return), m.DescribeOperation(op.Input, op.Output))
		}
	}
}
