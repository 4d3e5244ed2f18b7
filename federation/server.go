package federation

import (
	"crypto/subtle"
	"encoding/json"
	"strconv"
	"strings"
	"sync"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/wire"
)

// PeerConn is the serving side of one socket a peer hub opened: the owner
// end of a Link, or a reference hub's one-shot forward or pull. The hub's
// session hands it every frame of that socket; it never binds an agent
// name (PROTOCOL.md §6.2).
type PeerConn struct {
	f       *Federation
	peer    string // authenticated hub id; "" until Accept admits it
	send    func([]byte) bool
	closeFn func(code int, reason string)
	slots   chan struct{} // bounds forwards running at once
	wg      sync.WaitGroup
}

// Accept serves the first frame of a socket that speaks the hub-to-hub
// protocol and authenticates its sender against --peer-token
// (deny-by-default, constant-time). It returns the PeerConn that serves
// the socket's later frames, or nil when the peer was refused (the socket
// is then being closed, or was answered as the reference answers an
// unauthorised peer). send must not block; closeFn closes the socket.
func (f *Federation) Accept(data []byte, send func([]byte) bool, closeFn func(code int, reason string)) *PeerConn {
	var id struct {
		Sender string `json:"sender"`
		Token  string `json:"token"`
	}
	typ := frameType(data)
	_ = json.Unmarshal(data, &id)
	pc := &PeerConn{f: f, send: send, closeFn: closeFn, slots: make(chan struct{}, f.cfg.MaxInflightPerPeer)}
	authorised := f.authorised(id.Sender, id.Token)
	if typ == TypeHello && f.cfg.ReferenceOnly {
		pc.unknown(id.Sender, typ)
		return nil
	}
	if !authorised {
		f.Stats.PeerRefused.Add(1)
		f.log.Warn("federation: peer refused (no --peer-token for it, or a wrong token)", "peer", id.Sender, "type", typ)
		switch typ {
		case TypeClaimRequest:
			var req claimRequestFrame
			_ = decodeFrame(data, &req)
			pc.claimResult(id.Sender, req.TaskID, req.Namespace, false, "Peer hub '"+id.Sender+"' is not authorised to forward claims here.", nil, "PEER_NOT_AUTHORISED")
		case TypeLogRequest:
			var req logRequestFrame
			_ = decodeFrame(data, &req)
			after, _ := strconv.ParseInt(string(req.AfterSeq), 10, 64)
			pc.emptySnapshot(id.Sender, max(after, 0), req.ReqID)
		default:
			pc.send(hubFrame("auth_denied", id.Sender, "Peer hub '"+id.Sender+"' is not authorised here: give it --peer-token "+id.Sender+"=TOKEN on this hub and the same token as --claim-peer-token on it.", f.host.Now(), f.cfg.HubID).Bytes())
			pc.closeFn(4010, "peer auth denied")
		}
		return nil
	}
	pc.peer = id.Sender
	if typ == TypeHello {
		var h helloFrame
		if err := decodeFrame(data, &h); err != nil {
			pc.fail(err.Error())
			return nil
		}
		f.peerDeclared(pc.peer, h.Owners)
		go f.reassess()
		pc.send(hubFrame(TypeWelcome, pc.peer, "Peer link up", f.host.Now(), f.cfg.HubID).
			Str("hub_id", f.cfg.HubID).Strs("features", []string{FeatureForward}).
			Append("owners", func(b []byte) []byte { return appendOwners(b, f.declaredOwners()) }).Bytes())
		f.log.Info("federation: peer link accepted", "peer", pc.peer)
		return pc
	}
	pc.Handle(data)
	return pc
}

func (f *Federation) authorised(peer, token string) bool {
	if s := f.cfg.SharedPeerToken; s != "" && peer != "" && token != "" && peer != f.cfg.HubID &&
		subtle.ConstantTimeCompare([]byte(token), []byte(s)) == 1 {
		return true
	}
	want, ok := f.cfg.PeerTokens[peer]
	if !ok || want == "" || token == "" || peer == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
}

