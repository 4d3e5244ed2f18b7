package hub

import (
	"math"
	"time"

	"github.com/synapse-hub/synapse/transport"
)

// Rate limits and pacing on a socket bound how fast one socket or one
// remote host can make the hub work (PROTOCOL.md §1.4 steps 2 and 12).
// They bound abuse; they authenticate nobody (docs/security.md). The
// buckets are package gate's; here the session charges them and acts on
// the answer (refuses, pauses its reads, sends it through the heavy lane).
//
// Who owns what: a session's own buckets (session.rate, malformed, pace,
// ahead) belong to its read goroutine and need no lock; the per-host
// tables (gate.HostBuckets) are shared and carry their own mutex. Time is
// the hub's clock, so tests can hold it still.

// Malformed frames are paced per socket by default, unlike the reference
// (which answers each one): a socket past DefaultMalformedBurst frames that
// fail to decode has its reader wait 1/DefaultMalformedPerSecond before
// each next read. Every frame is still answered, in order, and the socket
// stays open; the kernel's buffers, not the hub, hold what it sends
// meanwhile, and its writes block. A well-behaved client never gets here;
// a flood of garbage then costs the hub ten frames a second per socket
// instead of both cores (issue 12; docs/security.md).
const (
	DefaultMalformedPerSecond = 10
	DefaultMalformedBurst     = 20
)

// DefaultAuthFailuresPerMinute is how many failed first frames (missing
// or wrong token) one remote host may send per minute, as a burst, before
// its further attempts are refused unchecked (--auth-fail-limit).
const DefaultAuthFailuresPerMinute = 10

// Pacing valid frames only bites when it protects someone (issue 19;
// docs/security.md, "Frames per socket and the heavy lane").
//
// Every frame the hub reads from a bound socket takes the registry lock
// (its identity gates), so a few dozen sockets flooding valid frames, each
// read as fast as it writes, once queued every agent's claims behind them
// on that lock (docs/benchmarks.md, "Hostile clients"). A fixed rate per
// socket bounded each flooder but throttled everyone all the time: a lone
// script doing claim/release ran 50 cycles a second on an idle hub. The
// hub now tells the two apart by how they send, not by how fast:
//
//   - A socket that waits for each answer before its next request (an
//     agent, a script through the SDK) is never paced and never queued:
//     its frames are handled as soon as they are read.
//   - A socket that sends ahead of its answers (its next frames were read
//     in with the last: a flood, a pipelining import) is heavy for
//     heavyFor, and heavy frames are handled in one lane, one at a time,
//     in start-time fair order (lane.go): the sockets that keep it busy in
//     turn, one frame each, and one that comes to it rarely next. However
//     many sockets flood, one of them at a time contends with the agents
//     for the registry lock and the processors.
//   - The lane is paced hub-wide (DefaultHeavyLanePerSecond past
//     DefaultHeavyLaneBurst) only while it protects someone: while a frame
//     of another socket that waits for its answers was handled within the
//     last protectFor. A lone pipelining script, or several with nobody
//     beside them, run at the hub's speed; beside a working agent, all
//     floods together get that many frames a second.
//
// Why a rate while someone waits, not all the time the agents leave idle:
// the hub cannot see a waiting agent's frame until Go's netpoller hands it
// a goroutine, which happens when a processor is idle (or every 10 ms),
// and the agents share the machine's cores with the hub. A lane kept busy
// keeps a processor busy: on two cores, under 200 flooding sockets, a good
// agent's claim p50 was 4.4× quiet with the lane at 500 frames a second,
// 5.4× at 2,000, 10× at 8,000 and unpaced, against 3.7× for 200 bound
// sockets sending nothing (docs/benchmarks.md). Priority for the
// agents therefore needs the lane to leave the hub idle part of the time
// while they work; when nobody does, it need not.
//
// The hard cap per socket (Config.FramesPerSocket, off in the zero
// Config) remains for operators who want every socket bounded, whatever
// it sends: past a burst, each frame read costs the socket its share of a
// second. `synapse hub` turns it on (DefaultFramesPerSocket, burst
// DefaultFramesPerSocketBurst, which an agent driven by a model never
// reaches) when it listens off loopback or has a token, and leaves it off
// on a loopback hub without one, where every client is the user's own.
const (
	DefaultFramesPerSocket      = 100
	DefaultFramesPerSocketBurst = 200
	DefaultHeavyLanePerSecond   = 2000
	DefaultHeavyLaneBurst       = 500
)

// heavyFor is how long, in seconds, a socket that sent ahead of its
// answers stays in the heavy lane.
const heavyFor = 1.0

