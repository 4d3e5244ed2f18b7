package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/wire"
)

// Credentials, granted roles and access rules on a socket (issue 23 items
// 1, 3, 4; package access holds the decisions, docs/security.md the
// modes). What lives where:
//
//   - Hub.access.reg is the credential and grant registry (its own lock,
//     a leaf: taken under Hub.mu or alone). A socket's credential is
//     session.cred, written under Hub.mu by the socket's reader on its
//     first frame (credentialGate) and read by revoke, which closes the
//     sockets of a revoked credential under Hub.mu.
//   - Hub.access.policy is the ACL in force, an immutable *access.Policy
//     swapped whole by ReloadACL; readers load it once per frame.

// RevokedCloseCode closes the sockets of a revoked or expired credential:
// 4010, the code of every authentication failure (PROTOCOL.md §1.8), with
// the reason "credential revoked" or "credential expired".
const RevokedCloseCode = 4010

// accessState is the hub's side of package access.
type accessState struct {
	reg    *access.Registry
	policy atomic.Pointer[access.Policy] // nil: no access rules
	m      accessMetrics
}

type accessMetrics struct {
	denied        *prometheus.CounterVec // mode: enforce | shadow
	reloads       *prometheus.CounterVec // result: ok | failed
	revokedCloses prometheus.Counter
	rolesIgnored  prometheus.Counter
	credRefused   *prometheus.CounterVec // reason
}

// initAccess sets up the registry, the policy and their metrics (New).
func (h *Hub) initAccess() {
	h.access.reg = h.cfg.Access
	if h.access.reg == nil {
		h.access.reg = access.NewRegistry(nil, nil, nil) // in memory: a hub without a journal
	}
	if h.cfg.ACL != nil {
		h.access.policy.Store(h.cfg.ACL)
	}
	am := &h.access.m
	am.denied = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "synapse_acl_denied_total",
		Help: "Frames the access rules refused (mode=enforce) or would have refused (mode=shadow)."}, []string{"mode"})
	am.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "synapse_acl_reloads_total",
		Help: "ACL file reloads; result=failed kept the old policy."}, []string{"result"})
	am.revokedCloses = prometheus.NewCounter(prometheus.CounterOpts{Name: "synapse_credential_revoked_closes_total",
		Help: "Sockets closed because their credential was revoked or expired."})
	am.rolesIgnored = prometheus.NewCounter(prometheus.CounterOpts{Name: "synapse_roles_ignored_total",
		Help: "Roles asserted in a heartbeat without a grant, ignored."})
	am.credRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "synapse_credential_refusals_total",
		Help: "First frames refused for their credential, by reason."}, []string{"reason"})
	h.m.reg.MustRegister(am.denied, am.reloads, am.revokedCloses, am.rolesIgnored, am.credRefused)
}

// secured reports whether every socket must authenticate its first frame:
// with the shared token, or with a credential.
func (h *Hub) secured() bool { return h.cfg.Token != "" || h.cfg.RequireCredentials }

// rolesGranted reports whether roles are granted rather than claimed:
// once credentials or access rules are in force (issue 23 item 3). A hub
// with only the shared token and no credential leaves roles as the
// reference does.
func (h *Hub) rolesGranted() bool {
	return h.cfg.RequireCredentials || h.access.reg.Live() > 0 || h.access.policy.Load() != nil
}

// Access returns the hub's credential and grant registry.
func (h *Hub) Access() *access.Registry { return h.access.reg }

// Policy returns the access rules in force, nil if none.
func (h *Hub) Policy() *access.Policy { return h.access.policy.Load() }

// ReloadACL reads Config.ACLFile again and puts its rules in force. A file
// that does not read or parse changes nothing: the old policy stays, and
// the error says why (logged, and counted as
// synapse_acl_reloads_total{result="failed"}).
func (h *Hub) ReloadACL() error {
	if h.cfg.ACLFile == "" {
		return errors.New("hub: reload ACL: the hub was started without --acl")
	}
	p, err := LoadACL(h.cfg.ACLFile)
	if err != nil {
		h.access.m.reloads.WithLabelValues("failed").Inc()
		h.log.Error("hub: ACL reload failed; the old policy stays in force", "file", h.cfg.ACLFile, "err", err)
		return err
	}
	h.access.policy.Store(p)
	h.access.m.reloads.WithLabelValues("ok").Inc()
	h.log.Info("hub: ACL reloaded", "file", h.cfg.ACLFile, "rules", p.Len())
	return nil
}

// LoadACL reads and parses an ACL file.
func LoadACL(path string) (*access.Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read ACL %s: %w", path, err)
	}
	p, err := access.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("ACL %s: %w", path, err)
	}
	return p, nil
}

