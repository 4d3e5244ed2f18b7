package hub

// Directed delivery over real sockets and real SQLite files (issue 5):
// mailbox replay across a restart, the ack watermark, deferred receipts
// through the outbox, dead letters, history privacy, at-least-once chat.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// jhub is a journalled hub on a file that a test can close and reopen.
type jhub struct {
	*testHub
	st    *journal.Store
	once  sync.Once
	clock func() float64
}

func openJournalHub(t *testing.T, path string) *jhub {
	t.Helper()
	st, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := journal.Replay(st, coord.DefaultLimits(), nowTS(), journal.ReplayOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Journal: st, State: rec.State, Logger: quietLogger(), HubID: "syn-0000test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler())
	j := &jhub{testHub: &testHub{t: t, h: h, srv: srv, url: "ws" + strings.TrimPrefix(srv.URL, "http")}, st: st}
	t.Cleanup(j.close)
	return j
}

// close shuts the hub down and closes its journal (a restart's first half).
func (j *jhub) close() {
	j.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := j.h.Close(ctx); err != nil {
			j.t.Errorf("hub close: %v", err)
		}
		j.srv.Close()
		if err := j.st.Close(); err != nil {
			j.t.Errorf("journal close: %v", err)
		}
	})
}

// f builds a frame: type, then key/value pairs.
func chatTo(sender, target, payload string, kv ...any) map[string]any {
	m := map[string]any{"sender": sender, "target": target, "type": "chat", "payload": payload, "timestamp": nowTS()}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func pendingOf(t *testing.T, c *tconn, asker string) map[string]any {
	t.Helper()
	c.send(map[string]any{"sender": asker, "type": "who_request", "target": "System", "payload": "who"})
	w := c.expect("who_snapshot")
	m, ok := w["mailbox_pending"].(map[string]any)
	if !ok {
		t.Fatalf("mailbox_pending = %v", w["mailbox_pending"])
	}
	return m
}

func pendingCount(t *testing.T, m map[string]any, id string) int {
	t.Helper()
	v, ok := m[id]
	if !ok {
		return 0
	}
	return int(num(t, v))
}

func seqOf(t *testing.T, m map[string]any) int64 {
	t.Helper()
	return int64(num(t, m["seq"]))
}

// sendAll sends n directed chats and waits for the last echo, so all are
// committed; it returns their seqs in order.
func sendAll(t *testing.T, a *tconn, sender, target string, n int, prefix string) []int64 {
	t.Helper()
	for i := 0; i < n; i++ {
		a.send(chatTo(sender, target, fmt.Sprintf("%s-%d", prefix, i), "client_msg_id", fmt.Sprintf("%s-id-%d", prefix, i)))
	}
	seqs := make([]int64, 0, n)
	for len(seqs) < n {
		m := a.expect("chat")
		if p, _ := m["payload"].(string); strings.HasPrefix(p, prefix+"-") {
			seqs = append(seqs, seqOf(t, m))
		}
	}
	return seqs
}

func TestMailbox_ReplayAcrossRestart_PagesWholeBacklog_INV_DG_3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	j := openJournalHub(t, path)
	a := j.join("p/a")
	const n = 1203 // more than the reference's 1000-row replay cut, and than a page
	seqs := sendAll(t, a, "p/a", "p/b", n, "m")
	for i := 1; i < n; i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("seq not increasing: %d then %d", seqs[i-1], seqs[i])
		}
	}
	a.send(chatTo("p/a", "all", "broadcast"))
	a.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "broadcast" })
	a.send(chatTo("p/a", "q/c", "for c"))
	lastEcho := a.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "for c" })
	if got := pendingCount(t, pendingOf(t, a, "p/a"), "p/b"); got != n {
		t.Fatalf("mailbox_pending[p/b] = %d, want %d", got, n)
	}
	j.close()

	j2 := openJournalHub(t, path)
	a2 := j2.join("p/a")
	if got := pendingCount(t, pendingOf(t, a2, "p/a"), "p/b"); got != n {
		t.Fatalf("after restart mailbox_pending[p/b] = %d, want %d", got, n)
	}
	a2.send(chatTo("p/a", "all", "after restart"))
	m := a2.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "after restart" })
	if num(t, m["msg_id"]) <= num(t, lastEcho["msg_id"]) || seqOf(t, m) <= seqOf(t, lastEcho) {
		t.Fatalf("msg_id/seq did not resume: %v after %v", m, lastEcho)
	}

	b := j2.join("p/b", map[string]any{"mailbox": true, "since_seq": 0})
	for i := 0; i < n; i++ {
		r := b.expect("chat")
		if r["replayed"] != true || seqOf(t, r) != seqs[i] || r["payload"] != fmt.Sprintf("m-%d", i) ||
			r["client_msg_id"] != fmt.Sprintf("m-id-%d", i) {
			t.Fatalf("replayed frame %d = %v, want seq %d", i, r, seqs[i])
		}
		if _, ok := r["receipt_requested"]; ok {
			t.Fatalf("replayed frame carries receipt_requested: %v", r)
		}
	}
	b.sync("p/b") // nothing else was replayed: not the broadcast, not C's chat
	b.quiet(100 * time.Millisecond)
}

