package hub

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/sequencer"
	"github.com/synapse-hub/synapse/wire"
)

// This file is the hub's side of package federation: it routes each
// claim-family verb through the namespace's authority (INV-CR-4,
// INV-MH-1..3), runs verbs forwarded by peers as its own, and gives the
// federation the journal and the sockets it needs (fedHost). The
// hub-to-hub protocol itself lives in package federation.

// fedHost is the hub as federation.Host.
type fedHost struct{ h *Hub }

func (f fedHost) Now() float64 { return f.h.now() }

// Deliver sends a frame an owner addressed to one of our agents.
func (f fedHost) Deliver(agent string, frame []byte) bool {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.reg.byName[agent]
	if s == nil || !s.send(frame) {
		return false
	}
	h.m.framesOut.WithLabelValues("relayed").Inc()
	return true
}

// AgentGone ends the waits of a peer's agent, unless it is connected here.
func (f fedHost) AgentGone(agent string) {
	h := f.h
	h.mu.Lock()
	local := h.reg.byName[agent] != nil
	h.mu.Unlock()
	if !local {
		h.disconnect(agent)
	}
}

// Record journals an audit record through the group commit. A memory-only
// hub keeps none.
func (f fedHost) Record(kind string, payload []byte) {
	h := f.h
	if h.cfg.Journal == nil || !h.beginSubmit() {
		return
	}
	defer h.submits.Done()
	_, err := h.seq.Submit(context.Background(), sequencer.Request{Records: []journal.Record{{Kind: kind, Payload: payload, Durable: true}}})
	if err != nil {
		h.log.Warn("hub: federation record not journalled", "kind", kind, "err", err)
	}
}

// publicKinds are served to a peer pulling the log as they are; every
// other kind (chats, mailbox, receipts, idempotency responses) keeps its
// seq and kind but its payload is redacted: a peer learns that a directed
// message passed, never what it said (PROTOCOL.md §8.3 [obs]).
var publicKinds = map[string]bool{
	journal.KindClaim: true, journal.KindTaskUpdate: true, journal.KindCheckpoint: true,
	journal.KindHandoff: true, journal.KindRelease: true, journal.KindClaimExpired: true,
	journal.KindClaimDenial: true, journal.KindLedgerTask: true, journal.KindLedgerProgress: true,
	journal.KindResource: true, "multihub_partition": true, "multihub_heal": true,
	"multihub_equivocation": true, "multihub_equivocation_recovery": true,
}

var redacted = json.RawMessage(`{"redacted":true}`)

// LogPage reads the journal for a peer. A memory-only hub has no log.
func (f fedHost) LogPage(after int64, limit int) ([]federation.Event, int64, int64, error) {
	j := f.h.cfg.Journal
	if j == nil {
		return nil, 0, 1, nil
	}
	end, err := j.LastSeq()
	if err != nil {
		return nil, 0, 0, err
	}
	rows, start, err := j.Page(after, limit)
	if err != nil {
		return nil, 0, 0, err
	}
	events := make([]federation.Event, len(rows))
	for i, r := range rows {
		events[i] = federation.Event{Seq: r.Seq, TS: r.TS, Kind: r.Kind, Payload: r.Payload}
		if !publicKinds[r.Kind] {
			events[i].Payload = redacted
		}
	}
	return events, end, start, nil
}

// ServeForward runs a claim-family frame a peer forwarded for its agent,
// as the owner: the namespace must resolve local here (INV-MH-3), the
// forwarder's credential must check out here (forwardedPrincipal, which
// also says whose quota it is, INV-ME-5), and the verb runs through the same code
// and the same idempotency keys as a local socket's (INV-CR-1 across
// hubs). Private replies are collected; frames addressed to the agent go
// back over the link (federation.DeliverRemote).
func (f fedHost) ServeForward(peer, agent string, from federation.Principal, frame []byte, recipientHere bool) [][]byte {
	h := f.h
	var out [][]byte
	p := &session{
		h: h, id: h.nextID.Add(1), host: "federation-peer:" + peer,
		authed: true, name: agent, receiptsFlushed: true,
		relay:            func(b []byte) { out = append(out, b) },
		viaPeer:          peer,
		recipientViaPeer: recipientHere,
	}
	p.kind.Store(uint32(forwardedVerb))
	in, err := wire.Decode(frame, h.cfg.MaxFrameBytes, wire.DefaultMaxDepth)
	if err != nil {
		de := wire.ErrMalformedJSON
		errors.As(err, &de)
		p.fail(agent, de.Code, de.Message)
		return out
	}
	typ := in.Type()
	fleetMail := h.cfg.Mail != nil && (typ == "chat" || typ == "ack")
	if !federation.ClaimFamily[typ] && !(federation.BoardFamily[typ] && h.fed.RoutesBoard()) && !fleetMail {
		p.fail(agent, "not_forwardable", "Only claim-family verbs (and, on a fleet, board writes and directed mail) are forwarded between hubs; '"+typ+"' is not.")
		return out
	}
	in.Set("sender", agent)
	in.Set("type", typ)
	if mutation(typ) && h.cfg.Degraded != "" {
		p.fail(agent, "journal_recovery_required", "Mutation refused: the owning hub's journal needs recovery ("+h.cfg.Degraded+").")
		return out
	}
	if !p.forwardedPrincipal(agent, typ, in, from) {
		return out
	}
	if fleetMail { // the addressee's namespace is checked where the letter is posted
		p.dispatch(agent, typ, in)
		return out
	}
	if p.refuseByNamespace(agent, typ, in, true) || !p.aclGate(agent, typ, in) { // the owner's rules too (access.go)
		return out
	}
	h.m.fedServed.Inc()
	p.dispatch(agent, typ, in)
	return out
}