// credentialGate authenticates a first frame that carries a credential's
// token and checks the name it binds against the credential's pattern.
// Nothing is bound or changed when it refuses. Read goroutine only.
func (s *session) credentialGate(sender, tok string, now float64, deny func(string) bool) bool {
	h := s.h
	c, err := h.access.reg.Authenticate(tok, now)
	switch {
	case errors.Is(err, access.ErrUnknownCredential):
		h.authFails.Allow(s.host, now) // a guess: spends the host's allowance
		h.access.m.credRefused.WithLabelValues("unknown").Inc()
		return deny("Invalid authentication token.")
	case errors.Is(err, access.ErrRevoked):
		h.access.m.credRefused.WithLabelValues("revoked").Inc()
		return deny("Credential '" + c.ID + "' was revoked; ask the operator for a new one (synapse token issue).")
	case errors.Is(err, access.ErrExpired):
		h.access.m.credRefused.WithLabelValues("expired").Inc()
		return deny("Credential '" + c.ID + "' has expired; ask the operator for a new one (synapse token issue).")
	}
	if !c.AllowsName(sender) && !c.AllowsName(identity(sender)) {
		h.access.m.credRefused.WithLabelValues("name").Inc()
		h.log.Info("hub: credential refused a name outside its pattern", "credential", c.ID, "name", sender, "pattern", c.Pattern)
		return deny("Token is not authorised for agent '" + sender + "'.")
	}
	h.mu.Lock()
	s.cred = c
	h.mu.Unlock()
	// Revoked between Authenticate and the store above: revoke's sweep,
	// which runs under Hub.mu after the registry changed, did not see us.
	if cur, _ := h.access.reg.Get(c.ID); cur.Revoked > 0 {
		return deny("Credential '" + c.ID + "' was revoked; ask the operator for a new one (synapse token issue).")
	}
	s.admin = c.HasRole(access.AdminRole)
	return true
}

// credentialLapsed closes an authenticated socket whose credential expired
// since it connected (revocation closes them at once, revokeCredential).
// One comparison per frame.
func (s *session) credentialLapsed(now float64) bool {
	c := s.cred
	if c == nil || c.Expires == 0 || now < c.Expires {
		return false
	}
	s.h.access.m.revokedCloses.Inc()
	s.reply(s.frame("auth_denied", s.name, "Credential '"+c.ID+"' has expired; ask the operator for a new one (synapse token issue).").Bytes())
	s.closeWith(RevokedCloseCode, "credential expired")
	return true
}

// revokeCredential revokes id and closes every live socket that used it,
// each told why before its close. It returns the record and how many
// sockets were closed.
func (h *Hub) revokeCredential(id string) (access.Credential, int, error) {
	c, err := h.access.reg.Revoke(id, h.now())
	if err != nil {
		return c, 0, err
	}
	closed := 0
	h.mu.Lock()
	for s := range h.reg.sessions {
		if s.cred == nil || s.cred.ID != id || s.isClosing() {
			continue
		}
		closed++
		s.send(s.frame("auth_denied", s.name, "Credential '"+id+"' was revoked; ask the operator for a new one (synapse token issue).").Bytes())
		s.closeWith(RevokedCloseCode, "credential revoked")
	}
	h.mu.Unlock()
	h.access.m.revokedCloses.Add(float64(closed))
	h.log.Info("hub: credential revoked", "credential", id, "sockets_closed", closed)
	return c, closed, nil
}

// grantedRolesLocked keeps the roles name may hold: all of them unless
// roles are granted (rolesGranted); else those its credential grants,
// those granted to the name or its identity (synapse role grant), and
// those an ACL role-claim rule allows on role:<role>. It returns the kept
// roles and the ignored ones.
func (s *session) grantedRolesLocked(name string, roles []string) (kept, ignored []string) {
	h := s.h
	if !h.rolesGranted() {
		return roles, nil
	}
	p := h.access.policy.Load()
	kept = roles[:0:0]
	for _, r := range roles {
		ok := (s.cred != nil && s.cred.HasRole(r)) || h.access.reg.Granted(name, r) || h.access.reg.Granted(identity(name), r) ||
			(p != nil && p.Decide(access.Request{Principal: name, Permission: access.PermRoleClaim, Kind: "role", Value: r}).Allow)
		if ok {
			kept = append(kept, r)
		} else {
			ignored = append(ignored, r)
		}
	}
	return kept, ignored
}

