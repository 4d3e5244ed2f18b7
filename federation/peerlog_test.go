package federation

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// peerEvents returns the events of a peer log with seqs from..to.
func peerEvents(from, to int64) []Event {
	var out []Event
	for s := from; s <= to; s++ {
		out = append(out, ev(s, float64(1000+s), "ledger_progress", fmt.Sprintf(`{"task_id":"T","text":"note %d"}`, s)))
	}
	return out
}

// tampered returns e with other content under the same seq.
func tampered(e Event) Event {
	e.Payload = json.RawMessage(`{"task_id":"T","text":"rewritten"}`)
	return e
}

func seqs(events []Event) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.Seq
	}
	return out
}

func mustAccept(t *testing.T, l *PeerLog, events []Event) []Event {
	t.Helper()
	got, err := l.Accept(events)
	if err != nil {
		t.Fatalf("Accept(%v): %v", seqs(events), err)
	}
	return got
}

func wantCursor(t *testing.T, l *PeerLog, want int64) {
	t.Helper()
	if got := l.Cursor(); got != want {
		t.Fatalf("Cursor() = %d, want %d", got, want)
	}
}

func TestPeerLog_AcceptsContiguousBatches(t *testing.T) {
	l := NewPeerLog("east", 0, 0)
	if got := mustAccept(t, l, peerEvents(1, 3)); !slices.Equal(seqs(got), []int64{1, 2, 3}) {
		t.Fatalf("new events = %v", seqs(got))
	}
	mustAccept(t, l, peerEvents(4, 4))
	wantCursor(t, l, 4)
}

func TestPeerLog_ReturnsOnlyNewEventsOfAnOverlappingBatch(t *testing.T) {
	l := NewPeerLog("east", 0, 0)
	mustAccept(t, l, peerEvents(1, 3))
	got := mustAccept(t, l, peerEvents(2, 5))
	if !slices.Equal(seqs(got), []int64{4, 5}) {
		t.Fatalf("new events = %v, want [4 5]", seqs(got))
	}
	if got := mustAccept(t, l, peerEvents(1, 5)); len(got) != 0 {
		t.Fatalf("a fully known batch gave new events %v", seqs(got))
	}
	wantCursor(t, l, 5)
}

func TestPeerLog_EmptyBatchChangesNothing(t *testing.T) {
	l := NewPeerLog("east", 7, 0)
	if got := mustAccept(t, l, nil); len(got) != 0 {
		t.Fatalf("new events = %v", seqs(got))
	}
	wantCursor(t, l, 7)
}

func TestPeerLog_StartsFromTheGivenCursor(t *testing.T) {
	l := NewPeerLog("east", 10, 0)
	mustAccept(t, l, peerEvents(11, 12))
	wantCursor(t, l, 12)
	if NewPeerLog("east", -5, 0).Cursor() != 0 {
		t.Fatal("a negative cursor is not 0")
	}
}

func TestPeerLog_RefusesSequenceGaps(t *testing.T) {
	cases := map[string][]Event{
		"first new seq skips one": peerEvents(5, 6),
		"gap inside the batch":    append(peerEvents(4, 4), peerEvents(6, 6)...),
		"known then gap":          append(peerEvents(3, 3), peerEvents(5, 5)...),
		"old seq before cursor":   peerEvents(1, 4), // the log started at 3: 1 and 2 were never seen
	}
	for name, batch := range cases {
		t.Run(name, func(t *testing.T) {
			l := NewPeerLog("east", 2, 0)
			mustAccept(t, l, peerEvents(3, 3))
			_, err := l.Accept(batch)
			if !errors.Is(err, ErrSequenceGap) {
				t.Fatalf("err = %v, want ErrSequenceGap", err)
			}
			wantCursor(t, l, 3)
		})
	}
}

