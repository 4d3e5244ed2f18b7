package client

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/hub"
)

func TestLedger_RecordReplacesForgetDrops_INV_EF_2(t *testing.T) {
	l := &Ledger{Path: filepath.Join(t.TempDir(), "git", "synapse", "leases.json")}
	if recs, err := l.Records(); err != nil || len(recs) != 0 {
		t.Fatalf("a missing ledger is empty: %v %v", recs, err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Record("ws://h", &Claim{TaskID: "T1", Owner: "p/a", Paths: []string{"src"}, Epoch: 3}))
	must(l.Record("ws://h", &Claim{TaskID: "T1", Owner: "p/b", Epoch: 4})) // another agent's record of the same task
	must(l.Record("ws://h", &Claim{TaskID: "T1", Owner: "p/a", Paths: []string{"src"}, Epoch: 5}))
	r, ok, err := l.Lookup("p/a", "T1")
	if err != nil || !ok || r.Epoch != 5 || r.Hub != "ws://h" || len(r.Paths) != 1 {
		t.Fatalf("lookup after a renewal: %+v %v %v", r, ok, err)
	}
	if recs, _ := l.Records(); len(recs) != 2 {
		t.Fatalf("a renewal must replace its record, not add one: %+v", recs)
	}
	must(l.Forget("p/a", "T1"))
	must(l.Forget("p/a", "T1")) // nothing left to forget: no error
	if _, ok, _ := l.Lookup("p/a", "T1"); ok {
		t.Fatal("forgotten record still there")
	}
	if r, ok, _ := l.Lookup("p/b", "T1"); !ok || r.Epoch != 4 || r.Paths == nil {
		t.Fatalf("p/b's record: %+v %v", r, ok)
	}

	// Concurrent writers in one checkout lose nothing.
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Record("ws://h", &Claim{TaskID: fmt.Sprintf("C%d", i), Owner: "p/a", Epoch: int64(i + 10)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if recs, _ := l.Records(); len(recs) != 17 {
		t.Fatalf("%d records after 16 concurrent grants and p/b's", len(recs))
	}
	leftovers, _ := filepath.Glob(l.Path + ".tmp*")
	if len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}

	must(os.WriteFile(l.Path, []byte(`{"version": 2, "leases": []}`), 0o644))
	if _, err := l.Records(); !errors.Is(err, ErrLedgerVersion) {
		t.Fatalf("a newer ledger: %v", err)
	}
}

// KeepOptions.OnRenew sees every renewal the keeper gets, so a ledger fed
// by it always holds the epoch the hub considers live.
func TestKeepLease_OnRenewRecordsEachFreshEpoch_INV_EF_2(t *testing.T) {
	th := startHub(t, hub.Config{Limits: coord.Limits{MinTTL: 1}}, false)
	ctx := testCtx(t)
	a := th.dial(t, "p/alpha")
	cl, err := a.Claim(ctx, ClaimRequest{TaskID: "T1", Paths: []string{"src"}, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := &Ledger{Path: filepath.Join(t.TempDir(), "leases.json")}
	if err := l.Record(a.URI(), cl); err != nil {
		t.Fatal(err)
	}
	renewed := make(chan int64, 16)
	k := a.KeepLeaseWith(ctx, cl, KeepOptions{OnRenew: func(next *Claim) {
		if err := l.Record(a.URI(), next); err != nil {
			t.Error(err)
		}
		renewed <- next.Epoch
	}})
	defer k.Stop()
	epoch := cl.Epoch
	for range 2 {
		select {
		case e := <-renewed:
			if e <= epoch {
				t.Fatalf("renewal epoch %d after %d", e, epoch)
			}
			epoch = e
		case <-ctx.Done():
			t.Fatal("no renewal")
		}
	}
	k.Stop()
	r, ok, err := l.Lookup("p/alpha", "T1")
	st, serr := a.State(ctx)
	if err != nil || serr != nil || !ok || st.Claim("T1") == nil || r.Epoch != st.Claim("T1").Epoch || r.Epoch != k.Claim().Epoch {
		t.Fatalf("ledger %+v (%v %v), live %+v (%v), keeper %d", r, ok, err, st.Claim("T1"), serr, k.Claim().Epoch)
	}
}

// A fenced keeper does not renew a claim that was re-granted under its
// name since its own grant (here handed away and back, as another process
// under the same name could): it reports the loss instead of adopting the
// newer lease, which a ledger fed by OnRenew would then record as its own.
func TestKeepLease_FenceRefusesToAdoptANewerEpoch_INV_EF_2(t *testing.T) {
	th := startHub(t, hub.Config{Limits: coord.Limits{MinTTL: 1}}, false)
	ctx := testCtx(t)
	a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
	cl, err := a.Claim(ctx, ClaimRequest{TaskID: "T1", Paths: []string{"src"}, TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var adopted atomic.Int64 // the newest epoch the keeper renewed to
	k := a.KeepLeaseWith(ctx, cl, KeepOptions{Fence: true, OnRenew: func(next *Claim) { adopted.Store(next.Epoch) }})
	defer k.Stop()
	if _, err := a.Handoff(ctx, HandoffRequest{TaskID: "T1", To: "p/bravo"}); err != nil {
		t.Fatal(err)
	}
	back, err := b.Handoff(ctx, HandoffRequest{TaskID: "T1", To: "p/alpha"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-k.Lost():
		var ref *Refused
		if !errors.As(err, &ref) {
			t.Fatalf("lost with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the keeper renewed a lease re-granted since its own")
	}
	if e := adopted.Load(); e > back.Epoch {
		t.Fatalf("the keeper adopted epoch %d after the re-grant (epoch %d)", e, back.Epoch)
	}
	st, err := a.State(ctx)
	if err != nil || st.Claim("T1") == nil || st.Claim("T1").Epoch != back.Epoch {
		t.Fatalf("the re-granted claim changed: %+v %v", st.Claim("T1"), err)
	}
}

// A renewal keeps the claimant's release-on wish; RecordReleaseOn sets
// or clears it; a trigger that is neither commit nor merge is refused and
// changes nothing (issue 21 item 4).
func TestLedger_ReleaseOnSurvivesRenewal_Issue21_4(t *testing.T) {
	l := &Ledger{Path: filepath.Join(t.TempDir(), "leases.json")}
	cl := &Claim{TaskID: "T1", Owner: "p/a", Paths: []string{"src"}, Epoch: 3}
	if err := l.RecordReleaseOn("ws://h", cl, ReleaseOnCommit); err != nil {
		t.Fatal(err)
	}
	if err := l.Record("ws://h", &Claim{TaskID: "T1", Owner: "p/a", Paths: []string{"src"}, Epoch: 4}); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := l.Lookup("p/a", "T1"); r.ReleaseOn != ReleaseOnCommit || r.Epoch != 4 {
		t.Fatalf("after a renewal: %+v", r)
	}
	if err := l.RecordReleaseOn("ws://h", cl, "push"); !errors.Is(err, ErrReleaseTrigger) {
		t.Fatalf("a bad trigger: %v", err)
	}
	if r, _, _ := l.Lookup("p/a", "T1"); r.ReleaseOn != ReleaseOnCommit || r.Epoch != 4 {
		t.Fatalf("a refused trigger changed the record: %+v", r)
	}
	if err := l.RecordReleaseOn("ws://h", cl, ""); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := l.Lookup("p/a", "T1"); r.ReleaseOn != "" {
		t.Fatalf("not cleared: %+v", r)
	}
	for in, want := range map[string]ReleaseTrigger{"commit": ReleaseOnCommit, "merge": ReleaseOnMerge, "off": "", "": ""} {
		if got, err := ParseReleaseTrigger(in); err != nil || got != want {
			t.Errorf("ParseReleaseTrigger(%q) = %q, %v", in, got, err)
		}
	}
}
