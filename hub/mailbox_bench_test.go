package hub

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMailboxReplayRate10k measures mailbox replay over a real socket: a
// recipient registers with mailbox:true since_seq:0 in front of a backlog
// of 10,000 directed chats and reads them all. It is a measurement, not a
// gate: run it with SYNAPSE_BENCH=1 (docs/journal.md has the figure).
func TestMailboxReplayRate10k(t *testing.T) {
	if os.Getenv("SYNAPSE_BENCH") == "" {
		t.Skip("set SYNAPSE_BENCH=1 to measure")
	}
	const n = 10000
	j := openJournalHub(t, filepath.Join(t.TempDir(), "j.db"))
	a := j.join("p/a")
	t0 := time.Now()
	sendAll(t, a, "p/a", "p/b", n, "m")
	send := time.Since(t0)
	t0 = time.Now()
	c := j.join("p/b", map[string]any{"mailbox": true, "since_seq": 0})
	for k := 0; k < n; k++ {
		if m := c.expect("chat"); m["replayed"] != true {
			t.Fatalf("frame %d not replayed: %v", k, m)
		}
	}
	replay := time.Since(t0)
	t.Logf("journalled %d directed chats in %v (%.0f chats/s, one sender, one at a time); replayed them in %v: %.0f msgs/s",
		n, send, n/send.Seconds(), replay, n/replay.Seconds())
}