func TestPeerLog_DetectsEquivocationOnAKnownSeq(t *testing.T) {
	l := NewPeerLog("east", 0, 0)
	mustAccept(t, l, peerEvents(1, 3))
	batch := peerEvents(2, 4)
	batch[0] = tampered(batch[0])
	_, err := l.Accept(batch)
	var eq *EquivocationError
	if !errors.Is(err, ErrEquivocation) || !errors.As(err, &eq) {
		t.Fatalf("err = %v, want an *EquivocationError", err)
	}
	accepted, _ := Fingerprint("east", peerEvents(2, 2)[0])
	served, _ := Fingerprint("east", batch[0])
	if eq.Hub != "east" || eq.Seq != 2 || eq.Accepted != accepted || eq.Conflicting != served {
		t.Fatalf("evidence = %+v, want seq 2 with accepted %x and served %x", eq, accepted, served)
	}
	wantCursor(t, l, 3)
}

func TestPeerLog_DetectsEquivocationWithinOneBatch(t *testing.T) {
	l := NewPeerLog("east", 0, 0)
	batch := append(peerEvents(1, 2), tampered(peerEvents(1, 1)[0]))
	_, err := l.Accept(batch)
	var eq *EquivocationError
	if !errors.As(err, &eq) || eq.Seq != 1 {
		t.Fatalf("err = %v, want equivocation at seq 1", err)
	}
	wantCursor(t, l, 0)
}

func TestPeerLog_ReportsEquivocationBeforeOtherFaults(t *testing.T) {
	l := NewPeerLog("east", 0, 0)
	mustAccept(t, l, peerEvents(1, 3))
	// Out of order and gapped as well, but seq 2 carries other content.
	batch := []Event{peerEvents(9, 9)[0], tampered(peerEvents(2, 2)[0])}
	if _, err := l.Accept(batch); !errors.Is(err, ErrEquivocation) {
		t.Fatalf("err = %v, want ErrEquivocation", err)
	}
}

func TestPeerLog_RefusesOutOfOrderOrRepeatedSeqs(t *testing.T) {
	cases := map[string][]Event{
		"descending":         {peerEvents(2, 2)[0], peerEvents(1, 1)[0]},
		"repeated identical": {peerEvents(1, 1)[0], peerEvents(1, 1)[0]},
		"known after new":    {peerEvents(4, 4)[0], peerEvents(3, 3)[0]},
	}
	for name, batch := range cases {
		t.Run(name, func(t *testing.T) {
			l := NewPeerLog("east", 0, 0)
			mustAccept(t, l, peerEvents(1, 3))
			if _, err := l.Accept(batch); !errors.Is(err, ErrBadEvent) {
				t.Fatalf("err = %v, want ErrBadEvent", err)
			}
			wantCursor(t, l, 3)
		})
	}
}

func TestPeerLog_RefusesAnEventItCannotFingerprint(t *testing.T) {
	l := NewPeerLog("east", 0, 0)
	batch := append(peerEvents(1, 1), ev(2, 1, "claim", `{"task_id":`))
	if _, err := l.Accept(batch); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("err = %v, want ErrBadEvent", err)
	}
	wantCursor(t, l, 0)
}

func TestPeerLog_FailedBatchLeavesNoFingerprints(t *testing.T) {
	l := NewPeerLog("east", 0, 0)
	bad := append(peerEvents(1, 2), peerEvents(4, 4)...) // gap: nothing may stick
	if _, err := l.Accept(bad); !errors.Is(err, ErrSequenceGap) {
		t.Fatalf("err = %v, want ErrSequenceGap", err)
	}
	// Had seq 1 been remembered, other content for it would be equivocation.
	other := []Event{tampered(peerEvents(1, 1)[0])}
	if got := mustAccept(t, l, other); len(got) != 1 {
		t.Fatalf("new events = %v", seqs(got))
	}
	wantCursor(t, l, 1)
}

func TestPeerLog_WindowForgetsTheOldestFingerprints(t *testing.T) {
	l := NewPeerLog("east", 0, 3)
	mustAccept(t, l, peerEvents(1, 5))
	mustAccept(t, l, peerEvents(3, 5)) // the window: 3, 4, 5
	tamperedFour := []Event{peerEvents(3, 3)[0], tampered(peerEvents(4, 4)[0])}
	if _, err := l.Accept(tamperedFour); !errors.Is(err, ErrEquivocation) {
		t.Fatalf("err = %v, want ErrEquivocation inside the window", err)
	}
	if _, err := l.Accept(peerEvents(2, 5)); !errors.Is(err, ErrSequenceGap) {
		t.Fatalf("err = %v, want ErrSequenceGap for seq 2, forgotten", err)
	}
	wantCursor(t, l, 5)
}

