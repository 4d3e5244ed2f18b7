package dashboard

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/wire"
)

// A body written from the claims and tasks a Backend encoded ahead
// (ClaimsJSON, TasksJSON) is the body encoding/json writes from Claims and
// Tasks: the same members, the same values, HTML escaped alike.
func TestAppendState_EncodedListsGiveEncodingJSONsBody(t *testing.T) {
	claims := []*coord.Claim{
		{TaskID: "T1", Owner: "proj/a", Worktree: "/wt", Paths: []string{"src/<x>.go"}, Note: "a & b", Epoch: 3, Version: 2, ClaimedAt: 10, ExpiresAt: 70, Checkpoint: "c"},
		{TaskID: "T2", Owner: "proj/b", Globs: []string{"**/*.md"}, Mode: coord.ModeShared, BoardTask: "B1"},
	}
	tasks := []*coord.BoardTask{{TaskID: "B1", Title: "<first>", Status: "open", Version: 1}, {TaskID: "B2", DependsOn: []string{"B1"}, Status: "open"}}
	st := APIState{HubID: "syn-a", Version: "v", GeneratedAt: 12.5, EventID: 7, Health: APIHealth{Status: "ok", ActiveClaims: 2},
		Agents: []APIAgent{{Name: "proj/a", Online: true, Claims: 1}}, Refusals: []APIRefusal{}, DeadLetters: []APIDeadLetter{},
		Mailbox: map[string]int64{"proj/a": 1}}
	st.Board.Ready = []string{"B1"}
	plain := st
	for _, c := range claims {
		plain.Claims = append(plain.Claims, ClaimOf(c))
	}
	for _, tk := range tasks {
		plain.Board.Tasks = append(plain.Board.Tasks, TaskOf(tk))
	}
	want, err := json.Marshal(plain)
	if err != nil {
		t.Fatal(err)
	}
	enc := st
	enc.ClaimsJSON = wire.List(nil, claims, AppendClaim)
	enc.Board.TasksJSON = wire.List(nil, tasks, AppendTask)
	for name, s := range map[string]APIState{"encoded ahead": enc, "not": plain} {
		got, err := appendState(nil, s)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: %v in %s", name, err, got)
		}
		_ = json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) || bytes.ContainsAny(got, "<>&") {
			t.Fatalf("%s: body\n%s\nwant encoding/json's, HTML escaped\n%s", name, got, want)
		}
	}
	board, err := appendBoard(nil, enc.Board)
	if err != nil {
		t.Fatal(err)
	}
	wantBoard, _ := json.Marshal(plain.Board)
	var g, w any
	_ = json.Unmarshal(board, &g)
	_ = json.Unmarshal(wantBoard, &w)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("board body\n%s\nwant\n%s", board, wantBoard)
	}
}