// heavyReceiveBuffer is the kernel receive buffer, in bytes, of a socket
// once it has been heavy: enough for a pipelining script's next frames.
const heavyReceiveBuffer = 256 << 10

// A socket may send ahead of its answers now and then without being heavy:
// DefaultAheadBurst frames read with more behind them (Config.AheadBurst,
// --ahead-burst), earned back at aheadPerSecond. Our SDK writes its
// registration and the ping that acks it at once, and a client may send a
// heartbeat with a call; without this allowance a connect storm of 10,000
// such agents went through the lane, paced, and took 8.6 s instead of
// 2.1 s. A flood or a pipelining import spends it within its first frames.
const (
	DefaultAheadBurst = 4
	aheadPerSecond    = 1
)

// protectFor is how long, in seconds, after a frame of a socket that waits
// for its answers the heavy lane is paced. An agent at work sends its next
// request within it (a release after its grant, the next claim); one that
// thinks longer meets, with its first request after that, a lane that
// paced nobody meanwhile, and the pace engages behind that request.
const protectFor = 1.0

// Sockets closed for cause are charged to their remote host: past a burst
// of DefaultClosesPerHostBurst, each costs it 1/DefaultClosesPerHostPerSecond
// s, and its next upgrade waits that out (at most the auth timeout) before
// the hub does any work for it. A client that reconnects as soon as it is
// closed (a token guesser, a takeover storm, a sender of oversized frames)
// then costs the hub ten handshakes a second instead of thousands. A
// well-behaved fleet is closed for cause rarely; a burst of 100 covers a
// fleet restarted while its old sockets still hold their names.
const (
	DefaultClosesPerHostPerSecond = 10
	DefaultClosesPerHostBurst     = 100
)

// allowFrame charges a frame to the per-host limiter (§1.4 step 2); a
// refused frame gets "Host rate limit exceeded.". It reports false when
// the frame must not be handled.
func (s *session) allowFrame() bool {
	h := s.h
	if h.hostRates.Allow(s.host, h.now()) {
		return true
	}
	h.m.rateLimited.WithLabelValues("host").Inc()
	s.fail(s.replyTarget(), "host_rate_limited", "Host rate limit exceeded.")
	s.owePause(h.hostRates.Debt(s.host, h.now()))
	return false
}

// allowAgentFrame charges a non-heartbeat frame to the socket's own
// limiter (§1.4 step 12); a refused frame gets "Rate limit exceeded.".
func (s *session) allowAgentFrame(sender, typ string) bool {
	if typ == "heartbeat" || s.rate.Allow(s.h.now()) {
		return true
	}
	s.h.m.rateLimited.WithLabelValues("agent").Inc()
	s.fail(sender, "rate_limited", "Rate limit exceeded.")
	s.owePause(s.rate.Wait(s.h.now()))
	return false
}

// replyTarget is whom a refusal sent before the frame is read goes to: the
// bound name, else "all" as the reference's decode errors do (§10).
func (s *session) replyTarget() string {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if s.name != "" {
		return s.name
	}
	return "all"
}

// malformedUnit is the size of frame one malformed token pays for: a
// malformed frame of n bytes costs 1 + n/malformedUnit tokens, so the
// pacing bounds the bytes a flood makes the hub read (reading is most of
// its cost), not only its frames.
const malformedUnit = 16 << 10

// chargeMalformed charges a frame of size bytes that failed to decode to
// the socket's malformed bucket; past the burst it sets the pause the
// reader owes before its next read (the frame itself is still answered).
func (s *session) chargeMalformed(size int) {
	d := s.malformed.ReserveN(s.h.now(), 1+size/malformedUnit)
	if d <= 0 {
		return
	}
	if !s.paced {
		s.paced = true
		s.h.log.Warn("hub: socket floods malformed frames; its reads are paced", "session", s.id, "remote", s.host, "per_second", s.malformed.Rate())
	}
	s.h.m.malformedPaced.Inc()
	s.pause = time.Duration(d * float64(time.Second))
}

// owePause makes the reader wait d seconds before its next read: a socket
// refused by a rate limit is not read again until its limit would admit a
// frame, so a flood past the limit costs the hub one refusal per token,
// not one per frame sent (its frames wait in the kernel's buffers).
func (s *session) owePause(d float64) {
	if d > 0 && !s.is(forwardedVerb) {
		s.pause = max(s.pause, time.Duration(d*float64(time.Second)))
	}
}