// routeClaimFamily routes a claim-family verb of a local agent on a
// governed hub: it returns false when the namespace is ours (decide it
// here), and otherwise answers the agent itself — with the owner's reply
// when the frame was forwarded, or with a refusal naming the namespace and
// owner.
func (s *session) routeClaimFamily(sender, typ string, in *wire.Inbound) bool {
	h := s.h
	if !h.fed.Governed() || !federation.ClaimFamily[typ] && !(federation.BoardFamily[typ] && h.fed.RoutesBoard()) {
		return false
	}
	if s.refuseByNamespace(sender, typ, in, false) {
		return true
	}
	r := h.fed.Resolve(coord.NamespaceOf(identity(sender)))
	switch r.Outcome {
	case federation.Local:
		return false
	case federation.Remote:
	default:
		s.refuseFederated(sender, typ, in, r, nil)
		return true
	}
	recipientHere := false
	if typ == "handoff" {
		h.mu.Lock()
		recipientHere = h.reg.byName[handoffTarget(in)] != nil
		h.mu.Unlock()
	}
	key, _ := in.Value("idem_key").(string)
	s.forward(sender, typ, in, r, recipientHere, key != "")
	return true
}

// forward sends a frame to the owner r names and relays the owner's
// replies, or refuses it with the reason: the one path of every forwarded
// verb (claim family, board writes and mail on a fleet).
func (s *session) forward(sender, typ string, in *wire.Inbound, r federation.Resolution, recipientHere, retryable bool) {
	h := s.h
	frame, err := json.Marshal(in.Map())
	if err != nil {
		s.fail(sender, "malformed_frame", "Frame could not be forwarded: "+err.Error())
		return
	}
	h.mu.Lock()
	var from federation.Principal
	if s.cred != nil {
		from = federation.Principal{Credential: s.cred.ID, Name: s.name}
	}
	h.mu.Unlock()
	s.releaseBeforeWait()
	t0 := h.now()
	frames, err := h.fed.ForwardAs(context.Background(), r.Owner, sender, from, typ, frame, recipientHere, retryable)
	h.m.fedForwardSeconds.WithLabelValues(typ).Observe(h.now() - t0)
	if err != nil {
		h.m.fedForwards.WithLabelValues(typ, federation.ForwardError(err)).Inc()
		h.log.Warn("hub: forward to the namespace owner failed", "verb", typ, "agent", sender, "owner", r.Owner, "err", err)
		if h.fed.RoutesBoard() && errors.Is(err, federation.ErrUnreachable) {
			// On a fleet an owner nobody can reach is being failed over
			// (its lease will lapse and another hub take the namespace);
			// the frame was never sent, so it is safe to retry.
			r.Outcome, r.RetryAfter = federation.Moving, 250*time.Millisecond
			err = nil
		}
		s.refuseFederated(sender, typ, in, r, err)
		return
	}
	h.m.fedForwards.WithLabelValues(typ, "ok").Inc()
	for _, fr := range frames {
		s.reply(fr)
	}
}

