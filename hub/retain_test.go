package hub

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/journal"
)

// Retention drops old chats but never directed mail that waits (INV-DG-3):
// on a hub keeping every chat for one second, a dead letter to an agent
// that is offline outlives the broadcasts sent beside it, a restart, and
// is replayed to the agent when it comes back; msg_id resumes past every
// chat ever sent (the newest chat rows are always kept).
func TestRetain_DeadLetterOutlivesItsWindowAndARestart_INV_DG_3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	opts := journal.Options{Retain: journal.Retain{Chat: time.Second, Receipts: time.Second, Audit: time.Second}, KeepChatRows: 1}
	j := openJournalHubOpts(t, path, opts, Config{})
	a := j.join("p/a")
	for _, text := range []string{"b1", "b2", "b3"} {
		a.send(chatTo("p/a", "all", text))
		a.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == text })
	}
	a.send(chatTo("p/a", "p/b", "for b while away"))
	letter := a.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "for b while away" })
	a.send(chatTo("p/a", "all", "newest"))
	newest := a.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "newest" })

	// The store's goroutine looks every quarter window: wait (no timed
	// assertion) until the three old broadcasts are gone.
	deadline := time.Now().Add(60 * time.Second)
	for j.st.RetainedRows() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("retention dropped %d rows in 60 s, want the 3 old broadcasts", j.st.RetainedRows())
		}
		time.Sleep(50 * time.Millisecond)
	}
	j.close()

	ro, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var chats []int64
	ro.Scan(0, func(seq int64, _ float64, kind string, _ []byte) error {
		if kind == journal.KindChat {
			chats = append(chats, seq)
		}
		return nil
	})
	ro.Close()
	if want := []int64{seqOf(t, letter), seqOf(t, newest)}; !slices.Equal(chats, want) {
		t.Fatalf("chat rows kept %v, want the dead letter and the newest %v", chats, want)
	}

	j2 := openJournalHubOpts(t, path, opts, Config{})
	b := j2.join("p/b", map[string]any{"mailbox": true, "since_seq": 0})
	r := b.expect("chat")
	if r["replayed"] != true || r["payload"] != "for b while away" || seqOf(t, r) != seqOf(t, letter) {
		t.Fatalf("replayed %v, want the dead letter at seq %d", r, seqOf(t, letter))
	}
	a2 := j2.join("p/a")
	a2.send(chatTo("p/a", "all", "after restart"))
	m := a2.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "after restart" })
	if num(t, m["msg_id"]) <= num(t, newest["msg_id"]) {
		t.Fatalf("msg_id %v after restart, want past %v", m["msg_id"], newest["msg_id"])
	}
}
