package journal

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"
)

// Far from the wall clock, as in retention_test.go: the store's own
// goroutine retains by it and never touches these rows; the test decides now.
const retainT0 = 4_000_000_000.0

func openRetained(t *testing.T, r Retain, keepChats int) *Store {
	t.Helper()
	st, err := Open(filepath.Join(t.TempDir(), "journal.db"), Options{Retain: r, KeepChatRows: keepChats})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// chatAt journals one chat at ts; a directed one is indexed in
// directed_chats (dead when no live recipient matched) as the hub does.
func chatAt(t *testing.T, st *Store, ts float64, sender, target string, dead bool) int64 {
	t.Helper()
	r := Record{Kind: KindChat, Payload: fmt.Appendf(nil, `{"sender":%q,"target":%q,"msg_id":1}`, sender, target)}
	if IsDirected(target) {
		r.Stamp = func(seq int64) ([]byte, []Statement) {
			return nil, []Statement{InsertDirectedChat(seq, ts, sender, target, dead)}
		}
	}
	seq, err := st.Append(context.Background(), &Batch{TS: ts, Records: []Record{r}})
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func appendAt(t *testing.T, st *Store, ts float64, recs ...Record) int64 {
	t.Helper()
	seq, err := st.Append(context.Background(), &Batch{TS: ts, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func eventSeqs(t *testing.T, st *Store, kind string) []int64 {
	t.Helper()
	var out []int64
	st.Scan(0, func(seq int64, _ float64, k string, _ []byte) error {
		if k == kind {
			out = append(out, seq)
		}
		return nil
	})
	return out
}

// retainAll runs RetainRows until it drops nothing, as the goroutine does.
func retainAll(t *testing.T, st *Store, now float64) RetainStats {
	t.Helper()
	var total RetainStats
	for {
		got, err := st.RetainRows(context.Background(), now, 2) // small batches: the loop must resume where it stopped
		if err != nil {
			t.Fatal(err)
		}
		if got.total() == 0 {
			return total
		}
		total.add(got)
	}
}

// Chat rows past the window go, but never mail that still waits (INV-DG-3):
// a dead letter, or a chat naming an identity whose watermark is below it
// or that never acknowledged anything;
// the newest Options.KeepChatRows stay whatever their age, and rows inside the
// window stay.
func TestRetain_ChatPastItsWindowGoesWaitingMailStays_INV_DG_3(t *testing.T) {
	st := openRetained(t, Retain{Chat: 100 * time.Second}, 2)
	old := retainT0
	broadcast := chatAt(t, st, old, "a/x", "all", false)
	dead := chatAt(t, st, old, "a/x", "b/offline", true)
	acked := chatAt(t, st, old, "a/x", "b/acker", false)
	unacked := chatAt(t, st, old, "a/x", "b/slow", false)
	both := chatAt(t, st, old, "a/x", "b/acker, b/slow", false)
	live := chatAt(t, st, old, "a/x", "b/nomailbox", false) // reached a live b/nomailbox, which never acks: it may replay it
	// Watermarks: b/acker past everything, b/slow below its chats.
	appendAt(t, st, old, Record{Kind: KindMailboxWatermark, Payload: []byte(`{}`), Stamp: func(int64) ([]byte, []Statement) {
		return nil, []Statement{AdvanceWatermark("b/acker", live+100), AdvanceWatermark("b/slow", dead)}
	}})
	recent := chatAt(t, st, old+150, "a/x", "all", false)
	tail1 := chatAt(t, st, old, "a/x", "all", false) // old, but among the newest two
	tail2 := chatAt(t, st, old, "a/x", "all", false)

	got := retainAll(t, st, old+200)
	kept := eventSeqs(t, st, KindChat)
	want := []int64{dead, unacked, both, live, recent, tail1, tail2}
	if !slices.Equal(kept, want) {
		t.Fatalf("chat rows kept %v, want %v (dropped: broadcast %d, acked %d)", kept, want, broadcast, acked)
	}
	if got.Chats != 2 || got.Watermarks != 1 || got.Mail != 0 {
		t.Errorf("stats %+v: want 2 chats and the 1 watermark event dropped, no waiting mail", got)
	}
	for _, seq := range []int64{acked} {
		if _, ok, _ := st.Directed(seq); ok {
			t.Errorf("directed_chats row %d kept after its chat went", seq)
		}
	}
	if _, ok, _ := st.Directed(unacked); !ok {
		t.Error("waiting chat lost its directed_chats row")
	}
	if wm, _ := st.Watermark("b/slow"); wm != dead {
		t.Errorf("watermark of b/slow %d after its event went, want %d (the table keeps it)", wm, dead)
	}
	// Once b/slow acknowledges, its mail follows the window too.
	appendAt(t, st, old+150, Record{Kind: KindMailboxWatermark, Payload: []byte(`{}`), Stamp: func(int64) ([]byte, []Statement) {
		return nil, []Statement{AdvanceWatermark("b/slow", tail2)}
	}})
	retainAll(t, st, old+200)
	if kept, want := eventSeqs(t, st, KindChat), []int64{dead, live, recent, tail1, tail2}; !slices.Equal(kept, want) {
		t.Fatalf("after the ack: chat rows kept %v, want %v", kept, want)
	}
	if k, _ := st.Kept(); k.DirectedWaiting != 2 {
		t.Errorf("Kept says %d directed chats wait, want 2 (the dead letter, b/nomailbox's)", k.DirectedWaiting)
	}
}

// Retain.Mail is the one window that drops waiting mail: a dead letter and
// unacknowledged mail older than it go, younger ones stay.
func TestRetain_MailWindowDropsWaitingMailOnlyPastIt_INV_DG_3(t *testing.T) {
	st := openRetained(t, Retain{Chat: 100 * time.Second, Mail: 1000 * time.Second}, 1)
	ancient := chatAt(t, st, retainT0, "a/x", "b/offline", true)
	oldish := chatAt(t, st, retainT0+500, "a/x", "b/offline", true)
	chatAt(t, st, retainT0+1500, "a/x", "all", false) // the kept tail
	got := retainAll(t, st, retainT0+1200)
	if kept := eventSeqs(t, st, KindChat); slices.Contains(kept, ancient) || !slices.Contains(kept, oldish) {
		t.Fatalf("chat rows kept %v: want %d dropped (past the mail window), %d kept", kept, ancient, oldish)
	}
	if got.Mail != 1 || got.Chats != 1 {
		t.Errorf("stats %+v, want 1 waiting chat dropped", got)
	}
}

// A settled receipt whose notifications reached its sender goes after the
// window, with its events and then its chat; a pending receipt, or a
// settled one with a notification not yet delivered, stays with its chat
// (PROTOCOL.md §4.4: at least once).
func TestRetain_ReceiptsGoOnceSettledAndDelivered_INV_DG_3(t *testing.T) {
	st := openRetained(t, Retain{Chat: 100 * time.Second, Receipts: 100 * time.Second}, 1)
	old := retainT0
	receipted := func(state string, delivered bool) int64 {
		var msg int64
		chat := Record{Kind: KindChat, Payload: []byte(`{"sender":"a/x","target":"all"}`), Stamp: func(seq int64) ([]byte, []Statement) {
			msg = seq
			return nil, nil
		}}
		ev := Record{Kind: "delivery_receipt_" + state, Stamp: func(seq int64) ([]byte, []Statement) {
			id := fmt.Sprintf("delivery-receipt:%d:%s", msg, state)
			sts := []Statement{UpsertReceipt(ReceiptRow{MessageSeq: msg, Sender: "a/x", Target: "all", State: state, UpdatedEventSeq: seq}),
				InsertOutbox(OutboxRow{NotificationID: id, MessageSeq: msg, Phase: state, Sender: "a/x", Frame: []byte(`{}`)})}
			if delivered {
				sts = append(sts, Statement{`UPDATE delivery_receipt_outbox SET delivered_at = 1 WHERE notification_id = ?`, []any{id}})
			}
			return fmt.Appendf(nil, `{"message_seq":%d}`, msg), sts
		}}
		appendAt(t, st, old, chat, ev)
		return msg
	}
	gone := receipted("immediate", true)
	pending := receipted("pending", true)
	undelivered := receipted("deferred", false)
	chatAt(t, st, old+150, "a/x", "all", false) // the kept tail

	got := retainAll(t, st, old+200)
	if _, ok, _ := st.Receipt(gone); ok {
		t.Error("settled, delivered receipt kept past its window")
	}
	for _, seq := range []int64{pending, undelivered} {
		if _, ok, _ := st.Receipt(seq); !ok {
			t.Errorf("receipt of message %d dropped: pending or not yet delivered to its sender", seq)
		}
	}
	if got.Receipts != 1 || got.ReceiptEvents != 1 || got.Chats != 1 {
		t.Errorf("stats %+v: want 1 receipt, its 1 event and its chat", got)
	}
	kept := eventSeqs(t, st, KindChat)
	if slices.Contains(kept, gone) || !slices.Contains(kept, pending) || !slices.Contains(kept, undelivered) {
		t.Errorf("chat rows kept %v: want %d gone, %d and %d kept", kept, gone, pending, undelivered)
	}
	if n := countRows(t, st, `SELECT count(*) FROM delivery_receipt_outbox`); n != 2 {
		t.Errorf("%d outbox rows, want the 2 of the kept receipts", n)
	}
}

// Audit rows go after their window; claims and board rows never do (they
// are the snapshot's and compaction's), nor does anything inside the window.
func TestRetain_AuditPastItsWindowGoesStateStays(t *testing.T) {
	st := openRetained(t, Retain{Audit: 100 * time.Second}, 0)
	old := retainT0
	appendAt(t, st, old, rec(KindClaimDenial, `{}`, true), rec("guard_denial", `{}`, true), rec(KindClaimExpired, `{}`, false),
		rec(KindClaim, `{}`, true), rec(KindLedgerTask, `{}`, true), rec(KindChat, `{}`, false))
	appendAt(t, st, old+150, rec(KindClaimDenial, `{}`, true))
	got := retainAll(t, st, old+200)
	if got.Audit != 3 {
		t.Errorf("stats %+v, want the 3 old audit rows", got)
	}
	var kinds []string
	st.Scan(0, func(_ int64, _ float64, k string, _ []byte) error { kinds = append(kinds, k); return nil })
	if want := []string{KindClaim, KindLedgerTask, KindChat, KindClaimDenial}; !slices.Equal(kinds, want) {
		t.Errorf("rows kept %v, want %v", kinds, want)
	}
}

// Windows of 0 keep everything (the library default); retention never
// lowers the last seq.
func TestRetain_ZeroKeepsEverything(t *testing.T) {
	st := openRetained(t, Retain{}, 0)
	appendAt(t, st, 1, rec(KindChat, `{}`, false), rec(KindClaimDenial, `{}`, true))
	if got := retainAll(t, st, 1e12); got.total() != 0 {
		t.Fatalf("dropped %+v with no window", got)
	}
	if last, _ := st.LastSeq(); last != 2 {
		t.Errorf("last seq %d", last)
	}
}

func TestParseRetain(t *testing.T) {
	base := DefaultRetain
	base.Mail = 90 * time.Minute // set, so that what "all" must leave alone is visible
	for _, c := range []struct {
		spec string
		want Retain
		err  string
	}{
		{"", base, ""},
		{"chat=30s", Retain{Chat: 30 * time.Second, Receipts: base.Receipts, Audit: base.Audit, Mail: base.Mail}, ""},
		{"all=1m, audit=0", Retain{Chat: time.Minute, Receipts: time.Minute, Mail: base.Mail}, ""}, // all leaves mail alone
		{"chat", base, "want kind=duration"},
		{"mail=1h", Retain{Chat: base.Chat, Receipts: base.Receipts, Audit: base.Audit, Mail: time.Hour}, ""},
		{"box=1h", base, `unknown kind "box"`},
		{"chat=-1s", base, "not a duration of 0 or more"},
		{"chat=soon", base, "not a duration"},
	} {
		got, err := ParseRetain(c.spec, base)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || got != base {
				t.Errorf("%q: %+v, %v; want an error with %q and the base unchanged", c.spec, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.spec, got, err, c.want)
		}
		if back, err := ParseRetain(got.String(), Retain{}); err != nil || back != got {
			t.Errorf("%q: String %q reads back as %+v, %v", c.spec, got.String(), back, err)
		}
	}
}

// A new file gives free pages back as it runs (incremental auto_vacuum),
// keeping a slack for reuse; a file without it gives nothing back until
// Vacuum turns it on.
func TestVacuum_NewFileGivesFreePagesBack(t *testing.T) {
	defer func(n int64) { vacuumSlackPages = n }(vacuumSlackPages)
	vacuumSlackPages = 16
	st := openTemp(t)
	big := strings.Repeat("x", 3000)
	for range 400 {
		appendAt(t, st, 1, rec(KindClaimDenial, `{"pad":"`+big+`"}`, false))
	}
	if _, err := st.wc.ExecContext(context.Background(), `DELETE FROM events`); err != nil {
		t.Fatal(err)
	}
	before, _ := st.Pages()
	if before.AutoVacuum != incrementalVacuum || before.Free < 300 {
		t.Fatalf("pages %+v: want incremental auto_vacuum and the deleted rows' pages free", before)
	}
	var given int64
	for {
		n, err := st.VacuumStep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		given += n
	}
	after, _ := st.Pages()
	if after.Free > slack(after.Pages) || after.Pages >= before.Pages || given == 0 {
		t.Fatalf("before %+v after %+v (gave %d): want free pages down to the slack and the file smaller", before, after, given)
	}
}

// child of TestRetain_SIGKILLMidwayLosesNothing: it opens the journal
// retaining and vacuuming one row or page per transaction and waits to be
// killed.
const retainChildEnv = "SYNAPSE_JOURNAL_RETAIN_CHILD"

// A hub SIGKILLed while retention and the incremental vacuum run loses
// nothing it must keep: after every kill the file checks sound, the claims
// replay whole, the dead letter and the mail not yet acknowledged are still
// there (INV-DG-3, INV-JA-1), and the next start finishes the work.
func TestRetain_SIGKILLMidwayLosesNothing_INV_DG_3_INV_JA_1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	old := float64(time.Now().Unix()) - 1000 // past every 1 s window by the wall clock
	pad := strings.Repeat("p", 2000)         // so the rows that go free pages to give back
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: old}
	for i := range 40 {
		task := fmt.Sprintf("T%d", i%7)
		r.step(t, coord.ClaimRequest{Agent: agents[i%4], TaskID: task, Worktree: "/r", Paths: []string{task}})
	}
	var waiting []int64
	for i := range 300 {
		appendAt(t, st, old, Record{Kind: KindChat, Payload: []byte(`{"sender":"p/a","target":"all","pad":"` + pad + `"}`)},
			rec("guard_denial", `{"pad":"`+pad+`"}`, true))
		if i%50 == 0 {
			waiting = append(waiting, chatAt(t, st, old, "p/a", "p/offline", true))
		}
	}
	appendAt(t, st, old, rec(KindChat, `{"sender":"p/a","target":"all"}`, false)) // the newest, kept
	st.Close()
	want := imageAt(r.live, r.now)
	droppable := func(st *Store) (n int) {
		st.rdb.QueryRow(`SELECT count(*) FROM events WHERE kind IN ('chat', 'guard_denial')`).Scan(&n)
		return n - len(waiting) - 1
	}
	for kill := range 4 {
		killChild(t, retainChildEnv, path, "retaining", time.Duration(kill*40)*time.Millisecond) // further in each time: rows, then pages

		st, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("kill %d: reopen: %v", kill, err)
		}
		left := droppable(st)
		rec, err := Replay(st, coord.Limits{}, r.now, ReplayOptions{Logger: quietLog})
		if err != nil || rec.Degraded() {
			st.Close()
			t.Fatalf("kill %d (%d droppable rows left): replay %v %v", kill, left, err, rec.Warnings)
		}
		if got := rec.State.Image(); !reflect.DeepEqual(got, want) {
			t.Errorf("kill %d: state\n got %+v\nwant %+v", kill, got, want)
		}
		for _, seq := range waiting {
			if d, ok, err := st.Directed(seq); !ok || err != nil || !d.Dead {
				t.Errorf("kill %d: dead letter %d: %+v %v %v", kill, seq, d, ok, err)
			}
		}
		pages, _ := st.Pages()
		st.Close()
		if rep, err := Check(path); err != nil || !rep.OK() {
			t.Errorf("kill %d: check %+v %v", kill, rep, err)
		}
		t.Logf("kill %d: %d droppable rows left, %d pages, %d free", kill, left, pages.Pages, pages.Free)
	}
	st, err = Open(path, Options{Retain: Retain{Chat: time.Second, Audit: time.Second}, KeepChatRows: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	waitFor(t, "the next start finishing the retention", func() bool { return droppable(st) == 0 })
}
