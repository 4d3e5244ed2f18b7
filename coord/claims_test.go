package coord_test

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// traceFixture is the opening position of the claims trace
// (traces/claims.jsonl steps 13-31): A holds T1 on src/core/a.py and
// docs/a.md, renewed once, so epoch 1 is stale and 2 is current; B holds T2
// on src/core in /wt/bravo (epoch 3); C holds the whole of /wt/charlie as T3
// (epoch 4).
func traceFixture(t *testing.T, lim coord.Limits) *rig {
	t.Helper()
	r := newRig(t, lim)
	r.ok(coord.ClaimRequest{Agent: "A", TaskID: "T1", Note: "first claim", Paths: []string{"src/core/a.py", "docs/a.md"}})
	r.ok(coord.ClaimRequest{Agent: "A", TaskID: "T1", Note: "renewed", Paths: []string{"src/core/a.py", "docs/a.md"}})
	r.ok(coord.ClaimRequest{Agent: "B", TaskID: "T2", Worktree: "/wt/bravo", Paths: []string{"src/core"}})
	r.ok(coord.ClaimRequest{Agent: "C", TaskID: "T3", Note: "whole tree", Worktree: "/wt/charlie"})
	for task, epoch := range map[string]int64{"T1": 2, "T2": 3, "T3": 4} {
		if got := r.s.Claim(task).Epoch; got != epoch {
			t.Fatalf("fixture: %s epoch %d, want %d", task, got, epoch)
		}
	}
	return r
}

// refusalCase is one refusal path of a verb.
type refusalCase struct {
	name  string
	lim   coord.Limits
	setup func(r *rig)
	cmd   coord.Command
	code  coord.Code
	msg   string
}

// runRefusals runs each case on a fresh fixture, asserts its refusal left
// the state as it was (rig.refused), then runs check.
func runRefusals(t *testing.T, fixture func(*testing.T, coord.Limits) *rig, cases []refusalCase, check func(t *testing.T, r *rig, c refusalCase, o coord.Outcome)) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := fixture(t, c.lim)
			if c.setup != nil {
				c.setup(r)
			}
			o := r.refused(c.cmd, c.code, c.msg)
			if check != nil {
				check(t, r, c, o)
			}
		})
	}
}

// noEvents: only claim refusals leave an (audit) event behind.
func noEvents(t *testing.T, _ *rig, _ refusalCase, o coord.Outcome) {
	t.Helper()
	if len(o.Events) != 0 {
		t.Fatalf("refusal emitted %s", kinds(o.Events))
	}
}

func TestClaim_Refusals_INV_ME_1_INV_ME_2_INV_ME_4_INV_ME_5_INV_RR_3(t *testing.T) {
	cases := []refusalCase{
		{name: "blank task id", cmd: coord.ClaimRequest{Agent: "B", TaskID: " \t"},
			code: coord.CodeTaskIDRequired, msg: "Task ID is required."},
		{name: "live lease held by another agent (trace step 17)", cmd: coord.ClaimRequest{Agent: "B", TaskID: "T1", Paths: []string{"src/other.py"}},
			code: coord.CodeLeaseLive, msg: "Task 'T1' is already claimed by A."},
		{name: "task id is stripped before the lease check", cmd: coord.ClaimRequest{Agent: "B", TaskID: "  T1\n"},
			code: coord.CodeLeaseLive, msg: "Task 'T1' is already claimed by A."},
		{name: "lease check precedes scope check", cmd: coord.ClaimRequest{Agent: "B", TaskID: "T1", Worktree: "/wt/charlie"},
			code: coord.CodeLeaseLive, msg: "Task 'T1' is already claimed by A."},
		{name: "ancestor of a held path (trace step 19)", cmd: coord.ClaimRequest{Agent: "B", TaskID: "T2", Paths: []string{"src/core"}},
			code: coord.CodeScopeConflict, msg: "Task 'T2' file scope conflicts with 'T1' held by A."},
		{name: "descendant of a held path", cmd: coord.ClaimRequest{Agent: "B", TaskID: "T4", Paths: []string{"docs/a.md/sub"}},
			code: coord.CodeScopeConflict, msg: "Task 'T4' file scope conflicts with 'T1' held by A."},
		{name: "equal path", cmd: coord.ClaimRequest{Agent: "D", TaskID: "T4", Worktree: "/wt/bravo", Paths: []string{`src\core`}},
			code: coord.CodeScopeConflict, msg: "Task 'T4' file scope conflicts with 'T2' held by B."},
		{name: "path inside a whole-worktree claim (trace step 29)", cmd: coord.ClaimRequest{Agent: "B", TaskID: "T4", Worktree: "/wt/charlie", Paths: []string{"README.md"}},
			code: coord.CodeScopeConflict, msg: "Task 'T4' file scope conflicts with 'T3' held by C."},
		{name: "whole-worktree claim over a path claim", cmd: coord.ClaimRequest{Agent: "D", TaskID: "T4"},
			code: coord.CodeScopeConflict, msg: "Task 'T4' file scope conflicts with 'T1' held by A."},
		{name: "escaping path widens to the whole worktree", cmd: coord.ClaimRequest{Agent: "D", TaskID: "T4", Paths: []string{"zzz", "../elsewhere"}},
			code: coord.CodeScopeConflict, msg: "Task 'T4' file scope conflicts with 'T1' held by A."},
		{name: "principal at its cap", lim: coord.Limits{MaxClaimsPerPrincipal: 2},
			setup: func(r *rig) { r.claimIn("B", "T5", "/wt/b5") },
			cmd:   coord.ClaimRequest{Agent: "B", TaskID: "T6", Worktree: "/wt/b6"},
			code:  coord.CodeQuotaExceeded, msg: "Agent B principal claim quota holds the maximum 2 claims."},
		{name: "scope check precedes quota check", lim: coord.Limits{MaxClaimsPerPrincipal: 1},
			cmd:  coord.ClaimRequest{Agent: "B", TaskID: "T6", Worktree: "/wt/charlie"},
			code: coord.CodeScopeConflict, msg: "Task 'T6' file scope conflicts with 'T3' held by C."},
		{name: "renewal charged to a different principal at its cap", lim: coord.Limits{MaxClaimsPerPrincipal: 1},
			setup: func(r *rig) {
				r.ok(coord.ClaimRequest{Agent: "Z", Principal: "p", TaskID: "T7", Worktree: "/wt/z"})
				r.ok(coord.ClaimRequest{Agent: "B", Principal: "q", TaskID: "T8", Worktree: "/wt/q"})
			},
			cmd:  coord.ClaimRequest{Agent: "B", Principal: "p", TaskID: "T8", Worktree: "/wt/q"},
			code: coord.CodeQuotaExceeded, msg: "Agent B principal claim quota holds the maximum 1 claims."},
	}
	runRefusals(t, traceFixture, cases, func(t *testing.T, r *rig, c refusalCase, o coord.Outcome) {
		// INV-RR-3: every refused claim leaves exactly one audit record, and
		// applying it changes nothing.
		req := c.cmd.(coord.ClaimRequest)
		d := one[coord.ClaimDenied](t, o.Events)
		wantKinds(t, o.Events, "[claim_denial]")
		want := coord.ClaimDenied{Claimant: req.Agent, TaskID: o.Refusal.TaskID, Code: c.code, Worktree: req.Worktree,
			Paths: coord.NormalizePaths(req.Paths, r.s.Limits())}
		wantEqual(t, "ClaimDenied", d, want)
		if d.Durability() != coord.Full {
			t.Fatalf("claim_denial durability %v, want Full", d.Durability())
		}
		before := r.s.Image()
		r.s.Apply(d)
		wantEqual(t, "image after applying ClaimDenied", r.s.Image(), before)
	})
}

func TestClaimDenied_AppliedOnReplayCreatesNoLease_INV_RR_3(t *testing.T) {
	s := coord.New(coord.Limits{})
	s.Apply(coord.ClaimDenied{Claimant: "A", TaskID: "T1", Code: coord.CodeLeaseLive, Worktree: "/wt", Paths: []string{"x"}})
	if s.ClaimCount() != 0 || s.Epoch() != 0 {
		t.Fatalf("a denial created state: %+v", s.Image())
	}
	wantEqual(t, "image", s.Image(), coord.New(coord.Limits{}).Image())
}

func TestClaim_RefusalDuringExpiryKeepsOnlyTheExpiry_INV_LL_2(t *testing.T) {
	r := traceFixture(t, coord.Limits{})
	r.ok(coord.ClaimRequest{Agent: "C", TaskID: "T5", Worktree: "/wt/ttl", TTL: 30, HasTTL: true})
	r.now += 30
	o := r.step(coord.ClaimRequest{Agent: "B", TaskID: "T1"})
	wantKinds(t, o.Events, "[claim_expired,claim_denial]")
	if o.Refusal == nil || o.Refusal.Code != coord.CodeLeaseLive {
		t.Fatalf("refusal %v, want LEASE_LIVE", o.Refusal)
	}
	if r.s.Claim("T5") != nil {
		t.Fatal("T5 still held after its expiry")
	}
}

