package hub

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/dashboard"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/transport"
	"github.com/synapse-hub/synapse/wire"
)

// writeTimeout bounds one batch of writes: a peer that accepts nothing for
// this long is dropped even if its queue never fills.
var writeTimeout = 30 * time.Second

// socket is the byte layer under a session (package transport): one
// reader, one writer that owns every write, a bounded send queue.
type socket interface {
	// Read returns the next message, whole; after its first error it
	// returns errors for good. Only the session's read goroutine calls it.
	Read() ([]byte, error)
	// Send queues a frame without blocking; transport.ErrQueueFull means
	// the peer is not keeping up.
	Send(b []byte) error
	// Hold and Release bracket the handling of one inbound message on the
	// read goroutine: frames queued meanwhile are written by Release, on
	// that goroutine, with one write (no hand-off to a writer goroutine).
	Hold()
	Release()
	// Pending reports whether the peer's next frames were already read in
	// with the last message (it sent ahead of the hub's answers).
	Pending() bool
	// LimitReceiveBuffer caps the kernel's receive buffer of the socket.
	LimitReceiveBuffer(n int)
	// Queued and QueueLen report the send queue's length and capacity,
	// QueuedBytes the bytes of the frames in it.
	Queued() int
	QueuedBytes() int
	QueueLen() int
	// Close sends what is queued, then a close frame; the first Close or
	// Kill counts.
	Close(code int, reason string)
	// Kill drops the connection at once, without a close handshake.
	Kill()
	// Closing is closed once a close was asked for; Done once the
	// connection is closed.
	Closing() <-chan struct{}
	Done() <-chan struct{}
}

// sessionKind says what a session serves. Every session starts as the
// kind it is created with, except that an agentSocket whose first frame is
// a peer hub's hello becomes a peerSocket (acceptPeer, under Hub.mu).
type sessionKind uint8

const (
	// agentSocket is a socket an agent (or a script, or a browser)
	// opened: it binds a name with its first frame and runs the verbs.
	agentSocket sessionKind = iota
	// peerSocket is a socket a peer hub opened: it speaks the hub-to-hub
	// protocol through peer (federation.PeerConn) and never binds a name.
	peerSocket
	// forwardedVerb has no socket: it runs one verb a peer hub forwarded
	// for its agent (fedHost.ServeForward), its private replies collected
	// by relay, its quota principal the peer's.
	forwardedVerb
)

// is reports whether s is of kind k.
func (s *session) is(k sessionKind) bool { return sessionKind(s.kind.Load()) == k }

