package coord_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

func ptr(s string) *string { return &s }

// boardFixture is the board trace's opening (traces/board.jsonl steps 8-12):
// design (v1, project P) and build (depends on design, suggested owner B).
func boardFixture(t *testing.T, lim coord.Limits) *rig {
	t.Helper()
	r := newRig(t, lim)
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "design", Title: "Design the API", Description: "sketch", Project: "P"})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "build", Title: "Build it", DependsOn: []string{"design", "design", "build"}, SuggestedOwner: "B", Project: "P"})
	return r
}

func TestBoard_DeclareCreatesVersionOne(t *testing.T) {
	r := newRig(t, coord.Limits{})
	evs := r.ok(coord.DeclareTask{Agent: "A", TaskID: " build ", Title: " Build it ", Description: " as is ",
		DependsOn: []string{"design", " design ", "build", "", "  ", "test"}, SuggestedOwner: " B ", Project: " P ", CausalParent: `{"seq":1}`})
	p := one[coord.TaskPosted](t, evs)
	want := coord.BoardTask{TaskID: "build", Title: "Build it", Description: " as is ", DependsOn: []string{"design", "test"},
		Status: "open", SuggestedOwner: "B", Project: "P", Version: 1, CreatedBy: "A", CreatedAt: t0, UpdatedAt: t0}
	wantEqual(t, "task", *p.Task, want)
	if p.Update || p.Redeclared || p.CausalParent != `{"seq":1}` {
		t.Fatalf("posted flags: %+v", p)
	}
	wantEqual(t, "stored", *r.s.BoardTask("build"), want)
}

func TestBoard_DeclareTraceDepsAreCleaned(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	wantEqual(t, "build deps (board.jsonl step 12)", r.s.BoardTask("build").DependsOn, []string{"design"})
	if d := r.s.BoardTask("design").DependsOn; len(d) != 0 {
		t.Fatalf("design deps = %q", d)
	}
}

func TestBoard_RedeclareReplacesPlanKeepsHistory(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "build", Status: ptr("in_progress")}) // v2
	r.now += 10
	evs := r.ok(coord.DeclareTask{Agent: "C", TaskID: "build", Title: "Build it again"})
	p := one[coord.TaskPosted](t, evs)
	want := coord.BoardTask{TaskID: "build", Title: "Build it again", Description: "", DependsOn: []string{},
		Status: "in_progress", SuggestedOwner: "", Project: "P", Version: 3, CreatedBy: "A", CreatedAt: t0, UpdatedAt: r.now}
	wantEqual(t, "re-declared", *p.Task, want)
	if !p.Redeclared || p.Update {
		t.Fatalf("flags: %+v", p)
	}
	// The same project is fine; a project on an unscoped task is set.
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "build", Title: "t", Project: "P"})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "free", Title: "t"})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "free", Title: "t", Project: "Q"})
	if got := r.s.BoardTask("free").Project; got != "Q" {
		t.Fatalf("project = %q", got)
	}
}