func TestClaim_GrantsAndRenewalsStampFreshEpochs_INV_EF_1(t *testing.T) {
	r := traceFixture(t, coord.Limits{})
	last := r.s.Epoch()
	grant := func(evs []coord.Event) int64 {
		var e int64
		for _, ev := range evs {
			switch ev := ev.(type) {
			case coord.ClaimGranted:
				e = ev.Claim.Epoch
			case coord.HandedOff:
				e = ev.Claim.Epoch
			}
		}
		return e
	}
	steps := []struct {
		name string
		cmd  coord.Command
		dt   float64
	}{
		{"new claim", coord.ClaimRequest{Agent: "D", TaskID: "T9", Worktree: "/wt/d", TTL: 30, HasTTL: true}, 0},
		{"renewal", coord.ClaimRequest{Agent: "D", TaskID: "T9", Worktree: "/wt/d", TTL: 30, HasTTL: true}, 1},
		{"handoff", coord.HandoffRequest{Agent: "D", TaskID: "T9", To: "E", ToOnline: true}, 1},
		{"takeover after expiry", coord.ClaimRequest{Agent: "F", TaskID: "T1"}, 3600},
		{"renewal after a takeover", coord.ClaimRequest{Agent: "F", TaskID: "T1"}, 1},
	}
	for _, st := range steps {
		r.now += st.dt
		e := grant(r.ok(st.cmd))
		if e <= last {
			t.Fatalf("%s: epoch %d not above %d", st.name, e, last)
		}
		if r.s.Epoch() != e {
			t.Fatalf("%s: State.Epoch %d, want %d", st.name, r.s.Epoch(), e)
		}
		last = e
		// A refusal issues no epoch.
		r.refused(coord.ClaimRequest{Agent: "nobody", TaskID: "T1"}, coord.CodeLeaseLive, "Task 'T1' is already claimed by "+r.s.Claim("T1").Owner+".")
		if r.s.Epoch() != last {
			t.Fatalf("%s: a refusal moved the epoch to %d", st.name, r.s.Epoch())
		}
	}
}

func TestClaim_GrantCarriesTheRequest(t *testing.T) {
	r := newRig(t, coord.Limits{})
	git := &coord.Git{Branch: "feat", Base: "main", AutoReleaseOn: "merge"}
	evs := r.ok(coord.ClaimRequest{Agent: "A", Principal: "open-host:127.0.0.1", TaskID: " T1 ", Note: "  first claim ",
		TTL: 120, HasTTL: true, Worktree: "/repo", Paths: []string{"src/x.py", "./src/x.py", "docs/"}, PathIdentity: `{"version":1}`, Git: git})
	g := one[coord.ClaimGranted](t, evs)
	want := coord.Claim{TaskID: "T1", Owner: "A", Note: "first claim", Status: coord.StatusClaimed, Worktree: "/repo",
		Paths: []string{"src/x.py", "docs"}, PathIdentity: `{"version":1}`, Git: git, QuotaPrincipal: "open-host:127.0.0.1",
		ClaimedAt: t0, ExpiresAt: t0 + 120, Epoch: 1}
	wantEqual(t, "claim", *g.Claim, want)
	if g.Renewal {
		t.Fatal("a first claim reported as a renewal")
	}
	wantEqual(t, "stored claim", *r.s.Claim("T1"), want)
	if r.s.PrincipalClaims("open-host:127.0.0.1") != 1 {
		t.Fatal("the principal is not charged")
	}
	r.claim("B", "T2", "elsewhere")
	if r.s.PrincipalClaims("legacy-agent:B") != 1 {
		t.Fatal(`a blank principal is not "legacy-agent:<name>"`)
	}
}

