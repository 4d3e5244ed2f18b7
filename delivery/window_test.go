package delivery

import (
	"testing"

	"github.com/synapse-hub/synapse/journal"
)

// The pending window's bound holds under every interleaving of reserve,
// add, abort and take (members plus reservations never exceed the limit;
// an eviction takes the oldest member).
func TestPendingWindow_BoundAndOldestFirst(t *testing.T) {
	w := NewWindow(3)
	row := func(seq int64) journal.ReceiptRow { return journal.ReceiptRow{MessageSeq: seq, MessageID: seq} }
	for seq := int64(1); seq <= 3; seq++ {
		if _, ev := w.Reserve(); ev {
			t.Fatalf("evicted with room left (seq %d)", seq)
		}
		w.Add(row(seq))
	}
	if _, ok := w.Take(2); !ok {
		t.Fatal("take 2")
	}
	if _, ev := w.Reserve(); ev { // 2 members + 1 reserved: room
		t.Fatal("evicted with room left")
	}
	ev, ok := w.Reserve() // full: the oldest (1) goes
	if !ok || ev.MessageSeq != 1 {
		t.Fatalf("evicted %v %v, want 1", ev, ok)
	}
	w.Abort(false, journal.ReceiptRow{}, ev, true) // its append failed: 1 is back
	w.Add(row(4))
	if ev, ok := w.Reserve(); !ok || ev.MessageSeq != 1 {
		t.Fatalf("evicted %v %v, want 1 again", ev, ok)
	}
	w.Add(row(5))
	if w.Len() != 3 {
		t.Fatalf("len %d", w.Len())
	}
	for _, seq := range []int64{3, 4, 5} {
		if _, ok := w.Take(seq); !ok {
			t.Fatalf("take %d", seq)
		}
	}
	if w.Len() != 0 || w.reserved != 0 {
		t.Fatalf("left %d members, %d reserved", w.Len(), w.reserved)
	}
}
