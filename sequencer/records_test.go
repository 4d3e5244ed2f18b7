package sequencer

import (
	"context"
	"testing"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// Requests may carry journal records of their own (a chat row, a mailbox
// watermark): they commit in the batch's transaction and are published in
// commit order with the coord events around them (INV-JA-1).

func chatRecord(text string) journal.Record {
	return journal.Record{Kind: "chat", Payload: []byte(`{"payload":"` + text + `"}`)}
}

func TestRecords_CommitInTheBatchAndPublishInOrder_INV_JA_1(t *testing.T) {
	j := newFakeJournal().holding()
	var order []string
	s := start(t, coord.New(coord.Limits{}), j, Options{OnCommit: func(evs []coord.Event) {
		for _, ev := range evs {
			if g, ok := ev.(coord.ClaimGranted); ok {
				order = append(order, "grant "+g.Claim.TaskID)
			}
		}
	}})
	first := plugged(t, s, j, claim("a", "T0"))
	committed := make(chan Reply, 1)
	results := []<-chan result{
		async(s, context.Background(), Request{Cmd: claim("a", "T1")}),
	}
	waitQueued(t, s, 1)
	results = append(results, async(s, context.Background(), Request{Records: []journal.Record{chatRecord("hello")}, Committed: func(r Reply) {
		order = append(order, "chat")
		committed <- r
	}}))
	waitQueued(t, s, 2)
	results = append(results, async(s, context.Background(), Request{Cmd: claim("b", "T2")}))
	waitQueued(t, s, 3)
	j.release <- nil // the plug
	recv(t, first)
	recv(t, j.entered)
	if len(committed) != 0 {
		t.Fatal("Committed ran before the batch's append returned")
	}
	j.release <- nil
	var replies []Reply
	for _, ch := range results {
		r := recv(t, ch)
		if r.err != nil {
			t.Fatal(r.err)
		}
		replies = append(replies, r.reply)
	}
	b := j.batch(1)
	if got := kinds(b); len(got) != 3 || got[1] != "chat" {
		t.Fatalf("batch kinds %v: the chat row must sit between the two claims", got)
	}
	want := []string{"grant T0", "grant T1", "chat", "grant T2"}
	if len(order) != len(want) {
		t.Fatalf("published %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("published %v, want %v (commit order)", order, want)
		}
	}
	if c := <-committed; c.Seq == 0 || c.Seq != replies[1].Seq || replies[0].Seq+1 != c.Seq {
		t.Fatalf("chat seq %d (reply %d), claim before it at %d: seqs must follow the batch order", c.Seq, replies[1].Seq, replies[0].Seq)
	}
}

func TestRecords_RefusedCommandWritesNone(t *testing.T) {
	j := newFakeJournal()
	s := start(t, coord.New(coord.Limits{}), j, Options{})
	submit(t, s, Request{Cmd: claim("a", "T")})
	called := false
	r := submit(t, s, Request{Cmd: claim("b", "T"), Records: []journal.Record{chatRecord("x")}, Committed: func(Reply) { called = true }})
	if r.Outcome.Refusal == nil {
		t.Fatal("b's claim on a's live task must be refused")
	}
	for _, k := range kinds(j.batch(1)) {
		if k == "chat" {
			t.Fatal("a refused command's own records were journalled")
		}
	}
	if !called {
		t.Fatal("Committed must still run for a refused command (its audit event committed)")
	}
}

func TestRecords_FailedAppendPublishesNothing_INV_JA_2(t *testing.T) {
	j := newFakeJournal()
	j.failNth = 1
	s := start(t, coord.New(coord.Limits{}), j, Options{})
	called := false
	_, err := s.Submit(context.Background(), Request{Records: []journal.Record{chatRecord("x")}, Committed: func(Reply) { called = true }})
	if err == nil || called {
		t.Fatalf("err %v, Committed ran %v: a failed append must publish nothing", err, called)
	}
}

func TestRecords_RequestNeedsACommandOrRecords(t *testing.T) {
	s := start(t, coord.New(coord.Limits{}), newFakeJournal(), Options{})
	if _, err := s.Submit(context.Background(), Request{}); err == nil {
		t.Fatal("an empty request must be refused with ErrBadRequest")
	}
}