func TestClaim_TTLIsClamped_INV_LL_3(t *testing.T) {
	cases := []struct {
		name   string
		ttl    float64
		hasTTL bool
		want   float64
	}{
		{"1 s rises to the 30 s minimum (trace step 81)", 1, true, 30},
		{"zero rises to the minimum", 0, true, 30},
		{"negative rises to the minimum", -5, true, 30},
		{"minimum kept", 30, true, 30},
		{"in range kept", 90.5, true, 90.5},
		{"maximum kept", 2592000, true, 2592000},
		{"1e12 falls to 30 days (trace step 85)", 1e12, true, 2592000},
		{"NaN takes the default", math.NaN(), true, 3600},
		{"+Inf takes the default", math.Inf(1), true, 3600},
		{"-Inf takes the default", math.Inf(-1), true, 3600},
		{"missing takes the default", 5, false, 3600},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, coord.Limits{})
			g := one[coord.ClaimGranted](t, r.ok(coord.ClaimRequest{Agent: "A", TaskID: "T", TTL: c.ttl, HasTTL: c.hasTTL}))
			if got := g.Claim.ExpiresAt - g.Claim.ClaimedAt; got != c.want {
				t.Fatalf("lease %v s, want %v", got, c.want)
			}
			if got := coord.DefaultLimits().ClampTTL(c.ttl, c.hasTTL); got != c.want {
				t.Fatalf("ClampTTL = %v, want %v", got, c.want)
			}
		})
	}
	custom := coord.Limits{MinTTL: 5, MaxTTL: 50, DefaultTTL: 20}.ClampTTL
	for _, c := range []struct{ in, want float64 }{{1, 5}, {500, 50}, {math.NaN(), 20}, {7, 7}} {
		if got := custom(c.in, true); got != c.want {
			t.Fatalf("custom ClampTTL(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	// A default outside the window is clamped too.
	if got := (coord.Limits{MinTTL: 5, MaxTTL: 50, DefaultTTL: 500}).ClampTTL(0, false); got != 50 {
		t.Fatalf("default above the max gives %v, want 50", got)
	}
}

func TestClaim_ExpiryAtLeaseExpiresAtFreesTheTask_INV_LL_1_INV_LL_2(t *testing.T) {
	r := newRig(t, coord.Limits{})
	c := one[coord.ClaimGranted](t, r.ok(coord.ClaimRequest{Agent: "A", TaskID: "T1", Paths: []string{"src"}, TTL: 30, HasTTL: true})).Claim
	if !c.Live(t0+29.999) || c.Live(t0+30) || c.Live(t0+31) {
		t.Fatal("Live must hold iff ExpiresAt > now")
	}
	if d, ok := r.s.NextDeadline(); !ok || d != t0+30 {
		t.Fatalf("NextDeadline = %v %v, want %v", d, ok, t0+30)
	}
	r.now = t0 + 29.999
	r.refused(coord.ClaimRequest{Agent: "B", TaskID: "T1"}, coord.CodeLeaseLive, "Task 'T1' is already claimed by A.")
	r.refused(coord.ClaimRequest{Agent: "B", TaskID: "T2", Paths: []string{"src/x"}}, coord.CodeScopeConflict, "Task 'T2' file scope conflicts with 'T1' held by A.")
	if o := r.s.Tick(r.now); len(o.Events) != 0 {
		t.Fatalf("Tick before the expiry emitted %s", kinds(o.Events))
	}
	// Exactly at lease_expires_at the claim is no longer live: Decide alone
	// (before any Tick) already treats it as free...
	if evs, ref := r.s.Decide(coord.ClaimRequest{Agent: "B", TaskID: "T1"}, t0+30); ref != nil || len(evs) != 1 {
		t.Fatalf("Decide at the expiry: %v %v", kinds(evs), ref)
	}
	// ...and Step expires it first, then grants the takeover.
	r.now = t0 + 30
	evs := r.ok(coord.ClaimRequest{Agent: "B", TaskID: "T1", Paths: []string{"src/x"}})
	wantKinds(t, evs, "[claim_expired,claim]")
	wantEqual(t, "expired", evs[0].(coord.ClaimExpired), coord.ClaimExpired{TaskID: "T1", Epoch: c.Epoch})
	g := evs[1].(coord.ClaimGranted)
	if g.Renewal || g.Claim.Owner != "B" || g.Claim.Epoch <= c.Epoch {
		t.Fatalf("takeover = %+v", g)
	}
	// Tick alone expires too.
	r.now = t0 + 30 + 3600
	o := r.s.Tick(r.now)
	wantKinds(t, o.Events, "[claim_expired]")
	if r.s.ClaimCount() != 0 {
		t.Fatal("Tick at the expiry left the claim")
	}
	if _, ok := r.s.NextDeadline(); ok {
		t.Fatal("NextDeadline with nothing live")
	}
}

func TestClaim_RenewalKeepsWorkStateUnlessTerminal_INV_LL_4(t *testing.T) {
	r := newRig(t, coord.Limits{})
	first := r.claim("A", "T1", "src")
	r.ok(coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working", DataRef: "artifact://1"})
	r.ok(coord.CheckpointRequest{Agent: "A", TaskID: "T1", Checkpoint: "step-3"})
	r.now += 10
	g := one[coord.ClaimGranted](t, r.ok(coord.ClaimRequest{Agent: "A", TaskID: "T1", Note: "renewed", Paths: []string{"src"}, TTL: 60, HasTTL: true}))
	c := g.Claim
	if !g.Renewal {
		t.Fatal("a same-owner claim is not reported as a renewal")
	}
	if c.Status != coord.StatusWorking || c.DataRef != "artifact://1" || c.Version != 2 || c.Checkpoint != "step-3" {
		t.Fatalf("renewal lost work state: %+v", *c)
	}
	if c.Epoch <= first.Epoch || c.ExpiresAt != r.now+60 || c.ClaimedAt != r.now || c.Note != "renewed" {
		t.Fatalf("renewal lease/epoch/note: %+v", *c)
	}
	if r.s.ClaimCount() != 1 || r.s.PrincipalClaims("legacy-agent:A") != 1 {
		t.Fatal("renewal created a second hold")
	}
	// A finished claim renewed starts over (checkpoint still kept).
	r.ok(coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "done"})
	c = one[coord.ClaimGranted](t, r.ok(coord.ClaimRequest{Agent: "A", TaskID: "T1", Paths: []string{"src"}})).Claim
	if c.Status != coord.StatusClaimed || c.DataRef != "" || c.Version != 0 || c.Checkpoint != "step-3" {
		t.Fatalf("terminal renewal did not start over: %+v", *c)
	}
	r.ok(coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "failed"})
	c = one[coord.ClaimGranted](t, r.ok(coord.ClaimRequest{Agent: "A", TaskID: "T1", Paths: []string{"src"}})).Claim
	if c.Status != coord.StatusClaimed || c.Version != 0 {
		t.Fatalf("failed renewal did not start over: %+v", *c)
	}
}

func TestClaim_RenewalMayMoveTheScope_INV_ME_2(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.claim("A", "T1", "src/a")
	r.claim("A", "T1", "src/b")
	// The old scope is free again, the new one is held.
	r.claim("B", "T2", "src/a")
	r.refused(coord.ClaimRequest{Agent: "B", TaskID: "T3", Paths: []string{"src/b/x"}}, coord.CodeScopeConflict, "Task 'T3' file scope conflicts with 'T1' held by A.")
	// An owner's own claims never conflict with each other.
	r.claim("A", "T4", "src/b/x")
	r.claim("A", "T5", "src/b")
}

func TestClaim_QuotaIsPerPrincipalNotPerName_INV_ME_5_INV_LL_4(t *testing.T) {
	r := newRig(t, coord.Limits{})
	const p = "open-host:127.0.0.1"
	for i := range coord.MaxClaimsPerAgent {
		agent := []string{"A", "A2"}[i%2] // two names, one principal
		r.ok(coord.ClaimRequest{Agent: agent, Principal: p, TaskID: fmt.Sprintf("T%03d", i), Worktree: fmt.Sprintf("/wt/%d", i)})
	}
	if n := r.s.PrincipalClaims(p); n != 128 {
		t.Fatalf("principal holds %d, want 128", n)
	}
	r.refused(coord.ClaimRequest{Agent: "A2", Principal: p, TaskID: "extra", Worktree: "/wt/extra"},
		coord.CodeQuotaExceeded, "Agent A2 principal claim quota holds the maximum 128 claims.")
	r.refused(coord.ClaimRequest{Agent: "A3", Principal: p, TaskID: "extra", Worktree: "/wt/extra"},
		coord.CodeQuotaExceeded, "Agent A3 principal claim quota holds the maximum 128 claims.")
	// A renewal at the cap is admitted (INV-LL-4).
	before := r.s.Claim("T000")
	g := one[coord.ClaimGranted](t, r.ok(coord.ClaimRequest{Agent: "A", Principal: p, TaskID: "T000", Worktree: "/wt/0"}))
	if !g.Renewal || g.Claim.Epoch <= before.Epoch || r.s.PrincipalClaims(p) != 128 {
		t.Fatalf("renewal at the cap: %+v, principal holds %d", g, r.s.PrincipalClaims(p))
	}
	// Another principal has its own budget.
	r.ok(coord.ClaimRequest{Agent: "Z", TaskID: "extra", Worktree: "/wt/extra"})
	// Freeing one makes room again.
	r.ok(coord.ReleaseRequest{Agent: "A2", TaskID: "T001"})
	r.ok(coord.ClaimRequest{Agent: "A2", Principal: p, TaskID: "extra2", Worktree: "/wt/extra2"})
}

func TestClaim_CheckpointSurvivesExpiryForAnotherAgent_INV_CR_3_INV_LL_2(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.ok(coord.ClaimRequest{Agent: "A", TaskID: "T1", TTL: 30, HasTTL: true})
	r.ok(coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working"})
	r.ok(coord.CheckpointRequest{Agent: "A", TaskID: "T1", Checkpoint: "step-3"})
	r.now += 30
	r.s.Tick(r.now)
	if cp, ok := r.s.RetainedCheckpoint("T1"); !ok || cp != "step-3" {
		t.Fatalf("retained = %q %v", cp, ok)
	}
	c := one[coord.ClaimGranted](t, r.ok(coord.ClaimRequest{Agent: "B", TaskID: "T1"})).Claim
	if c.Checkpoint != "step-3" || c.Status != coord.StatusClaimed || c.Version != 0 || c.Owner != "B" {
		t.Fatalf("takeover = %+v", *c)
	}
	if _, ok := r.s.RetainedCheckpoint("T1"); ok {
		t.Fatal("the inherited checkpoint is still retained")
	}
	// A claim without a checkpoint retains nothing.
	r.ok(coord.ClaimRequest{Agent: "C", TaskID: "T2", Worktree: "/wt/c", TTL: 30, HasTTL: true})
	r.now += 30
	r.s.Tick(r.now)
	if _, ok := r.s.RetainedCheckpoint("T2"); ok {
		t.Fatal("an empty checkpoint was retained")
	}
}

func TestRelease_DropsTheCheckpoint_INV_CR_3(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.claim("A", "T1")
	r.ok(coord.CheckpointRequest{Agent: "A", TaskID: "T1", Checkpoint: "step-3"})
	r.ok(coord.ReleaseRequest{Agent: "A", TaskID: "T1"})
	if _, ok := r.s.RetainedCheckpoint("T1"); ok {
		t.Fatal("release retained the checkpoint")
	}
	if c := r.claim("B", "T1"); c.Checkpoint != "" {
		t.Fatalf("a later claim resurrected %q", c.Checkpoint)
	}
	// A checkpoint retained from an expiry and inherited is dropped by the
	// inheritor's release too.
	r.ok(coord.CheckpointRequest{Agent: "B", TaskID: "T1", Checkpoint: "b-1"})
	r.now += 3600
	r.s.Tick(r.now)
	if c := r.claim("C", "T1"); c.Checkpoint != "b-1" {
		t.Fatalf("inherited %q", c.Checkpoint)
	}
	r.ok(coord.ReleaseRequest{Agent: "C", TaskID: "T1"})
	if c := r.claim("D", "T1"); c.Checkpoint != "" {
		t.Fatalf("a claim after release inherited %q", c.Checkpoint)
	}
}

func TestRelease_Refusals_INV_EF_2(t *testing.T) {
	runRefusals(t, traceFixture, []refusalCase{
		{name: "blank task id", cmd: coord.ReleaseRequest{Agent: "A", TaskID: ""},
			code: coord.CodeTaskIDRequired, msg: "Task ID is required."},
		{name: "not claimed", cmd: coord.ReleaseRequest{Agent: "A", TaskID: "T9"},
			code: coord.CodeNotClaimed, msg: "Task 'T9' is not currently claimed."},
		{name: "expired claim is not claimed", setup: func(r *rig) { r.now += 3600 },
			cmd:  coord.ReleaseRequest{Agent: "A", TaskID: "T1"},
			code: coord.CodeNotClaimed, msg: "Task 'T1' is not currently claimed."},
		{name: "not the owner", cmd: coord.ReleaseRequest{Agent: "B", TaskID: "T1"},
			code: coord.CodeNotOwner, msg: "Task 'T1' is owned by A, not B."},
		{name: "ownership precedes the epoch", cmd: coord.ReleaseRequest{Agent: "B", TaskID: "T1", Epoch: 1, HasEpoch: true},
			code: coord.CodeNotOwner, msg: "Task 'T1' is owned by A, not B."},
		{name: "pre-renewal epoch (trace step 53)", cmd: coord.ReleaseRequest{Agent: "A", TaskID: "T1", Epoch: 1, HasEpoch: true},
			code: coord.CodeEpochStale, msg: "Task 'T1' epoch is stale (current 2)."},
		{name: "future epoch", cmd: coord.ReleaseRequest{Agent: "A", TaskID: "T1", Epoch: 99, HasEpoch: true},
			code: coord.CodeEpochStale, msg: "Task 'T1' epoch is stale (current 2)."},
		{name: "epoch zero is checked when present", cmd: coord.ReleaseRequest{Agent: "A", TaskID: "T1", HasEpoch: true},
			code: coord.CodeEpochStale, msg: "Task 'T1' epoch is stale (current 2)."},
	}, noEvents)
}

func TestRelease_EvidenceReceiptAndAssessmentNote(t *testing.T) {
	const fresh = "positive evidence present"
	cases := []struct {
		name    string
		ev      *coord.Evidence
		status  string
		reasons []string
		note    string // "" means no note
	}{
		{name: "trace step 70: full evidence, fresh", ev: &coord.Evidence{
			Evidence: []string{"pytest -q: 41 passed"}, Artifacts: []string{"dist/app.whl"}, ChangedFiles: []string{"src/core/a.py"},
			GeneratedArtifacts: []string{"docs/a.html"}, Approvals: []string{"lead-review"}, Confidence: "high", Freshness: 120, HasFreshness: true},
			status: "unverified", reasons: []string{fresh, "fresh evidence present but unverified"},
			note: "release receipt: evidence=pytest -q: 41 passed; artifacts=dist/app.whl; changed_files=src/core/a.py; generated_artifacts=docs/a.html; approvals=lead-review; confidence=high; freshness_seconds=120.0; epistemic_status=unverified; epistemic_reasons=positive evidence present, fresh evidence present but unverified"},
		{name: "trace step 77: no evidence", ev: nil,
			status: "unsupported", reasons: []string{"no positive evidence, artifact, changed file, generated artifact, or approval"}},
		{name: "empty evidence is no evidence", ev: &coord.Evidence{},
			status: "unsupported", reasons: []string{"no positive evidence, artifact, changed file, generated artifact, or approval"}},
		{name: "known failures degrade", ev: &coord.Evidence{Evidence: []string{"ok"}, KnownFailures: []string{"flaky", "slow"}, Freshness: 1, HasFreshness: true},
			status: "degraded", reasons: []string{"known failures reported"},
			note: "release receipt: evidence=ok; known_failures=flaky, slow; freshness_seconds=1.0; epistemic_status=degraded; epistemic_reasons=known failures reported"},
		{name: "confidence alone is unsupported", ev: &coord.Evidence{Confidence: "high"},
			status: "unsupported", reasons: []string{"no positive evidence, artifact, changed file, generated artifact, or approval"},
			note: "release receipt: confidence=high; epistemic_status=unsupported; epistemic_reasons=no positive evidence, artifact, changed file, generated artifact, or approval"},
		{name: "missing freshness", ev: &coord.Evidence{Artifacts: []string{"a", "b"}},
			status: "needs_freshness", reasons: []string{fresh, "evidence freshness not supplied"},
			note: "release receipt: artifacts=a, b; epistemic_status=needs_freshness; epistemic_reasons=positive evidence present, evidence freshness not supplied"},
		{name: "negative freshness is missing", ev: &coord.Evidence{Approvals: []string{"x"}, Freshness: -1, HasFreshness: true},
			status: "needs_freshness", reasons: []string{fresh, "evidence freshness not supplied"},
			note: "release receipt: approvals=x; epistemic_status=needs_freshness; epistemic_reasons=positive evidence present, evidence freshness not supplied"},
		{name: "freshness at 3600 s is still fresh", ev: &coord.Evidence{ChangedFiles: []string{"f"}, Freshness: 3600, HasFreshness: true},
			status: "unverified", reasons: []string{fresh, "fresh evidence present but unverified"},
			note: "release receipt: changed_files=f; freshness_seconds=3600.0; epistemic_status=unverified; epistemic_reasons=positive evidence present, fresh evidence present but unverified"},
		{name: "freshness past 3600 s is stale", ev: &coord.Evidence{GeneratedArtifacts: []string{"g"}, Freshness: 3600.5, HasFreshness: true},
			status: "stale", reasons: []string{fresh, "evidence older than 3600 seconds"},
			note: "release receipt: generated_artifacts=g; freshness_seconds=3600.5; epistemic_status=stale; epistemic_reasons=positive evidence present, evidence older than 3600 seconds"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, coord.Limits{})
			c1 := r.claim("B", "T1")
			r.now += 5
			evs := r.ok(coord.ReleaseRequest{Agent: "B", TaskID: "T1", Epoch: c1.Epoch, HasEpoch: true, Evidence: c.ev})
			rel := one[coord.Released](t, evs)
			if rel.TaskID != "T1" || rel.Owner != "B" || rel.Epoch != c1.Epoch {
				t.Fatalf("released = %+v", rel)
			}
			if rel.Receipt == nil || rel.Receipt.Status != c.status || !slices.Equal(rel.Receipt.Reasons, c.reasons) {
				t.Fatalf("receipt = %+v, want %s %q", rel.Receipt, c.status, c.reasons)
			}
			if rel.Receipt.TaskID != "T1" || rel.Receipt.Owner != "B" {
				t.Fatalf("receipt identity = %+v", rel.Receipt)
			}
			if c.note == "" {
				wantKinds(t, evs, "[release]")
				return
			}
			wantKinds(t, evs, "[release,ledger_progress]")
			n := *one[coord.ProgressPosted](t, evs).Note
			wantEqual(t, "note", n, coord.Note{TaskID: "T1", Author: "B", Kind: "assessment", Text: c.note, PostedAt: r.now})
			if got := r.s.Notes(); len(got) != 1 || got[0].Text != c.note {
				t.Fatalf("board notes = %v", got)
			}
		})
	}
}

