package mcpserver

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/client"
)

// The server records each grant it makes in Options.Ledger and forgets the
// claims it releases or hands off, so synapse guard and the pre-commit
// check fence on the epoch this agent holds (docs/claims.md).
func TestServer_RecordsGrantsInTheLedger_INV_EF_2(t *testing.T) {
	uri := startHub(t)
	l := &client.Ledger{Path: filepath.Join(t.TempDir(), "leases.json")}
	s := New(Options{Client: serverClient(t, uri, "proj/me"), Ledger: l})
	cs, _ := connectInMemory(t, s)
	dial(t, uri, "proj/peer") // online, to receive a handoff
	recorded := func(task string) (client.LeaseRecord, bool) {
		t.Helper()
		r, ok, err := l.Lookup("proj/me", task)
		if err != nil {
			t.Fatal(err)
		}
		return r, ok
	}

	var cl ClaimResult
	call(t, cs, "claim", map[string]any{"task_id": "T1", "paths": []string{"src"}}, &cl)
	if r, ok := recorded("T1"); !cl.Granted || !ok || r.Epoch != cl.Claim.Epoch || len(r.Paths) != 1 || r.Paths[0] != "src" {
		t.Fatalf("claim: %+v, record %+v %v", cl, r, ok)
	}
	var rn ClaimResult
	call(t, cs, "renew", map[string]any{"task_id": "T1"}, &rn)
	if r, ok := recorded("T1"); !rn.Granted || !ok || r.Epoch != rn.Claim.Epoch || r.Epoch <= cl.Claim.Epoch {
		t.Fatalf("renew: %+v, record %+v %v", rn, r, ok)
	}
	// A record older than the live epoch (re-granted since): renew refuses.
	stale := *rn.Claim
	if err := l.Record(uri, &client.Claim{TaskID: "T1", Owner: "proj/me", Paths: stale.Paths, Epoch: cl.Claim.Epoch}); err != nil {
		t.Fatal(err)
	}
	if res := call(t, cs, "renew", map[string]any{"task_id": "T1"}, nil); !res.IsError || !strings.Contains(text(res), "re-granted since") {
		t.Fatalf("renew over a stale record: %s", text(res))
	}
	var rl ReleaseResult
	call(t, cs, "release", map[string]any{"task_id": "T1"}, &rl)
	if _, ok := recorded("T1"); !rl.Released || ok {
		t.Fatalf("release: %+v, still recorded %v", rl, ok)
	}

	call(t, cs, "claim", map[string]any{"task_id": "T2"}, &cl)
	if _, ok := recorded("T2"); !ok {
		t.Fatal("T2 not recorded")
	}
	var ho ClaimResult
	call(t, cs, "handoff", map[string]any{"task_id": "T2", "to": "proj/peer"}, &ho)
	if _, ok := recorded("T2"); !ho.Granted || ok {
		t.Fatalf("handoff: %+v, still recorded %v", ho, ok)
	}
}
