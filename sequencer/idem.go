package sequencer

import (
	"container/list"

	"github.com/synapse-hub/synapse/journal"
)

// idemCache is a bounded LRU of committed idempotency records, by key. It
// holds only successful responses (refusals are never cached). Owned by the
// leader (sequencer.go).
type idemCache struct {
	max    int
	window float64    // seconds a record answers after it committed; 0: forever
	order  *list.List // of journal.Operation, most recent first
	byKey  map[string]*list.Element
}

func newIdemCache(max int) *idemCache {
	return &idemCache{max: max, order: list.New(), byKey: make(map[string]*list.Element)}
}

// get returns the record of key unless it is older than the window at now
// (then it is dropped: the journal says whether it expired).
func (c *idemCache) get(key string, now float64) (journal.Operation, bool) {
	e, ok := c.byKey[key]
	if !ok {
		return journal.Operation{}, false
	}
	if op := e.Value.(journal.Operation); c.window > 0 && now-op.CommittedAt >= c.window {
		c.order.Remove(e)
		delete(c.byKey, key)
		return journal.Operation{}, false
	}
	c.order.MoveToFront(e)
	return e.Value.(journal.Operation), true
}

func (c *idemCache) put(op journal.Operation) {
	if e, ok := c.byKey[op.Key]; ok {
		e.Value = op
		c.order.MoveToFront(e)
		return
	}
	c.byKey[op.Key] = c.order.PushFront(op)
	for c.order.Len() > c.max {
		old := c.order.Remove(c.order.Back()).(journal.Operation)
		delete(c.byKey, old.Key)
	}
}
