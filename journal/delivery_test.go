package journal

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"
)

func TestStamp_SeqKnownInsideTheTransactionAndRolledBackTogether(t *testing.T) {
	st := openTemp(t)
	ctx := context.Background()
	var seen []int64
	chat := Record{Kind: KindChat, Payload: []byte(`{"target":"p/b"}`), Stamp: func(seq int64) ([]byte, []Statement) {
		seen = append(seen, seq)
		return nil, []Statement{InsertDirectedChat(seq, 1, "p/a", "p/b", true)}
	}}
	mark := Record{Kind: KindMailboxWatermark, Stamp: func(seq int64) ([]byte, []Statement) {
		seen = append(seen, seq)
		return []byte(`{"identity":"p/b","source":"ack","through_seq":1}`), []Statement{AdvanceWatermark("p/b", seq-1)}
	}}
	first, err := st.Append(ctx, &Batch{TS: 1, Records: []Record{chat, mark}})
	if err != nil || first != 1 || len(seen) != 2 || seen[0] != 1 || seen[1] != 2 {
		t.Fatalf("append: first %d err %v seen %v", first, err, seen)
	}
	if d, ok, err := st.Directed(1); err != nil || !ok || d.Target != "p/b" || !d.Dead {
		t.Fatalf("directed row = %+v %v %v", d, ok, err)
	}
	if wm, _ := st.Watermark("p/b"); wm != 1 {
		t.Fatalf("watermark = %d", wm)
	}
	// A watermark never goes back.
	if _, err := st.Append(ctx, &Batch{TS: 2, Records: []Record{{Kind: KindMailboxWatermark, Payload: []byte(`{}`),
		Stamp: func(int64) ([]byte, []Statement) { return nil, []Statement{AdvanceWatermark("p/b", 0)} }}}}); err != nil {
		t.Fatal(err)
	}
	if wm, _ := st.Watermark("p/b"); wm != 1 {
		t.Fatalf("watermark moved back to %d", wm)
	}
	// A failing statement rolls the whole batch back, event rows included.
	bad := Record{Kind: KindChat, Payload: []byte(`{}`), Stamp: func(seq int64) ([]byte, []Statement) {
		return nil, []Statement{InsertDirectedChat(1, 1, "x", "y", false)} // duplicate key
	}}
	if _, err := st.Append(ctx, &Batch{TS: 3, Records: []Record{rec("chat", `{}`, false), bad}}); err == nil {
		t.Fatal("duplicate directed row accepted")
	}
	if last, _ := st.LastSeq(); last != 3 {
		t.Fatalf("last seq after the rolled-back batch = %d, want 3", last)
	}
	page, err := st.DirectedPage(0, 10, true)
	if err != nil || len(page) != 1 || string(page[0].Payload) != `{"target":"p/b"}` {
		t.Fatalf("page = %+v %v", page, err)
	}
}

