package linz

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/synapse-hub/synapse/client"
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

// scopedOp is a claim or handoff of task slot of worktree tree, whose
// claims declare path.
func scopedOp(client int, call, ret int64, in Input, tree string, slot int, path string, out Output) porcupine.Operation {
	in.Worktree, in.Slot, in.Path, in.Task = tree, slot, path, fmt.Sprintf("%s-%d", tree, slot)
	return op(client, call, ret, in, out)
}

func cpOp(client int, call, ret int64, agent string, epoch int64, cp string, out Output) porcupine.Operation {
	return op(client, call, ret, Input{Verb: VerbCheckpoint, Task: "T", Agent: agent, Epoch: epoch, Checkpoint: cp}, out)
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
	claimA, claimB := Input{Verb: VerbClaim, Agent: "a"}, Input{Verb: VerbClaim, Agent: "b"}
	readOp2 := func(tree string, slot int, call, ret int64, holder string) porcupine.Operation {
		return scopedOp(9, call, ret, Input{Verb: VerbRead}, tree, slot, "", Output{Holder: holder})
	}
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
		{"INV-CR-3: a claim after a lapse resumes from the checkpoint", true, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 2*sec)), cpOp(0, 2, 3, "a", 1, "x", Output{Version: 1}),
			claimOp(1, 3*sec, 3*sec+1, "b", Output{Epoch: 2, Expires: 10 * sec, Checkpoint: "x"})}},
		{"INV-CR-3: a claim after a lapse starts over", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 2*sec)), cpOp(0, 2, 3, "a", 1, "x", Output{Version: 1}),
			claimOp(1, 3*sec, 3*sec+1, "b", granted(2, 10*sec))}},
		{"INV-CR-3: a claim after a release resumes a dropped checkpoint", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), cpOp(0, 2, 3, "a", 1, "x", Output{Version: 1}),
			releaseOp(0, 4, 5, "a", 1, Output{}), claimOp(1, 6, 7, "b", Output{Epoch: 2, Expires: 10 * sec, Checkpoint: "x"})}},
		{"INV-CR-2: a handoff loses the checkpoint", false, []porcupine.Operation{
			claimOp(0, 0, 1, "a", granted(1, 10*sec)), cpOp(0, 2, 3, "a", 1, "x", Output{Version: 1}),
			handoffOp(0, 4, 5, "a", "b", 1, granted(2, 10*sec))}},
		{"INV-ME-2: a claim on an ancestor of a held path is refused", true, []porcupine.Operation{
			scopedOp(0, 0, 1, claimA, "w", 0, "a/b", granted(1, 10*sec)), scopedOp(1, 2, 3, claimB, "w", 1, "a", denied)}},
		{"INV-ME-2: a claim on an ancestor of a held path is granted", false, []porcupine.Operation{
			scopedOp(0, 0, 1, claimA, "w", 0, "a/b", granted(1, 10*sec)), scopedOp(1, 2, 3, claimB, "w", 1, "a", granted(2, 10*sec))}},
		{"INV-ME-2: siblings are refused", false, []porcupine.Operation{
			scopedOp(0, 0, 1, claimA, "w", 0, "a/b", granted(1, 10*sec)), scopedOp(1, 2, 3, claimB, "w", 2, "a/c", denied)}},
		{"INV-ME-2: the same owner may hold overlapping scopes", true, []porcupine.Operation{
			scopedOp(0, 0, 1, claimA, "w", 0, "a/b", granted(1, 10*sec)), scopedOp(0, 2, 3, claimA, "w", 1, "a", granted(2, 10*sec))}},
		{"INV-ME-2: the overlapping lease lapsed, the ancestor is free", true, []porcupine.Operation{
			scopedOp(0, 0, 1, claimA, "w", 0, "a/b", granted(1, 2*sec)), scopedOp(1, 3*sec, 3*sec+1, claimB, "w", 1, "a", granted(2, 10*sec))}},
		{"INV-ME-4: a whole-worktree claim excludes every path", false, []porcupine.Operation{
			scopedOp(0, 0, 1, claimA, "w", 1, "", granted(1, 10*sec)), scopedOp(1, 2, 3, claimB, "w", 0, "a/b", granted(2, 10*sec))}},
		{"INV-ME-3: the same path in another worktree never contends", false, []porcupine.Operation{
			scopedOp(0, 0, 1, claimA, "w", 0, "a/b", granted(1, 10*sec)), scopedOp(1, 2, 3, claimB, "v", 0, "a/b", denied)}},
		{"a lost claim cannot take an overlapping scope", false, []porcupine.Operation{
			scopedOp(0, 0, 1, claimA, "w", 0, "a/b", granted(1, 10*sec)), scopedOp(1, 2, 3, claimB, "w", 1, "a", unknown),
			readOp2("w", 1, 4, 5, "b")}},
		{"INV-CR-2 with INV-ME-2: a handoff whose scope overlaps the giver's other claim is refused", true, []porcupine.Operation{
			scopedOp(0, 0, 1, claimA, "w", 0, "a/b", granted(1, 10*sec)), scopedOp(0, 2, 3, claimA, "w", 1, "a", granted(2, 10*sec)),
			scopedOp(0, 4, 5, Input{Verb: VerbHandoff, Agent: "a", To: "b", Epoch: 2}, "w", 1, "a", denied)}},
		{"INV-CR-2 with INV-ME-2: a handoff leaves two owners of overlapping scopes", false, []porcupine.Operation{
			scopedOp(0, 0, 1, claimA, "w", 0, "a/b", granted(1, 10*sec)), scopedOp(0, 2, 3, claimA, "w", 1, "a", granted(2, 10*sec)),
			scopedOp(0, 4, 5, Input{Verb: VerbHandoff, Agent: "a", To: "b", Epoch: 2}, "w", 1, "a", granted(3, 10*sec))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Model.ToModel(), c.ops); got != c.legal {
				t.Errorf("linearizable = %v, want %v", got, c.legal)
			}
		})
	}
}

