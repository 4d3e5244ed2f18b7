package sequencer

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// Inside the journal's idempotency window a retry is answered with the
// stored response, from the cache or the journal, and applies nothing;
// past it (once the journal expired the record) the retry is refused with
// ErrIdempotencyExpired and still applies nothing; even the cache, which
// still holds the record, does not answer past the window (INV-CR-1,
// INV-DG-2).
func TestIdem_WindowStoredInsideExpiredOutside_INV_CR_1_INV_DG_2(t *testing.T) {
	const at, window = 4_000_000_000.0, 100.0 // far past the wall clock, which the journal's own expiry reads
	path := filepath.Join(t.TempDir(), "journal.db")
	st := openJournal(t, path, journal.Options{IdempotencyWindow: window * time.Second})
	t.Cleanup(func() { st.Close() })
	clock := &fixedClock{t: at}
	s := start(t, coord.New(coord.Limits{}), st, Options{Clock: clock.now})
	key := idemKey("a", "claim", "k1")
	first := submit(t, s, keyed(claim("a", "T1"), key, "d1"))
	epoch := claimOf(t, s, "T1").Epoch

	clock.set(at + window/2)
	again := submit(t, s, keyed(claim("a", "T1"), key, "d1"))
	if !again.Replayed || string(again.Response) != string(first.Response) {
		t.Fatalf("retry inside the window: %+v; want the stored response", again)
	}

	clock.set(at + window + 1)
	if n, err := st.ExpireOperations(context.Background(), at+window+1, 100); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	_, err := s.Submit(context.Background(), keyed(claim("a", "T1"), key, "d1"))
	var exp *journal.ExpiredError
	if !errors.Is(err, ErrIdempotencyExpired) || !errors.As(err, &exp) || exp.CommittedAt != at {
		t.Fatalf("retry past the window: %v; want ErrIdempotencyExpired saying it committed at %v", err, at)
	}
	if c := claimOf(t, s, "T1"); c == nil || c.Epoch != epoch {
		t.Fatalf("the late retry changed the claim: %+v; want epoch %d untouched", c, epoch)
	}
	if s.Err() != nil {
		t.Fatalf("an expired key degraded the sequencer: %v", s.Err())
	}

	// After a restart the journal alone answers the same.
	s.Close()
	st.Close()
	st2 := openJournal(t, path, journal.Options{IdempotencyWindow: window * time.Second})
	t.Cleanup(func() { st2.Close() })
	rec, err := journal.Replay(st2, coord.Limits{}, at+window+1, journal.ReplayOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s2 := start(t, rec.State, st2, Options{Clock: clock.now})
	if _, err := s2.Submit(context.Background(), keyed(claim("a", "T1"), key, "d1")); !errors.Is(err, ErrIdempotencyExpired) {
		t.Fatalf("retry past the window after a restart: %v; want ErrIdempotencyExpired", err)
	}
}

// The cache forgets a record past the window even before the journal's
// expiry ran: the journal's answer (here still the stored response) wins.
func TestIdem_CacheAnswersNoLongerThanTheWindow_INV_CR_1(t *testing.T) {
	c := newIdemCache(4)
	c.window = 10
	c.put(journal.Operation{Key: "k", Response: []byte(`1`), CommittedAt: 100})
	if _, ok := c.get("k", 109.9); !ok {
		t.Fatal("a record inside its window missed")
	}
	if _, ok := c.get("k", 110); ok {
		t.Fatal("the cache answered at the end of the window")
	}
	if _, ok := c.get("k", 100); ok {
		t.Fatal("a record past its window stayed in the cache")
	}
}
