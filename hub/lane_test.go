package hub

import (
	"context"
	"testing"
	"time"
)

// The heavy lane serves the sockets that keep it busy in turn, one frame
// each, and a socket that comes to it rarely (here G, arriving for the
// first time while H and A wait for their second frames) next, before
// them: start-time fair order (lane.go), not first come, first served
// (which would serve G last). Each socket's frame is a goroutine that
// enters, says so, and leaves when told.
func TestHeavyLane_ServesBusySocketsInTurnAndARareOneNext(t *testing.T) {
	var l heavyLane
	served := make(chan string, 16)
	arrive := func(name string, s *session) chan struct{} {
		done := make(chan struct{})
		go func() {
			l.enter(s)
			served <- name
			<-done
			l.leave()
		}()
		return done
	}
	next := func(want string) {
		t.Helper()
		select {
		case got := <-served:
			if got != want {
				t.Fatalf("the lane went to %s, want %s", got, want)
			}
		case <-time.After(testDeadline):
			t.Fatalf("the lane never went to %s", want)
		}
	}
	waiting := func(n int) {
		t.Helper()
		eventually(t, "sockets waiting for the lane", func() bool { return l.queued() == n })
	}
	h, a, b, g := &session{id: 1}, &session{id: 2}, &session{id: 3}, &session{id: 4}

	hDone := arrive("H", h)
	next("H")
	aDone := arrive("A", a)
	waiting(1)
	bDone := arrive("B", b)
	waiting(2)
	close(hDone)
	next("A")
	hDone = arrive("H", h) // H's second frame: after B's first
	waiting(2)
	close(aDone)
	next("B")
	aDone = arrive("A", a)
	waiting(2)
	gDone := arrive("G", g) // a rare socket: tagged before H's and A's second frames
	waiting(3)
	close(bDone)
	next("G")
	close(gDone)
	next("H")
	close(hDone)
	next("A")
	close(aDone)
	if l.queued() != 0 {
		t.Fatalf("%d still waiting", l.queued())
	}
}

// A planned move drains its own namespace only (Hub.DrainNamespace): a
// mutation in flight in another namespace does not hold it, one in its
// namespace does until answered (rule 5's freeze, then the handoff).
func TestNamespaceDrain_WaitsForItsOwnNamespaceOnly_Rule5(t *testing.T) {
	var c nsInflight
	c.enter("busy")
	c.enter("moving")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() { c.wait(ctx, "moving"); close(done) }()
	select {
	case <-done:
		t.Fatal("the drain returned with the namespace's mutation in flight")
	case <-time.After(50 * time.Millisecond):
	}
	c.leave("moving")
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the drain did not return once the namespace's mutation was answered, with another namespace busy")
	}
	c.wait(ctx, "idle") // nothing in flight there: at once
	if ctx.Err() != nil {
		t.Fatal("the drain of an idle namespace waited")
	}
	c.enter("moving")
	c.leave("moving")
	c.wait(ctx, "moving") // entered and left again: idle
	c.leave("busy")
}