// tellRolesIgnoredLocked sends the private notice that some asserted roles
// were not granted. Only a hub with credentials or access rules sends it,
// so the reference's clients in the open and shared-token modes never see
// the frame type.
func (s *session) tellRolesIgnoredLocked() {
	name, ignored := s.name, s.ignoredRoles
	s.ignoredRoles = nil
	s.h.access.m.rolesIgnored.Add(float64(len(ignored)))
	s.send(s.frame("notice", name, "Roles not granted, ignored: "+strings.Join(ignored, ", ")+
		". Ask the operator to grant them (synapse role grant ROLE --to "+name+"), or use a credential that carries them.").
		Str("error_code", "role_not_granted").Strs("ignored_roles", ignored).Bytes())
}

// aclRequests maps a routed frame to the accesses it asks for (PROTOCOL.md
// §5.6, the reference's table). Verbs it returns none for are not gated:
// heartbeats, acks, pings, leave, waits and the queries (whose answers are
// filtered instead, observe).
func aclRequests(sender, typ string, in *wire.Inbound) []access.Request {
	req := func(perm, kind, value string) access.Request {
		return access.Request{Principal: sender, Permission: perm, Kind: kind, Value: value}
	}
	orAll := func(v string) string {
		if v = strings.TrimSpace(v); v == "" {
			return "*"
		}
		return v
	}
	switch typ {
	case "chat":
		if c, ok := chatChannel(in); ok { // a private channel's chat (channels.go), either form
			return []access.Request{req(access.PermMessage, "channel", c)}
		}
		target := strings.TrimSpace(in.Str("target"))
		if target == "" {
			target = "all"
		}
		var out []access.Request
		for _, t := range strings.Split(target, ",") {
			t = strings.TrimSpace(t)
			if c, ok := strings.CutPrefix(t, "channel:"); ok {
				out = append(out, req(access.PermMessage, "channel", c))
			} else if t != "" {
				out = append(out, req(access.PermMessage, "agent", t))
			}
		}
		return out
	case "claim", "task_update", "handoff":
		out := []access.Request{req(access.PermClaim, "claim", taskID(in))}
		for _, k := range []string{"paths", "globs", "files"} {
			for _, p := range in.Strings(k) {
				out = append(out, req(access.PermClaim, "path", p))
			}
		}
		return out
	case "checkpoint":
		return []access.Request{req(access.PermClaim, "claim", taskID(in))}
	case "release":
		return []access.Request{req(access.PermRelease, "claim", taskID(in))}
	case "ledger_task", "ledger_task_update", "ledger_progress":
		return []access.Request{req(access.PermBoard, "board", orAll(taskID(in)))}
	case "resource", "resource_offer", "offer_resource":
		return []access.Request{req(access.PermBoard, "resource", orAll(in.Str("name")))}
	case "advertise":
		return []access.Request{req(access.PermBoard, "capability", sender)}
	case "history_request", "resume_request":
		return []access.Request{req(access.PermRecall, "history", "global")}
	case "ns_move", "ns_drain":
		return []access.Request{req(access.PermNamespace, "namespace", orAll(in.Str("namespace")))}
	case "channel_create", "channel_invite", "channel_join", "channel_leave":
		// The reference's: every membership change is `message` on the
		// channel (channel_invite, ours, too). The invite-only rules
		// (channels.go) still apply to what a rule allows.
		return []access.Request{req(access.PermMessage, "channel", strings.TrimSpace(in.Str("channel")))}
	case "channel_history_request":
		return []access.Request{req(access.PermRecall, "channel", strings.TrimSpace(in.Str("channel")))}
	}
	// identity_pin_reclaim is decided by its handler (mayReclaimPin), which
	// lets the operator through as the admin verbs do.
	return nil
}

// aclGate decides a routed frame against the access rules (PROTOCOL.md
// §1.4 step 15): every access it asks for must be allowed. A refusal is
// the reference's error, "access denied: <perm> on <kind>:<value>", with
// acl_decision and acl_reason, and ours: error_code "acl_denied" and
// acl_rule, the rule that decided. In shadow mode (Config.ACLShadow) the
// would-be refusal is logged and counted, and the frame goes on.
func (s *session) aclGate(sender, typ string, in *wire.Inbound) bool {
	p := s.h.access.policy.Load()
	if p == nil {
		return true
	}
	for _, q := range aclRequests(sender, typ, in) {
		if !s.aclAllows(p, sender, typ, in, q) {
			return false
		}
	}
	return true
}