func TestBoard_DeclareRefusals(t *testing.T) {
	runRefusals(t, boardFixture, []refusalCase{
		{name: "blank task id", cmd: coord.DeclareTask{Agent: "A", TaskID: " ", Title: "t"},
			code: coord.CodeTaskIDRequired, msg: "Task ID is required."},
		{name: "blank title", cmd: coord.DeclareTask{Agent: "A", TaskID: "x", Title: " \n"},
			code: coord.CodeTitleRequired, msg: "Task title is required."},
		{name: "two-cycle (board.jsonl step 15)", cmd: coord.DeclareTask{Agent: "A", TaskID: "design", Title: "Design the API", DependsOn: []string{"build"}, Project: "P"},
			code: coord.CodeDependencyCycle, msg: "Task 'design' dependencies would form a cycle."},
		{name: "longer cycle", setup: func(r *rig) {
			r.ok(coord.DeclareTask{Agent: "A", TaskID: "test", Title: "t", DependsOn: []string{"build"}})
			r.ok(coord.DeclareTask{Agent: "A", TaskID: "ship", Title: "t", DependsOn: []string{"nothing", "test"}})
		},
			cmd:  coord.DeclareTask{Agent: "A", TaskID: "design", Title: "t", DependsOn: []string{"ghost", "ship"}},
			code: coord.CodeDependencyCycle, msg: "Task 'design' dependencies would form a cycle."},
		{name: "a new task closing a cycle through an unknown reference", setup: func(r *rig) {
			r.ok(coord.DeclareTask{Agent: "A", TaskID: "x", Title: "t", DependsOn: []string{"y"}}) // y unknown: accepted
		},
			cmd:  coord.DeclareTask{Agent: "A", TaskID: "y", Title: "t", DependsOn: []string{"x"}},
			code: coord.CodeDependencyCycle, msg: "Task 'y' dependencies would form a cycle."},
		{name: "cycle precedes version", cmd: coord.DeclareTask{Agent: "A", TaskID: "design", Title: "t", DependsOn: []string{"build"}, HasExpectedVersion: true, ExpectedVersion: 7},
			code: coord.CodeDependencyCycle, msg: "Task 'design' dependencies would form a cycle."},
		{name: "create-only on an existing task (board.jsonl step 17)", cmd: coord.DeclareTask{Agent: "A", TaskID: "build", Title: "Build it", HasExpectedVersion: true},
			code: coord.CodeVersionConflict, msg: "Task 'build' version conflict: expected v0, board has v1."},
		{name: "expected version on an absent task", cmd: coord.DeclareTask{Agent: "A", TaskID: "ship", Title: "t", HasExpectedVersion: true, ExpectedVersion: 1},
			code: coord.CodeVersionConflict, msg: "Task 'ship' version conflict: expected v1, board has v0."},
		{name: "version precedes project", cmd: coord.DeclareTask{Agent: "A", TaskID: "build", Title: "t", Project: "Q", HasExpectedVersion: true, ExpectedVersion: 3},
			code: coord.CodeVersionConflict, msg: "Task 'build' version conflict: expected v3, board has v1."},
		{name: "different project", cmd: coord.DeclareTask{Agent: "A", TaskID: "build", Title: "t", Project: " Q "},
			code: coord.CodeProjectConflict, msg: "Task 'build' project conflict: already scoped to 'P', cannot re-scope to 'Q'."},
		{name: "board full", lim: coord.Limits{MaxBoardTasks: 2}, cmd: coord.DeclareTask{Agent: "A", TaskID: "ship", Title: "t"},
			code: coord.CodeBoardFull, msg: "The board holds the maximum 2 tasks."},
	}, noEvents)
}

func TestBoard_UnknownDependenciesCannotCloseACycle(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "a", Title: "t", DependsOn: []string{"b"}})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "c", Title: "t", DependsOn: []string{"b", "a"}})
	// Self-dependency is dropped, not a cycle.
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "d", Title: "t", DependsOn: []string{"d", "zz"}})
	wantEqual(t, "d deps", r.s.BoardTask("d").DependsOn, []string{"zz"})
	// A diamond is no cycle.
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "e", Title: "t", DependsOn: []string{"a", "c"}})
}

func TestBoard_CreateOnlyCAS(t *testing.T) {
	r := newRig(t, coord.Limits{})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "build", Title: "t", HasExpectedVersion: true, ExpectedVersion: 0})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "build", Title: "t2", HasExpectedVersion: true, ExpectedVersion: 1})
	if v := r.s.BoardTask("build").Version; v != 2 {
		t.Fatalf("version %d", v)
	}
}

func TestBoard_UpdateRefusals(t *testing.T) {
	runRefusals(t, boardFixture, []refusalCase{
		{name: "blank task id", cmd: coord.UpdateBoardTask{Agent: "A", TaskID: ""},
			code: coord.CodeTaskIDRequired, msg: "Task ID is required."},
		{name: "not on the board (board.jsonl step 25)", cmd: coord.UpdateBoardTask{Agent: "A", TaskID: "nope", Status: ptr("done")},
			code: coord.CodeBoardTaskNotFound, msg: "Task 'nope' is not on the board."},
		{name: "unknown status", cmd: coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr(" finished ")},
			code: coord.CodeUnknownLedgerStatus, msg: "Unknown ledger status 'finished'."},
		{name: "claim statuses are not ledger statuses", cmd: coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr("working")},
			code: coord.CodeUnknownLedgerStatus, msg: "Unknown ledger status 'working'."},
		{name: "stale expected version (board.jsonl step 24)",
			setup: func(r *rig) {
				r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr("done"), HasExpectedVersion: true, ExpectedVersion: 1})
			},
			cmd:  coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr("in_progress"), HasExpectedVersion: true, ExpectedVersion: 1},
			code: coord.CodeVersionConflict, msg: "Task 'design' version conflict: expected v1, board has v2."},
	}, noEvents)
}