// Handle serves one later frame of the peer's socket.
func (pc *PeerConn) Handle(data []byte) {
	f := pc.f
	switch typ := frameType(data); typ {
	case TypeForward:
		if f.cfg.ReferenceOnly {
			pc.unknown(pc.peer, typ)
			return
		}
		var fw forwardFrame
		if err := decodeFrame(data, &fw); err != nil || fw.Agent == "" || len(fw.Frame) == 0 || fw.Frame[0] != '{' {
			pc.fail("multihub_forward needs fwd_id, agent and frame (an object)")
			return
		}
		restore := f.bind(fw.Agent, pc)
		_ = restore // the agent stays reachable through this link until it leaves
		if fw.RecipientHere {
			var h struct {
				To string `json:"to_agent"`
			}
			if json.Unmarshal(fw.Frame, &h) == nil && strings.TrimSpace(h.To) != "" {
				f.bind(strings.TrimSpace(h.To), pc)
			}
		}
		pc.slots <- struct{}{} // backpressure: a peer with too many in flight waits here
		pc.wg.Add(1)
		go func() {
			defer pc.wg.Done()
			defer func() { <-pc.slots }()
			f.Stats.Served.Add(1)
			frames := f.host.ServeForward(pc.peer, fw.Agent, Principal{Credential: fw.CredentialID, Name: fw.CredentialName}, fw.Frame, fw.RecipientHere)
			if len(frames) > MaxResultFrames {
				frames = frames[:MaxResultFrames]
			}
			pc.send(hubFrame(TypeForwardResult, pc.peer, "", f.host.Now(), f.cfg.HubID).Int("fwd_id", fw.FwdID).
				Append("frames", func(b []byte) []byte {
					return wire.List(b, frames, func(b []byte, fr []byte) []byte { return append(b, fr...) })
				}).Bytes())
		}()
	case TypeAgentLeft:
		var al agentLeftFrame
		if decodeFrame(data, &al) == nil && al.Agent != "" && f.unbind(al.Agent, pc) {
			f.host.AgentGone(al.Agent)
		}
	case TypeClaimRequest:
		pc.slots <- struct{}{}
		pc.wg.Add(1)
		go func() {
			defer pc.wg.Done()
			defer func() { <-pc.slots }()
			pc.referenceClaim(data)
		}()
	case TypeLogRequest:
		pc.logPage(data)
	default:
		pc.unknown(pc.peer, typ)
	}
}

// Close ends the peer's socket: the agents it spoke for are gone (their
// waits end), as when an agent's own socket closes.
func (pc *PeerConn) Close() {
	pc.wg.Wait()
	for _, a := range pc.f.unbindAll(pc) {
		pc.f.host.AgentGone(a)
	}
}

func (pc *PeerConn) deliver(agent string, frame []byte) bool {
	return pc.send(hubFrame(TypeDeliver, pc.peer, "", pc.f.host.Now(), pc.f.cfg.HubID).Str("agent", agent).Raw("frame", frame).Bytes())
}

func (pc *PeerConn) peerID() string { return pc.peer }

func (pc *PeerConn) fail(msg string) {
	pc.send(hubFrame("error", pc.peer, "Malformed peer frame: "+msg, pc.f.host.Now(), pc.f.cfg.HubID).Str("error_code", "malformed_frame").Bytes())
}

func (pc *PeerConn) unknown(peer, typ string) {
	pc.send(hubFrame("error", peer, "Unknown message type '"+typ+"'.", pc.f.host.Now(), pc.f.cfg.HubID).Str("error_code", "unknown_type").Bytes())
}

// capture is a reference request's sink: it keeps what the owner addresses
// to the claimant while the request runs.
type capture struct {
	peer   string
	mu     sync.Mutex
	frames [][]byte
}

func (c *capture) deliver(_ string, frame []byte) bool {
	c.mu.Lock()
	c.frames = append(c.frames, frame)
	c.mu.Unlock()
	return true
}

func (c *capture) peerID() string { return c.peer }