func TestMailbox_AckWatermarkMonotonicAndSpoofProof_INV_DG_3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	j := openJournalHub(t, path)
	a := j.join("p/a")
	toB := sendAll(t, a, "p/a", "p/b", 3, "b")
	toC := sendAll(t, a, "p/a", "q/c", 1, "c")
	a.send(chatTo("p/a", "all", "everyone"))
	bc := seqOf(t, a.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "everyone" }))

	b := j.join("p/b")
	if got := pendingCount(t, pendingOf(t, b, "p/b"), "p/b"); got != 3 {
		t.Fatalf("pending[p/b] = %d, want 3", got)
	}
	ack := func(seq int64, extra ...any) {
		f := map[string]any{"sender": "p/b", "target": "System", "type": "ack", "payload": "", "seq": seq}
		for i := 0; i+1 < len(extra); i += 2 {
			f[extra[i].(string)] = extra[i+1]
		}
		b.send(f)
	}
	wm := func(id string) int64 {
		t.Helper()
		n, err := j.st.Watermark(id)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	ack(toB[1])
	p := pendingOf(t, b, "p/b")
	if got := pendingCount(t, p, "p/b"); got != 1 || wm("p/b") != toB[1] {
		t.Fatalf("after ack of the 2nd: pending %d watermark %d, want 1 and %d", got, wm("p/b"), toB[1])
	}
	// An older ack does not move the watermark back.
	ack(toB[0])
	// Spoofs: C's chat, a broadcast, C's chat with mailbox_for C, a seq
	// that is no chat at all, a bool and a float seq.
	ack(toC[0])
	ack(bc)
	ack(toC[0], "mailbox_for", "q/c")
	ack(toB[2] + 1000)
	b.send(map[string]any{"sender": "p/b", "target": "System", "type": "ack", "seq": true})
	b.send(map[string]any{"sender": "p/b", "target": "System", "type": "ack", "seq": float64(toB[2]) + 0.5})
	p = pendingOf(t, b, "p/b")
	if got := pendingCount(t, p, "p/b"); got != 1 || wm("p/b") != toB[1] {
		t.Fatalf("after older and spoofed acks: pending %d watermark %d, want 1 and %d", got, wm("p/b"), toB[1])
	}
	if got := pendingCount(t, p, "q/c"); got != 1 || wm("q/c") != 0 {
		t.Fatalf("C's mailbox moved by B's acks: pending %d watermark %d", got, wm("q/c"))
	}
	// The sender cannot ack its own chat as its recipient.
	a.send(map[string]any{"sender": "p/a", "target": "System", "type": "ack", "seq": toB[2], "mailbox_for": "p/b"})
	if got := pendingCount(t, pendingOf(t, a, "p/a"), "p/b"); got != 1 || wm("p/a") != 0 {
		t.Fatalf("the sender's ack moved something: pending[p/b] %d, watermark[p/a] %d", got, wm("p/a"))
	}
	// Replay after the watermark: only the third chat.
	b.close()
	b2 := j.join("p/b", map[string]any{"mailbox": true, "since_seq": 0})
	if r := b2.expect("chat"); seqOf(t, r) != toB[2] || r["replayed"] != true {
		t.Fatalf("replay after the watermark = %v, want seq %d", r, toB[2])
	}
	b2.sync("p/b")
	// A sidecar may ack for its identity.
	rx := j.join("p/b-rx")
	rx.send(map[string]any{"sender": "p/b-rx", "target": "System", "type": "ack", "seq": toB[2], "mailbox_for": "p/b"})
	if got := pendingCount(t, pendingOf(t, rx, "p/b-rx"), "p/b"); got != 0 || wm("p/b") != toB[2] {
		t.Fatalf("sidecar ack: pending %d watermark %d, want 0 and %d", got, wm("p/b"), toB[2])
	}
}