// The TARGET_OFFLINE check outside the model has teeth: a refusal while
// the recipient was registered and the hub undisturbed is reported; one
// across a kill or a pause, or without a connection, is not (INV-CR-2).
func TestCheckOfflineRefusals_INV_CR_2(t *testing.T) {
	refused := op(0, 10*sec, 11*sec, Input{Verb: VerbHandoff, Task: "T", Agent: "a", To: "b", Epoch: 1},
		Output{Outcome: Denied, Code: "TARGET_OFFLINE", Offline: true})
	cases := []struct {
		name   string
		spans  []span
		shocks []int64
		want   int
	}{
		{"connected throughout", []span{{1 * sec, 30 * sec}}, nil, 1},
		{"connected, the hub killed meanwhile", []span{{1 * sec, 30 * sec}}, []int64{5 * sec}, 0},
		{"connected, the hub paused just after", []span{{1 * sec, 30 * sec}}, []int64{12 * sec}, 0},
		{"registered after the call", []span{{10*sec + 1, 30 * sec}}, nil, 0},
		{"gone soon after the return", []span{{1 * sec, 12 * sec}}, nil, 0},
		{"still open at the end of the run", []span{{1 * sec, 0}}, nil, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := []*worker{{name: "a"}, {name: "b", spans: c.spans}}
			if got := checkOfflineRefusals([]porcupine.Operation{refused}, ws, c.shocks); len(got) != c.want {
				t.Errorf("problems = %v, want %d", got, c.want)
			}
		})
	}
}

// The mailbox check has teeth: after a SIGKILL and restart, a directed
// chat the hub acknowledged is found in its recipient's mailbox, and one
// recorded as acknowledged that the hub never journalled is reported lost
// (INV-JA-1, INV-DG-3).
func TestCheckMailboxes_ReportsALostChat_INV_DG_3(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a hub process")
	}
	hub := &hubProc{bin: synapseBinary(t), db: filepath.Join(t.TempDir(), "hub.db"), port: freePort(t)}
	if err := hub.start(); err != nil {
		t.Fatal(err)
	}
	defer hub.kill()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := &worker{id: 0, name: "linz/agent0", uri: hub.uri()}
	b := &worker{id: 1, name: "linz/agent1", uri: hub.uri()}
	a.dial(ctx)
	sent, err := a.c.Send(ctx, b.name, "kept", client.SendOptions{ClientMsgID: "kept"})
	if err != nil || sent.Seq == 0 {
		t.Fatalf("send: %v %+v", err, sent)
	}
	a.c.Close()
	a.mail = []sentMail{{b.name, "kept", sent.Seq}, {b.name, "never-sent", sent.Seq + 1}}
	hub.kill()
	if err := hub.start(); err != nil {
		t.Fatal(err)
	}
	n, problems := checkMailboxes(ctx, hub.uri(), []*worker{a, b})
	if n != 2 || len(problems) != 1 || !strings.Contains(problems[0], "never-sent") {
		t.Fatalf("checked %d, problems %q; want the never-sent chat alone reported", n, problems)
	}
}