// chargeFrame charges a frame read to the socket's hard cap (Config.
// FramesPerSocket, when on); past the burst the reader owes its share of a
// second before the next read. A peer hub's socket is exempt from all of
// it.
//
// It reports whether the socket is heavy: it has sent frames ahead of the
// hub's answers (more were already read in with this one) within the last
// heavyFor. A heavy socket's frame is handled in the heavy lane
// (enterLane); any other frame is noted as one a socket waits for
// (noteWaiting), which the lane's pace protects.
func (s *session) chargeFrame() (heavy bool) {
	if s.is(peerSocket) {
		return false
	}
	now := s.h.now()
	if s.pace.Rate() > 0 {
		if d := s.pace.Reserve(now); d > 0 {
			s.h.m.framesPaced.Inc()
			s.owePause(d)
		}
	}
	if s.conn.Pending() && (s.ahead.Rate() <= 0 || !s.ahead.Allow(now)) {
		if !s.limited {
			// Sending ahead past its allowance: what it sends beyond
			// what the hub reads waits in its own host's buffers, not
			// in ours (200 flooders once queued 544 MiB here).
			s.limited = true
			s.conn.LimitReceiveBuffer(heavyReceiveBuffer)
		}
		s.heavyAt = now
	}
	if now-s.heavyAt < heavyFor {
		return true
	}
	s.noteWaiting(now)
	return false
}

// noteEvery is, in seconds, how often at most a socket's frames handled
// outside the lane are noted (noteWaiting): the grain of protectFor.
const noteEvery = 0.05

// noteWaiting records that a frame of this socket, which waits for its
// answers, is being handled now: the heavy lane is paced for protectFor
// after it (Hub.protecting). On the hot path of every such frame it costs
// a comparison; once per noteEvery, an atomic store to the socket's own
// field and an atomic load of the hub's (two stores more when another
// socket was the last).
func (s *session) noteWaiting(now float64) {
	if now-s.notedAt < noteEvery && now >= s.notedAt {
		return
	}
	s.notedAt = now
	s.waitingAt.Store(math.Float64bits(now))
	h := s.h
	if last := h.lastWaiting.Load(); last != s {
		h.prevWaiting.Store(last)
		h.lastWaiting.Store(s)
	}
}

// protecting reports whether the heavy lane protects someone from s now:
// one of the two sockets last served outside the lane is another, served
// within protectFor. Two are kept so that s's own earlier frames (a
// script's first request, sent alone) neither pace it nor hide the agent
// served before them.
func (h *Hub) protecting(s *session, now float64) bool {
	recent := func(w *session) bool {
		return w != nil && w != s && now-math.Float64frombits(w.waitingAt.Load()) < protectFor
	}
	return recent(h.lastWaiting.Load()) || recent(h.prevWaiting.Load())
}

// flooding reports whether the socket's malformed burst is spent now.
func (s *session) flooding() bool {
	return s.malformed.Rate() > 0 && s.malformed.Wait(s.h.now()) > 0
}

// closeCharged reports whether a socket closed with code was closed for
// its own conduct, so its host pays for it (Config.ClosesPerHostPerSecond):
// a policy violation (slow consumer, missed pong) or protocol error, an
// oversized frame, a refused name or token, a registration timeout, a
// refused takeover, too many sockets from its host, a refused identity
// (4013 with an identity reason: a pinned name without its key, a broken
// proof; also the pin store failing, which loops the same way). A
// superseded socket lost its name to someone else; a full hub (4013 "hub
// at capacity") or a shutdown is nobody's conduct.
func closeCharged(code int, reason string, superseded bool) bool {
	switch code {
	case transport.StatusPolicyViolation, transport.StatusProtocolError, transport.StatusMessageTooBig,
		4009, 4012, 4014, 4015, NameOwnedCloseCode:
		return true
	case 4010:
		return !superseded
	case IdentityPinClose:
		return reason == reasonPinMismatch || reason == reasonBindingFailed
	}
	return false
}

// paceUpgrade makes a new socket from a host that owes for its closed
// sockets wait until it has paid, at most AuthTimeout, before the hub
// upgrades it: the wait costs a parked goroutine, not a handshake. It
// reports false if the hub closed meanwhile.
func (h *Hub) paceUpgrade(host string) bool {
	d := h.closes.Debt(host, h.now())
	if d <= 0 {
		return true
	}
	h.m.upgradesPaced.Inc()
	t := time.NewTimer(min(time.Duration(d*float64(time.Second)), h.cfg.AuthTimeout))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-h.quit:
		return false
	}
}

// wait pauses the read goroutine for d, or until the socket closes.
func (s *session) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.conn.Closing():
	}
}
