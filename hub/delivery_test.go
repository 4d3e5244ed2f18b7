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
	return openJournalHubWith(t, path, Config{})
}

// openJournalHubWith opens a journalled hub on path with cfg's other
// fields. Opening a second one on the path while the first still runs is
// a restart after SIGKILL: nothing of the first hub's shutdown has run
// when the second replays the file (both close at the test's end).
func openJournalHubWith(t *testing.T, path string, cfg Config) *jhub {
	t.Helper()
	return openJournalHubOpts(t, path, journal.Options{}, cfg)
}

// openJournalHubOpts is openJournalHubWith with the journal's options.
func openJournalHubOpts(t *testing.T, path string, opts journal.Options, cfg Config) *jhub {
	t.Helper()
	st, err := journal.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	now := nowTS()
	if cfg.Clock != nil {
		now = cfg.Clock()
	}
	rec, err := journal.Replay(st, coord.DefaultLimits(), now, journal.ReplayOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Journal, cfg.State, cfg.Logger, cfg.HubID = st, rec.State, quietLogger(), "syn-0000test"
	h, err := New(cfg)
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

// PROTOCOL.md §4.6 and INV-DG-3 across a SIGKILL: a dead letter clears
// when its target binds, and stays cleared after the hub restarts on the
// same file without a clean shutdown (the ledger is rebuilt from the
// directed chats still marked dead). The backlog itself is untouched: the
// target's mailbox still replays it. Another target's dead letter, never
// cleared, comes back.
func TestDeadLetter_ClearedOnBindStaysClearedAfterSIGKILL_INV_DG_3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	j := openJournalHub(t, path)
	a := j.join("p/a")
	seqs := sendAll(t, a, "p/a", "p/d", 2, "dl")
	sendAll(t, a, "p/a", "p/e", 1, "other")
	deadLetters := func(c *tconn) map[string]float64 {
		t.Helper()
		c.send(map[string]any{"sender": c.name, "type": "state_request", "target": "System"})
		dl, _ := c.expect("state_snapshot")["snapshot"].(map[string]any)["dead_letters"].([]any)
		out := map[string]float64{}
		for _, e := range dl {
			m := e.(map[string]any)
			out[m["target"].(string)] = num(t, m["count"])
		}
		return out
	}
	if got := deadLetters(a); got["p/d"] != 2 || got["p/e"] != 1 {
		t.Fatalf("dead letters before the bind = %v", got)
	}
	d := j.join("p/d")
	d.sync("p/d") // the bind's frame is served, its clear committed
	if got := deadLetters(a); len(got) != 1 || got["p/e"] != 1 {
		t.Fatalf("dead letters after p/d bound = %v", got)
	}
	// p/d goes away and a new chat to it dead-letters again: counted from
	// the clear on, after the restart as before it.
	d.close()
	late := sendAll(t, a, "p/a", "p/d", 1, "late")

	j2 := openJournalHub(t, path) // j is never closed: SIGKILL
	a2 := j2.join("p/a")
	if got := deadLetters(a2); len(got) != 2 || got["p/e"] != 1 || got["p/d"] != 1 {
		t.Fatalf("dead letters after the restart = %v, want p/e 1 and p/d 1 (only the chat after the clear)", got)
	}
	d2 := j2.join("p/d", map[string]any{"mailbox": true, "since_seq": 0})
	for _, s := range append(seqs, late...) {
		if m := d2.expect("chat"); seqOf(t, m) != s {
			t.Fatalf("replay = %v, want seq %d", m, s)
		}
	}
	d2.sync("p/d")
	j3 := openJournalHub(t, path) // and again, after the second clear
	if got := deadLetters(j3.join("p/a")); len(got) != 1 || got["p/e"] != 1 {
		t.Fatalf("dead letters after the second restart = %v", got)
	}
}

// expectExpired reads the expired receipt of message seq (PROTOCOL.md
// §2.2, §4.4) from c, whatever else comes first.
func expectExpired(t *testing.T, c *tconn, seq int64, cmid string) {
	t.Helper()
	id := fmt.Sprintf("delivery-receipt:%d:expired", seq)
	r := c.expectWhere("delivery_receipt", func(m map[string]any) bool { return m["receipt_notification_id"] == id })
	want := map[string]any{"delivered": false, "deferred": true, "expired": true, "reason": "pending_window_evicted",
		"payload": "delivery receipt expired before acknowledgement", "message_target": "p/b", "target": c.name,
		"client_msg_id": cmid}
	for k, v := range want {
		if r[k] != v {
			t.Fatalf("expired receipt %s = %v, want %v (%v)", k, r[k], v, r)
		}
	}
	if rs, ok := r["recipients"].([]any); !ok || len(rs) != 0 || seqOf(t, map[string]any{"seq": r["message_seq"]}) != seq {
		t.Fatalf("expired receipt = %v", r)
	}
}

// noReceiptBeforeSync fails if a delivery_receipt reaches c before the
// reply to a who_request sent now, which comes after everything already
// queued to c.
func noReceiptBeforeSync(t *testing.T, c *tconn) {
	t.Helper()
	c.send(map[string]any{"sender": c.name, "type": "who_request", "target": "System", "payload": "who"})
	for {
		switch m := c.next(); m["type"] {
		case "who_snapshot":
			return
		case "delivery_receipt":
			t.Fatalf("unexpected receipt %v", m)
		}
	}
}

// sendPending sends a receipt-requested chat to the offline p/b and
// returns its seq once the pending receipt is back.
func sendPending(t *testing.T, c *tconn, cmid string) int64 {
	t.Helper()
	c.send(chatTo(c.name, "p/b", cmid, "receipt_requested", true, "client_msg_id", cmid))
	seq := seqOf(t, c.expectWhere("chat", func(m map[string]any) bool { return m["client_msg_id"] == cmid }))
	id := fmt.Sprintf("delivery-receipt:%d:pending", seq)
	c.expectWhere("delivery_receipt", func(m map[string]any) bool { return m["receipt_notification_id"] == id })
	return seq
}

func receiptState(t *testing.T, st *journal.Store, seq int64) string {
	t.Helper()
	r, ok, err := st.Receipt(seq)
	if err != nil || !ok {
		t.Fatalf("receipt %d: %v %v", seq, ok, err)
	}
	return r.State
}

// PROTOCOL.md §4.4 (pending → expired) and §4.5 step 6: the pending window
// holds --pending-receipt-window receipts; one more evicts the oldest,
// whose expired row commits with the new pending one. Its sender gets the
// expired receipt at once when online, else when it next binds (the
// outbox), also after a SIGKILL; the restart restores the window in seq
// order, so the next eviction takes the oldest survivor. An ack of an
// expired receipt settles nothing; an ack of a pending one still defers.
func TestReceipt_PendingWindowExpiresOldest_OnlineOfflineAndAfterSIGKILL_PROTOCOL_4_4(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	cfg := Config{PendingReceiptWindow: 2}
	j := openJournalHubWith(t, path, cfg)
	a := j.join("p/a")
	m1, m2 := sendPending(t, a, "a-1"), sendPending(t, a, "a-2")
	m3 := sendPending(t, a, "a-3")
	expectExpired(t, a, m1, "a-1") // online: at once
	a.close()
	c := j.join("p/c")
	m4 := sendPending(t, c, "c-4") // evicts m2, whose sender is offline
	if n, err := j.st.ReceiptCount("pending"); err != nil || n != 2 {
		t.Fatalf("pending receipts in the journal = %d %v, want 2", n, err)
	}
	for seq, want := range map[int64]string{m1: "expired", m2: "expired", m3: "pending", m4: "pending"} {
		if got := receiptState(t, j.st, seq); got != want {
			t.Fatalf("receipt %d is %s, want %s", seq, got, want)
		}
	}

	j2 := openJournalHubWith(t, path, cfg) // j is never closed: SIGKILL
	a2 := j2.join("p/a")
	expectExpired(t, a2, m2, "a-2") // offline: flushed on the bind, after the restart
	noReceiptBeforeSync(t, a2)      // m1's was delivered before: not again
	c2 := j2.join("p/c")
	m5 := sendPending(t, c2, "c-5")
	expectExpired(t, a2, m3, "a-3") // the oldest restored one goes first
	if v := metricValue(t, j2.srv.URL, "synapse_pending_receipts"); v != "2" {
		t.Fatalf("synapse_pending_receipts = %q", v)
	}
	b := j2.join("p/b")
	b.send(map[string]any{"sender": "p/b", "target": "System", "type": "ack", "seq": m2})
	b.send(map[string]any{"sender": "p/b", "target": "System", "type": "ack", "seq": m4})
	d := c2.expect("delivery_receipt")
	if d["receipt_notification_id"] != fmt.Sprintf("delivery-receipt:%d:deferred", m4) {
		t.Fatalf("after the acks p/c got %v", d)
	}
	b.sync("p/b")
	noReceiptBeforeSync(t, a2) // the expired m2 stays expired
	for seq, want := range map[int64]string{m2: "expired", m3: "expired", m4: "deferred", m5: "pending"} {
		if got := receiptState(t, j2.st, seq); got != want {
			t.Fatalf("receipt %d is %s, want %s", seq, got, want)
		}
	}
}

// PROTOCOL.md §4.5 step 6, INV-RR-2: a journal holding more pending
// receipts than the window (written with a larger one) is cut to the
// window on restart: the oldest expire at start, and their sender gets
// them when it binds.
func TestReceipt_RestartCapsPendingAtTheWindow_INV_RR_2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	j := openJournalHubWith(t, path, Config{PendingReceiptWindow: 4})
	a := j.join("p/a")
	var seqs []int64
	for i := 0; i < 4; i++ {
		seqs = append(seqs, sendPending(t, a, fmt.Sprintf("a-%d", i)))
	}
	a.close()
	j.close()
	j2 := openJournalHubWith(t, path, Config{PendingReceiptWindow: 3})
	if n, err := j2.st.ReceiptCount("pending"); err != nil || n != 3 || receiptState(t, j2.st, seqs[0]) != "expired" {
		t.Fatalf("after the restart: %d pending (%v), the oldest %s", n, err, receiptState(t, j2.st, seqs[0]))
	}
	a2 := j2.join("p/a")
	expectExpired(t, a2, seqs[0], "a-0")
	if v := metricValue(t, j2.srv.URL, "synapse_pending_receipts"); v != "3" {
		t.Fatalf("synapse_pending_receipts = %q", v)
	}
}

