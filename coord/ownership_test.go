package coord

import "testing"

// Adopt installs a namespace's claims with an epoch floor: the next grant
// stamps an epoch above every epoch the previous owner issued (INV-EF-1
// across owners); Disown drops them without retaining checkpoints, and a
// rollback of either restores the state before it.
func TestAdoptDisown_InstallsDropsAndRollsBack_INV_EF_1(t *testing.T) {
	s := New(DefaultLimits())
	c := &Claim{TaskID: "T1", Owner: "proj/a", Worktree: "", Paths: []string{"src"}, Epoch: 41, ExpiresAt: 5000, QuotaPrincipal: "p", Checkpoint: "cp"}
	o := s.Step(Adopt{Claims: []*Claim{c, {TaskID: "old", Owner: "proj/b", Epoch: 3, ExpiresAt: 10}}, EpochFloor: 90}, 100)
	if o.Refusal != nil || s.Claim("T1") == nil || s.Claim("old") != nil {
		t.Fatalf("adopt: %+v; claims %v", o, s.Claims())
	}
	g := s.Step(ClaimRequest{Agent: "proj/c", TaskID: "T2", Paths: []string{"src/x"}}, 100)
	if g.Refusal == nil || g.Refusal.Code != CodeScopeConflict {
		t.Fatalf("an adopted claim does not exclude: %+v", g)
	}
	g = s.Step(ClaimRequest{Agent: "proj/c", TaskID: "T2", Paths: []string{"docs"}}, 100)
	if ev, ok := g.Events[len(g.Events)-1].(ClaimGranted); !ok || ev.Claim.Epoch <= 90 {
		t.Fatalf("epoch after adopt with floor 90: %+v", g.Events)
	}
	other := s.Step(ClaimRequest{Agent: "ops/z", TaskID: "Z", Paths: []string{"z"}}, 100)
	if other.Refusal != nil {
		t.Fatal(other.Refusal)
	}
	d := s.Step(Disown{Namespace: "proj"}, 100)
	if s.Claim("T1") != nil || s.Claim("T2") != nil || s.Claim("Z") == nil {
		t.Fatalf("disown proj left %v", s.Claims())
	}
	if _, ok := s.RetainedCheckpoint("T1"); ok {
		t.Fatal("a disowned claim's checkpoint was retained here")
	}
	s.Rollback(&d)
	if s.Claim("T1") == nil || s.Claim("T2") == nil {
		t.Fatal("rollback of disown did not restore the claims")
	}
}

// Adopt installs a namespace's board tasks with its claims, and Disown
// drops the tasks its agents declared, leaving other namespaces' alone.
func TestAdoptDisown_BoardTasksFollowTheirNamespace(t *testing.T) {
	s := New(DefaultLimits())
	s.Step(Adopt{Tasks: []*BoardTask{{TaskID: "plan", Title: "p", CreatedBy: "proj/a", Status: "open"}}}, 1)
	if s.BoardTask("plan") == nil {
		t.Fatal("adopted task missing")
	}
	o := s.Step(DeclareTask{Agent: "ops/z", TaskID: "other", Title: "o"}, 1)
	if o.Refusal != nil {
		t.Fatal(o.Refusal)
	}
	s.Step(Disown{Namespace: "proj"}, 1)
	if s.BoardTask("plan") != nil || s.BoardTask("other") == nil {
		t.Fatalf("after disown proj: plan=%v other=%v", s.BoardTask("plan"), s.BoardTask("other"))
	}
}

// A hub keys claims by task id, so a namespace whose live claim has the
// task id of a live claim of another namespace served here is not adopted:
// installing it would replace that acknowledged grant, and the task could
// then be granted to a second owner in the other namespace (INV-ME-1). The
// refusal fails closed, as a contested namespace does, and changes nothing
// and names the holder; the namespace's own leftover of an earlier stint
// with that task id does not count.
func TestAdopt_ATaskIDHeldByAnotherNamespaceIsRefused_INV_ME_1(t *testing.T) {
	s := New(DefaultLimits())
	g := s.Step(ClaimRequest{Agent: "alpha/x", TaskID: "T1", Paths: []string{"a"}}, 100)
	if g.Refusal != nil {
		t.Fatal(g.Refusal)
	}
	held := *s.Claim("T1")
	beta := []*Claim{
		{TaskID: "B", Owner: "beta/y", Paths: []string{"b"}, Epoch: 7, ExpiresAt: 5000},
		{TaskID: "T1", Owner: "beta/y", Paths: []string{"c"}, Epoch: 8, ExpiresAt: 5000},
	}
	o := s.Step(Adopt{Namespace: "beta", Claims: beta, EpochFloor: 500}, 100)
	if o.Refusal == nil || o.Refusal.Code != CodeTaskIDInUse || o.Refusal.TaskID != "T1" || o.Refusal.Holder != "alpha/x" {
		t.Fatalf("adopt over a task id alpha holds: %+v", o.Refusal)
	}
	if c := s.Claim("T1"); c == nil || c.Owner != "alpha/x" || c.Epoch != held.Epoch || s.Claim("B") != nil {
		t.Fatalf("the refused adopt changed the claims: %v", s.Claims())
	}
	if e := s.Step(ClaimRequest{Agent: "alpha/x", TaskID: "T2", Paths: []string{"d"}}, 100); e.Refusal != nil ||
		e.Events[len(e.Events)-1].(ClaimGranted).Claim.Epoch >= 500 {
		t.Fatalf("the refused adopt's epoch floor was applied: %+v", e)
	}
	// A lapsed claim of the other namespace does not stand in the way.
	if o := s.Step(Adopt{Namespace: "beta", Claims: []*Claim{{TaskID: "T1", Owner: "beta/y", Epoch: 9, ExpiresAt: 9000}}}, 4000); o.Refusal != nil {
		t.Fatalf("adopt after alpha's claim lapsed: %+v", o.Refusal)
	}
	// Nor does this namespace's own claim of that task, left from a stint
	// whose Disown did not land: the adopt replaces it with the store's.
	o = s.Step(Adopt{Namespace: "beta", Claims: []*Claim{{TaskID: "T1", Owner: "beta/z", Epoch: 10, ExpiresAt: 9000}}}, 4000)
	if o.Refusal != nil || s.Claim("T1").Owner != "beta/z" {
		t.Fatalf("re-adopt of beta: %+v, T1 %+v", o.Refusal, s.Claim("T1"))
	}
}