func TestRelease_EvidenceIsCapped(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.claim("A", "T1")
	many := make([]string, 60)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	long := fmt.Sprintf("%0600d", 7)
	rel := one[coord.Released](t, r.ok(coord.ReleaseRequest{Agent: "A", TaskID: "T1", Evidence: &coord.Evidence{
		Evidence: many, Artifacts: []string{long}, Confidence: long + "é"}}))
	e := rel.Receipt.Evidence
	if len(e.Evidence) != 50 || e.Evidence[49] != "49" || len(e.Artifacts[0]) != 500 || len(e.Confidence) != 500 {
		t.Fatalf("caps: %d items, artifact %d chars, confidence %d", len(e.Evidence), len(e.Artifacts[0]), len(e.Confidence))
	}
}

func TestUpdate_Refusals_INV_EF_2_INV_EF_3(t *testing.T) {
	toInputRequired := func(r *rig) {
		r.ok(coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working", ExpectedVersion: 0, HasExpectedVersion: true})
		r.ok(coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "input_required", ExpectedVersion: 1, HasExpectedVersion: true})
	}
	runRefusals(t, traceFixture, []refusalCase{
		{name: "blank task id", cmd: coord.UpdateRequest{Agent: "A", TaskID: " "},
			code: coord.CodeTaskIDRequired, msg: "Task ID is required."},
		{name: "not found", cmd: coord.UpdateRequest{Agent: "A", TaskID: "T9", Status: "working"},
			code: coord.CodeTaskNotFound, msg: "Task 'T9' not found."},
		{name: "expired is not found", setup: func(r *rig) { r.now += 3600 }, cmd: coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working"},
			code: coord.CodeTaskNotFound, msg: "Task 'T1' not found."},
		{name: "not the owner", cmd: coord.UpdateRequest{Agent: "B", TaskID: "T1", Status: "working"},
			code: coord.CodeNotOwner, msg: "Task 'T1' owned by A, not B."},
		{name: "stale epoch (trace step 55)", cmd: coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working", Epoch: 1, HasEpoch: true},
			code: coord.CodeEpochStale, msg: "Task 'T1' epoch is stale (current 2)."},
		{name: "epoch precedes version", cmd: coord.UpdateRequest{Agent: "A", TaskID: "T1", Epoch: 1, HasEpoch: true, ExpectedVersion: 5, HasExpectedVersion: true},
			code: coord.CodeEpochStale, msg: "Task 'T1' epoch is stale (current 2)."},
		{name: "stale expected_version (trace step 39)",
			setup: func(r *rig) {
				r.ok(coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working", ExpectedVersion: 0, HasExpectedVersion: true})
			},
			cmd:  coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "input_required", ExpectedVersion: 0, HasExpectedVersion: true},
			code: coord.CodeVersionConflict, msg: "Task 'T1' version conflict (current 1)."},
		{name: "version precedes transition", cmd: coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "input_required", ExpectedVersion: 3, HasExpectedVersion: true},
			code: coord.CodeVersionConflict, msg: "Task 'T1' version conflict (current 0)."},
		{name: "illegal transition (trace step 45)", setup: toInputRequired, cmd: coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "claimed"},
			code: coord.CodeIllegalTransition, msg: "Task 'T1' cannot transition input_required -> claimed."},
		{name: "claimed cannot skip to input_required", cmd: coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "input_required"},
			code: coord.CodeIllegalTransition, msg: "Task 'T1' cannot transition claimed -> input_required."},
		{name: "done is terminal", setup: func(r *rig) { r.ok(coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "done"}) },
			cmd:  coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working"},
			code: coord.CodeIllegalTransition, msg: "Task 'T1' cannot transition done -> working."},
		{name: "unknown status", cmd: coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "bogus"},
			code: coord.CodeUnknownStatus, msg: "Task 'T1' cannot transition claimed -> bogus."},
	}, noEvents)
}

func TestUpdate_BumpsVersionAndKeepsTheLease_INV_EF_3(t *testing.T) {
	r := traceFixture(t, coord.Limits{})
	c0 := r.s.Claim("T1")
	steps := []struct {
		req  coord.UpdateRequest
		want func(c *coord.Claim) bool
	}{
		{coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working", ExpectedVersion: 0, HasExpectedVersion: true},
			func(c *coord.Claim) bool { return c.Status == coord.StatusWorking && c.Version == 1 }},
		{coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "input_required", ExpectedVersion: 1, HasExpectedVersion: true},
			func(c *coord.Claim) bool { return c.Status == coord.StatusInputRequired && c.Version == 2 }},
		{coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working", Note: " resuming ", DataRef: "artifact://build/42", Epoch: 2, HasEpoch: true},
			func(c *coord.Claim) bool {
				return c.Status == coord.StatusWorking && c.Version == 3 && c.Note == "resuming" && c.DataRef == "artifact://build/42"
			}},
		{coord.UpdateRequest{Agent: "A", TaskID: "T1"}, // blanks leave everything, still a write
			func(c *coord.Claim) bool {
				return c.Status == coord.StatusWorking && c.Version == 4 && c.Note == "resuming" && c.DataRef == "artifact://build/42"
			}},
		{coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working"}, // re-asserting is allowed
			func(c *coord.Claim) bool { return c.Version == 5 }},
		{coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "done"},
			func(c *coord.Claim) bool { return c.Status == coord.StatusDone && c.Version == 6 }},
		{coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "done"},
			func(c *coord.Claim) bool { return c.Status == coord.StatusDone && c.Version == 7 }},
	}
	for i, st := range steps {
		c := one[coord.TaskUpdated](t, r.ok(st.req)).Claim
		if !st.want(c) {
			t.Fatalf("step %d: %+v", i, *c)
		}
		if c.Epoch != c0.Epoch || c.ExpiresAt != c0.ExpiresAt || c.Owner != "A" || !slices.Equal(c.Paths, c0.Paths) {
			t.Fatalf("step %d: update touched the lease: %+v", i, *c)
		}
		wantEqual(t, "stored", r.s.Claim("T1"), c)
	}
}

