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
	if a.key != b.key {
		return a.key < b.key
	}
	return a.gen < b.gen
}

// deadlineHeap is a binary min-heap ordered by (at, key, gen), so equal
// deadlines pop in a deterministic order.
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

func (h deadlineHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
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
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r].before(h[l]) {
			m = r
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
	for i := len(kept)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}