// session is one socket, or one forwarded verb. Fields under "registry"
// are guarded by Hub.mu; the rest are set at creation or owned as noted.
type session struct {
	h  *Hub
	id int64
	// kind is a sessionKind (is): set at creation, and once by the
	// session's own reader when a peer hub's hello makes it a peerSocket
	// (acceptPeer), while any goroutine may be sending to it.
	kind atomic.Uint32
	conn socket // nil for a forwardedVerb
	host string
	rate gate.Bucket // per-socket frame limiter (ratelimit.go); read goroutine only
	// Malformed-frame pacing (ratelimit.go), read goroutine only: the
	// bucket, the pause owed before the next read, and whether the
	// pacing was logged (once per socket).
	malformed gate.Bucket
	pace      gate.Bucket // every frame (Config.FramesPerSocket)
	heavyAt   float64     // when it last sent ahead of its answers past its allowance (chargeFrame); reader only
	ahead     gate.Bucket // its allowance of frames sent ahead of its answers (chargeFrame); reader only
	limited   bool        // its kernel receive buffer was capped, once heavy (chargeFrame); reader only
	inLane    bool        // the frame being handled holds the heavy lane; reader only
	lane      laneTurn    // its place in the heavy lane (lane.go; heavyLane.mu)
	// waitingAt is the hub clock (float64 bits) of its latest frame
	// handled outside the lane, noted at most every noteEvery (notedAt,
	// reader only): written by its reader, read by the heavy lane's holder
	// (noteWaiting, Hub.protecting).
	waitingAt atomic.Uint64
	notedAt   float64
	pause     time.Duration
	paced     bool
	counted   atomic.Bool // in Hub.liveSockets (registry.go uncount)
	// clientCert: its TLS client presented a certificate the listener
	// verified (Config.PeerClientCert; tls.go). Set at the upgrade.
	clientCert bool

	// registry (Hub.mu)
	name         string             // bound name, "" until the first frame binds it
	authed       bool               // passed the token gate (always true on an open hub)
	cred         *access.Credential // its credential (access.go); written by its reader on the first frame
	admin        bool               // may run the admin verbs (verbs_access.go); reader only
	keyProved    bool               // its name is pinned to the key its registration proved (identity.go); reader only
	ignoredRoles []string           // roles its last heartbeat asserted without a grant, not yet told (access.go)
	superseded   bool               // lost its name to a takeover: its end is silent
	scoped       bool               // asked for scoped fan-out ("scoped" or "own")
	ownOnly      bool               // asked for its own fan-out: not even its namespace's events
	roles        []string
	wake         string
	lastReaction float64
	shownAt      float64 // the last reaction the dashboard's streams were told of (activityStep)
	chatMark     uint64  // registry.chatMark when a chat last reached it: once per chat (recipients.go)

	// presence (Hub.mu; presence.go)
	presenceAsk   string // the upgrade's Synapse-Presence header, then the registration's presence field: "full", "compact", "none" or ""
	presenceSeq   uint64 // the compact batch's seq when this socket last knew the whole list
	broadcastMark uint64 // registry.broadcastMark when a scoped broadcast last reached it (registry.audienceLocked)
	presenceKnown uint64 // presenceChanges when it was told the whole list alone, on its join

	receiptsFlushed bool // read goroutine only: the outbox was flushed on bind
	// deadCleared is set (Hub.mu, by the read goroutine's register) to the
	// newest directed chat seq when the frame cleared the name's dead
	// letter; the same goroutine journals the clear (chat.go).
	deadCleared int64

	// peer is a peerSocket's end of the hub-to-hub protocol
	// (federation.go). Set under Hub.mu, with kind.
	peer *federation.PeerConn

	// A forwardedVerb session (fedHost.ServeForward): relay collects its
	// private replies instead of a socket, viaPeer is the forwarding hub
	// (its quota principal), and recipientViaPeer says a handoff's
	// recipient is an agent of that peer. Set at creation.
	relay            func([]byte)
	viaPeer          string
	recipientViaPeer bool
}

// send queues a frame without ever blocking. A full queue means the peer
// reads slower than the hub writes: it is disconnected (slow consumer).
func (s *session) send(b []byte) bool {
	if s.is(forwardedVerb) {
		s.relay(b)
		return true
	}
	switch err := s.conn.Send(b); {
	case err == nil:
		return true
	case errors.Is(err, transport.ErrQueueFull):
		s.h.m.slowConsumers.Inc()
		s.h.log.Warn("hub: slow consumer disconnected", "session", s.id, "queued_frames", s.conn.Queued(), "queued_bytes", s.queuedBytes())
		s.kill()
	}
	return false
}

// releaseBeforeWait ends the read goroutine's hold on the socket (and on
// the heavy lane) before it waits on something slow (another hub, etcd):
// frames for this socket must not wait for that.
func (s *session) releaseBeforeWait() {
	if !s.is(forwardedVerb) {
		s.conn.Release()
	}
	s.leaveLane()
}

// closeWith asks the writer to send what is queued, then close the socket
// with code and reason. Only the first call counts. A forwarded verb has
// no socket to close.
func (s *session) closeWith(code int, reason string) {
	s.uncount()
	if !s.is(forwardedVerb) {
		s.conn.Close(code, reason)
	}
}