func TestStatus_TransitionTable(t *testing.T) {
	allowed := map[coord.Status][]coord.Status{
		coord.StatusClaimed:       {coord.StatusClaimed, coord.StatusWorking, coord.StatusDone, coord.StatusFailed},
		coord.StatusWorking:       {coord.StatusWorking, coord.StatusInputRequired, coord.StatusDone, coord.StatusFailed},
		coord.StatusInputRequired: {coord.StatusInputRequired, coord.StatusWorking, coord.StatusDone, coord.StatusFailed},
		coord.StatusDone:          {coord.StatusDone},
		coord.StatusFailed:        {coord.StatusFailed},
	}
	all := []coord.Status{coord.StatusClaimed, coord.StatusWorking, coord.StatusInputRequired, coord.StatusDone, coord.StatusFailed}
	for _, from := range all {
		for _, to := range all {
			if got, want := from.CanTransition(to), slices.Contains(allowed[from], to); got != want {
				t.Errorf("%s -> %s: %v, want %v", from, to, got, want)
			}
		}
		if p, ok := coord.ParseStatus(from.String()); !ok || p != from {
			t.Errorf("ParseStatus(%q) = %v %v", from.String(), p, ok)
		}
		if got, want := from.Terminal(), from == coord.StatusDone || from == coord.StatusFailed; got != want {
			t.Errorf("%s.Terminal() = %v", from, got)
		}
	}
	if _, ok := coord.ParseStatus("Working"); ok {
		t.Error("status names are case-sensitive")
	}
	if coord.Status(9).String() != "unknown" {
		t.Error("out-of-range status name")
	}
}

func TestCheckpoint_Refusals_INV_EF_2(t *testing.T) {
	runRefusals(t, traceFixture, []refusalCase{
		{name: "blank task id", cmd: coord.CheckpointRequest{Agent: "A", TaskID: "", Checkpoint: "x"},
			code: coord.CodeTaskIDRequired, msg: "Task ID is required."},
		{name: "not found", cmd: coord.CheckpointRequest{Agent: "A", TaskID: "T9", Checkpoint: "x"},
			code: coord.CodeTaskNotFound, msg: "Task 'T9' not found."},
		{name: "expired is not found", setup: func(r *rig) { r.now += 3600 }, cmd: coord.CheckpointRequest{Agent: "A", TaskID: "T1", Checkpoint: "x"},
			code: coord.CodeTaskNotFound, msg: "Task 'T1' not found."},
		{name: "not the owner", cmd: coord.CheckpointRequest{Agent: "C", TaskID: "T1", Checkpoint: "x"},
			code: coord.CodeNotOwner, msg: "Task 'T1' owned by A, not C."},
		{name: "stale epoch (trace step 57)", cmd: coord.CheckpointRequest{Agent: "A", TaskID: "T1", Checkpoint: "step-4", Epoch: 1, HasEpoch: true},
			code: coord.CodeEpochStale, msg: "Task 'T1' epoch is stale (current 2)."},
	}, noEvents)
}

func TestCheckpoint_SavesAndBumpsVersion_INV_EF_3(t *testing.T) {
	r := traceFixture(t, coord.Limits{})
	c0 := r.s.Claim("T1")
	c := one[coord.CheckpointSaved](t, r.ok(coord.CheckpointRequest{Agent: "A", TaskID: "T1", Checkpoint: " step-3 ", Epoch: 2, HasEpoch: true})).Claim
	if c.Checkpoint != " step-3 " || c.Version != 1 || c.Epoch != c0.Epoch || c.ExpiresAt != c0.ExpiresAt {
		t.Fatalf("checkpoint = %+v (the token is opaque, not stripped)", *c)
	}
	c = one[coord.CheckpointSaved](t, r.ok(coord.CheckpointRequest{Agent: "A", TaskID: "T1", Checkpoint: ""})).Claim
	if c.Checkpoint != "" || c.Version != 2 {
		t.Fatalf("clearing checkpoint = %+v", *c)
	}
}

func TestHandoff_Refusals_INV_EF_2_INV_ME_5_INV_CR_2(t *testing.T) {
	runRefusals(t, traceFixture, []refusalCase{
		{name: "blank task id", cmd: coord.HandoffRequest{Agent: "A", TaskID: "", To: "B", ToOnline: true},
			code: coord.CodeTaskIDRequired, msg: "Task ID is required."},
		{name: "blank target", cmd: coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "  ", ToOnline: true},
			code: coord.CodeTargetRequired, msg: "Handoff target is required."},
		{name: "target required precedes not claimed", cmd: coord.HandoffRequest{Agent: "A", TaskID: "T9"},
			code: coord.CodeTargetRequired, msg: "Handoff target is required."},
		{name: "not claimed", cmd: coord.HandoffRequest{Agent: "A", TaskID: "T9", To: "B", ToOnline: true},
			code: coord.CodeNotClaimed, msg: "Task 'T9' is not currently claimed."},
		{name: "not the owner", cmd: coord.HandoffRequest{Agent: "B", TaskID: "T1", To: "C", ToOnline: true},
			code: coord.CodeNotOwner, msg: "Task 'T1' is owned by A, not B."},
		{name: "to oneself", cmd: coord.HandoffRequest{Agent: "A", TaskID: "T1", To: " A ", ToOnline: true},
			code: coord.CodeAlreadyOwner, msg: "Task 'T1' is already owned by A."},
		{name: "stale epoch (trace step 59)", cmd: coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "B", ToOnline: true, Epoch: 1, HasEpoch: true},
			code: coord.CodeEpochStale, msg: "Task 'T1' epoch is stale (current 2)."},
		{name: "target offline (trace step 69)", cmd: coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "D", ToOnline: false, Epoch: 2, HasEpoch: true},
			code: coord.CodeTargetOffline, msg: "Handoff target 'D' is not online."},
		{name: "recipient principal at its cap", lim: coord.Limits{MaxClaimsPerPrincipal: 1},
			cmd:  coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "B", ToOnline: true},
			code: coord.CodeQuotaExceeded, msg: "Agent B holds the maximum 1 claims."},
		{name: "recipient principal by its own name", lim: coord.Limits{MaxClaimsPerPrincipal: 1},
			setup: func(r *rig) {
				r.ok(coord.ClaimRequest{Agent: "Q", Principal: "auth-token:q", TaskID: "T7", Worktree: "/wt/q"})
			},
			cmd:  coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "Q2", ToPrincipal: "auth-token:q", ToOnline: true},
			code: coord.CodeQuotaExceeded, msg: "Agent Q2 holds the maximum 1 claims."},
		{name: "giver's other overlapping claim blocks the recipient",
			setup: func(r *rig) { r.claim("A", "T7", "docs") },
			cmd:   coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "B", ToOnline: true},
			code:  coord.CodeScopeConflict, msg: "Task 'T1' file scope conflicts with 'T7' held by A."},
		{name: "third party's overlapping claim (replayed registry)",
			setup: func(r *rig) {
				r.s.Apply(coord.ClaimGranted{Claim: &coord.Claim{TaskID: "T8", Owner: "C", Paths: []string{"src"}, QuotaPrincipal: "legacy-agent:C",
					ClaimedAt: r.now, ExpiresAt: r.now + 60, Epoch: 10}})
			},
			cmd:  coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "B", ToOnline: true},
			code: coord.CodeScopeConflict, msg: "Task 'T1' file scope conflicts with 'T8' held by C."},
	}, noEvents)
}

func TestHandoff_MovesTheClaimAtomically_INV_CR_2_INV_EF_1_INV_EF_3(t *testing.T) {
	r := newRig(t, coord.Limits{})
	git := &coord.Git{Branch: "feat"}
	r.ok(coord.ClaimRequest{Agent: "A", TaskID: "T1", Note: "mine", Paths: []string{"src/core/a.py", "docs/a.md"}, TTL: 45, HasTTL: true,
		PathIdentity: `{"version":1}`, Git: git})
	r.ok(coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working", DataRef: "artifact://1"})
	r.ok(coord.CheckpointRequest{Agent: "A", TaskID: "T1", Checkpoint: "step-3"})
	r.claim("X", "T9", "elsewhere") // raises the epoch counter past T1's
	before := *r.s.Claim("T1")
	r.now += 10
	evs := r.ok(coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "B", ToOnline: true, Note: " over to you ", Epoch: before.Epoch, HasEpoch: true})
	// Trace steps 62-67: the progress note comes before the grant.
	wantKinds(t, evs, "[ledger_progress,handoff]")
	wantEqual(t, "note", *evs[0].(coord.ProgressPosted).Note,
		coord.Note{TaskID: "T1", Author: "A", Kind: "note", Text: "handed off to B: over to you", PostedAt: r.now})
	h := evs[1].(coord.HandedOff)
	want := before
	want.Owner, want.QuotaPrincipal, want.Note = "B", "legacy-agent:B", "over to you"
	want.Epoch, want.Version = 3, 0
	want.ClaimedAt, want.ExpiresAt = r.now, r.now+3600 // a full default lease, not the original 45 s
	wantEqual(t, "handed-off claim", *h.Claim, want)
	if h.From != "A" {
		t.Fatalf("From = %q", h.From)
	}
	wantEqual(t, "stored", *r.s.Claim("T1"), want)
	if r.s.PrincipalClaims("legacy-agent:A") != 0 || r.s.PrincipalClaims("legacy-agent:B") != 1 {
		t.Fatal("the claim did not move to the recipient's principal")
	}
	// The giver is fenced out.
	r.refused(coord.ReleaseRequest{Agent: "A", TaskID: "T1"}, coord.CodeNotOwner, "Task 'T1' is owned by B, not A.")
	r.refused(coord.CheckpointRequest{Agent: "B", TaskID: "T1", Epoch: before.Epoch, HasEpoch: true}, coord.CodeEpochStale, "Task 'T1' epoch is stale (current 3).")
	// Without a note the claim note stays and the progress text is bare.
	evs = r.ok(coord.HandoffRequest{Agent: "B", TaskID: "T1", To: "C", ToOnline: true})
	if n := evs[0].(coord.ProgressPosted).Note; n.Text != "handed off to C" || n.Author != "B" {
		t.Fatalf("note = %+v", *n)
	}
	if c := evs[1].(coord.HandedOff).Claim; c.Note != "over to you" || c.Epoch != 4 || c.Status != coord.StatusWorking {
		t.Fatalf("second handoff = %+v", *c)
	}
}

