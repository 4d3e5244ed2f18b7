package hub

// Reads that list every claim or board task (state on a fleet, /api/state,
// /api/board) keep each one's encoding by its pointer: the fleet view
// hands out the same immutable claims and tasks while their records are
// unchanged, and the sequencer's state its stored ones (never modified),
// so a read of 10,000 claims encodes only those that changed since the
// last read. A pointer held as a key cannot be freed and reused, so an
// entry never answers for another claim.

import (
	"sync"

	"github.com/synapse-hub/synapse/wire"
)

// encodings caches one encoding of items of type T. Its lock is taken
// alone, on the reader's goroutine.
type encodings[T any] struct {
	encode func(b []byte, v *T) []byte // appends v's encoding; the same for the same v

	mu  sync.Mutex
	enc map[*T][]byte
}

func newEncodings[T any](encode func(b []byte, v *T) []byte) *encodings[T] {
	return &encodings[T]{encode: encode}
}

// list encodes items as a JSON array, in their order, from the cache
// where it can; the entries of items no longer listed are dropped once
// they outnumber the listed ones.
func (e *encodings[T]) list(items []*T) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.enc == nil || len(e.enc) > 2*len(items)+1024 {
		old := e.enc
		e.enc = make(map[*T][]byte, len(items))
		for _, v := range items {
			if b, ok := old[v]; ok {
				e.enc[v] = b
			}
		}
	}
	size := 2 + len(items)
	for _, v := range items {
		b, ok := e.enc[v]
		if !ok {
			b = e.encode(nil, v)
			e.enc[v] = b
		}
		size += len(b)
	}
	return wire.List(make([]byte, 0, size), items, func(b []byte, v *T) []byte { return append(b, e.enc[v]...) })
}
