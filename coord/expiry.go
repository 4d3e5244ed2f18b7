package coord

// deadline is one entry of a deadline heap: key is due at `at`. gen is a
// staleness guard — the entry counts only while the keyed item still has the
// same generation (a claim's epoch, an offer's time); superseded items leave
// stale entries behind that are skipped, as etcd's lessor does.
type deadline struct {
	at  float64
	key string
	gen int64
}

func (a deadline) before(b deadline) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.gen != b.gen {
		return a.gen < b.gen
	}
	return a.key < b.key
}

// deadlineHeap is a min-heap ordered by (at, gen, key), so equal
// deadlines pop in a deterministic order. Leases carry their epoch as gen,
// which is unique, so ties (a fleet granted at once) rarely compare strings.
type deadlineHeap struct {
	items []deadline
	// floor is the heap's size after its last compaction: entries that
	// stay valid (a lease restored by a rollback may have two) can never
	// make compaction run on every push.
	floor int
}

func (h *deadlineHeap) push(d deadline) {
	h.items = append(h.items, d)
	h.up(len(h.items) - 1)
}

func (h *deadlineHeap) peek() (deadline, bool) {
	if len(h.items) == 0 {
		return deadline{}, false
	}
	return h.items[0], true
}

func (h *deadlineHeap) pop() deadline {
	old := h.items
	top := old[0]
	last := len(old) - 1
	old[0] = old[last]
	old[last] = deadline{}
	h.items = old[:last]
	h.down(0)
	return top
}

// The heap is 4-ary: half the depth of a binary heap, and a node's children
// share cache lines, which is what a mass expiry of 100k leases pays for.
const heapArity = 4

func (h *deadlineHeap) up(i int) {
	items := h.items
	for i > 0 {
		p := (i - 1) / heapArity
		if !items[i].before(items[p]) {
			return
		}
		items[i], items[p] = items[p], items[i]
		i = p
	}
}

func (h *deadlineHeap) down(i int) {
	items := h.items
	n := len(items)
	for {
		first := heapArity*i + 1
		if first >= n {
			return
		}
		m := first
		for c := first + 1; c < first+heapArity && c < n; c++ {
			if items[c].before(items[m]) {
				m = c
			}
		}
		if !items[m].before(items[i]) {
			return
		}
		items[i], items[m] = items[m], items[i]
		i = m
	}
}

// compact drops stale entries once they outnumber the live ones, so a heap
// of often-renewed leases stays proportional to the live set.
func (h *deadlineHeap) compact(live int, valid func(deadline) bool) {
	if len(h.items) <= 2*max(live, h.floor)+16 {
		return
	}
	kept := h.items[:0]
	for _, d := range h.items {
		if valid(d) {
			kept = append(kept, d)
		}
	}
	clear(h.items[len(kept):])
	h.items = kept
	h.floor = len(kept)
	for i := (len(kept) - 2) / heapArity; i >= 0; i-- {
		h.down(i)
	}
}

// len returns how many entries, stale ones included, the heap holds.
func (h *deadlineHeap) len() int { return len(h.items) }
