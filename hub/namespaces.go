package hub

// The namespace verbs (ns_request, ns_move, ns_drain): the ownership map
// as the federation sees it, and planned moves on a fleet.

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/wire"
)

// nsRequest answers the additive ns_request (feature "namespaces") with
// ns_snapshot: the ownership map as this hub resolves it, the namespaces
// its agents use, the peers and their links, the contests, and what it
// observes of its peers (advisory).
func (s *session) nsRequest(sender string) {
	h := s.h
	h.mu.Lock()
	used := map[string]bool{}
	for name := range h.reg.byName {
		used[coord.NamespaceOf(identity(name))] = true
	}
	h.mu.Unlock()
	extra := make([]string, 0, len(used))
	for ns := range used {
		extra = append(extra, ns)
	}
	st := h.fed.Status(extra)
	body, err := json.Marshal(struct {
		federation.Status
		federation.Observation
	}{st, h.fed.Observed()})
	if err != nil {
		s.fail(sender, "internal_error", "Namespace snapshot failed: "+err.Error())
		return
	}
	h.m.framesOut.WithLabelValues("ns_snapshot").Inc()
	s.reply(s.frame("ns_snapshot", sender, "Namespace ownership").Raw("federation", body).Bytes())
}

// nsMove serves the additive ns_move {namespace, to} and ns_drain {hub}:
// planned moves on a fleet whose ownership lives in etcd. The answer,
// ns_moved, comes once every move is complete, with the moves and the
// time they took.
func (s *session) nsMove(sender, typ string, in *wire.Inbound) {
	h := s.h
	mover, ok := h.fed.Authority().(federation.Mover)
	if !ok {
		s.fail(sender, "not_supported", "Namespaces move only between hubs of a fleet on etcd (synapse hub --etcd); this hub's ownership is fixed by --namespace-owner, or it has none.")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
	defer cancel()
	t0 := time.Now()
	moves := map[string]string{}
	var err error
	if typ == "ns_move" {
		// "namespace": "" is the default namespace, of bare names; the
		// key must be there, so a frame that forgot it moves nothing.
		raw, named := in.Value("namespace").(string)
		ns, to := strings.TrimSpace(raw), strings.TrimSpace(in.Str("to"))
		if !named || to == "" {
			s.fail(sender, "malformed_frame", "ns_move needs 'namespace' (\"\" for the default namespace, of bare names) and 'to' (a hub id).")
			return
		}
		if err = mover.Move(ctx, ns, to); err == nil {
			moves[ns] = to
		}
	} else {
		hub := strings.TrimSpace(in.Str("hub"))
		if hub == "" {
			s.fail(sender, "malformed_frame", "ns_drain needs 'hub' (the hub id to empty).")
			return
		}
		moves, err = mover.Drain(ctx, hub)
	}
	if err != nil {
		s.fail(sender, "move_failed", "Move failed: "+err.Error()+".")
		return
	}
	body, _ := json.Marshal(moves)
	s.reply(s.frame("ns_moved", sender, "Namespaces moved").Raw("moves", body).Int("elapsed_ms", time.Since(t0).Milliseconds()).Bytes())
}