func TestHandoff_RecipientsOwnClaimsNeverBlock_INV_CR_2(t *testing.T) {
	r := traceFixture(t, coord.Limits{})
	// B already holds a scope overlapping T1 (only a replayed registry can
	// hold such a pair); the move is still allowed.
	r.s.Apply(coord.ClaimGranted{Claim: &coord.Claim{TaskID: "T8", Owner: "B", Paths: []string{"docs"}, QuotaPrincipal: "legacy-agent:B",
		ClaimedAt: r.now, ExpiresAt: r.now + 60, Epoch: 10}})
	r.ok(coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "B", ToOnline: true})
	// And B's own path claims nest under the moved scope.
	r.claim("B", "T9", "src/core/a.py/deeper")
	if c := r.s.Claim("T1"); c.Owner != "B" || c.Epoch != 11 {
		t.Fatalf("T1 = %+v", *c)
	}
	// An expired third-party claim does not block.
	r2 := traceFixture(t, coord.Limits{})
	r2.s.Apply(coord.ClaimGranted{Claim: &coord.Claim{TaskID: "T8", Owner: "C", Paths: []string{"src"}, QuotaPrincipal: "legacy-agent:C",
		ClaimedAt: r2.now - 100, ExpiresAt: r2.now, Epoch: 10}})
	r2.ok(coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "B", ToOnline: true})
}

func TestHandoff_SharedPrincipalIsNotCharged_INV_ME_5(t *testing.T) {
	r := newRig(t, coord.Limits{MaxClaimsPerPrincipal: 1})
	r.ok(coord.ClaimRequest{Agent: "A", Principal: "open-host:h", TaskID: "T1"})
	r.ok(coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "B", ToPrincipal: "open-host:h", ToOnline: true})
	if r.s.PrincipalClaims("open-host:h") != 1 {
		t.Fatal("handoff within a principal changed its count")
	}
}

func TestWait_Refusals(t *testing.T) {
	runRefusals(t, traceFixture, []refusalCase{
		{name: "blank task id", cmd: coord.WaitRequest{Agent: "B", TaskID: ""},
			code: coord.CodeTaskIDRequired, msg: "Task ID is required."},
		{name: "not claimed", cmd: coord.WaitRequest{Agent: "B", TaskID: "T9"},
			code: coord.CodeNotClaimed, msg: "Task 'T9' is not claimed; nothing to wait for."},
		{name: "expired is not claimed", setup: func(r *rig) { r.now += 3600 }, cmd: coord.WaitRequest{Agent: "B", TaskID: "T1"},
			code: coord.CodeNotClaimed, msg: "Task 'T1' is not claimed; nothing to wait for."},
		{name: "already the holder", cmd: coord.WaitRequest{Agent: "A", TaskID: "T1"},
			code: coord.CodeAlreadyHolder, msg: "You already hold 'T1'."},
		{name: "direct deadlock", setup: func(r *rig) { r.ok(coord.WaitRequest{Agent: "A", TaskID: "T2"}) },
			cmd:  coord.WaitRequest{Agent: "B", TaskID: "T1"},
			code: coord.CodeDeadlock, msg: "Waiting for 'T1' held by A would deadlock."},
		{name: "deadlock through a chain", setup: func(r *rig) {
			r.ok(coord.WaitRequest{Agent: "A", TaskID: "T2"}) // A → B
			r.ok(coord.WaitRequest{Agent: "B", TaskID: "T3"}) // B → C
		},
			cmd:  coord.WaitRequest{Agent: "C", TaskID: "T1"}, // C → A closes the cycle
			code: coord.CodeDeadlock, msg: "Waiting for 'T1' held by A would deadlock."},
		{name: "wait limit", lim: coord.Limits{MaxWaitsPerAgent: 1}, setup: func(r *rig) { r.ok(coord.WaitRequest{Agent: "D", TaskID: "T1"}) },
			cmd:  coord.WaitRequest{Agent: "D", TaskID: "T2"},
			code: coord.CodeWaitLimit, msg: "Agent D already waits on the maximum 1 tasks."},
	}, func(t *testing.T, r *rig, c refusalCase, o coord.Outcome) {
		noEvents(t, r, c, o)
		if c.code == coord.CodeDeadlock && o.Refusal.Holder != "A" {
			t.Fatalf("deadlock Holder = %q, want A", o.Refusal.Holder)
		}
	})
}

func TestWait_GrantedWhenNoCycle(t *testing.T) {
	r := traceFixture(t, coord.Limits{})
	wantEqual(t, "wait", one[coord.WaitAdded](t, r.ok(coord.WaitRequest{Agent: "B", TaskID: " T1 "})),
		coord.WaitAdded{Waiter: "B", TaskID: "T1", Holder: "A"})
	// Waiting again is idempotent.
	r.ok(coord.WaitRequest{Agent: "B", TaskID: "T1"})
	wantEqual(t, "waiters", r.s.Waiters("T1"), []string{"B"})
	// A chain whose link has expired is no cycle: C's T3 lapses, so A
	// waiting on T3 is refused as unclaimed and B may wait on C's new task.
	r.ok(coord.WaitRequest{Agent: "C", TaskID: "T1"})
	r.refused(coord.WaitRequest{Agent: "A", TaskID: "T3"}, coord.CodeDeadlock, "Waiting for 'T3' held by C would deadlock.")
	r.now += 3600
	r.s.Tick(r.now)
	r.claimIn("A", "T1", "")
	r.claimIn("C", "T3", "/wt/charlie")
	// The earlier waits were woken by the expiry; no edge remains.
	r.ok(coord.WaitRequest{Agent: "A", TaskID: "T3"})
}

func TestWait_ReadyOnReleaseWithSortedWaiters(t *testing.T) {
	r := traceFixture(t, coord.Limits{})
	for _, w := range []string{"C", "B", "Z"} {
		r.ok(coord.WaitRequest{Agent: w, TaskID: "T1"})
	}
	r.ok(coord.WaitRequest{Agent: "B", TaskID: "T3"})
	evs := r.ok(coord.ReleaseRequest{Agent: "A", TaskID: "T1", Evidence: &coord.Evidence{Evidence: []string{"ok"}}})
	wantKinds(t, evs, "[release,ledger_progress,wait_ready]")
	wantEqual(t, "ready", evs[2].(coord.WaitReady), coord.WaitReady{TaskID: "T1", Waiters: []string{"B", "C", "Z"}, Reason: "release"})
	if len(r.s.Waiters("T1")) != 0 {
		t.Fatal("waits on the released task remain")
	}
	wantEqual(t, "B's other wait", r.s.WaitsOf("B"), []string{"T3"})
	// No waiters, no WaitReady.
	wantKinds(t, r.ok(coord.ReleaseRequest{Agent: "B", TaskID: "T2"}), "[release]")
}

func TestWait_ReadyOnExpiry(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.ok(coord.ClaimRequest{Agent: "A", TaskID: "T1", TTL: 30, HasTTL: true})
	r.ok(coord.WaitRequest{Agent: "Y", TaskID: "T1"})
	r.ok(coord.WaitRequest{Agent: "X", TaskID: "T1"})
	o := r.s.Tick(t0 + 30)
	wantKinds(t, o.Events, "[claim_expired,wait_ready]")
	wantEqual(t, "ready", o.Events[1].(coord.WaitReady), coord.WaitReady{TaskID: "T1", Waiters: []string{"X", "Y"}, Reason: "expiry"})
	if len(r.s.WaitsOf("X"))+len(r.s.WaitsOf("Y")) != 0 {
		t.Fatal("expiry left wait edges")
	}
	// A single waiter is woken too.
	r.now = t0 + 30
	r.ok(coord.ClaimRequest{Agent: "A", TaskID: "T2", TTL: 30, HasTTL: true})
	r.ok(coord.WaitRequest{Agent: "X", TaskID: "T2"})
	o = r.s.Tick(t0 + 60)
	wantEqual(t, "single waiter", o.Events, []coord.Event{coord.ClaimExpired{TaskID: "T2", Epoch: 2},
		coord.WaitReady{TaskID: "T2", Waiters: []string{"X"}, Reason: "expiry"}})
}

