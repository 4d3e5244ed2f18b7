package cluster

import "testing"

// The reconcile queue holds a namespace once (rule 7: single-flight per
// namespace), and an event names it ahead of the relist's sweep of every
// namespace: a planned move's next step does not wait behind the reads of
// namespaces nothing happened to (rule 5's pause).
func TestKickQueue_OncePerNamespaceEventsAheadOfTheSweep_Rule7(t *testing.T) {
	var q kickQueue
	q.swept("a")
	q.swept("b")
	q.swept("a") // queued already
	if !q.mark("b", queuedKick) {
		t.Fatal("an event for a namespace waiting in the sweep must move it to the kicks")
	}
	if q.mark("b", queuedKick) {
		t.Fatal("a namespace queued as a kick was queued again")
	}
	q.swept("b") // in the kicks: the sweep leaves it
	if ns, ok := q.nextSwept(); !ok || ns != "a" {
		t.Fatalf("sweep gave %q %v; want a", ns, ok)
	}
	if ns, ok := q.nextSwept(); ok {
		t.Fatalf("the sweep gave %q, which an event had moved to the kicks", ns)
	}
	q.unmark("b") // the kick was taken
	if !q.mark("b", queuedKick) {
		t.Fatal("a namespace reconciled could not be queued again")
	}
}