func TestBoard_UpdateSetsAnyStatusOwnerAndProject(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	r.now += 5
	evs := r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr("done"), HasExpectedVersion: true, ExpectedVersion: 1, CausalParent: "cp"})
	p := one[coord.TaskPosted](t, evs)
	if !p.Update || p.Redeclared || p.CausalParent != "cp" {
		t.Fatalf("flags %+v", p)
	}
	want := coord.BoardTask{TaskID: "design", Title: "Design the API", Description: "sketch", DependsOn: []string{}, Status: "done",
		Project: "P", Version: 2, CreatedBy: "A", CreatedAt: t0, UpdatedAt: r.now}
	wantEqual(t, "board.jsonl step 21", *p.Task, want)
	// No transition table: done goes back to open, and every status is accepted.
	for _, st := range []string{"open", "in_progress", "blocked", "cancelled", "done", "open"} {
		r.ok(coord.UpdateBoardTask{Agent: "B", TaskID: "design", Status: ptr(st)})
		if got := r.s.BoardTask("design").Status; got != st {
			t.Fatalf("status %q, want %q", got, st)
		}
	}
	// nil and blank fields leave things alone; "" clears owner and project.
	v := r.s.BoardTask("build").Version
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "build", Status: ptr("  ")})
	b := r.s.BoardTask("build")
	if b.Status != "open" || b.SuggestedOwner != "B" || b.Project != "P" || b.Version != v+1 {
		t.Fatalf("blank update changed fields: %+v", *b)
	}
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "build", SuggestedOwner: ptr(" C ")})
	if b := r.s.BoardTask("build"); b.SuggestedOwner != "C" || b.Project != "P" {
		t.Fatalf("owner update: %+v", *b)
	}
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "build", SuggestedOwner: ptr(""), Project: ptr("")})
	if b := r.s.BoardTask("build"); b.SuggestedOwner != "" || b.Project != "" || b.Version != v+3 {
		t.Fatalf("clearing: %+v", *b)
	}
	// Unlike re-declare, update re-scopes freely.
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "design", Project: ptr("Q")})
	if got := r.s.BoardTask("design").Project; got != "Q" {
		t.Fatalf("re-scope: %q", got)
	}
	// The board is independent of claims: the board update made no claim.
	if r.s.ClaimCount() != 0 {
		t.Fatal("board verbs touched claims")
	}
}

func TestBoard_ReadyIsOpenWithDependenciesMet(t *testing.T) {
	r := boardFixture(t, coord.Limits{})
	wantEqual(t, "ready before", r.s.Ready(), []string{"design"})
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr("done")})
	wantEqual(t, "ready (board.jsonl step 33)", r.s.Ready(), []string{"build"})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "a-first", Title: "t", DependsOn: []string{"design"}})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "orphan", Title: "t", DependsOn: []string{"ghost"}})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "zz", Title: "t", DependsOn: []string{"orphan"}})
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "blocked", Title: "t"})
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "blocked", Status: ptr("blocked")})
	wantEqual(t, "sorted, unknown deps unmet, non-open excluded", r.s.Ready(), []string{"a-first", "build"})
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "orphan", Status: ptr("cancelled")})
	wantEqual(t, "cancelled dependency is met", r.s.Ready(), []string{"a-first", "build", "zz"})
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "design", Status: ptr("in_progress")})
	wantEqual(t, "dependency reopened", r.s.Ready(), []string{"zz"})
	ids := []string{}
	for _, tk := range r.s.BoardTasks() {
		ids = append(ids, tk.TaskID)
	}
	if !slices.IsSorted(ids) || len(ids) != 6 {
		t.Fatalf("BoardTasks = %q", ids)
	}
}

func TestBoard_ProgressKinds(t *testing.T) {
	r := newRig(t, coord.Limits{})
	for _, k := range []string{"note", "blocked", "assessment", "usage", "approval", "", " usage "} {
		n := one[coord.ProgressPosted](t, r.ok(coord.PostProgress{Agent: "B", TaskID: " build ", Kind: k, Text: " started the build "})).Note
		want := k
		switch k {
		case "":
			want = "note"
		case " usage ":
			want = "usage"
		}
		wantEqual(t, "note", *n, coord.Note{TaskID: "build", Author: "B", Kind: want, Text: " started the build ", PostedAt: t0})
	}
	if len(r.s.Notes()) != 7 {
		t.Fatalf("%d notes", len(r.s.Notes()))
	}
	r.refused(coord.PostProgress{Agent: "B", TaskID: "build", Kind: "gossip", Text: "x"}, coord.CodeUnknownProgressKind, "Unknown progress kind 'gossip'.")
	r.refused(coord.PostProgress{Agent: "B", TaskID: "build", Kind: "Note", Text: "x"}, coord.CodeUnknownProgressKind, "Unknown progress kind 'Note'.")
	r.refused(coord.PostProgress{Agent: "B", TaskID: "  ", Text: "x"}, coord.CodeTaskIDRequired, "Task ID is required.")
	// Progress is not tied to a board task.
	if r.s.BoardTask("build") != nil {
		t.Fatal("progress created a board task")
	}
}