// refuseByNamespace answers a claim-family frame whose namespace does not
// resolve to a grant here (on the owner side, forwarded is set: a remote
// outcome means the forwarder's map disagrees with ours, and we never
// forward again). It also refuses a handoff across namespaces, which would
// put a lease under an authority that does not hold it.
func (s *session) refuseByNamespace(sender, typ string, in *wire.Inbound, forwarded bool) bool {
	h := s.h
	ns := coord.NamespaceOf(identity(sender))
	if typ == "handoff" {
		if to := handoffTarget(in); to != "all" && coord.NamespaceOf(identity(to)) != ns {
			s.refuseCode(sender, verbs[typ].denial, in, "CROSS_NAMESPACE_HANDOFF",
				"Task '"+taskID(in)+"' cannot be handed from namespace '"+ns+"' to '"+to+"': on a federated hub each namespace has its own authority. Release it and let "+to+" claim it.", nil)
			return true
		}
	}
	if !forwarded {
		return false
	}
	r := federation.Resolution{Namespace: ns, Outcome: federation.Ungoverned}
	if h.fed.Governed() {
		r = h.fed.Resolve(ns)
	}
	if r.Outcome == federation.Local {
		return false
	}
	s.refuseFederated(sender, typ, in, r, nil)
	return true
}

// refuseFederated sends the verb's own refusal for a namespace that does
// not grant here, with the namespace, the outcome and the owner, so a
// client can act on it (connect to the owner, fix the map).
func (s *session) refuseFederated(sender, typ string, in *wire.Inbound, r federation.Resolution, ferr error) {
	h := s.h
	ns := r.Namespace
	nsText := "Namespace '" + ns + "'"
	if ns == "" {
		nsText = "Agent '" + sender + "' has no namespace (a name like PROJECT/AGENT) and"
	}
	var code, msg string
	switch {
	case ferr != nil:
		code = "OWNER_UNREACHABLE"
		msg = nsText + " is owned by hub " + r.Owner + ", and forwarding to it failed (" + federation.ForwardError(ferr) + "): " + ferr.Error() + "."
		if errors.Is(ferr, federation.ErrLost) {
			msg += " The owner may or may not have applied it: retry with an idem_key, or check 'synapse state' on " + r.Owner + "."
		} else {
			msg += " Nothing was granted here; retry shortly, or connect to " + r.Owner + " directly."
		}
	case r.Outcome == federation.Ungoverned && ns == "":
		code = "NAMESPACE_UNGOVERNED"
		msg = nsText + " is ungoverned on this federated hub: nothing is granted there (INV-CR-4). Reconnect as PROJECT/" + sender + "."
	case r.Outcome == federation.Ungoverned:
		code = "NAMESPACE_UNGOVERNED"
		msg = nsText + " has no owning hub in the ownership map, so nothing is granted there (INV-CR-4). Add --namespace-owner " + ns + "=HUB_ID on every hub."
	case r.Outcome == federation.Partitioned:
		code = "NAMESPACE_PARTITIONED"
		msg = nsText + " is contested: hubs " + strings.Join(r.Contesting, ", ") + " assert it besides its owner " + r.Owner + ", so every grant is refused until the contest ends (INV-CR-4). Make every hub's --namespace-owner agree, or release their claims there."
	case r.Outcome == federation.Moving:
		code = "NAMESPACE_MOVING"
		msg = nsText + " is changing hands (a move, a failover, or its hub is warming it): nothing was decided. Retry in " + r.RetryAfter.String() + "."
	case r.Outcome == federation.Remote:
		code = "NAMESPACE_NOT_OWNED"
		msg = nsText + " is owned by hub " + r.Owner + ", not by this hub (" + h.cfg.HubID + "): the forwarding hub's ownership map disagrees with ours, and a forwarded request is never forwarded again. Make every hub's --namespace-owner agree."
	default:
		code, msg = "NAMESPACE_UNGOVERNED", nsText+" does not grant here."
	}
	if ferr == nil {
		h.m.fedRefused.WithLabelValues(string(r.Outcome)).Inc()
	}
	s.refuseCode(sender, verbs[typ].denial, in, code, msg, func(f *wire.Frame) {
		f.Str("namespace", ns).Str("ownership", string(r.Outcome)).Str("owner_hub_id", r.Owner)
		if ferr != nil {
			f.Str("forward_error", federation.ForwardError(ferr))
		}
		if len(r.Contesting) > 0 {
			f.Strs("contesting", r.Contesting)
		}
		if r.RetryAfter > 0 {
			f.Int("retry_after_ms", r.RetryAfter.Milliseconds())
		}
	})
}

// acceptPeer hands a socket whose first frame speaks the hub-to-hub
// protocol to the federation; it never binds a name.
func (s *session) acceptPeer(data []byte) {
	h := s.h
	if !s.peerCertOK() {
		return
	}
	pc := h.fed.Accept(data, s.send, func(code int, reason string) { s.closeWith(code, reason) })
	if pc == nil {
		return
	}
	h.mu.Lock()
	s.peer = pc
	s.kind.Store(uint32(peerSocket))
	h.authLocked(s)
	h.mu.Unlock()
}

