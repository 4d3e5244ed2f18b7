package hub

import (
	"crypto/subtle"

	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/wire"
)

// Authentication on a socket (PROTOCOL.md §5; docs/security.md says what
// each part protects against and what it does not). The decisions are
// package gate's; here the session applies them.
//
//   - The connect token is checked on a socket's first frame by its read
//     goroutine (tokenGate); failures are counted per remote host in
//     Hub.authFails, and a host out of tokens is refused unchecked.
//   - Per-message HMAC (verifyMessage) runs on the read goroutine for the
//     signed verbs; the verifier's replay cache is shared by every socket
//     and guarded by its own mutex.

// tokenGate checks the connect token on a socket's first frame (PROTOCOL.md
// §1.4 step 5): constant-time comparison, "auth_denied" and close 4010 on a
// missing or wrong token. Each failure spends one of the remote host's
// tokens; a host with none left is refused without a comparison, so a
// guesser learns nothing until its bucket refills. Reserved names are left
// to register, which closes them 4009 first (step 4). A first frame may
// carry a credential's token instead of the shared one (credentialGate,
// access.go); an authenticated socket whose credential has expired is
// closed. Read goroutine only.
func (s *session) tokenGate(sender string, in *wire.Inbound) bool {
	h := s.h
	if s.authed {
		return s.cred == nil || !s.credentialLapsed(h.now())
	}
	if reserved(sender) {
		return true
	}
	now := h.now()
	deny := func(payload string) bool {
		h.m.authFailures.Inc()
		s.reply(s.frame("auth_denied", sender, payload).Bytes())
		s.closeWith(4010, "auth denied")
		return false
	}
	if h.authFails.Empty(s.host, now) {
		h.m.authLockouts.Inc()
		return deny("Too many failed authentication attempts from this host; try again later.")
	}
	tok, _ := in.Value("token").(string)
	switch {
	case tok == "":
		h.authFails.Allow(s.host, now)
		return deny("Authentication token required.")
	case h.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(h.cfg.Token)) == 1:
		s.admin = true // the operator's shared secret
		return true
	case access.IsCredentialToken(tok):
		return s.credentialGate(sender, tok, now, deny)
	}
	h.authFails.Allow(s.host, now)
	return deny("Invalid authentication token.")
}

// verifyMessage runs per-message authentication on a routed frame of a
// signed verb (§1.4 step 13) and refuses it with an error frame carrying
// verification_result. A frame carrying auth is verified whenever keys are
// configured; one without auth (or with "auth": null) passes unless
// RequireMessageAuth.
func (s *session) verifyMessage(sender string, signed bool, in *wire.Inbound) bool {
	h := s.h
	if h.verifier == nil || !signed || (in.Value("auth") == nil && !h.cfg.RequireMessageAuth) {
		return true
	}
	result := h.verifier.Verify(sender, in, h.now())
	if result == gate.VerifyOK {
		return true
	}
	h.m.messageAuthFailures.WithLabelValues(result).Inc()
	h.m.framesOut.WithLabelValues("error").Inc()
	s.reply(s.frame("error", sender, "per-message authentication failed: "+result).
		Str("verification_result", result).Str("error_code", "message_auth_failed").Bytes())
	return false
}