func TestReceipt_DeferredAfterSenderRestart_INV_DG_3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	j := openJournalHub(t, path)
	a := j.join("p/a")
	a.send(chatTo("p/a", "p/b", "please", "receipt_requested", true, "client_msg_id", "a-1"))
	seq := seqOf(t, a.expect("chat"))
	r := a.expect("delivery_receipt")
	if r["delivered"] != false || r["dead_lettered"] != true || r["reason"] != "no_online_recipient" ||
		r["receipt_notification_id"] != fmt.Sprintf("delivery-receipt:%d:pending", seq) || seqOf(t, map[string]any{"seq": r["message_seq"]}) != seq {
		t.Fatalf("immediate receipt = %v", r)
	}
	a.close() // the sender goes away before the ack

	b := j.join("p/b", map[string]any{"mailbox": true, "since_seq": 0})
	if m := b.expect("chat"); seqOf(t, m) != seq || m["replayed"] != true {
		t.Fatalf("replay = %v", m)
	}
	b.send(map[string]any{"sender": "p/b", "target": "System", "type": "ack", "payload": "", "seq": seq})
	b.sync("p/b")
	rc, ok, err := j.st.Receipt(seq)
	if err != nil || !ok || rc.State != "deferred" || rc.AckedBy != "p/b" {
		t.Fatalf("receipt row = %+v %v %v", rc, ok, err)
	}
	if rows, _ := j.st.OutboxPending("p/a"); len(rows) != 1 || rows[0].NotificationID != fmt.Sprintf("delivery-receipt:%d:deferred", seq) {
		t.Fatalf("outbox for the offline sender = %+v", rows)
	}
	// A second ack settles nothing more.
	b.send(map[string]any{"sender": "p/b", "target": "System", "type": "ack", "payload": "", "seq": seq})
	b.sync("p/b")
	j.close() // and the hub restarts before the sender is back

	j2 := openJournalHub(t, path)
	a2 := j2.join("p/a")
	d := a2.expect("delivery_receipt")
	want := map[string]any{"delivered": true, "deferred": true, "payload": "delivered to p/b on reconnect",
		"receipt_notification_id": fmt.Sprintf("delivery-receipt:%d:deferred", seq), "client_msg_id": "a-1",
		"message_target": "p/b", "target": "p/a"}
	for k, v := range want {
		if d[k] != v {
			t.Fatalf("deferred receipt %s = %v, want %v (%v)", k, d[k], v, d)
		}
	}
	if rs, _ := d["recipients"].([]any); len(rs) != 1 || rs[0] != "p/b" {
		t.Fatalf("deferred recipients = %v", d["recipients"])
	}
	a2.sync("p/a")
	a2.quiet(100 * time.Millisecond) // exactly once on this bind
	a2.close()
	a3 := j2.join("p/a")
	a3.sync("p/a")
	a3.quiet(100 * time.Millisecond) // delivered: not sent again
}