func TestWait_ReadyOnHandoffToTheWaiter(t *testing.T) {
	r := traceFixture(t, coord.Limits{})
	r.ok(coord.WaitRequest{Agent: "B", TaskID: "T1"})
	r.ok(coord.WaitRequest{Agent: "C", TaskID: "T1"})
	evs := r.ok(coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "B", ToOnline: true})
	wantKinds(t, evs, "[ledger_progress,handoff,wait_ready]")
	wantEqual(t, "ready", evs[2].(coord.WaitReady), coord.WaitReady{TaskID: "T1", Waiters: []string{"B"}, Reason: "handoff"})
	wantEqual(t, "remaining waiters", r.s.Waiters("T1"), []string{"C"})
	// A handoff to someone who does not wait wakes nobody.
	wantKinds(t, r.ok(coord.HandoffRequest{Agent: "B", TaskID: "T1", To: "D", ToOnline: true}), "[ledger_progress,handoff]")
}

func TestWait_GrantClearsTheClaimantsWait(t *testing.T) {
	r := newRig(t, coord.Limits{})
	// A replayed wait on a task the waiter then claims is ended by the grant.
	r.s.Apply(coord.WaitAdded{Waiter: "B", TaskID: "T1", Holder: "A"})
	r.claim("B", "T1")
	if len(r.s.WaitsOf("B")) != 0 {
		t.Fatal("claiming the awaited task kept the wait")
	}
}

func TestDisconnect_DropsWaits(t *testing.T) {
	r := traceFixture(t, coord.Limits{})
	r.ok(coord.WaitRequest{Agent: "D", TaskID: "T3"})
	r.ok(coord.WaitRequest{Agent: "D", TaskID: "T1"})
	r.ok(coord.WaitRequest{Agent: "E", TaskID: "T1"})
	evs := r.ok(coord.Disconnect{Agent: "D"})
	wantEqual(t, "dropped", evs, []coord.Event{coord.WaitsDropped{Waiter: "D", Tasks: []string{"T1", "T3"}}})
	if len(r.s.WaitsOf("D")) != 0 {
		t.Fatal("disconnect kept waits")
	}
	wantEqual(t, "others' waits", r.s.Waiters("T1"), []string{"E"})
	if evs := r.ok(coord.Disconnect{Agent: "D"}); len(evs) != 0 {
		t.Fatalf("a second disconnect emitted %s", kinds(evs))
	}
}

func TestOffer_Refusals(t *testing.T) {
	runRefusals(t, traceFixture, []refusalCase{
		{name: "blank kind", cmd: coord.OfferResource{Agent: "A", Kind: " ", Name: "gpu0"},
			code: coord.CodeResourceInvalid, msg: "resource offer requires kind+name"},
		{name: "blank name", cmd: coord.OfferResource{Agent: "A", Kind: "gpu", Name: ""},
			code: coord.CodeResourceInvalid, msg: "resource offer requires kind+name"},
		{name: "quota", lim: coord.Limits{MaxOffersPerAgent: 1},
			setup: func(r *rig) { r.ok(coord.OfferResource{Agent: "A", Kind: "gpu", Name: "0"}) },
			cmd:   coord.OfferResource{Agent: "A", Kind: "gpu", Name: "1"},
			code:  coord.CodeResourceQuota, msg: "resource offer quota exceeded"},
	}, noEvents)
}

func TestOffer_GrantAndRefresh(t *testing.T) {
	r := newRig(t, coord.Limits{})
	o := one[coord.ResourceOffered](t, r.ok(coord.OfferResource{Agent: "A", Kind: " gpu ", Name: " h100 ", Capacity: 0, Meta: `{"x":1}`})).Offer
	wantEqual(t, "offer", *o, coord.Offer{Agent: "A", Kind: "gpu", Name: "h100", Capacity: 1, Meta: `{"x":1}`, OfferedAt: t0})
	if o.Key() != "A:gpu:h100" {
		t.Fatalf("key %q", o.Key())
	}
	r.now += 100
	r.ok(coord.OfferResource{Agent: "A", Kind: "gpu", Name: "h100", Capacity: 4})
	offers := r.s.Offers()
	if len(offers) != 1 || offers[0].Capacity != 4 || offers[0].OfferedAt != r.now {
		t.Fatalf("refresh: %+v", offers)
	}
}

// unknownCommand satisfies Command by embedding one, but is no command the
// state knows.
type unknownCommand struct{ coord.Disconnect }

func TestDecide_RefusesUnknownCommand(t *testing.T) {
	r := newRig(t, coord.Limits{})
	o := r.refused(unknownCommand{}, coord.CodeUnknownCommand, "Unknown command coord_test.unknownCommand.")
	if len(o.Events) != 0 {
		t.Fatal("unknown command emitted events")
	}
}

func TestEvents_KindsAndDurability_INV_JA_4(t *testing.T) {
	cases := []struct {
		ev   coord.Event
		kind string
		d    coord.Durability
	}{
		{coord.ClaimGranted{}, "claim", coord.Full},
		{coord.TaskUpdated{}, "task_update", coord.Full},
		{coord.CheckpointSaved{}, "checkpoint", coord.Full},
		{coord.HandedOff{}, "handoff", coord.Full},
		{coord.Released{}, "release", coord.Full},
		{coord.ClaimDenied{}, "claim_denial", coord.Full},
		{coord.TaskPosted{}, "ledger_task", coord.Full},
		{coord.ProgressPosted{}, "ledger_progress", coord.Normal},
		{coord.ResourceOffered{}, "resource", coord.Normal},
		{coord.ClaimExpired{}, "claim_expired", coord.Normal},
		{coord.WaitAdded{}, "wait", coord.Volatile},
		{coord.WaitReady{}, "wait_ready", coord.Volatile},
		{coord.WaitsDropped{}, "wait_dropped", coord.Volatile},
		{coord.ResourceExpired{}, "resource_expired", coord.Volatile},
	}
	for _, c := range cases {
		if c.ev.Kind() != c.kind || c.ev.Durability() != c.d {
			t.Errorf("%T: %q/%v, want %q/%v", c.ev, c.ev.Kind(), c.ev.Durability(), c.kind, c.d)
		}
	}
}

// TestClaims_ReplayRebuildsTheState_INV_RR_1: applying a run's events to an
// empty state rebuilds the run's image (the journal's replay path).
func TestClaims_ReplayRebuildsTheState_INV_RR_1(t *testing.T) {
	var log []coord.Event
	record := func(o coord.Outcome) { log = append(log, o.Events...) }
	r := newRig(t, coord.Limits{})
	cmds := []coord.Command{
		coord.ClaimRequest{Agent: "A", TaskID: "T1", Paths: []string{"src/core/a.py", "docs/a.md"}, TTL: 60, HasTTL: true},
		coord.ClaimRequest{Agent: "B", TaskID: "T2", Worktree: "/wt/bravo", Paths: []string{"src/core"}},
		coord.ClaimRequest{Agent: "B", TaskID: "T4", Paths: []string{"src"}},
		coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working"},
		coord.CheckpointRequest{Agent: "A", TaskID: "T1", Checkpoint: "cp"},
		coord.WaitRequest{Agent: "C", TaskID: "T2"},
		coord.DeclareTask{Agent: "A", TaskID: "design", Title: "Design"},
		coord.PostProgress{Agent: "B", TaskID: "design", Text: "hi"},
		coord.OfferResource{Agent: "A", Kind: "gpu", Name: "0"},
		coord.HandoffRequest{Agent: "B", TaskID: "T2", To: "C", ToOnline: true},
		coord.ReleaseRequest{Agent: "C", TaskID: "T2", Evidence: &coord.Evidence{Artifacts: []string{"x"}}},
	}
	for _, cmd := range cmds {
		record(r.step(cmd))
	}
	r.now += 61
	record(r.s.Tick(r.now))
	replayed := coord.New(coord.Limits{})
	for _, ev := range log {
		replayed.Apply(ev)
	}
	wantEqual(t, "replayed image", replayed.Image(), r.s.Image())
	wantEqual(t, "FromImage image", coord.FromImage(coord.Limits{}, r.s.Image()).Image(), r.s.Image())
	if !reflect.DeepEqual(replayed.Ready(), r.s.Ready()) {
		t.Fatal("replayed board differs")
	}
}

// sameBehaviour asserts that s decides like a state freshly rebuilt from the
// same image: its derived indexes (scope trie, principal counts, expiry heap,
// retained order, note counters) are consistent with its content.
func sameBehaviour(t *testing.T, s *coord.State, now float64) {
	t.Helper()
	lim := s.Limits()
	ref := coord.FromImage(lim, s.Image())
	var probes []coord.Command
	worktrees := map[string]bool{"": true}
	for _, c := range ref.Claims() {
		worktrees[c.Worktree] = true
		probes = append(probes,
			coord.ClaimRequest{Agent: "probe", TaskID: "probe-" + c.TaskID, Worktree: c.Worktree, Paths: c.Paths},
			coord.ClaimRequest{Agent: "probe", TaskID: c.TaskID},
			coord.ClaimRequest{Agent: c.Owner, Principal: c.QuotaPrincipal, TaskID: "probe-quota", Worktree: "/probe"},
			coord.WaitRequest{Agent: "probe", TaskID: c.TaskID},
		)
		for _, p := range c.Paths {
			probes = append(probes, coord.ClaimRequest{Agent: "probe", TaskID: "probe-sub", Worktree: c.Worktree, Paths: []string{p + "/sub"}})
		}
		if s.PrincipalClaims(c.QuotaPrincipal) != ref.PrincipalClaims(c.QuotaPrincipal) {
			t.Fatalf("principal %s counts %d, rebuilt %d", c.QuotaPrincipal, s.PrincipalClaims(c.QuotaPrincipal), ref.PrincipalClaims(c.QuotaPrincipal))
		}
	}
	for wt := range worktrees {
		probes = append(probes, coord.ClaimRequest{Agent: "probe", TaskID: "probe-whole", Worktree: wt})
	}
	for _, p := range probes {
		evs, r1 := s.Decide(p, now)
		want, r2 := ref.Decide(p, now)
		if !reflect.DeepEqual(evs, want) || !reflect.DeepEqual(r1, r2) {
			t.Fatalf("probe %+v: %s %v, rebuilt state %s %v", p, kinds(evs), r1, kinds(want), r2)
		}
	}
	// Expiring everything yields the same events and the same image.
	late := now + 2*coord.MaximumTTLSeconds
	o1, o2 := s.Tick(late), ref.Tick(late)
	wantEqual(t, "expiry events", o1.Events, o2.Events)
	wantEqual(t, "image after expiry", s.Image(), ref.Image())
	s.Rollback(&o1)
}

