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
type deadlineHeap []deadline

func (h *deadlineHeap) push(d deadline) {
	*h = append(*h, d)
	h.up(len(*h) - 1)
}

func (h deadlineHeap) peek() (deadline, bool) {
	if len(h) == 0 {
		return deadline{}, false
	}
	return h[0], true
}

func (h *deadlineHeap) pop() deadline {
	old := *h
	top := old[0]
	last := len(old) - 1
	old[0] = old[last]
	old[last] = deadline{}
	*h = old[:last]
	h.down(0)
	return top
}

// The heap is 4-ary: half the depth of a binary heap, and a node's children
// share cache lines, which is what a mass expiry of 100k leases pays for.
const heapArity = 4

func (h deadlineHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / heapArity
		if !h[i].before(h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (h deadlineHeap) down(i int) {
	n := len(h)
	for {
		first := heapArity*i + 1
		if first >= n {
			return
		}
		m := first
		for c := first + 1; c < first+heapArity && c < n; c++ {
			if h[c].before(h[m]) {
				m = c
			}
		}
		if !h[m].before(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// compact drops stale entries once they outnumber the live ones, so a heap
// of often-renewed leases stays proportional to the live set.
func (h *deadlineHeap) compact(live int, valid func(deadline) bool) {
	if len(*h) <= 2*live+16 {
		return
	}
	kept := (*h)[:0]
	for _, d := range *h {
		if valid(d) {
			kept = append(kept, d)
		}
	}
	clear((*h)[len(kept):])
	*h = kept
	for i := (len(kept) - 2) / heapArity; i >= 0; i-- {
		h.down(i)
	}
}