// referenceClaim serves PROTOCOL.md §6.2's multihub_claim_request: the
// claim runs as the claimant's, charged to federation-peer:<peer>, and the
// answer is one multihub_claim_result.
func (pc *PeerConn) referenceClaim(data []byte) {
	f := pc.f
	var req claimRequestFrame
	if err := decodeFrame(data, &req); err != nil || strings.TrimSpace(req.Claimant) == "" {
		pc.claimResult(pc.peer, req.TaskID, req.Namespace, false, "Malformed multihub_claim_request: claimant required.", nil, "MALFORMED_FORWARD")
		return
	}
	claimant := strings.TrimSpace(req.Claimant)
	var claim map[string]any
	if len(req.Claim) > 0 && json.Unmarshal(req.Claim, &claim) != nil {
		claim = nil
	}
	if claim == nil {
		claim = map[string]any{}
	}
	claim["sender"], claim["type"] = claimant, "claim"
	if _, ok := claim["task_id"]; !ok && req.TaskID != "" {
		claim["task_id"] = req.TaskID
	}
	delete(claim, "token")
	frame, _ := json.Marshal(claim)
	c := &capture{peer: pc.peer}
	restore := f.bind(claimant, c)
	replies := f.host.ServeForward(pc.peer, claimant, Principal{}, frame, false)
	restore()
	c.mu.Lock()
	got := c.frames
	c.mu.Unlock()
	for _, fr := range append(got, replies...) {
		var g struct {
			Type, Owner, Payload, ReasonCode string
		}
		_ = json.Unmarshal(fr, &g)
		if g.Type == "claim_granted" && g.Owner == claimant {
			f.Stats.Served.Add(1)
			pc.claimResult(pc.peer, req.TaskID, coord.NamespaceOf(claimant), true, "granted", fr, "")
			return
		}
	}
	detail, code := "Claim refused.", "CLAIM_DENIED"
	if len(replies) > 0 {
		var g struct {
			Payload    string `json:"payload"`
			ReasonCode string `json:"reason_code"`
			ErrorCode  string `json:"error_code"`
		}
		_ = json.Unmarshal(replies[0], &g)
		detail, code = g.Payload, g.ReasonCode
		if code == "" {
			code = g.ErrorCode
		}
	}
	pc.claimResult(pc.peer, req.TaskID, coord.NamespaceOf(claimant), false, detail, nil, code)
}

// claimResult answers a reference forward (PROTOCOL.md §6.2 item 3), with
// our additive reason_code.
func (pc *PeerConn) claimResult(peer, task, ns string, granted bool, detail string, grant []byte, code string) {
	f := pc.f
	fr := hubFrame(TypeClaimResult, peer, detail, f.host.Now(), f.cfg.HubID).
		Bool("granted", granted).Str("task_id", task).Str("namespace", ns).
		Str("owner_hub_id", f.cfg.HubID).Str("detail", detail)
	if grant != nil {
		fr.Raw("grant", grant)
	} else {
		fr.Null("grant")
	}
	if code != "" {
		fr.Str("reason_code", code)
	}
	pc.send(fr.Bytes())
}

// logPage serves multihub_log_request (PROTOCOL.md §6.3), at most
// MaxLogPage events a frame.
func (pc *PeerConn) logPage(data []byte) {
	f := pc.f
	var req logRequestFrame
	if err := decodeFrame(data, &req); err != nil {
		pc.fail(err.Error())
		return
	}
	after, err := strconv.ParseInt(string(req.AfterSeq), 10, 64)
	if req.AfterSeq == "" {
		after, err = 0, nil
	}
	if err != nil || after < 0 {
		pc.fail("'after_seq' must be an integer ≥ 0")
		return
	}
	limit := MaxLogPage
	if req.Limit != "" {
		if n, err := strconv.ParseInt(string(req.Limit), 10, 64); err == nil && n > 0 && n < MaxLogPage {
			limit = int(n)
		}
	}
	events, end, start, err := f.host.LogPage(after, limit)
	if err != nil {
		f.log.Warn("federation: log page", "err", err)
		pc.emptySnapshot(pc.peer, after, req.ReqID)
		return
	}
	next := after
	if n := len(events); n > 0 {
		next = events[n-1].Seq
	}
	fr := hubFrame(TypeLogSnapshot, pc.peer, "", f.host.Now(), f.cfg.HubID).
		Append("events", func(b []byte) []byte {
			return wire.List(b, events, func(b []byte, e Event) []byte {
				return append(b, wire.Object().Int("seq", e.Seq).Float("ts", e.TS).Str("kind", e.Kind).Raw("payload", e.Payload).Bytes()...)
			})
		}).Int("next_cursor", next).Int("log_end_seq", end).Int("log_start_seq", start)
	if req.ReqID != 0 {
		fr.Int("req_id", req.ReqID)
	}
	pc.send(fr.Bytes())
}

func (pc *PeerConn) emptySnapshot(peer string, cursor, reqID int64) {
	fr := hubFrame(TypeLogSnapshot, peer, "", pc.f.host.Now(), pc.f.cfg.HubID).
		Raw("events", []byte("[]")).Int("next_cursor", cursor)
	if reqID != 0 {
		fr.Int("req_id", reqID)
	}
	pc.send(fr.Bytes())
}