func TestReceipt_DeferredToOnlineSender(t *testing.T) {
	j := openJournalHub(t, filepath.Join(t.TempDir(), "j.db"))
	a := j.join("p/a")
	a.send(chatTo("p/a", "p/b", "x", "receipt_requested", true))
	seq := seqOf(t, a.expect("chat"))
	a.expect("delivery_receipt")
	b := j.join("p/b", map[string]any{"mailbox": true})
	// B's join may be held for the presence window (docs/protocol.md
	// "Presence"): read it before B acts, so the quiet check below is only
	// about receipts.
	a.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "p/b" })
	b.expect("chat")
	b.send(map[string]any{"sender": "p/b", "target": "System", "type": "ack", "seq": seq})
	d := a.expect("delivery_receipt")
	if d["deferred"] != true || d["receipt_notification_id"] != fmt.Sprintf("delivery-receipt:%d:deferred", seq) {
		t.Fatalf("deferred = %v", d)
	}
	if _, ok := d["client_msg_id"]; ok {
		t.Fatalf("no client_msg_id was sent, receipt has one: %v", d)
	}
	// Online recipient: immediate_delivered, nothing deferred later.
	a.send(chatTo("p/a", "p/b", "y", "receipt_requested", true))
	seq2 := seqOf(t, a.expect("chat"))
	if d := a.expect("delivery_receipt"); d["delivered"] != true ||
		d["receipt_notification_id"] != fmt.Sprintf("delivery-receipt:%d:immediate_delivered", seq2) {
		t.Fatalf("immediate = %v", d)
	}
	b.send(map[string]any{"sender": "p/b", "target": "System", "type": "ack", "seq": seq2})
	a.sync("p/a")
	a.quiet(100 * time.Millisecond)
}

func metricValue(t *testing.T, url, name string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

func TestDeadLetter_OfflineTargetStateMetricsReplay_INV_DG_3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	j := openJournalHub(t, path)
	a := j.join("p/a")
	seqs := sendAll(t, a, "p/a", "p/d", 2, "dl")
	check := func(j *jhub, c *tconn) {
		t.Helper()
		c.send(map[string]any{"sender": "p/a", "type": "state_request", "target": "System"})
		st := c.expect("state_snapshot")["snapshot"].(map[string]any)
		dl, _ := st["dead_letters"].([]any)
		if len(dl) != 1 {
			t.Fatalf("dead_letters = %v", st["dead_letters"])
		}
		e := dl[0].(map[string]any)
		if e["target"] != "p/d" || num(t, e["count"]) != 2 || e["last_sender"] != "p/a" || num(t, e["last_ts"]) < 1e9 {
			t.Fatalf("dead letter = %v", e)
		}
		if v := metricValue(t, j.srv.URL, "synapse_dead_letters"); v != "2" {
			t.Fatalf("synapse_dead_letters = %q", v)
		}
		if v := metricValue(t, j.srv.URL, "synapse_dead_letter_targets"); v != "1" {
			t.Fatalf("synapse_dead_letter_targets = %q", v)
		}
	}
	check(j, a)
	j.close()
	j2 := openJournalHub(t, path)
	a2 := j2.join("p/a")
	check(j2, a2) // rebuilt from the journal
	d := j2.join("p/d", map[string]any{"mailbox": true, "since_seq": 0})
	for i, s := range seqs {
		if m := d.expect("chat"); seqOf(t, m) != s || m["payload"] != fmt.Sprintf("dl-%d", i) {
			t.Fatalf("replayed dead letter %d = %v", i, m)
		}
	}
}

func TestHistory_NeverLeaksDirectedChat_AcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	j := openJournalHub(t, path)
	a := j.join("p/a")
	b := j.join("p/b")
	a.send(chatTo("p/a", "p/b", "secret"))
	b.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "secret" })
	a.send(chatTo("p/a", "p/*", "project audience"))
	b.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "project audience" })
	a.send(chatTo("p/a", "all", "public"))
	b.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "public" })
	third := func(j *jhub) {
		t.Helper()
		c := j.join("q/c")
		c.send(map[string]any{"sender": "q/c", "type": "history_request", "target": "System"})
		hist := c.expect("history_snapshot")["history"].([]any)
		c.send(map[string]any{"sender": "q/c", "type": "resume_request", "target": "System", "since": 0})
		res := c.expect("resume_snapshot")["messages"].([]any)
		for _, list := range [][]any{hist, res} {
			if len(list) != 1 || list[0].(map[string]any)["payload"] != "public" {
				t.Fatalf("a third agent sees %v, want only the public chat", list)
			}
		}
		c.close()
	}
	third(j)
	j.close()
	j2 := openJournalHub(t, path)
	third(j2)
	b2 := j2.join("p/b")
	b2.send(map[string]any{"sender": "p/b", "type": "history_request", "target": "System"})
	hist := b2.expect("history_snapshot")["history"].([]any)
	if len(hist) != 3 {
		t.Fatalf("the recipient's history after restart = %v", hist)
	}
	for _, e := range hist {
		if _, ok := e.(map[string]any)["seq"].(json.Number); !ok {
			t.Fatalf("history entry without seq: %v", e)
		}
	}
}

