package cluster

import "time"

// BreakMirror starts o's mirror and breaks the hub's watch of the fleet,
// which feeds it (mirror.go), until resume is called; the watch then
// resumes after the last event it delivered, and the mirror lists again
// if that revision was compacted.
func BreakMirror(o *Owners) (resume func()) {
	o.rec.mu.Lock()
	o.startMirrorLocked()
	o.rec.mu.Unlock()
	hold := make(chan struct{})
	o.rec.hold <- hold
	return func() { close(hold) }
}

// MirrorStats says how often o's mirror listed every record, and how many
// reads gave up waiting for it and range-read etcd.
func MirrorStats(o *Owners) (relists, direct int) {
	o.rec.mu.Lock()
	defer o.rec.mu.Unlock()
	return o.rec.relists, o.rec.direct
}

// MirrorRun says how often o's mirror stopped for want of a reader, and
// whether a run of it is watching now.
func MirrorRun(o *Owners) (stops int, watching bool) {
	o.rec.mu.Lock()
	defer o.rec.mu.Unlock()
	if o.rec.done != nil {
		select {
		case <-o.rec.done:
		default:
			watching = true
		}
	}
	return o.rec.stops, watching
}

// SetMirrorIdle sets how long a mirror watches with no reader, until the
// test ends.
func SetMirrorIdle(t interface{ Cleanup(func()) }, d time.Duration) {
	old := mirrorIdle
	mirrorIdle = d
	t.Cleanup(func() { mirrorIdle = old })
}

// RewarmFenced runs o's re-read of a namespace after an ambiguous write
// (rewarm) while its member is between a fence and its next
// registration: it holds no lease then.
func RewarmFenced(o *Owners, ns string) {
	o.m.mu.Lock()
	was := o.m.serving
	o.m.serving = false
	o.m.mu.Unlock()
	defer func() {
		o.m.mu.Lock()
		o.m.serving = was
		o.m.mu.Unlock()
	}()
	o.rewarm(ns)
}
