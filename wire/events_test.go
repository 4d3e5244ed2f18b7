package wire

import (
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// A committed event's frames (PROTOCOL.md §2.4–2.11): a grant is one
// broadcast naming its task and owner, wait_ready one private frame per
// waiter, an expiry nothing (the reference expires leases silently).
func TestEventFrames_WhoEachFrameIsFor_PROTOCOL_2_4(t *testing.T) {
	c := &coord.Claim{TaskID: "p/t1", Owner: "p/a", Epoch: 3, ExpiresAt: 10}
	fs := EventFrames(coord.ClaimGranted{Claim: c}, 1, "syn-x")
	if len(fs) != 1 || fs[0].Type != "claim_granted" || fs[0].To != "" || fs[0].Task != "p/t1" || len(fs[0].Agents) != 1 || fs[0].Agents[0] != "p/a" {
		t.Fatalf("claim_granted frames %+v", fs)
	}
	if b := string(fs[0].Bytes); !strings.Contains(b, `"type":"claim_granted"`) || !strings.Contains(b, `"epoch":3`) || !strings.Contains(b, `"hub_id":"syn-x"`) {
		t.Errorf("claim_granted bytes %s", b)
	}
	fs = EventFrames(coord.WaitReady{TaskID: "p/t1", Waiters: []string{"p/b", "p/c"}, Reason: "released"}, 1, "syn-x")
	if len(fs) != 2 || fs[0].To != "p/b" || fs[1].To != "p/c" || fs[0].Type != "wait_ready" {
		t.Fatalf("wait_ready frames %+v", fs)
	}
	task := &coord.BoardTask{TaskID: "p/t2", Project: "q", SuggestedOwner: "r/x"}
	fs = EventFrames(coord.TaskPosted{Task: task, By: "p/a"}, 1, "syn-x")
	if len(fs) != 1 || len(fs[0].Namespaces) != 1 || fs[0].Namespaces[0] != "q" || len(fs[0].Names) != 1 || fs[0].Names[0] != "r/x" {
		t.Fatalf("ledger_task_posted frames %+v", fs)
	}
	if fs := EventFrames(coord.ClaimExpired{TaskID: "p/t1", Epoch: 3}, 1, "syn-x"); fs != nil {
		t.Errorf("an expiry put %d frames on the wire", len(fs))
	}
}
