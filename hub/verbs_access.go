package hub

import (
	"encoding/json"
	"strings"

	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/wire"
)

// The admin verbs of credentials, role grants and access rules (issue 23;
// `synapse token`, `synapse role`, `synapse acl check` send them). They
// take effect at once on this hub: a revocation closes the credential's
// sockets before its answer. Only a socket authenticated with the shared
// token, or with a credential holding access.AdminRole, may run them; an
// open hub has no admin (anyone could be), so it refuses them.
//
//	token_issue  {name_pattern, roles?, ttl_seconds?, note?} → token_issued {token, credential}
//	token_list   {}                                          → token_list {credentials}
//	token_revoke {credential_id}                             → token_revoked {credential, sockets_closed}
//	role_grant   {role, to}                                  → role_granted {grant}
//	role_revoke  {role, to}                                  → role_revoked {grant}
//	role_list    {}                                          → role_list {grants}
//	acl_check    {as, permission, target_kind, target_value} → acl_decision {decision, rule, reason, acl_in_force}
//
// acl_check is open to any socket for its own name (as = its name).

func addAccessVerbs(v map[string]verb) {
	v["token_issue"] = verb{handle: adminOnly((*session).tokenIssue)}
	v["token_list"] = verb{handle: adminOnly((*session).tokenList)}
	v["token_revoke"] = verb{handle: adminOnly((*session).tokenRevoke)}
	v["role_grant"] = verb{handle: adminOnly((*session).roleGrant)}
	v["role_revoke"] = verb{handle: adminOnly((*session).roleRevoke)}
	v["role_list"] = verb{handle: adminOnly((*session).roleList)}
	v["acl_check"] = verb{handle: withFrame((*session).aclCheck)}
}

// adminOnly refuses a verb to a socket that is not the operator's.
func adminOnly(f func(*session, string, *wire.Inbound)) func(*session, string, string, *wire.Inbound) {
	return func(s *session, sender, typ string, in *wire.Inbound) {
		if !s.adminAllowed(sender, typ) {
			return
		}
		f(s, sender, in)
	}
}

func (s *session) adminAllowed(sender, typ string) bool {
	switch {
	case !s.h.secured():
		s.fail(sender, "admin_required", "'"+typ+"' needs a secured hub: this one is open, so anyone could run it. Start the hub with --token (or --credentials), or edit a stopped hub's journal with --db.")
		return false
	case s.is(forwardedVerb) || !s.admin:
		s.fail(sender, "admin_required", "'"+typ+"' needs the hub's shared token or a credential with role "+access.AdminRole+"; this socket has neither.")
		return false
	}
	return true
}

func credentialJSON(c access.Credential) []byte {
	if c.Roles == nil {
		c.Roles = []string{}
	}
	b, _ := json.Marshal(c)
	return b
}

func (s *session) tokenIssue(sender string, in *wire.Inbound) {
	ttl, _ := in.LenientFloat("ttl_seconds")
	tok, c, err := s.h.access.reg.Issue(access.IssueRequest{Pattern: in.Str("name_pattern"), Roles: in.Strings("roles"),
		TTL: ttl, Note: in.Str("note")}, s.h.now())
	if err != nil {
		s.fail(sender, "invalid_request", err.Error())
		return
	}
	s.h.log.Info("hub: credential issued", "credential", c.ID, "pattern", c.Pattern, "roles", c.Roles, "by", sender)
	s.reply(s.frame("token_issued", sender, "Credential "+c.ID+" issued; its token is shown once.").
		Str("token", tok).Raw("credential", credentialJSON(c)).Bytes())
}

func (s *session) tokenList(sender string, _ *wire.Inbound) {
	list := s.h.access.reg.List()
	s.reply(s.frame("token_list", sender, "Credentials").Raw("credentials", wire.List(nil, list, func(b []byte, c access.Credential) []byte {
		return append(b, credentialJSON(c)...)
	})).Bytes())
}

func (s *session) tokenRevoke(sender string, in *wire.Inbound) {
	c, closed, err := s.h.revokeCredential(strings.TrimSpace(in.Str("credential_id")))
	if err != nil {
		s.fail(sender, "unknown_credential", err.Error())
		return
	}
	s.reply(s.frame("token_revoked", sender, "Credential "+c.ID+" revoked.").Raw("credential", credentialJSON(c)).
		Int("sockets_closed", int64(closed)).Bytes())
}

func (s *session) grantFrom(in *wire.Inbound) access.Grant {
	return access.Grant{Role: in.Str("role"), To: in.Str("to")}
}

func grantJSON(g access.Grant) []byte {
	return wire.Object().Str("role", g.Role).Str("to", g.To).Bytes()
}

func (s *session) roleGrant(sender string, in *wire.Inbound) {
	g := s.grantFrom(in)
	if err := s.h.access.reg.Grant(g); err != nil {
		s.fail(sender, "invalid_request", err.Error())
		return
	}
	s.reply(s.frame("role_granted", sender, "Role "+g.Role+" granted to "+g.To+"; it sticks on the next heartbeat that asserts it.").
		Raw("grant", grantJSON(g)).Bytes())
}

func (s *session) roleRevoke(sender string, in *wire.Inbound) {
	g := s.grantFrom(in)
	if err := s.h.access.reg.RevokeGrant(g); err != nil {
		s.fail(sender, "unknown_grant", err.Error())
		return
	}
	s.reply(s.frame("role_revoked", sender, "Role "+g.Role+" no longer granted to "+g.To+" (a live socket keeps it until its next heartbeat with roles).").
		Raw("grant", grantJSON(g)).Bytes())
}

func (s *session) roleList(sender string, _ *wire.Inbound) {
	s.reply(s.frame("role_list", sender, "Role grants").Raw("grants", wire.List(nil, s.h.access.reg.Grants(), func(b []byte, g access.Grant) []byte {
		return append(b, grantJSON(g)...)
	})).Bytes())
}

func (s *session) aclCheck(sender string, in *wire.Inbound) {
	as := strings.TrimSpace(in.Str("as"))
	if as == "" {
		as = sender
	}
	if as != sender && !s.adminAllowed(sender, "acl_check --as "+as) {
		return
	}
	q := access.Request{Principal: as, Permission: in.Str("permission"), Kind: in.Str("target_kind"), Value: in.Str("target_value")}
	p := s.h.access.policy.Load()
	f := s.frame("acl_decision", sender, "ACL decision").Str("as", as).Str("permission", q.Permission).
		Str("target", q.Kind+":"+q.Value).Bool("acl_in_force", p != nil).Bool("shadow", s.h.cfg.ACLShadow)
	if p == nil {
		f.Str("decision", "allow").Str("rule", "").Str("reason", "no access rules in force (the hub was started without --acl)")
	} else {
		d := p.Decide(q)
		f.Str("decision", map[bool]string{true: "allow", false: "deny"}[d.Allow]).Str("rule", d.Rule).Str("reason", d.Reason)
	}
	s.reply(f.Bytes())
}