// restoreQuarantine re-applies the peer quarantines the journal recorded
// (multihub_equivocation, cleared by multihub_equivocation_recovery).
func (h *Hub) restoreQuarantine() error {
	q := map[string]string{}
	err := h.cfg.Journal.ScanKinds([]string{"multihub_equivocation", "multihub_equivocation_recovery"}, func(kind string, payload []byte) error {
		var p struct {
			Peer   string `json:"peer_id"`
			Reason string `json:"reason"`
		}
		if json.Unmarshal(payload, &p) != nil || p.Peer == "" {
			return nil
		}
		if kind == "multihub_equivocation" {
			q[p.Peer] = p.Reason
		} else {
			delete(q, p.Peer)
		}
		return nil
	})
	for peer, why := range q {
		h.fed.Quarantine(peer, why)
	}
	return err
}

// observed is what the watches saw of the peers, when there are watches.
func (h *Hub) observed() (federation.Observation, bool) {
	if !h.fed.Watching() {
		return federation.Observation{}, false
	}
	return h.fed.Observed(), true
}

// appendObservedClaims writes observed claims for state_snapshot: each
// names the hub it was seen at and says it is advisory.
func appendObservedClaims(b []byte, cs []federation.ObservedClaim) []byte {
	return wire.List(b, cs, func(b []byte, c federation.ObservedClaim) []byte {
		return append(b, wire.Object().Str("task_id", c.TaskID).Str("owner", c.Owner).Str("hub_id", c.Hub).
			Str("observed_as", c.Owner+"@"+c.Hub).Str("worktree", c.Worktree).Strs("paths", c.Paths).
			Int("epoch", c.Epoch).Str("status", c.Status).Float("lease_expires_at", c.LeaseExpiresAt).
			Float("observed_at", c.ObservedAt).Bool("advisory", true).Bytes()...)
	})
}

// observedAgents lists the owners of observed claims as name@HUB, sorted.
func observedAgents(cs []federation.ObservedClaim) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, c := range cs {
		if n := c.Owner + "@" + c.Hub; !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Adopt installs the claims of a namespace this hub now owns, through the
// sequencer (cluster.Host).
func (h *Hub) Adopt(ns string, claims []*coord.Claim, tasks []*coord.BoardTask, epochFloor int64, retained map[string]string) error {
	if !h.beginSubmit() {
		return errClosing
	}
	defer h.submits.Done()
	r, err := h.seq.Submit(context.Background(), sequencer.Request{Cmd: coord.Adopt{Namespace: ns, Claims: claims, Tasks: tasks, EpochFloor: epochFloor, Retained: retained}})
	if err != nil {
		return err
	}
	if ref := r.Outcome.Refusal; ref != nil {
		return ref // coord.CodeTaskIDInUse: nothing of the namespace was installed
	}
	return nil
}

// Adoptable reports whether Adopt of ns with claims would be refused now
// (the *coord.Refusal it would get), without changing anything: a planned
// move's new owner asks before it takes the namespace.
func (h *Hub) Adoptable(ns string, claims []*coord.Claim) error {
	now := h.now()
	v, err := h.seq.Query(context.Background(), func(s *coord.State) any { return s.AdoptConflict(ns, claims, now) })
	if err != nil {
		return err
	}
	if ref, _ := v.(*coord.Refusal); ref != nil {
		return ref
	}
	return nil
}

// Disown drops the claims of a namespace another hub owns now.
func (h *Hub) Disown(ns string) {
	if !h.beginSubmit() {
		return
	}
	defer h.submits.Done()
	// The batch it lands in may be refused for another request's sake (a
	// namespace lost under it): ask again for a while. A Disown that never
	// lands is undone by the namespace's next Adopt here, which drops what
	// is left of it first.
	var err error
	for try := 0; try < 50; try++ {
		if _, err = h.seq.Submit(context.Background(), sequencer.Request{Cmd: coord.Disown{Namespace: ns}}); err == nil || !errors.Is(err, sequencer.ErrRetry) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		h.log.Warn("hub: disown", "namespace", ns, "err", err)
	}
}

// Drain waits, at most budget, for the mutations in flight to be answered.
func (h *Hub) Drain(budget time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	_ = waitCtx(ctx, &h.submits)
}

// DrainNamespace waits, at most budget, for the mutations of namespace ns
// in flight to be answered (a planned move, once ns is frozen).
func (h *Hub) DrainNamespace(ns string, budget time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	h.nsBusy.wait(ctx, ns)
}

// moveTimeout bounds a planned move or drain asked for over the wire.
var moveTimeout = 60 * time.Second