func TestChat_AtLeastOnceIdemKeyNotConsumed_INV_DG_1(t *testing.T) {
	for _, journalled := range []bool{false, true} {
		t.Run(fmt.Sprint("journal=", journalled), func(t *testing.T) {
			var th *testHub
			if journalled {
				th = openJournalHub(t, filepath.Join(t.TempDir(), "j.db")).testHub
			} else {
				th = startHub(t, Config{})
			}
			a := th.join("p/a")
			b := th.join("p/b")
			for i := 0; i < 2; i++ { // the same retry twice: both delivered
				a.send(chatTo("p/a", "p/b", "retry", "idem_key", "k1", "client_msg_id", "cm-1"))
			}
			long := strings.Repeat("x", 257)
			a.send(chatTo("p/a", "p/b", "bad ids", "client_msg_id", long))
			a.send(chatTo("p/a", "p/b", "ctl", "client_msg_id", "a\x01b"))
			for i := 0; i < 2; i++ {
				m := b.expect("chat")
				if m["payload"] != "retry" || m["client_msg_id"] != "cm-1" {
					t.Fatalf("copy %d = %v", i, m)
				}
				if _, ok := m["seq"]; ok != journalled {
					t.Fatalf("seq present=%v on %v", ok, m)
				}
			}
			for _, p := range []string{"bad ids", "ctl"} {
				if m := b.expect("chat"); m["payload"] != p || m["client_msg_id"] != nil {
					t.Fatalf("%s: %v", p, m)
				}
			}
		})
	}
}

// A reconnect must not recount an identity's mailbox from its watermark:
// for an agent that never acks, that is every directed chat ever sent, and
// each `who` after any reconnect paid it, more with every chat (found by
// synapse bench soak: who_request was half the hub's CPU after 7 minutes).
// Coming back with the same roles reads only the chats sent while away;
// the counts stay what a recount from the watermark gives.
func TestMailbox_ReconnectReadsOnlyWhatItMissed_INV_DG_3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	j := openJournalHub(t, path)
	a := j.join("p/a")
	sendAll(t, a, "p/a", "p/b", 300, "old") // history nobody acks
	reviewer := map[string]any{"roles": []string{"q/reviewer"}}
	c := j.join("q/c", reviewer)
	pendingOf(t, a, "p/a")
	named, group := 0, 0
	for round := range 3 {
		c.close()
		sendAll(t, a, "p/a", "q/reviewer", 2, fmt.Sprintf("role%d", round)) // reaches q/c only while online
		sendAll(t, a, "p/a", "q/c", 1, fmt.Sprintf("name%d", round))
		named, group = named+1, group+2
		if got := pendingCount(t, pendingOf(t, a, "p/a"), "q/c"); got != named {
			t.Fatalf("round %d, q/c away: mailbox_pending %d, want %d (named only)", round, got, named)
		}
		before := j.h.mb.read.Load()
		c = j.join("q/c", reviewer)
		if got := pendingCount(t, pendingOf(t, a, "p/a"), "q/c"); got != named+group {
			t.Fatalf("round %d, q/c back: mailbox_pending %d, want %d", round, got, named+group)
		}
		if read := j.h.mb.read.Load() - before; read > 3 {
			t.Errorf("round %d: the recount read %d directed chats, want at most the 3 sent while q/c was away", round, read)
		}
	}
	c.close()
	c = j.join("q/c", map[string]any{"roles": []string{"q/other"}}) // other roles: a recount from the watermark
	if got := pendingCount(t, pendingOf(t, a, "p/a"), "q/c"); got != named {
		t.Fatalf("back with other roles: mailbox_pending %d, want %d (named only)", got, named)
	}
	c.close()
	a.close()
	j.close()
	j = openJournalHub(t, path) // a restart: counted from the journal with the roles it comes back with
	a = j.join("p/a")
	j.join("q/c", reviewer)
	if got := pendingCount(t, pendingOf(t, a, "p/a"), "q/c"); got != named+group {
		t.Fatalf("after a restart: mailbox_pending %d, want %d", got, named+group)
	}
}