func TestReceiptTablesAndOutbox(t *testing.T) {
	st := openTemp(t)
	ctx := context.Background()
	r := ReceiptRow{Sender: "p/a", Target: "p/b", MessageID: 7, State: "pending"}
	recs := []Record{
		{Kind: KindChat, Payload: []byte(`{}`), Durable: true},
		{Kind: KindReceiptImmediate, Payload: []byte(`{}`), Durable: true, Stamp: func(seq int64) ([]byte, []Statement) {
			r.MessageSeq, r.UpdatedEventSeq = seq-1, seq
			return nil, []Statement{UpsertReceipt(r), InsertOutbox(OutboxRow{NotificationID: "delivery-receipt:1:pending",
				MessageSeq: seq - 1, Phase: ReceiptPhase(KindReceiptImmediate), Sender: "p/a", Frame: []byte(`{"x":1}`)})}
		}},
	}
	if _, err := st.Append(ctx, &Batch{TS: 1, Records: recs}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := st.Receipt(1)
	if err != nil || !ok || got.State != "pending" || got.UpdatedEventSeq != 2 || got.Delivered {
		t.Fatalf("receipt = %+v %v %v", got, ok, err)
	}
	rows, err := st.OutboxPending("p/a")
	if err != nil || len(rows) != 1 || rows[0].Phase != "immediate" || string(rows[0].Frame) != `{"x":1}` {
		t.Fatalf("outbox = %+v %v", rows, err)
	}
	if err := st.MarkOutbox("delivery-receipt:1:pending", false, 5); err != nil {
		t.Fatal(err)
	}
	if rows, _ := st.OutboxPending("p/a"); len(rows) != 1 || rows[0].Attempts != 1 {
		t.Fatalf("after a failed attempt: %+v", rows)
	}
	if err := st.MarkOutbox("delivery-receipt:1:pending", true, 6); err != nil {
		t.Fatal(err)
	}
	if rows, _ := st.OutboxPending("p/a"); len(rows) != 0 {
		t.Fatalf("delivered row still pending: %+v", rows)
	}
}

// A file written before schema 2 (ours at v1, or the reference's) gets its
// directed_chats and mailbox_watermarks back-filled from the events.
func TestMigration_BackfillsDeliveryTables(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ref.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL)`,
		`INSERT INTO events(ts, kind, payload) VALUES (1, 'chat', '{"sender":"p/a","target":"p/b","msg_id":1}')`,
		`INSERT INTO events(ts, kind, payload) VALUES (1, 'chat', '{"sender":"p/a","target":"all","msg_id":2}')`,
		`INSERT INTO events(ts, kind, payload) VALUES (1, 'chat', '{"sender":"p/a","target":"p/*","msg_id":3}')`,
		`INSERT INTO events(ts, kind, payload) VALUES (1, 'chat', '{"sender":"p/a","target":"p/c","channel":"x","msg_id":4}')`,
		`INSERT INTO events(ts, kind, payload) VALUES (2, 'mailbox_watermark', '{"identity":"p/b","through_seq":1,"source":"ack"}')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	page, err := st.DirectedPage(0, 10, false)
	if err != nil || len(page) != 1 || page[0].Seq != 1 || page[0].Target != "p/b" {
		t.Fatalf("back-filled directed chats = %+v %v", page, err)
	}
	if wm, _ := st.Watermark("p/b"); wm != 1 {
		t.Fatalf("back-filled watermark = %d", wm)
	}
	tail, err := st.ChatTail(2)
	if err != nil || len(tail) != 2 || tail[0].Seq != 3 || tail[1].Seq != 4 {
		t.Fatalf("chat tail = %+v %v", tail, err)
	}
}

// ClearDeadLetters (a dead_letter_cleared row's statement) unmarks only
// its target's dead chats up to through_seq; PendingReceiptRows lists the
// pending aggregates in seq order, whatever order they were written in.
func TestClearDeadLettersAndPendingReceiptRows(t *testing.T) {
	st := openTemp(t)
	ctx := context.Background()
	chat := func(target string, dead bool) Record {
		return Record{Kind: KindChat, Payload: []byte(`{}`), Stamp: func(seq int64) ([]byte, []Statement) {
			return nil, []Statement{InsertDirectedChat(seq, 1, "p/a", target, dead)}
		}}
	}
	// seqs 1..4: p/d dead, p/e dead, p/d live, p/d dead
	recs := []Record{chat("p/d", true), chat("p/e", true), chat("p/d", false), chat("p/d", true)}
	if _, err := st.Append(ctx, &Batch{TS: 1, Records: recs}); err != nil {
		t.Fatal(err)
	}
	clear := Record{Kind: KindDeadLetterCleared, Payload: []byte(`{"target":"p/d","through_seq":3}`),
		Stamp: func(int64) ([]byte, []Statement) { return nil, []Statement{ClearDeadLetters("p/d", 3)} }}
	if _, err := st.Append(ctx, &Batch{TS: 2, Records: []Record{clear}}); err != nil {
		t.Fatal(err)
	}
	for seq, want := range map[int64]bool{1: false, 2: true, 3: false, 4: true} {
		if d, _, err := st.Directed(seq); err != nil || d.Dead != want {
			t.Fatalf("seq %d dead = %v (%v), want %v", seq, d.Dead, err, want)
		}
	}
	receipt := func(seq int64, state string) Statement {
		return UpsertReceipt(ReceiptRow{MessageSeq: seq, Sender: "p/a", Target: "p/d", MessageID: seq, State: state, UpdatedEventSeq: seq})
	}
	up := Record{Kind: KindReceiptImmediate, Payload: []byte(`{}`), Stamp: func(int64) ([]byte, []Statement) {
		return nil, []Statement{receipt(4, "pending"), receipt(1, "pending"), receipt(2, "deferred"), receipt(3, "pending")}
	}}
	if _, err := st.Append(ctx, &Batch{TS: 3, Records: []Record{up}}); err != nil {
		t.Fatal(err)
	}
	rows, err := st.PendingReceiptRows()
	if err != nil || len(rows) != 3 || rows[0].MessageSeq != 1 || rows[1].MessageSeq != 3 || rows[2].MessageSeq != 4 {
		t.Fatalf("pending rows = %+v %v", rows, err)
	}
	if n, err := st.ReceiptCount("pending"); err != nil || n != 3 {
		t.Fatalf("pending count = %d %v", n, err)
	}
}
