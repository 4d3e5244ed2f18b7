package hub

// msg_id order is delivery order: however many senders chat at once, every
// socket receives chats with strictly increasing msg_ids (and, journalled,
// strictly increasing seqs), with and without a journal.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/coder/websocket"
)

func TestChat_MsgIDsArriveInOrderBetweenConcurrentSenders(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		chatOrder(t, startHub(t, Config{}), false)
	})
	t.Run("journal", func(t *testing.T) {
		t.Parallel()
		chatOrder(t, openJournalHub(t, filepath.Join(t.TempDir(), "j.db")).testHub, true)
	})
}

func chatOrder(t *testing.T, th *testHub, journalled bool) {
	const senders, each = 8, 60
	rx := th.join("p/rx")
	conns := make([]*tconn, senders)
	for i := range conns {
		conns[i] = th.join(fmt.Sprintf("p/s%d", i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for i, c := range conns {
		wg.Add(1)
		go func() { // no t.Fatal off the test goroutine: errors come back
			defer wg.Done()
			for n := range each {
				b, _ := json.Marshal(chatTo(c.name, "all", fmt.Sprintf("s%d-%d", i, n)))
				ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
				err := c.c.Write(ctx, websocket.MessageText, b)
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("send: %v", err)
	}
	var lastID, lastSeq int64
	for got := 0; got < senders*each; got++ {
		m := rx.expect("chat")
		id := int64(num(t, m["msg_id"]))
		if id <= lastID {
			t.Fatalf("chat %d: msg_id %d after %d (%v)", got, id, lastID, m["payload"])
		}
		lastID = id
		if journalled {
			seq := seqOf(t, m)
			if seq <= lastSeq {
				t.Fatalf("chat %d: seq %d after %d", got, seq, lastSeq)
			}
			lastSeq = seq
		}
	}
}
