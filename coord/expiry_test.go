package coord

import "testing"

// Updates within a lease must not grow the lease heap: the journal helper
// found each task_update pushing a duplicate entry that compaction could not
// drop, turning every later update into a scan of the heap.
func TestLeaseHeap_UpdatesWithinALeaseAddNoEntries(t *testing.T) {
	s := New(Limits{})
	const t0 = 1_800_000_000.0
	if o := s.Step(ClaimRequest{Agent: "a", TaskID: "T", TTL: 3600, HasTTL: true}, t0); o.Refusal != nil {
		t.Fatal(o.Refusal)
	}
	for i := range 10_000 {
		cmd := Command(CheckpointRequest{Agent: "a", TaskID: "T", Checkpoint: "c"})
		if i%2 == 0 {
			cmd = UpdateRequest{Agent: "a", TaskID: "T", Status: "working"}
		}
		if o := s.Step(cmd, t0+float64(i)*1e-3); o.Refusal != nil {
			t.Fatal(o.Refusal)
		}
	}
	if n := s.leases.len(); n != 1 {
		t.Fatalf("lease heap holds %d entries for one lease after 10,000 updates", n)
	}
}

// Entries that stay valid (a lease restored by rollback can have two) must
// not make compaction run, and find nothing, on every push.
func TestLeaseHeap_CompactionFloorStopsRescans(t *testing.T) {
	var h deadlineHeap
	always := func(deadline) bool { return true }
	for i := range 100 {
		h.push(deadline{at: float64(i), key: "k", gen: int64(i)})
		h.compact(1, always)
	}
	if h.floor == 0 || h.len() != 100 {
		t.Fatalf("floor %d, len %d: compaction should have recorded its floor and kept every valid entry", h.floor, h.len())
	}
	floor := h.floor
	h.push(deadline{at: 1000, key: "k", gen: 1000})
	h.compact(1, always)
	if h.floor != floor {
		t.Fatalf("compaction ran again one push after the floor was set (floor %d → %d)", floor, h.floor)
	}
}
