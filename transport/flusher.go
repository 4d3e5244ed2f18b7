package transport

import (
	"runtime"
	"sync"
)

// The flusher writes the frames queued for sockets no reader holds — a
// broadcast's, mostly — from one goroutine, each socket's with one write
// that never blocks (writeInlineLocked), instead of starting a writer
// goroutine per socket per broadcast. A grant broadcast to 200 sockets
// then costs one goroutine's wake-up and 200 non-blocking writes, not 200
// goroutines created, scheduled and ended: on two cores that scheduling
// was most of what 200 bound sockets cost the agents beside them
// (docs/benchmarks.md, "Hostile clients", the bound baseline). A socket
// the kernel does not take everything from, or a big batch, is handed to a
// writer goroutine of its own, as before, so one slow peer never holds the
// flusher up.
//
// Who owns what: a socket on the list has been made its own writer
// (Conn.writing) by whoever put it there; the flusher takes that role over
// and gives it up (or hands it to a writer goroutine) as Release does.
var flusher struct {
	mu      sync.Mutex
	dirty   []*Conn // sockets with frames to write, in the order queued
	running bool    // the flusher goroutine is on its way or draining
}

// flushLater puts c, whose writer the caller has become, on the flusher's
// list, and starts the flusher if it is not running.
func flushLater(c *Conn) {
	flusher.mu.Lock()
	flusher.dirty = append(flusher.dirty, c)
	start := !flusher.running
	flusher.running = true
	flusher.mu.Unlock()
	if start {
		go flushDirty()
	}
}

// flushDirty writes every socket on the list until it stays empty.
func flushDirty() {
	// As a writer goroutine did: let whoever started it, queueing frames
	// (a commit broadcasting to every socket), queue the rest first, so a
	// socket's write carries more of them. Only at the start: a flusher
	// kept busy by many sockets does not yield between passes, so a frame
	// for an agent waiting on its answer is not held behind every runnable
	// goroutine (under 200 flooding sockets a yield per pass doubled the
	// agents' claim p50).
	runtime.Gosched()
	var batch []*Conn
	for {
		flusher.mu.Lock()
		batch, flusher.dirty = flusher.dirty, batch[:0]
		if len(batch) == 0 {
			flusher.running = false
			flusher.mu.Unlock()
			return
		}
		flusher.mu.Unlock()
		for i, c := range batch {
			c.mu.Lock()
			c.writeInlineLocked(&stats.flushWrites)
			batch[i] = nil
		}
	}
}
