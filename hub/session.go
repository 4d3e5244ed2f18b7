package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/wire"
)

// writeTimeout bounds one frame write: a peer that accepts nothing for this
// long is dropped even if its queue never fills.
var writeTimeout = 30 * time.Second

// session is one socket. Fields under "registry" are guarded by Hub.mu; the
// rest are set at creation or owned as noted.
type session struct {
	h    *Hub
	id   int64
	conn *websocket.Conn
	host string
	out  chan []byte // bounded; never closed (senders may race with the end)

	closeOnce   sync.Once
	closing     chan struct{} // closed when a close was asked for
	closeCode   websocket.StatusCode
	closeReason string
	writerDone  chan struct{}
	rate        bucket // per-socket frame limiter (ratelimit.go); read goroutine only

	// registry (Hub.mu)
	name         string // bound name, "" until the first frame binds it
	authed       bool   // passed the token gate (always true on an open hub)
	superseded   bool   // lost its name to a takeover: its end is silent
	scoped       bool   // asked for scoped fan-out
	roles        []string
	wake         string
	lastReaction float64

	receiptsFlushed bool // read goroutine only: the outbox was flushed on bind

	// A socket a peer hub opened speaks the hub-to-hub protocol through
	// peer (federation.go) and never binds a name. Set under Hub.mu.
	peer *federation.PeerConn

	// A proxy session runs a verb a peer forwarded (fedHost.ServeForward):
	// relay collects its private replies instead of a socket, its quota
	// principal is the peer's, and recipient says a handoff's recipient is
	// an agent of that peer. Set at creation.
	relay     func([]byte)
	viaPeer   string
	recipient bool
}

func (h *Hub) serveSocket(w http.ResponseWriter, r *http.Request) {
	if h.closing.Load() {
		http.Error(w, "hub shutting down", http.StatusServiceUnavailable)
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return // Accept wrote the HTTP error
	}
	c.SetReadLimit(int64(h.cfg.MaxFrameBytes))
	s := &session{
		h:          h,
		id:         h.nextID.Add(1),
		conn:       c,
		host:       remoteHost(r),
		out:        make(chan []byte, h.cfg.SendQueue),
		closing:    make(chan struct{}),
		writerDone: make(chan struct{}),
		authed:     h.cfg.Token == "",
		rate:       newBucket(h.cfg.RateLimits.AgentPerSecond, h.cfg.RateLimits.AgentBurst, h.now()),
	}
	h.conns.Add(1)
	defer h.conns.Done()
	go s.writeLoop()

	if code, reason, ok := h.admit(s); !ok {
		h.m.rejected.WithLabelValues(strconv.Itoa(int(code))).Inc()
		s.closeWith(code, reason)
		s.drainReads()
		<-s.writerDone
		return
	}
	h.m.connections.Inc()
	go s.keepalive()
	s.readLoop()
	if s.peer != nil {
		s.peer.Close()
	}
	h.leave(s)
	s.closeWith(websocket.StatusNormalClosure, "")
	<-s.writerDone
}

// readLoop reads frames until the socket ends. After a close was asked for
// it keeps reading (so the close handshake completes) but handles nothing.
func (s *session) readLoop() {
	ctx := context.Background()
	authTimer := time.AfterFunc(s.h.cfg.AuthTimeout, func() {
		s.h.mu.Lock()
		bound := s.name != "" || s.peer != nil
		s.h.mu.Unlock()
		if !bound {
			reason := "registration timeout"
			if s.h.cfg.Token != "" {
				reason = "auth timeout"
			}
			s.closeWith(4012, reason)
		}
	})
	defer authTimer.Stop()
	for {
		_, data, err := s.conn.Read(ctx)
		if err != nil {
			return
		}
		if s.isClosing() || s.h.closing.Load() {
			continue
		}
		s.h.m.bytesIn.Add(float64(len(data)))
		s.handle(data)
	}
}

// drainReads lets a close handshake complete on a socket refused at
// admission.
func (s *session) drainReads() {
	for {
		if _, _, err := s.conn.Read(context.Background()); err != nil {
			return
		}
	}
}

// writeLoop owns the connection's writes: queued frames in order, then the
// close frame once one was asked for.
func (s *session) writeLoop() {
	defer close(s.writerDone)
	for {
		select {
		case b := <-s.out:
			if !s.write(b) {
				return
			}
		case <-s.closing:
		drain:
			for {
				select {
				case b := <-s.out:
					if !s.write(b) {
						return
					}
				default:
					break drain
				}
			}
			_ = s.conn.Close(s.closeCode, s.closeReason)
			return
		}
	}
}

func (s *session) write(b []byte) bool {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	err := s.conn.Write(ctx, websocket.MessageText, b)
	cancel()
	if err != nil {
		s.kill()
		return false
	}
	return true
}

// keepalive pings the peer; a peer that misses a pong is dropped, and its
// read loop ends, which frees its name (PROTOCOL.md §1.1).
func (s *session) keepalive() {
	t := time.NewTicker(s.h.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-s.writerDone:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.h.cfg.PongTimeout)
			err := s.conn.Ping(ctx)
			cancel()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					s.h.m.reaped.Inc()
					s.h.log.Info("hub: dead socket reaped", "session", s.id, "err", err)
				}
				s.kill()
				return
			}
		}
	}
}

// send queues a frame without ever blocking. A full queue means the peer
// reads slower than the hub writes: it is disconnected (slow consumer).
func (s *session) send(b []byte) bool {
	if s.relay != nil {
		s.relay(b)
		return true
	}
	select {
	case <-s.closing:
		return false
	default:
	}
	select {
	case s.out <- b:
		return true
	default:
		s.h.m.slowConsumers.Inc()
		s.h.log.Warn("hub: slow consumer disconnected", "session", s.id, "queue", cap(s.out))
		s.kill()
		return false
	}
}

// closeWith asks the writer to send what is queued, then close the socket
// with code and reason. Only the first call counts.
func (s *session) closeWith(code websocket.StatusCode, reason string) {
	s.closeOnce.Do(func() {
		s.closeCode, s.closeReason = code, reason
		close(s.closing)
	})
}

// kill drops the connection at once, without a close handshake.
func (s *session) kill() {
	s.closeOnce.Do(func() {
		s.closeCode, s.closeReason = websocket.StatusPolicyViolation, "slow consumer"
		close(s.closing)
	})
	go s.conn.CloseNow()
}

func (s *session) isClosing() bool {
	select {
	case <-s.closing:
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

func wsCode(code int) websocket.StatusCode { return websocket.StatusCode(code) }

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func headerHasToken(values []string, token string) bool {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
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
	if s.viaPeer != "" {
		return "federation-peer:" + s.viaPeer // INV-ME-5: the forwarding hub's budget
	}
	if tok := s.h.cfg.Token; tok != "" {
		sum := sha256.Sum256([]byte(principalDomain + tok))
		return "auth-token:" + hex.EncodeToString(sum[:])
	}
	return "open-host:" + s.host
}
