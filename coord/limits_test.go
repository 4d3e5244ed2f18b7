package coord_test

import (
	"fmt"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

func TestLimits_ZeroValueMeansDefaults(t *testing.T) {
	want := coord.Limits{
		MinTTL: 30, MaxTTL: 2592000, DefaultTTL: 3600,
		MaxClaimsPerPrincipal: 128, MaxPathsPerClaim: 512, MaxPathLength: 4096,
		MaxRetainedCheckpoints: 10000, ResourceTTL: 300, MaxOffersPerAgent: 64, MaxWaitsPerAgent: 128,
		MaxBoardTasks: 100000, MaxNotesTotal: 5000, MaxNotesPerAuthor: 1000, MaxNotesPerTask: 1000,
	}
	wantEqual(t, "DefaultLimits", coord.DefaultLimits(), want)
	wantEqual(t, "New(Limits{}).Limits", coord.New(coord.Limits{}).Limits(), want)
	// Negative values are treated as unset; set values are kept.
	got := coord.New(coord.Limits{MaxWaitsPerAgent: -1, MaxOffersPerAgent: 3}).Limits()
	if got.MaxWaitsPerAgent != 128 || got.MaxOffersPerAgent != 3 {
		t.Fatalf("limits = %+v", got)
	}
}

func TestLimits_MaxClaimsPerPrincipal_INV_ME_5(t *testing.T) {
	r := newRig(t, coord.Limits{MaxClaimsPerPrincipal: 3})
	for i := range 3 {
		r.claimIn("A", fmt.Sprint("T", i), fmt.Sprint("/wt/", i))
	}
	r.refused(coord.ClaimRequest{Agent: "A", TaskID: "T3", Worktree: "/wt/3"}, coord.CodeQuotaExceeded,
		"Agent A principal claim quota holds the maximum 3 claims.")
	// Expiry frees budget.
	r.now += 3600
	r.claimIn("A", "T3", "/wt/3")
	if r.s.PrincipalClaims("legacy-agent:A") != 1 {
		t.Fatalf("principal holds %d after expiry", r.s.PrincipalClaims("legacy-agent:A"))
	}
}

func TestLimits_MaxPathsAndPathLengthWidenTheClaim(t *testing.T) {
	r := newRig(t, coord.Limits{MaxPathsPerClaim: 2, MaxPathLength: 10})
	if c := r.claimIn("A", "T1", "/wt/a", "a", "b"); len(c.Paths) != 2 {
		t.Fatalf("paths %q", c.Paths)
	}
	if c := r.claimIn("A", "T2", "/wt/b", "a", "b", "c"); !c.WholeWorktree() {
		t.Fatalf("three paths past a cap of two kept %q", c.Paths)
	}
	if c := r.claimIn("A", "T3", "/wt/c", "a", "0123456789x"); !c.WholeWorktree() {
		t.Fatalf("an over-long path kept %q", c.Paths)
	}
	// Widening is an over-claim: it now blocks everyone in /wt/b.
	r.refused(coord.ClaimRequest{Agent: "B", TaskID: "T4", Worktree: "/wt/b", Paths: []string{"zzz"}},
		coord.CodeScopeConflict, "Task 'T4' file scope conflicts with 'T2' held by A.")
}

func TestLimits_MaxRetainedCheckpointsForgetsOldestFirst_INV_CR_3(t *testing.T) {
	r := newRig(t, coord.Limits{MaxRetainedCheckpoints: 2})
	for i, task := range []string{"T1", "T2", "T3"} {
		r.ok(coord.ClaimRequest{Agent: "A", TaskID: task, Worktree: "/wt/" + task, TTL: float64(30 + 10*i), HasTTL: true})
		r.ok(coord.CheckpointRequest{Agent: "A", TaskID: task, Checkpoint: "cp-" + task})
	}
	r.s.Tick(t0 + 30)
	r.s.Tick(t0 + 40)
	wantEqual(t, "retained at the cap", r.s.Image().Retained, []coord.RetainedCheckpoint{{"T1", "cp-T1"}, {"T2", "cp-T2"}})
	r.s.Tick(t0 + 50)
	wantEqual(t, "retained past the cap", r.s.Image().Retained, []coord.RetainedCheckpoint{{"T2", "cp-T2"}, {"T3", "cp-T3"}})
	if _, ok := r.s.RetainedCheckpoint("T1"); ok {
		t.Fatal("the oldest retained checkpoint was kept")
	}
	// Inheriting one frees a slot, so the next expiry forgets nothing.
	r.now = t0 + 60
	if c := r.claimIn("B", "T2", "/wt/T2"); c.Checkpoint != "cp-T2" {
		t.Fatalf("inherited %q", c.Checkpoint)
	}
	r.ok(coord.ClaimRequest{Agent: "A", TaskID: "T4", Worktree: "/wt/T4", TTL: 30, HasTTL: true})
	r.ok(coord.CheckpointRequest{Agent: "A", TaskID: "T4", Checkpoint: "cp-T4"})
	r.s.Tick(t0 + 90)
	wantEqual(t, "after inheritance", r.s.Image().Retained, []coord.RetainedCheckpoint{{"T3", "cp-T3"}, {"T4", "cp-T4"}})
}

func TestLimits_MaxRetainedCheckpointsInOneMassExpiry(t *testing.T) {
	r := newRig(t, coord.Limits{MaxRetainedCheckpoints: 3})
	tasks := []string{"e", "b", "d", "a", "c"}
	for _, task := range tasks {
		r.ok(coord.ClaimRequest{Agent: "A", TaskID: task, Worktree: "/wt/" + task, TTL: 30, HasTTL: true})
		r.ok(coord.CheckpointRequest{Agent: "A", TaskID: task, Checkpoint: "cp-" + task})
	}
	o := r.s.Tick(t0 + 30)
	wantKinds(t, o.Events, "[claim_expired,claim_expired,claim_expired,claim_expired,claim_expired]")
	// Equal deadlines expire in an order of the heap's choosing; whatever it
	// is, the checkpoints kept are those of the last three to expire.
	var want []coord.RetainedCheckpoint
	for _, e := range o.Events[2:] {
		task := e.(coord.ClaimExpired).TaskID
		want = append(want, coord.RetainedCheckpoint{TaskID: task, Checkpoint: "cp-" + task})
	}
	wantEqual(t, "retained", r.s.Image().Retained, want)
}

func TestLimits_MaxOffersPerAgentAllowsRefresh(t *testing.T) {
	r := newRig(t, coord.Limits{MaxOffersPerAgent: 2})
	r.ok(coord.OfferResource{Agent: "A", Kind: "gpu", Name: "0"})
	r.ok(coord.OfferResource{Agent: "A", Kind: "gpu", Name: "1"})
	r.refused(coord.OfferResource{Agent: "A", Kind: "gpu", Name: "2"}, coord.CodeResourceQuota, "resource offer quota exceeded")
	r.now += 10
	r.ok(coord.OfferResource{Agent: "A", Kind: "gpu", Name: "0", Capacity: 2}) // refresh at the cap
	r.ok(coord.OfferResource{Agent: "B", Kind: "gpu", Name: "2"})              // per agent
	if n := len(r.s.Offers()); n != 3 {
		t.Fatalf("%d offers", n)
	}
	// gpu/1 lapses at t0+300 and frees a slot.
	r.now = t0 + 300
	r.ok(coord.OfferResource{Agent: "A", Kind: "gpu", Name: "2"})
}

func TestLimits_ResourceTTLExpiresUnrefreshedOffers(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.ok(coord.OfferResource{Agent: "A", Kind: "gpu", Name: "0"})
	r.ok(coord.OfferResource{Agent: "A", Kind: "cpu", Name: "0"})
	r.now = t0 + 200
	r.ok(coord.OfferResource{Agent: "A", Kind: "cpu", Name: "0"}) // refreshed: lives until t0+500
	if d, ok := r.s.NextDeadline(); !ok || d != t0+300 {
		t.Fatalf("NextDeadline = %v %v", d, ok)
	}
	if o := r.s.Tick(t0 + 299.999); len(o.Events) != 0 {
		t.Fatalf("early expiry: %s", kinds(o.Events))
	}
	o := r.s.Tick(t0 + 300)
	wantEqual(t, "expired", o.Events, []coord.Event{coord.ResourceExpired{Key: "A:gpu:0", OfferedAt: t0}})
	if len(r.s.Offers()) != 1 {
		t.Fatal("the lapsed offer is still listed")
	}
	if o := r.s.Tick(t0 + 499.999); len(o.Events) != 0 {
		t.Fatalf("the refreshed offer expired early: %s", kinds(o.Events))
	}
	wantKinds(t, r.s.Tick(t0+500).Events, "[resource_expired]")
	if len(r.s.Offers()) != 0 {
		t.Fatal("offers outlived their TTL")
	}
	// A custom ResourceTTL is honoured.
	r2 := newRig(t, coord.Limits{ResourceTTL: 5})
	r2.ok(coord.OfferResource{Agent: "A", Kind: "k", Name: "n"})
	wantKinds(t, r2.s.Tick(t0+5).Events, "[resource_expired]")
}

func TestLimits_MaxWaitsPerAgent(t *testing.T) {
	r := newRig(t, coord.Limits{MaxWaitsPerAgent: 2})
	for _, task := range []string{"T1", "T2", "T3"} {
		r.claimIn("H", task, "/wt/"+task)
	}
	r.ok(coord.WaitRequest{Agent: "W", TaskID: "T1"})
	r.ok(coord.WaitRequest{Agent: "W", TaskID: "T2"})
	r.refused(coord.WaitRequest{Agent: "W", TaskID: "T3"}, coord.CodeWaitLimit, "Agent W already waits on the maximum 2 tasks.")
	r.ok(coord.WaitRequest{Agent: "W", TaskID: "T1"}) // re-waiting at the cap is no new wait
	r.ok(coord.WaitRequest{Agent: "V", TaskID: "T3"}) // per agent
	r.ok(coord.ReleaseRequest{Agent: "H", TaskID: "T1"})
	r.ok(coord.WaitRequest{Agent: "W", TaskID: "T3"}) // the woken wait freed a slot
	wantEqual(t, "W waits", r.s.WaitsOf("W"), []string{"T2", "T3"})
}

func TestLimits_MaxBoardTasks(t *testing.T) {
	r := newRig(t, coord.Limits{MaxBoardTasks: 3})
	for i := range 3 {
		r.ok(coord.DeclareTask{Agent: "A", TaskID: fmt.Sprint("t", i), Title: "x"})
	}
	r.refused(coord.DeclareTask{Agent: "A", TaskID: "t3", Title: "x"}, coord.CodeBoardFull, "The board holds the maximum 3 tasks.")
}
