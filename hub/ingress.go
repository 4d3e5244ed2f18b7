package hub

// The ingress pipeline (PROTOCOL.md §1.4): a socket's upgrade, its read
// loop, and each frame's way through the gates to its verb (handle), then
// the verb table (dispatch, verbs.go). federation.go and this file refer
// to each other on purpose: a verb a peer hub forwards is run here again,
// on its owner (fedHost.ServeForward calls dispatch), and a local frame
// of the claim family is routed to its owner first (routeClaimFamily).

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/transport"
	"github.com/synapse-hub/synapse/wire"
)

func (h *Hub) serveSocket(w http.ResponseWriter, r *http.Request) {
	if h.closing.Load() {
		http.Error(w, "hub shutting down", http.StatusServiceUnavailable)
		return
	}
	host := transport.RemoteHost(r)
	if !h.paceUpgrade(host) {
		http.Error(w, "hub shutting down", http.StatusServiceUnavailable)
		return
	}
	c, err := transport.Accept(w, r, transport.Options{
		MaxMessageBytes: h.cfg.MaxFrameBytes,
		QueueLen:        h.cfg.SendQueue,
		QueueBytes:      h.knobs.sendQueueBytes,
		WriteTimeout:    writeTimeout,
	})
	if err != nil {
		return // Accept wrote the HTTP error
	}
	s := &session{
		h:          h,
		id:         h.nextID.Add(1),
		conn:       c,
		host:       host,
		authed:     !h.secured(),
		rate:       gate.NewBucket(h.cfg.RateLimits.AgentPerSecond, h.cfg.RateLimits.AgentBurst, h.now()),
		clientCert: verifiedClient(r),
	}
	if p := r.Header.Get(wire.PresenceHeader); validPresence(p) {
		s.presenceAsk = p // before the welcome (presence.go)
	}
	if k := h.knobs; k.malformedPerSecond > 0 {
		s.malformed = gate.NewBucket(k.malformedPerSecond, h.cfg.MalformedBurst, h.now())
	}
	if h.cfg.FramesPerSocket > 0 {
		s.pace = gate.NewBucket(h.cfg.FramesPerSocket, h.cfg.FramesPerSocketBurst, h.now())
	}
	if k := h.knobs; k.aheadBurst > 0 {
		s.ahead = gate.NewBucket(aheadPerSecond, k.aheadBurst, h.now())
	}
	h.conns.Add(1)
	// The socket is served on a goroutine of its own and the HTTP handler
	// returns, so net/http's per-request state (the request, its headers,
	// the response and connection buffers) is freed instead of living as
	// long as the socket.
	go s.serve(c)
}

// serve runs an accepted socket to its end, and charges its host if it
// was closed for cause.
func (s *session) serve(c *transport.Conn) {
	h := s.h
	defer h.conns.Done()
	defer func() {
		h.mu.Lock()
		superseded := s.superseded
		h.mu.Unlock()
		if code, reason := c.CloseStatus(); closeCharged(code, reason, superseded) {
			h.closes.Owe(s.host, h.now())
		}
	}()
	if code, reason, ok := h.admit(s); !ok {
		h.m.rejected.WithLabelValues(strconv.Itoa(code)).Inc()
		s.closeWith(code, reason)
		s.drainReads()
		<-c.Done()
		return
	}
	h.m.connections.Inc()
	h.keeper.Add(c)
	s.readLoop()
	h.keeper.Remove(c)
	if s.is(peerSocket) {
		s.peer.Close()
	}
	h.leave(s)
	s.closeWith(transport.StatusNormalClosure, "")
	<-c.Done()
}

// readLoop reads frames until the socket ends. After a close was asked for
// it keeps reading (so the close handshake completes) but handles nothing.
func (s *session) readLoop() {
	authTimer := time.AfterFunc(s.h.cfg.AuthTimeout, func() {
		s.h.mu.Lock()
		bound := s.name != "" || s.is(peerSocket)
		s.h.mu.Unlock()
		if !bound {
			reason := "registration timeout"
			if s.h.secured() {
				reason = "auth timeout"
			}
			s.closeWith(4012, reason)
		}
	})
	defer authTimer.Stop()
	for {
		data, err := s.conn.Read()
		if err != nil {
			return
		}
		if s.isClosing() || s.h.closing.Load() {
			if s.flooding() {
				// A flooder's close handshake is not worth reading its
				// flood at full speed for: it is dropped (the close
				// frame may or may not have gone), so the next Read
				// fails and the socket ends now.
				s.kill()
			}
			continue
		}
		s.h.m.bytesIn.Add(float64(len(data)))
		if s.chargeFrame() {
			s.enterLane()
		}
		s.conn.Hold()
		s.handle(data)
		s.conn.Release()
		s.leaveLane()
		if s.pause > 0 {
			s.wait(s.pause)
			s.pause = 0
		}
	}
}