// kill drops the connection at once, without a close handshake.
func (s *session) kill() {
	s.uncount()
	if !s.is(forwardedVerb) {
		s.conn.Kill()
	}
}

// queuedBytes is how many bytes wait in the send queue.
func (s *session) queuedBytes() int {
	if s.is(forwardedVerb) {
		return 0
	}
	return s.conn.QueuedBytes()
}

// queued is how many frames wait in the send queue.
func (s *session) queued() int {
	if s.is(forwardedVerb) {
		return 0
	}
	return s.conn.Queued()
}

func (s *session) isClosing() bool {
	if s.is(forwardedVerb) {
		return false
	}
	select {
	case <-s.conn.Closing():
		return true
	default:
		return false
	}
}

// reply sends a private frame.
func (s *session) reply(b []byte) {
	s.send(b)
}

// frame starts a private frame to this session's bound name.
func (s *session) frame(typ, target, payload string) *wire.Frame {
	return wire.NewFrame(typ, target, payload, s.h.now(), s.h.cfg.HubID)
}

// principalDomain prefixes the token in the quota principal's digest, as
// the reference does (PROTOCOL.md §5.1).
const principalDomain = "synapse-channel:claim-quota-principal:v1\x00"

// principal is the server-derived quota principal the claim cap is charged
// to (INV-ME-5): the connect token's digest on a secured hub, the remote
// host on an open one — never the asserted name, which a client could
// rotate to multiply its budget. A loopback fleet on an open hub therefore
// shares one budget (raise --max-claims-per-agent, or give agents tokens).
func (s *session) principal() string {
	if s.is(forwardedVerb) {
		return "federation-peer:" + s.viaPeer // INV-ME-5: the forwarding hub's budget
	}
	if s.cred != nil {
		return s.cred.Principal() // INV-ME-5: every name of one credential shares its budget
	}
	if tok := s.h.cfg.Token; tok != "" {
		sum := sha256.Sum256([]byte(principalDomain + tok))
		return "auth-token:" + hex.EncodeToString(sum[:])
	}
	return "open-host:" + s.host
}

// fail sends a private error frame with its machine code (additive).
func (s *session) fail(target, code, msg string) {
	s.h.m.framesOut.WithLabelValues("error").Inc()
	s.reply(s.frame("error", target, msg).Str("error_code", code).Bytes())
}

// refuseCode sends a verb's refusal with a code and extra fields, as the
// verb's denial frame (verb.denial; "" is a plain error).
func (s *session) refuseCode(sender, denial string, in *wire.Inbound, code, msg string, extra func(*wire.Frame)) {
	dt := denial
	if dt == "" {
		dt = "error"
	}
	f := s.frame(dt, sender, msg)
	if task := taskID(in); task != "" || dt != "error" {
		f.Str("task_id", task)
	}
	if dt == "claim_denied" {
		f.Str("reason_code", code)
	}
	if extra != nil {
		extra(f)
	}
	s.h.feed.Refusal(dashboard.APIRefusal{At: s.h.now(), Verb: dt, Code: code, Agent: sender, TaskID: taskID(in), Message: msg})
	s.h.m.framesOut.WithLabelValues(dt).Inc()
	if dt == "claim_denied" {
		s.h.m.claimsDenied.WithLabelValues(code).Inc()
	}
	s.reply(f.Str("error_code", code).Bytes())
}

// uncount takes s out of Hub.liveSockets once: when the hub closes or
// drops it, or when it leaves (a socket its peer closed).
func (s *session) uncount() {
	if s.counted.CompareAndSwap(true, false) {
		s.h.liveSockets.Add(-1)
	}
}

// taskID reads task_id, falling back to payload when it is empty (§9.5).
func taskID(in *wire.Inbound, keys ...string) string {
	for _, k := range append(keys, "task_id", "payload") {
		if t := strings.TrimSpace(in.Text(k)); t != "" {
			return t
		}
	}
	return ""
}
