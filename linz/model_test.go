package linz

import (
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

const sec = int64(1e9)

func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	in.Call, in.Return = call, ret
	o := porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	if out.Outcome == Unknown {
		o.Return = math.MaxInt64
	}
	return o
}

func claimOp(client int, call, ret int64, agent string, out Output) porcupine.Operation {
	return op(client, call, ret, Input{Verb: VerbClaim, Task: "T", Agent: agent}, out)
}

func releaseOp(client int, call, ret int64, agent string, epoch int64, out Output) porcupine.Operation {
	return op(client, call, ret, Input{Verb: VerbRelease, Task: "T", Agent: agent, Epoch: epoch}, out)
}

func updateOp(client int, call, ret int64, agent string, epoch, expected int64, out Output) porcupine.Operation {
	return op(client, call, ret, Input{Verb: VerbUpdate, Task: "T", Agent: agent, Epoch: epoch, Expected: expected}, out)
}

func handoffOp(client int, call, ret int64, agent, to string, epoch int64, out Output) porcupine.Operation {
	return op(client, call, ret, Input{Verb: VerbHandoff, Task: "T", Agent: agent, To: to, Epoch: epoch}, out)
}

func readOp(call, ret int64, holder string) porcupine.Operation {
	return readVersionOp(call, ret, holder, 0, 0)
}

func readVersionOp(call, ret int64, holder string, epoch, version int64) porcupine.Operation {
	return op(9, call, ret, Input{Verb: VerbRead, Task: "T"}, Output{Holder: holder, Epoch: epoch, Version: version})
}

// The model accepts what the hub may do and refuses what the rules forbid;
// each row is one rule the harness relies on the checker to enforce.
func TestModel_AcceptsLegalAndRefusesIllegalHistories(t *testing.T) {
	granted := func(epoch, expires int64) Output { return Output{Outcome: Granted, Epoch: epoch, Expires: expires} }
	denied := Output{Outcome: Denied}
	unknown := Output{Outcome: Unknown}
	cases := []struct {
		name  string
		legal bool
		ops   []porcupine.Operation
	}{
		{"INV-ME-1: a live lease refuses a second owner", true, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), claimOp(1, 2, 3, "b", denied)}},
		{"INV-ME-1: two owners at once", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), claimOp(1, 2, 3, "b", granted(2, 10*sec))}},
		{"INV-LL-2: the lease lapsed, the task is free", true, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 2*sec)), claimOp(1, 3*sec, 3*sec+1, "b", granted(2, 5*sec))}},
		{"INV-LL-2: a lapsed lease still refuses", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 2*sec)), claimOp(1, 3*sec, 3*sec+1, "b", denied)}},
		{"INV-LL-4: the holder renews with a fresh epoch", true, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), claimOp(0, 2, 3, "a", granted(2, 10*sec))}},
		{"INV-EF-1: a grant reuses an epoch", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(3, 10*sec)), releaseOp(0, 2, 3, "a", 3, Output{}), claimOp(1, 4, 5, "b", granted(3, 10*sec))}},
		{"INV-EF-2: a stale epoch is fenced out", true, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), claimOp(0, 2, 3, "a", granted(2, 10*sec)), releaseOp(0, 4, 5, "a", 1, denied)}},
		{"INV-EF-2: a stale epoch releases", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), claimOp(0, 2, 3, "a", granted(2, 10*sec)), releaseOp(0, 4, 5, "a", 1, Output{})}},
		{"INV-JA-1: an acknowledged grant is lost by recovery", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), readOp(2, 3, "")}},
		{"INV-JA-1: an acknowledged release comes back after recovery", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), releaseOp(0, 2, 3, "a", 1, Output{}), readOp(4, 5, "a")}},
		{"a lost connection may or may not have claimed", true, []porcupine.Operation{
			claimOp(0, 0, 1, "a", unknown), readOp(4, 5, "a"), claimOp(1, 6, 7, "b", denied)}},
		{"a lost claim cannot take a held task", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), claimOp(1, 2, 3, "b", unknown), readOp(4, 5, "b")}},
		{"INV-EF-3: the version guard passes and the version rises", true, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), updateOp(0, 2, 3, "a", 1, 0, Output{Version: 1}), updateOp(0, 4, 5, "a", 1, 0, denied)}},
		{"INV-EF-3: an update passes a stale version", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), updateOp(0, 2, 3, "a", 1, 0, Output{Version: 1}), updateOp(0, 4, 5, "a", 1, 0, Output{Version: 2})}},
		{"INV-CR-2: a handoff moves the task straight to the recipient", true, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), handoffOp(0, 2, 3, "a", "b", 1, granted(2, 10*sec)), claimOp(2, 4, 5, "c", denied), readVersionOp(6, 7, "b", 2, 0)}},
		{"INV-JA-1: an acknowledged update is lost by recovery", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), updateOp(0, 2, 3, "a", 1, -1, Output{Version: 1}), readVersionOp(4, 5, "a", 1, 0)}},
		{"INV-JA-1: the recovered claim has the acknowledged epoch and version", true, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), updateOp(0, 2, 3, "a", 1, -1, Output{Version: 1}), readVersionOp(4, 5, "a", 1, 1)}},
		{"INV-CR-2: a handoff leaves a window for a third agent", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), handoffOp(0, 2, 3, "a", "b", 1, granted(3, 10*sec)), claimOp(2, 4, 5, "c", granted(4, 10*sec))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Model.ToModel(), c.ops); got != c.legal {
				t.Errorf("linearizable = %v, want %v", got, c.legal)
			}
		})
	}
}
