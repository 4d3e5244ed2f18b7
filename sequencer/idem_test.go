package sequencer

import (
	"context"
	"errors"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// Each idempotency test runs with a journal and memory-only: the stored
// response lives in the operations table or in the bounded cache.
func forBothStores(t *testing.T, test func(t *testing.T, j Journal)) {
	t.Run("journal", func(t *testing.T) { test(t, newFakeJournal()) })
	t.Run("memory", func(t *testing.T) { test(t, nil) })
}

func TestIdem_DuplicateReplaysStoredResponse_INV_CR_1_INV_DG_2(t *testing.T) {
	forBothStores(t, func(t *testing.T, j Journal) {
		var published int
		s := start(t, coord.New(coord.Limits{}), j, Options{OnCommit: func(evs []coord.Event) { published += len(evs) }})
		key := idemKey("a", "claim", "k1")
		first := submit(t, s, keyed(claim("a", "T1"), key, "d1"))
		if first.Replayed || string(first.Response) != `"granted T1 to a"` {
			t.Fatalf("first: %+v", first)
		}
		epoch := claimOf(t, s, "T1").Epoch

		again := submit(t, s, keyed(claim("a", "T1"), key, "d1"))
		if !again.Replayed || string(again.Response) != string(first.Response) || len(again.Outcome.Events) != 0 {
			t.Fatalf("retry: %+v, want the first response replayed", again)
		}
		if c := claimOf(t, s, "T1"); c.Epoch != epoch {
			t.Fatalf("the retry applied again: epoch %d → %d", epoch, c.Epoch)
		}
		if published != 1 {
			t.Errorf("published %d events, want the first grant only (a replay is not re-broadcast)", published)
		}
	})
}

func TestIdem_SameKeyDifferentRequestConflicts_INV_CR_1(t *testing.T) {
	forBothStores(t, func(t *testing.T, j Journal) {
		s := start(t, coord.New(coord.Limits{}), j, Options{})
		key := idemKey("a", "claim", "k1")
		submit(t, s, keyed(claim("a", "T1"), key, "d1"))
		_, err := s.Submit(context.Background(), keyed(claim("a", "T2"), key, "d2"))
		if !errors.Is(err, ErrIdempotencyConflict) {
			t.Fatalf("err = %v, want ErrIdempotencyConflict", err)
		}
		if c := claimOf(t, s, "T2"); c != nil {
			t.Fatalf("the conflicting request was applied: %v", c)
		}
	})
}

func TestIdem_KeysAreNamespacedBySenderAndType_INV_CR_1(t *testing.T) {
	forBothStores(t, func(t *testing.T, j Journal) {
		s := start(t, coord.New(coord.Limits{}), j, Options{})
		submit(t, s, keyed(claim("a", "T1"), idemKey("a", "claim", "k"), "d-a"))
		// Another sender's identical idem_key is another key.
		r := submit(t, s, keyed(claim("b", "T2"), idemKey("b", "claim", "k"), "d-b"))
		if r.Replayed || r.Outcome.Refusal != nil {
			t.Fatalf("b's claim: %+v", r)
		}
		// So is the same sender's key on another verb.
		r = submit(t, s, keyed(coord.ReleaseRequest{Agent: "a", TaskID: "T1"}, idemKey("a", "release", "k"), "d-rel"))
		if r.Replayed || r.Outcome.Refusal != nil || string(r.Response) != `"release"` {
			t.Fatalf("a's release: %+v", r)
		}
		if claimOf(t, s, "T1") != nil || claimOf(t, s, "T2") == nil {
			t.Fatal("keys collided")
		}
	})
}

func TestIdem_RefusalIsNotCached_INV_CR_1(t *testing.T) {
	forBothStores(t, func(t *testing.T, j Journal) {
		s := start(t, coord.New(coord.Limits{}), j, Options{})
		submit(t, s, Request{Cmd: claim("b", "T1")})
		key := idemKey("a", "claim", "k1")
		r := submit(t, s, keyed(claim("a", "T1"), key, "d1"))
		if r.Outcome.Refusal == nil || r.Outcome.Refusal.Code != coord.CodeLeaseLive || r.Response != nil {
			t.Fatalf("first try: %+v, want LEASE_LIVE", r)
		}
		if fj, ok := j.(*fakeJournal); ok && len(fj.ops) != 0 {
			t.Fatalf("a refusal was stored: %v", fj.ops)
		}
		submit(t, s, Request{Cmd: coord.ReleaseRequest{Agent: "b", TaskID: "T1"}})
		r = submit(t, s, keyed(claim("a", "T1"), key, "d1"))
		if r.Replayed || r.Outcome.Refusal != nil {
			t.Fatalf("retry: %+v, want it decided afresh and granted", r)
		}
	})
}

func TestIdem_DuplicateInOneBatchAppliesOnce_INV_CR_1(t *testing.T) {
	j := newFakeJournal().holding()
	s := start(t, coord.New(coord.Limits{}), j, Options{})
	plug := plugged(t, s, j, claim("z", "T0"))
	key := idemKey("a", "claim", "k1")
	first := async(s, context.Background(), keyed(claim("a", "T1"), key, "d1"))
	waitQueued(t, s, 1)
	dup := async(s, context.Background(), keyed(claim("a", "T1"), key, "d1"))
	waitQueued(t, s, 2)
	conflict := async(s, context.Background(), keyed(claim("a", "T9"), key, "d9"))
	waitQueued(t, s, 3)
	j.release <- nil
	recv(t, plug)
	recv(t, j.entered)
	j.release <- nil

	r1, r2, r3 := recv(t, first), recv(t, dup), recv(t, conflict)
	if r1.err != nil || r1.reply.Replayed || r1.reply.Outcome.Refusal != nil {
		t.Fatalf("first: %+v", r1)
	}
	if r2.err != nil || !r2.reply.Replayed || string(r2.reply.Response) != string(r1.reply.Response) {
		t.Fatalf("duplicate in the same batch: %+v, want a replay of %q", r2, r1.reply.Response)
	}
	if !errors.Is(r3.err, ErrIdempotencyConflict) {
		t.Fatalf("conflict in the same batch: %v", r3.err)
	}
	b := j.batch(1)
	if len(b.Records) != 1 || len(b.Operations) != 1 {
		t.Fatalf("batch holds %v records and %d operations, want one of each", kinds(b), len(b.Operations))
	}
}

func TestIdem_SurvivesLosingTheCache_INV_CR_1(t *testing.T) {
	// A second sequencer over the same journal has an empty cache, as after
	// a restart: the key is found in the operations table.
	j := newFakeJournal()
	st := coord.New(coord.Limits{})
	s1 := start(t, st, j, Options{})
	key := idemKey("a", "claim", "k1")
	first := submit(t, s1, keyed(claim("a", "T1"), key, "d1"))
	s1.Close()

	s2 := start(t, st, j, Options{})
	r := submit(t, s2, keyed(claim("a", "T1"), key, "d1"))
	if !r.Replayed || string(r.Response) != string(first.Response) {
		t.Fatalf("after restart: %+v", r)
	}
	if _, err := s2.Submit(context.Background(), keyed(claim("a", "T1"), key, "other")); !errors.Is(err, ErrIdempotencyConflict) {
		t.Fatalf("conflict after restart: %v", err)
	}
}

func TestIdem_MemoryCacheIsBounded(t *testing.T) {
	s := start(t, coord.New(coord.Limits{}), nil, Options{IdemCacheSize: 2})
	for i := range 3 {
		submit(t, s, keyed(claim("a", taskName(i)), idemKey("a", "claim", itoa(i)), "d"))
	}
	// Key 0 was evicted: a memory-only hub forgets it (the reference's LRU).
	r := submit(t, s, keyed(claim("a", taskName(0)), idemKey("a", "claim", "0"), "d"))
	if r.Replayed {
		t.Fatalf("evicted key replayed: %+v", r)
	}
	if r = submit(t, s, keyed(claim("a", taskName(2)), idemKey("a", "claim", "2"), "d")); !r.Replayed {
		t.Fatalf("recent key not replayed: %+v", r)
	}
}

func TestIdem_DegradedRefusesReplaysToo(t *testing.T) {
	j := newFakeJournal()
	j.failNth = 2
	s := start(t, coord.New(coord.Limits{}), j, Options{})
	key := idemKey("a", "claim", "k1")
	submit(t, s, keyed(claim("a", "T1"), key, "d1"))
	if _, err := s.Submit(context.Background(), Request{Cmd: claim("b", "T2")}); !errors.Is(err, ErrJournal) {
		t.Fatal(err)
	}
	if _, err := s.Submit(context.Background(), keyed(claim("a", "T1"), key, "d1")); !errors.Is(err, ErrJournal) {
		t.Fatalf("replay in degraded mode: %v, want ErrJournal (fail closed)", err)
	}
}

func TestIdem_BadResponseFailsOnlyItsRequest(t *testing.T) {
	j := newFakeJournal()
	s := start(t, coord.New(coord.Limits{}), j, Options{})
	req := keyed(claim("a", "T1"), idemKey("a", "claim", "k1"), "d1")
	req.Render = func(coord.Outcome) []byte { return []byte("not json") }
	if _, err := s.Submit(context.Background(), req); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("err = %v, want ErrBadRequest", err)
	}
	if c := claimOf(t, s, "T1"); c != nil {
		t.Fatalf("the failed request's claim is held: %v", c)
	}
	if s.Err() != nil || j.appendCount() != 0 {
		t.Fatalf("a caller's bug reached the journal: err %v, %d appends", s.Err(), j.appendCount())
	}
	submit(t, s, keyed(claim("a", "T1"), idemKey("a", "claim", "k1"), "d1"))
	if _, err := s.Submit(context.Background(), keyed(claim("a", "T2"), "", "d")); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("empty key: %v, want ErrBadRequest", err)
	}
}
