package cluster

// BreakMirror breaks o's record watch (the mirror's, mirror.go) until
// resume is called; the mirror then watches again from the last event it
// applied, and lists again if that revision was compacted.
func BreakMirror(o *Owners) (resume func()) {
	o.startMirror()
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