// post adds a progress note whose text names it.
func post(r *rig, author, task, text string) {
	r.t.Helper()
	r.ok(coord.PostProgress{Agent: author, TaskID: task, Text: text})
}

func noteTexts(s *coord.State) []string {
	var out []string
	for _, n := range s.Notes() {
		out = append(out, n.Text)
	}
	return out
}

func TestBoard_NoteCapsDropOldestFirst_INV_RR_2(t *testing.T) {
	cases := []struct {
		name  string
		lim   coord.Limits
		posts [][3]string // author, task, text
		want  []string
	}{
		{name: "total cap", lim: coord.Limits{MaxNotesTotal: 5},
			posts: [][3]string{{"a", "t1", "1"}, {"b", "t2", "2"}, {"c", "t3", "3"}, {"d", "t4", "4"}, {"e", "t5", "5"}, {"f", "t6", "6"}, {"g", "t7", "7"}},
			want:  []string{"3", "4", "5", "6", "7"}},
		{name: "per author cap", lim: coord.Limits{MaxNotesPerAuthor: 3},
			posts: [][3]string{{"a", "t1", "a1"}, {"b", "t1", "b1"}, {"a", "t2", "a2"}, {"a", "t3", "a3"}, {"b", "t9", "b2"}, {"a", "t4", "a4"}, {"a", "t5", "a5"}},
			want:  []string{"b1", "a3", "b2", "a4", "a5"}},
		{name: "per task cap", lim: coord.Limits{MaxNotesPerTask: 2},
			posts: [][3]string{{"a", "T", "1"}, {"b", "U", "u1"}, {"c", "T", "2"}, {"d", "T", "3"}, {"e", "U", "u2"}, {"f", "T", "4"}},
			want:  []string{"u1", "3", "u2", "4"}},
		{name: "5/3/2 together", lim: coord.Limits{MaxNotesTotal: 5, MaxNotesPerAuthor: 3, MaxNotesPerTask: 2},
			posts: [][3]string{
				{"a", "T", "1"}, {"a", "U", "2"}, {"b", "T", "3"}, // [1 2 3]
				{"b", "T", "4"},                  // task T: 1 3 4 > 2, drop 1 → [2 3 4]
				{"a", "V", "5"}, {"a", "W", "6"}, // author a: 2 5 6 → [2 3 4 5 6]
				{"a", "X", "7"},                   // author a: 2 5 6 7 > 3, drop 2 → [3 4 5 6 7]
				{"c", "Y", "8"},                   // total 6 > 5, drop 3 → [4 5 6 7 8]
				{"c", "Y", "9"}, {"d", "Y", "10"}, // task Y: 8 9 10 > 2 drop 8; total: [4 5 6 7 9 10] > 5 drop 4
			},
			want: []string{"5", "6", "7", "9", "10"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, c.lim)
			for _, p := range c.posts {
				post(r, p[0], p[1], p[2])
			}
			wantEqual(t, "kept notes", noteTexts(r.s), c.want)
			// The caps hold in a state rebuilt from its image too.
			again := coord.FromImage(c.lim, r.s.Image())
			wantEqual(t, "image round trip", again.Image(), r.s.Image())
		})
	}
}

func TestBoard_DefaultNoteCaps_INV_RR_2(t *testing.T) {
	r := newRig(t, coord.Limits{})
	for i := range 1001 {
		post(r, "a", "T", fmt.Sprint(i))
	}
	n := r.s.Notes()
	if len(n) != 1000 || n[0].Text != "1" || n[999].Text != "1000" {
		t.Fatalf("per-task/per-author default: %d notes, first %q", len(n), n[0].Text)
	}
	for i := range 4500 {
		post(r, fmt.Sprintf("w%d", i%9), fmt.Sprintf("t%d", i%7), "x")
	}
	if len(r.s.Notes()) != 5000 || r.s.Notes()[0].Text != "501" {
		t.Fatalf("total default: %d notes, oldest %q", len(r.s.Notes()), r.s.Notes()[0].Text)
	}
}

func TestBoard_MaxBoardTasksAllowsRedeclare(t *testing.T) {
	r := boardFixture(t, coord.Limits{MaxBoardTasks: 2})
	r.refused(coord.DeclareTask{Agent: "A", TaskID: "ship", Title: "t"}, coord.CodeBoardFull, "The board holds the maximum 2 tasks.")
	r.ok(coord.DeclareTask{Agent: "A", TaskID: "build", Title: "Build it v2"})
	r.ok(coord.UpdateBoardTask{Agent: "A", TaskID: "build", Status: ptr("done")})
	if len(r.s.BoardTasks()) != 2 {
		t.Fatal("board grew past its cap")
	}
}
