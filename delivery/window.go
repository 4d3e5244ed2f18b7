package delivery

import (
	"slices"
	"sync"

	"github.com/synapse-hub/synapse/journal"
)

// Window is the bounded set of pending receipts: at most limit wait for
// an ack; the one that would exceed it evicts the oldest, which expires.
// Membership is the right to a transition: whoever takes a seq out (an ack
// settling it, a new pending receipt evicting it) commits its one
// transition, so a receipt is never both deferred and expired. A new
// pending receipt reserves its place before its append and enters in the
// append's Stamp (on the sequencer goroutine, before an ack could find its
// chat), so members plus reservations never exceed limit. Its own mutex,
// never held with Hub.mu; safe for concurrent use.
type Window struct {
	mu       sync.Mutex
	freed    sync.Cond // a reservation ended
	limit    int
	rows     map[int64]journal.ReceiptRow // by message seq
	order    []int64                      // the seqs ascending; taken ones are skipped lazily
	reserved int
}

// NewWindow holds at most limit pending receipts (at least 1).
func NewWindow(limit int) *Window {
	w := &Window{limit: max(limit, 1), rows: make(map[int64]journal.ReceiptRow)}
	w.freed.L = &w.mu
	return w
}

// Load fills the window with the newest pending receipts of rows (in seq
// order) and returns the older ones, which no longer fit (INV-RR-2: the
// cap is re-applied on replay, PROTOCOL.md §4.5 step 6).
func (w *Window) Load(rows []journal.ReceiptRow) (overflow []journal.ReceiptRow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(rows) - w.limit; n > 0 {
		overflow, rows = rows[:n], rows[n:]
	}
	for _, r := range rows {
		w.insertLocked(r)
	}
	return overflow
}

// Reserve makes room for one new pending receipt, evicting the oldest
// member when the window is full; it waits only while every place is
// reserved by appends in flight.
func (w *Window) Reserve() (evicted journal.ReceiptRow, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.rows) == 0 && w.reserved >= w.limit {
		w.freed.Wait()
	}
	if len(w.rows)+w.reserved >= w.limit {
		evicted, ok = w.popOldestLocked()
	}
	w.reserved++
	return evicted, ok
}

// Add turns a reservation into a member (the receipt's append Stamp).
func (w *Window) Add(r journal.ReceiptRow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reserved--
	w.insertLocked(r)
	w.freed.Broadcast()
}

// Abort undoes a reservation whose append failed: the member it became is
// dropped (unless a later append reused its seq), and the receipt it
// evicted, which did not expire, is put back.
func (w *Window) Abort(added bool, r journal.ReceiptRow, evicted journal.ReceiptRow, didEvict bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !added {
		w.reserved--
	} else if cur, ok := w.rows[r.MessageSeq]; ok && cur.MessageID == r.MessageID {
		delete(w.rows, r.MessageSeq)
	}
	if didEvict {
		w.insertLocked(evicted)
	}
	w.freed.Broadcast()
}

// Take removes seq to settle it; false when it is not pending.
func (w *Window) Take(seq int64) (journal.ReceiptRow, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.rows[seq]
	if ok {
		delete(w.rows, seq)
		w.compactLocked()
	}
	return r, ok
}

// Restore puts back a receipt whose settlement failed to commit.
func (w *Window) Restore(r journal.ReceiptRow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.insertLocked(r)
}

// Len is the number of pending receipts.
func (w *Window) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.rows)
}

func (w *Window) insertLocked(r journal.ReceiptRow) {
	seq := r.MessageSeq
	if _, dup := w.rows[seq]; !dup {
		// Appends enter in seq order, so this is an append but for a
		// receipt put back.
		i, _ := slices.BinarySearch(w.order, seq)
		if i == len(w.order) || w.order[i] != seq {
			w.order = slices.Insert(w.order, i, seq)
		}
	}
	w.rows[seq] = r
}

func (w *Window) popOldestLocked() (journal.ReceiptRow, bool) {
	for len(w.order) > 0 {
		seq := w.order[0]
		w.order = w.order[1:]
		if r, ok := w.rows[seq]; ok {
			delete(w.rows, seq)
			return r, true
		}
	}
	return journal.ReceiptRow{}, false
}

// compactLocked drops the taken seqs from order once they outnumber the
// members, so order stays within a constant factor of the window.
func (w *Window) compactLocked() {
	if len(w.order) <= 2*len(w.rows)+64 {
		return
	}
	live := make([]int64, 0, 2*len(w.rows)+1)
	for _, seq := range w.order {
		if _, ok := w.rows[seq]; ok {
			live = append(live, seq)
		}
	}
	w.order = live
}