// aclAllows decides one access against p: allowed, or refused (the reply
// sent, naming the rule) and false; in shadow mode a would-be refusal is
// logged and counted and the access allowed.
func (s *session) aclAllows(p *access.Policy, sender, typ string, in *wire.Inbound, q access.Request) bool {
	d := p.Decide(q)
	if d.Allow {
		return true
	}
	h := s.h
	if h.cfg.ACLShadow {
		h.access.m.denied.WithLabelValues("shadow").Inc()
		h.log.Warn("hub: acl would deny (shadow mode)", "agent", sender, "verb", typ, "access", q.String(), "rule", d.Rule, "reason", d.Reason)
		return true
	}
	h.access.m.denied.WithLabelValues("enforce").Inc()
	msg := "access denied: " + q.String() + " (rule " + d.Rule + ": " + d.Reason + "). `synapse acl check --as " + sender +
		" " + q.Permission + " " + q.Kind + ":" + q.Value + "` shows the decision; ask the operator for a rule that allows it."
	s.refuseCode(sender, "", in, "acl_denied", msg, func(f *wire.Frame) {
		f.Str("acl_decision", "deny").Str("acl_reason", d.Reason).Str("acl_rule", d.Rule)
	})
	return false
}

// mayReclaimPin decides whether sender may reclaim name's identity pin
// over this socket (identity_pin_reclaim, identity.go). In order:
//
//   - the operator may: a socket with the shared token or an admin
//     credential, as for the admin verbs (verbs_access.go), rules or not;
//   - with access rules in force (not shadow), a rule must allow
//     `identity-pin-reclaim agent:<name>` (the reference's permission);
//     a refusal is the ACL's (acl_denied, naming the rule), already sent
//     when refused is true. On an open hub the requester must also have
//     proved its own pinned key, since its name is otherwise anyone's
//     (the reference asks the same);
//   - else nobody: an open hub cannot tell its operator from any local
//     process, and on a secured one the socket is neither. In shadow mode
//     the rules are asked, a denial logged and counted, and this applies.
func (s *session) mayReclaimPin(sender, name string, in *wire.Inbound) (ok, refused bool, why string) {
	h := s.h
	if s.admin && !s.is(forwardedVerb) {
		return true, false, ""
	}
	q := access.Request{Principal: sender, Permission: access.PermPinReclaim, Kind: "agent", Value: name}
	p := h.access.policy.Load()
	if p != nil && h.cfg.ACLShadow {
		s.aclAllows(p, sender, "identity_pin_reclaim", in, q) // logs and counts a would-be denial; grants nothing
	}
	if p != nil && !h.cfg.ACLShadow {
		if !s.aclAllows(p, sender, "identity_pin_reclaim", in, q) {
			return false, true, ""
		}
		if !h.secured() && !s.keyProved {
			return false, false, "An ACL rule allows " + q.String() + ", but on a hub without --token or --credentials a name is anyone's: connect as '" +
				sender + "' with a signed registration (its pinned key) to reclaim, or give the hub a --token."
		}
		return true, false, ""
	}
	if !h.secured() {
		return false, false, "This hub has no token, so it cannot tell its operator from any local process: stop it and run `synapse identity reclaim NAME --db PATH` on its journal, or give the hub a --token."
	}
	return false, false, "Reclaiming '" + name + "' needs the hub's shared token, a credential with role " + access.AdminRole +
		", or an access rule allowing identity-pin-reclaim on agent:" + name + " (synapse hub --acl FILE); this socket has none of them."
}

// observer filters what a read shows its viewer (issue 23 item 4): with
// access rules in force (not in shadow mode), the viewer sees an item only
// when a rule allows it observe on the item's kind:value, or the item is
// its own. Without rules every item is shown. Safe on any goroutine.
type observer struct {
	p    *access.Policy
	name string
}

func (s *session) observer(viewer string) observer {
	if s.h.cfg.ACLShadow {
		return observer{}
	}
	return observer{p: s.h.access.policy.Load(), name: viewer}
}

// sees reports whether the viewer may see kind:value; own items (owner is
// the viewer or its identity) are always seen.
func (o observer) sees(kind, value, owner string) bool {
	if o.p == nil || (owner != "" && (owner == o.name || owner == identity(o.name))) {
		return true
	}
	return o.p.Decide(access.Request{Principal: o.name, Permission: access.PermObserve, Kind: kind, Value: value}).Allow
}

// filtering reports whether the observer hides anything at all.
func (o observer) filtering() bool { return o.p != nil }

// filterCounts keeps the entries of a JSON object of per-identity counts
// that the viewer may observe (who_snapshot.mailbox_pending).
func (o observer) filterCounts(counts []byte) []byte {
	if !o.filtering() {
		return counts
	}
	var m map[string]int64
	if json.Unmarshal(counts, &m) != nil {
		return []byte("{}")
	}
	for id := range m {
		if !o.sees("agent", id, id) {
			delete(m, id)
		}
	}
	b, _ := json.Marshal(m)
	return b
}