func TestPeerLog_AcceptFromJumpsOverACompactedPrefix(t *testing.T) {
	l := NewPeerLog("east", 0, 0)
	mustAccept(t, l, peerEvents(1, 2))
	got, err := l.AcceptFrom(10, peerEvents(10, 11))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seqs(got), []int64{10, 11}) {
		t.Fatalf("new events = %v", seqs(got))
	}
	wantCursor(t, l, 11)
	// The jump forgot seqs 1 and 2: re-serving them cannot be verified.
	if _, err := l.Accept(peerEvents(2, 11)); !errors.Is(err, ErrSequenceGap) {
		t.Fatalf("err = %v, want ErrSequenceGap", err)
	}
}

func TestPeerLog_AcceptFromWithAnEmptyBatchStillJumps(t *testing.T) {
	l := NewPeerLog("east", 3, 0)
	if _, err := l.AcceptFrom(10, nil); err != nil {
		t.Fatal(err)
	}
	wantCursor(t, l, 9)
}

func TestPeerLog_AcceptFromRefusesABatchNotStartingAtStart(t *testing.T) {
	l := NewPeerLog("east", 0, 0)
	mustAccept(t, l, peerEvents(1, 2))
	if _, err := l.AcceptFrom(10, peerEvents(11, 12)); !errors.Is(err, ErrSequenceGap) {
		t.Fatalf("err = %v, want ErrSequenceGap", err)
	}
	wantCursor(t, l, 2) // no jump either
	// Seq 2 is still remembered: the failed jump forgot nothing.
	if _, err := l.Accept([]Event{tampered(peerEvents(2, 2)[0])}); !errors.Is(err, ErrEquivocation) {
		t.Fatalf("err = %v, want ErrEquivocation", err)
	}
}

func TestPeerLog_AcceptFromNotAheadIsAccept(t *testing.T) {
	l := NewPeerLog("east", 0, 0)
	mustAccept(t, l, peerEvents(1, 5))
	got, err := l.AcceptFrom(3, peerEvents(4, 6)) // the log begins at 3: nothing to skip
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seqs(got), []int64{6}) {
		t.Fatalf("new events = %v", seqs(got))
	}
	if _, err := l.AcceptFrom(3, []Event{tampered(peerEvents(5, 5)[0])}); !errors.Is(err, ErrEquivocation) {
		t.Fatalf("err = %v, want ErrEquivocation: no jump means fingerprints are kept", err)
	}
}

// An honest peer polled with any overlap inside the window is followed to
// the end, each event handed on exactly once; a rewritten event in any
// re-served part is caught and changes nothing.
func TestPeerLog_FollowsAnHonestPeerAndCatchesARewrite_Property(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		window := rapid.IntRange(1, 8).Draw(t, "window")
		n := rapid.Int64Range(0, 40).Draw(t, "n")
		log := peerEvents(1, n)
		l := NewPeerLog("east", 0, window)
		var handed []int64
		for l.Cursor() < n {
			overlap := rapid.Int64Range(0, min(int64(window), l.Cursor())).Draw(t, "overlap")
			from := l.Cursor() - overlap + 1
			to := min(n, l.Cursor()+rapid.Int64Range(1, 5).Draw(t, "more"))
			batch := slices.Clone(log[from-1 : to])
			before := l.Cursor()
			if overlap > 0 && rapid.Bool().Draw(t, "rewrite") {
				i := rapid.IntRange(0, int(overlap)-1).Draw(t, "which")
				batch[i] = tampered(batch[i])
				if _, err := l.Accept(batch); !errors.Is(err, ErrEquivocation) {
					t.Fatalf("rewrite of seq %d: err = %v", batch[i].Seq, err)
				}
				if l.Cursor() != before {
					t.Fatalf("cursor moved on a refused batch")
				}
				continue
			}
			got, err := l.Accept(batch)
			if err != nil {
				t.Fatalf("honest batch %v: %v", seqs(batch), err)
			}
			handed = append(handed, seqs(got)...)
		}
		if want := seqs(log); !slices.Equal(handed, want) {
			t.Fatalf("handed on %v, want %v", handed, want)
		}
	})
}
