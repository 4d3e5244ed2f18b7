package mcpserver

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// A claim made with release_on commit is recorded with the wish; once a git
// hook marks it due (the owner's name being this server's, the hook cannot
// release it itself), the server releases it, fenced on the recorded
// epoch, and drops the record (issue 21 item 4, INV-EF-2). A release_on the
// server cannot honour is refused and claims nothing.
func TestServer_ReleasesWhatAGitHookMarksDue_Issue21_4(t *testing.T) {
	old := releaseDueEvery
	releaseDueEvery = 20 * time.Millisecond
	t.Cleanup(func() { releaseDueEvery = old })
	uri := startHub(t)
	l := &client.Ledger{Path: filepath.Join(t.TempDir(), "leases.json")}
	s := New(Options{Client: serverClient(t, uri, "proj/me"), Ledger: l})
	cs, _ := connectInMemory(t, s)

	if res := call(t, cs, "claim", map[string]any{"task_id": "T0", "release_on": "push"}, nil); !res.IsError || !strings.Contains(text(res), "commit or merge") {
		t.Fatalf("release_on push: %s", text(res))
	}
	var cl ClaimResult
	call(t, cs, "claim", map[string]any{"task_id": "T1", "paths": []string{"src"}, "release_on": "commit"}, &cl)
	r, ok, err := l.Lookup("proj/me", "T1")
	if err != nil || !ok || r.ReleaseOn != client.ReleaseOnCommit || r.Epoch != cl.Claim.Epoch {
		t.Fatalf("the wish not recorded: %+v %v %v", r, ok, err)
	}
	if marked, err := l.MarkReleaseDue("proj/me", "T1", r.Epoch+1, "committed in abc", nil); err != nil || marked {
		t.Fatalf("a mark under another epoch took: %v %v", marked, err)
	}
	if marked, err := l.MarkReleaseDue("proj/me", "T1", r.Epoch, "committed in abc", []string{"src/a.go"}); err != nil || !marked {
		t.Fatalf("mark: %v %v", marked, err)
	}
	watcher := dial(t, uri, "proj/watch")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := watcher.State(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(st.ActiveClaims) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the due claim was never released: %+v", st.ActiveClaims)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, ok, _ := l.Lookup("proj/me", "T1"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the released claim's record was never dropped")
		}
	}
}