// PROTOCOL.md §4.4: however many senders race, the pending set never
// exceeds the window, and every receipt evicted from it expires exactly
// once (a receipt is pending, or expired, never both nor lost).
func TestReceipt_PendingWindowNeverExceeded_Concurrent_PROTOCOL_4_4(t *testing.T) {
	const window, senders, each = 3, 4, 8
	j := openJournalHubWith(t, filepath.Join(t.TempDir(), "j.db"), Config{PendingReceiptWindow: window})
	var wg sync.WaitGroup
	conns := make([]*tconn, senders)
	for i := range conns {
		conns[i] = j.join(fmt.Sprintf("p/s%d", i))
	}
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < each; k++ {
				c.send(chatTo(c.name, "p/b", "x", "receipt_requested", true, "client_msg_id", fmt.Sprintf("%d-%d", i, k)))
			}
		}()
	}
	wg.Wait()
	for _, c := range conns {
		c.sync(c.name)
	}
	// Every chat is committed once its sender's sync is answered.
	if n, err := j.st.ReceiptCount("pending"); err != nil || n != window {
		t.Fatalf("pending receipts = %d %v, want %d", n, err, window)
	}
	if got := j.h.receipts.Pending(); got != window {
		t.Fatalf("pending window holds %d, want %d", got, window)
	}
	if expired, err := j.st.ReceiptCount("expired"); err != nil || expired != senders*each-window {
		t.Fatalf("expired receipts = %d, want %d", expired, senders*each-window)
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
		before := j.h.mb.Read()
		c = j.join("q/c", reviewer)
		if got := pendingCount(t, pendingOf(t, a, "p/a"), "q/c"); got != named+group {
			t.Fatalf("round %d, q/c back: mailbox_pending %d, want %d", round, got, named+group)
		}
		if read := j.h.mb.Read() - before; read > 3 {
			t.Errorf("round %d: the recount read %d directed chats, want at most the 3 sent while q/c was away", round, read)
		}
	}
	// Visits nobody asks `who` about (a one-shot CLI command): each keeps
	// its gap to catch up on, the chats counted live meanwhile dropped.
	before := j.h.mb.Read()
	for visit := range 3 {
		c.close()
		sendAll(t, a, "p/a", "q/reviewer", 1, fmt.Sprintf("visit%d", visit))
		c = j.join("q/c", reviewer)
		sendAll(t, a, "p/a", "q/reviewer", 1, fmt.Sprintf("during%d", visit))
		group += 2
	}
	if got := pendingCount(t, pendingOf(t, a, "p/a"), "q/c"); got != named+group {
		t.Fatalf("after visits: mailbox_pending %d, want %d", got, named+group)
	}
	if read := j.h.mb.Read() - before; read > 5 {
		t.Errorf("after visits: the recount read %d directed chats, want at most the 5 sent since q/c first left", read)
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

// The split counts (named, group, catch-ups) must report what a recount
// from the watermark under the current presence and roles gives, whatever
// the order of joins, leaves, role changes, chats and `who`s: a seeded
// random walk checks every identity at every `who` against that scan.
func TestMailbox_PendingMatchesAFullRecount_RandomWalk_INV_DG_3(t *testing.T) {
	j := openJournalHub(t, filepath.Join(t.TempDir(), "j.db"))
	a := j.join("p/a")
	ids := []string{"q/c", "q/d"}
	roleSets := [][]string{nil, {"q/reviewer"}, {"q/other"}, {"q/reviewer", "q/other"}}
	targets := []string{"q/c", "q/d", "q/reviewer", "q/other", "q", "q/*", "q/c,q/d", "p/a", "r/x"}
	conns := map[string]*tconn{}
	seed := uint64(12)
	next := func(n int) int { // a fixed sequence, no clock: xorshift
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return int(seed % uint64(n))
	}
	for step := range 300 {
		switch op := next(10); {
		case op < 3:
			id := ids[next(len(ids))]
			if c := conns[id]; c != nil {
				c.close()
				delete(conns, id)
			} else {
				roles := roleSets[next(len(roleSets))]
				conns[id] = j.join(id, map[string]any{"roles": roles})
			}
		case op < 8:
			sendAll(t, a, "p/a", targets[next(len(targets))], 1, fmt.Sprintf("s%d", step))
		default:
			got := pendingOf(t, a, "p/a")
			for _, id := range ids {
				want := 0
				err := j.st.ScanDirected(0, func(d journal.DirectedChat) error {
					j.h.mu.Lock()
					defer j.h.mu.Unlock()
					if j.h.mb.CountsLocked(d.Target, d.Sender, id) {
						want++
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if n := pendingCount(t, got, id); n != want {
					t.Fatalf("step %d: mailbox_pending[%s] = %d, a full recount gives %d", step, id, n, want)
				}
			}
		}
	}
}
