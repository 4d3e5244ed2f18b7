package hub

import (
	"container/heap"
	"sync"
	"time"
)

// heavyLane is where the frames of sockets that send ahead of their
// answers are handled (session.chargeFrame, enterLane): one at a time, so
// however many sockets flood, one of them at a time contends with the
// agents for the registry lock and the processors (docs/benchmarks.md,
// "Hostile clients": 200 flooders once convoyed on that lock).
//
// The sockets waiting for the lane are served in start-time fair order:
// each frame is tagged with a virtual start time, the socket's previous
// frame's finish (its tag + 1), but no earlier than laneCredit frames
// before the frame in the lane now, and the smallest tag goes next (ties
// first come, first served). Sockets that keep the lane busy are served in
// turn, one frame each, so 200 flooders share it equally; a socket that
// comes to it rarely (an agent whose heartbeat happened to arrive with a
// call) is tagged before all of them and goes next instead of waiting a
// round of theirs. laneCredit bounds that head start: a socket cannot save
// up priority by staying away.
//
// One mutex guards everything here; a frame takes it twice (enter, leave),
// for a few comparisons, and allocates nothing once its socket has waited
// once (the socket's wake-up channel is made then).
type heavyLane struct {
	mu      sync.Mutex
	busy    bool      // a frame holds the lane
	now     int64     // the virtual start time of the frame holding it
	seq     uint64    // arrival order, for ties
	waiting laneQueue // sockets waiting, by tag
}

// laneCredit is how many frames before the lane's virtual time a socket
// that comes back to it may be tagged.
const laneCredit = 1

// laneTurn is a socket's place in the heavy lane: guarded by heavyLane.mu.
type laneTurn struct {
	finish int64         // the virtual finish time of its latest frame
	start  int64         // the tag of the frame it waits with
	seq    uint64        // when it began to wait
	wake   chan struct{} // its turn has come; made the first time it waits
}

// enter returns once s holds the lane.
func (l *heavyLane) enter(s *session) {
	t := &s.lane
	l.mu.Lock()
	tag := max(l.now-laneCredit, t.finish)
	t.finish = tag + 1
	if !l.busy {
		l.busy, l.now = true, tag
		l.mu.Unlock()
		return
	}
	if t.wake == nil {
		t.wake = make(chan struct{}, 1)
	}
	l.seq++
	t.start, t.seq = tag, l.seq
	heap.Push(&l.waiting, s)
	l.mu.Unlock()
	<-t.wake
}

// leave gives the lane to the socket with the smallest tag, if any waits.
func (l *heavyLane) leave() {
	l.mu.Lock()
	if len(l.waiting) == 0 {
		l.busy = false
		l.mu.Unlock()
		return
	}
	next := heap.Pop(&l.waiting).(*session)
	l.now = next.lane.start
	l.mu.Unlock()
	next.lane.wake <- struct{}{}
}

// queued is how many sockets wait for the lane (tests).
func (l *heavyLane) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiting)
}

// laneQueue is a min-heap of waiting sockets by (tag, arrival).
type laneQueue []*session

func (q laneQueue) Len() int { return len(q) }
func (q laneQueue) Less(i, j int) bool {
	a, b := &q[i].lane, &q[j].lane
	return a.start < b.start || (a.start == b.start && a.seq < b.seq)
}
func (q laneQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *laneQueue) Push(x any)   { *q = append(*q, x.(*session)) }
func (q *laneQueue) Pop() any {
	old := *q
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return s
}

// enterLane waits for the hub's heavy lane (chargeFrame): the frames of
// sockets that send ahead of their answers are handled one at a time, the
// sockets waiting for it served in start-time fair order (lane.go).
//
// While the lane protects someone (Hub.protecting: another socket, which
// waits for its answers, was served within protectFor), it is paced
// hub-wide past its burst (Config.HeavyLanePerSecond): its holder waits
// out its frame's share of a second before handling it, so all floods
// together take at most that many frames a second beside a working agent.
// Otherwise it is not paced and spends nothing: a script pipelining alone
// runs at the hub's speed, and the burst is whole when an agent comes.
func (s *session) enterLane() {
	h := s.h
	h.lane.enter(s)
	s.inLane = true
	h.m.heavyLane.Inc()
	if p := &h.heavyPace; p.Rate() > 0 {
		if now := h.now(); h.protecting(s, now) {
			if d := p.Reserve(now); d > 0 {
				h.m.heavyLanePaced.Inc()
				s.wait(time.Duration(d * float64(time.Second)))
			}
		}
	}
}

// leaveLane gives the heavy lane back, if this frame took it; before a
// network wait too (releaseBeforeWait), so one slow forward does not stall the lane.
func (s *session) leaveLane() {
	if s.inLane {
		s.inLane = false
		s.h.lane.leave()
	}
}