// drainReads lets a close handshake complete on a socket refused at
// admission.
func (s *session) drainReads() {
	for {
		if _, err := s.conn.Read(); err != nil {
			return
		}
	}
}

// reaped is the keeper's word that a socket missed its pong: it was
// killed, so its read loop ends, which frees its name (PROTOCOL.md §1.1).
func (h *Hub) reaped(c *transport.Conn) {
	h.m.reaped.Inc()
	h.log.Info("hub: dead socket reaped", "remote", c.RemoteAddr().String())
}

// handle runs one inbound frame through the ingress pipeline (PROTOCOL.md
// §1.4): the per-host rate limit (charged before decoding, so malformed
// floods are charged too), decode, the token and identity gates, the
// per-socket rate limit, per-message authentication, then the verb.
func (s *session) handle(data []byte) {
	h := s.h
	if !s.allowFrame() {
		return
	}
	in, err := wire.Decode(data, h.cfg.MaxFrameBytes, wire.DefaultMaxDepth)
	if err != nil {
		de := wire.ErrMalformedJSON
		errors.As(err, &de)
		h.m.framesIn.WithLabelValues("malformed").Inc()
		s.chargeMalformed(len(data))
		// The reference sends decode errors to the offending socket only,
		// but with target "all" (PROTOCOL.md §10).
		s.reply(s.frame("error", "all", de.Message).Str("error_code", de.Code).Bytes())
		return
	}
	typ := in.Type()
	if s.is(peerSocket) {
		s.peer.Handle(data)
		return
	}
	if federation.IsPeerType(typ) && s.unbound() {
		h.m.framesIn.WithLabelValues("multihub").Inc()
		s.acceptPeer(data)
		return
	}
	v, known := verbs[typ] // one lookup: the verb's row serves every gate below
	label := typ
	if !known {
		label = "other"
	}
	h.m.framesIn.WithLabelValues(label).Inc()
	sender := strings.TrimSpace(in.Str("sender"))
	if sender == "" {
		sender = "anon-" + itoa(s.id)
	}
	if !s.tokenGate(sender, in) || !s.identityGate(sender, in) || !s.register(sender, in, typ) {
		return
	}
	if s.deadCleared > 0 {
		s.journalDeadLetterClear(sender)
	}
	if !s.allowAgentFrame(sender, typ) || !s.verifyMessage(sender, v.signed, in) {
		return
	}
	if v.idempotent && h.cfg.Degraded != "" {
		s.fail(sender, "journal_recovery_required", "Mutation refused: durable journal recovery is required. Inspect the journal and run `synapse compact --drop-corrupt` ("+h.cfg.Degraded+").")
		return
	}
	if err := h.cfg.JournalFault; v.idempotent && err != nil {
		what := "The " + typ
		if task := in.Str("task_id"); task != "" {
			what += " of task '" + task + "'"
		}
		s.fail(sender, "journal_unavailable", journalRefusal(h.journalName(), what, err))
		return
	}
	if !s.aclGate(sender, typ, in) { // §1.4 step 15 (access.go)
		return
	}
	in.Set("sender", sender)
	in.Set("type", typ)
	if !s.receiptsFlushed { // first bind: undelivered receipts (PROTOCOL.md §1.4 step 11)
		s.receiptsFlushed = true
		s.h.receipts.Flush(sessionConn{s}, sender)
	}
	if s.routeClaimFamily(sender, typ, in) { // §1.4 step 16, for every claim-family verb
		return
	}
	s.run(v, known, sender, typ, in)
}

// dispatch runs one verb of a frame that passed every gate.
func (s *session) dispatch(sender, typ string, in *wire.Inbound) {
	v, known := verbs[typ]
	s.run(v, known, sender, typ, in)
}

// run runs verb row v of typ, or refuses a type the hub does not serve.
func (s *session) run(v verb, known bool, sender, typ string, in *wire.Inbound) {
	if !known {
		s.fail(sender, "unknown_type", "Unknown message type '"+typ+"'.")
		return
	}
	v.handle(s, sender, typ, in)
}
