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