// TestRollback_RestoresTheExactImage_INV_JA_2: Step then Rollback leaves the
// state exactly as it was, indexes included, so the same Step afterwards
// produces the same events and image.
func TestRollback_RestoresTheExactImage_INV_JA_2(t *testing.T) {
	cases := []struct {
		name  string
		lim   coord.Limits
		setup func(r *rig)
		run   func(r *rig) coord.Outcome
		kinds string
	}{
		{name: "a grant",
			run: func(r *rig) coord.Outcome {
				return r.step(coord.ClaimRequest{Agent: "D", TaskID: "T9", Paths: []string{"src/new", "lib"}})
			},
			kinds: "[claim]"},
		{name: "a renewal moving the scope",
			run: func(r *rig) coord.Outcome {
				return r.step(coord.ClaimRequest{Agent: "A", TaskID: "T1", Paths: []string{"other"}, TTL: 60, HasTTL: true})
			},
			kinds: "[claim]"},
		{name: "a takeover inheriting a retained checkpoint",
			setup: func(r *rig) {
				r.ok(coord.CheckpointRequest{Agent: "C", TaskID: "T3", Checkpoint: "c-1"})
				r.now += 3600
			},
			run: func(r *rig) coord.Outcome {
				return r.step(coord.ClaimRequest{Agent: "D", TaskID: "T3", Worktree: "/wt/charlie"})
			},
			kinds: "[claim_expired,claim_expired,claim_expired,claim]"},
		{name: "a refused claim during expiry",
			setup: func(r *rig) {
				r.ok(coord.ClaimRequest{Agent: "D", TaskID: "T5", Worktree: "/wt/d", TTL: 30, HasTTL: true})
				r.now += 30
			},
			run:   func(r *rig) coord.Outcome { return r.step(coord.ClaimRequest{Agent: "D", TaskID: "T1"}) },
			kinds: "[claim_expired,claim_denial]"},
		{name: "a handoff to a waiter",
			setup: func(r *rig) {
				r.ok(coord.WaitRequest{Agent: "B", TaskID: "T1"})
				r.ok(coord.WaitRequest{Agent: "C", TaskID: "T1"})
				r.ok(coord.CheckpointRequest{Agent: "A", TaskID: "T1", Checkpoint: "a-1"})
			},
			run: func(r *rig) coord.Outcome {
				return r.step(coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "B", ToOnline: true, Note: "yours"})
			},
			kinds: "[ledger_progress,handoff,wait_ready]"},
		{name: "a release with waiters and evidence",
			setup: func(r *rig) {
				r.ok(coord.WaitRequest{Agent: "C", TaskID: "T1"})
				r.ok(coord.WaitRequest{Agent: "B", TaskID: "T1"})
				r.ok(coord.CheckpointRequest{Agent: "A", TaskID: "T1", Checkpoint: "a-1"})
			},
			run: func(r *rig) coord.Outcome {
				return r.step(coord.ReleaseRequest{Agent: "A", TaskID: "T1", Evidence: &coord.Evidence{Evidence: []string{"ok"}, Freshness: 1, HasFreshness: true}})
			},
			kinds: "[release,ledger_progress,wait_ready]"},
		{name: "a task update",
			run: func(r *rig) coord.Outcome {
				o := r.step(coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working", DataRef: "d"})
				return o
			},
			kinds: "[task_update]"},
		{name: "a mass expiry retaining checkpoints over the cap", lim: coord.Limits{MaxRetainedCheckpoints: 2},
			setup: func(r *rig) {
				for _, task := range []string{"T1", "T2", "T3"} {
					r.ok(coord.CheckpointRequest{Agent: r.s.Claim(task).Owner, TaskID: task, Checkpoint: "cp-" + task})
				}
				for i := range 3 {
					task := fmt.Sprint("M", i)
					r.ok(coord.ClaimRequest{Agent: "M", TaskID: task, Worktree: "/wt/m" + task, TTL: 30, HasTTL: true})
					r.ok(coord.CheckpointRequest{Agent: "M", TaskID: task, Checkpoint: "cp-" + task})
				}
				r.ok(coord.WaitRequest{Agent: "W", TaskID: "M1"})
				r.ok(coord.OfferResource{Agent: "A", Kind: "gpu", Name: "0"})
				r.now += 30
				r.s.Tick(r.now) // M0..M2 expire; two of their checkpoints stay retained
				r.now += 3600
			},
			run:   func(r *rig) coord.Outcome { return r.s.Tick(r.now) },
			kinds: "[claim_expired,claim_expired,claim_expired,resource_expired]"},
		{name: "a progress post that drops notes", lim: coord.Limits{MaxNotesTotal: 3, MaxNotesPerAuthor: 2, MaxNotesPerTask: 2},
			setup: func(r *rig) {
				post(r, "a", "x", "1")
				post(r, "b", "y", "2")
				post(r, "a", "y", "3")
			},
			run:   func(r *rig) coord.Outcome { return r.step(coord.PostProgress{Agent: "a", TaskID: "y", Text: "4"}) },
			kinds: "[ledger_progress]"},
		{name: "a board declaration and update",
			setup: func(r *rig) { r.ok(coord.DeclareTask{Agent: "A", TaskID: "d", Title: "t"}) },
			run: func(r *rig) coord.Outcome {
				return r.step(coord.DeclareTask{Agent: "B", TaskID: "d", Title: "t2", DependsOn: []string{"e"}})
			},
			kinds: "[ledger_task]"},
		{name: "a disconnect",
			setup: func(r *rig) {
				r.ok(coord.WaitRequest{Agent: "D", TaskID: "T1"})
				r.ok(coord.WaitRequest{Agent: "D", TaskID: "T2"})
			},
			run:   func(r *rig) coord.Outcome { return r.step(coord.Disconnect{Agent: "D"}) },
			kinds: "[wait_dropped]"},
		{name: "an offer refresh",
			setup: func(r *rig) { r.ok(coord.OfferResource{Agent: "A", Kind: "gpu", Name: "0"}); r.now += 100 },
			run: func(r *rig) coord.Outcome {
				return r.step(coord.OfferResource{Agent: "A", Kind: "gpu", Name: "0", Capacity: 3})
			},
			kinds: "[resource]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := traceFixture(t, c.lim)
			if c.setup != nil {
				c.setup(r)
			}
			before := r.s.Image()
			o := c.run(r)
			wantKinds(t, o.Events, c.kinds)
			after := r.s.Image()
			if reflect.DeepEqual(before, after) {
				t.Fatal("the outcome changed nothing; the case proves nothing")
			}
			r.s.Rollback(&o)
			wantEqual(t, "image after rollback", r.s.Image(), before)
			sameBehaviour(t, r.s, r.now)
			again := c.run(r)
			wantEqual(t, "events re-run after rollback", again.Events, o.Events)
			wantEqual(t, "image re-run after rollback", r.s.Image(), after)
			sameBehaviour(t, r.s, r.now)
		})
	}
}

// TestRollback_NewestFirstAcrossSteps_INV_JA_2: a batch of outcomes rolled
// back newest first restores the state before the batch.
func TestRollback_NewestFirstAcrossSteps_INV_JA_2(t *testing.T) {
	r := traceFixture(t, coord.Limits{MaxNotesPerTask: 1})
	before := r.s.Image()
	var batch []coord.Outcome
	batch = append(batch, r.step(coord.UpdateRequest{Agent: "A", TaskID: "T1", Status: "working"}))
	batch = append(batch, r.step(coord.CheckpointRequest{Agent: "A", TaskID: "T1", Checkpoint: "x"}))
	batch = append(batch, r.step(coord.HandoffRequest{Agent: "A", TaskID: "T1", To: "B", ToOnline: true}))
	batch = append(batch, r.step(coord.ReleaseRequest{Agent: "B", TaskID: "T1", Evidence: &coord.Evidence{Confidence: "low"}}))
	r.now += 3600
	batch = append(batch, r.s.Tick(r.now))
	batch = append(batch, r.step(coord.ClaimRequest{Agent: "C", TaskID: "T1"}))
	for i := len(batch) - 1; i >= 0; i-- {
		r.s.Rollback(&batch[i])
	}
	wantEqual(t, "image", r.s.Image(), before)
	r.now = t0
	sameBehaviour(t, r.s, r.now)
}
