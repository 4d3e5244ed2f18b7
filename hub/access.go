package hub

// The access hook (issue 23 items 2 and 5): the verbs of identity pins
// and private channels ask Config.Access, when it is set, whether an
// agent may do a permission on a target, before their own rules. The ACL
// (issue 23 item 4) plugs in there: it answers AccessAllow or AccessDeny
// for what its policy covers and AccessDefault for the rest, which the
// built-in rules then decide (invite-only channel membership, pin reclaim
// by a token holder). The permissions asked, and their targets:
//
//	pin-reclaim      agent:<name>     identity_pin_reclaim
//	channel-create   channel:<name>   channel_create
//	channel-invite   channel:<name>   channel_invite (Subject: the invitee)
//	channel-join     channel:<name>   channel_join
//	message          channel:<name>   a chat to the channel
//	recall           channel:<name>   channel_history_request
//
// Leaving a channel and listing one's own channels need no permission.

// AccessDecision is what Config.Access says of one request.
type AccessDecision int

const (
	// AccessDefault leaves the request to the built-in rules.
	AccessDefault AccessDecision = iota
	// AccessAllow admits it, whatever the built-in rules say.
	AccessAllow
	// AccessDeny refuses it; nothing changes.
	AccessDeny
)

// AccessRequest is one question put to Config.Access.
type AccessRequest struct {
	Agent      string // the bound name asking
	Principal  string // its server-derived principal (session.principal: the token's digest, or the remote host)
	Permission string // one of the permissions above
	Target     string // "channel:<name>" or "agent:<name>"
	Subject    string // the other agent a request is about (an invitee), or ""
}

// mayAccess asks Config.Access, then the built-in rule of permission
// (nil: allowed), whether s's agent may do permission on target. A
// refusal comes with what to do next.
func (h *Hub) mayAccess(s *session, agent, permission, target string) (bool, string) {
	return h.mayAccessSubject(s, agent, permission, target, "", nil)
}

func (h *Hub) mayAccessSubject(s *session, agent, permission, target, subject string, builtin func() (bool, string)) (bool, string) {
	if f := h.cfg.Access; f != nil {
		d, why := f(AccessRequest{Agent: agent, Principal: s.principal(), Permission: permission, Target: target, Subject: subject})
		switch d {
		case AccessAllow:
			return true, ""
		case AccessDeny:
			if why == "" {
				why = "Access denied: " + agent + " may not " + permission + " on " + target + " (the hub's ACL)."
			}
			return false, why
		}
	}
	if permission == "pin-reclaim" {
		if h.cfg.Token == "" {
			return false, "This hub has no token, so it cannot tell its operator from any local process: stop it and run `synapse identity reclaim NAME --db PATH` on its journal, or give the hub a --token."
		}
		return true, "" // the socket presented the hub's token (tokenGate)
	}
	if builtin != nil {
		return builtin()
	}
	return true, ""
}
