package hub

// TLS (issue 23 item 6): what the hub decides about connections the
// listener's TLS let in — which peers presented a verified client
// certificate, and who may read /metrics. docs/security.md, "TLS".

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// CloseNoPeerCert is the reason a peer hub's socket without a verified
// client certificate is closed with (4010, Config.PeerClientCert); a
// close reason has at most 123 bytes, so the log says the rest.
const CloseNoPeerCert = "peer hubs must present a TLS client certificate signed by this hub's --tls-client-ca"

// verifiedClient reports whether r came over TLS with a client
// certificate the listener verified against its client CAs.
func verifiedClient(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.VerifiedChains) > 0
}

// peerCertOK closes a peer hub's socket that must present a client
// certificate and did not; it reports whether the socket may go on.
func (s *session) peerCertOK() bool {
	if !s.h.cfg.PeerClientCert || s.clientCert {
		return true
	}
	s.h.log.Warn("refused a peer hub without a TLS client certificate: give the dialling hub --tls-client-cert and --tls-client-key, signed by this hub's --tls-client-ca",
		"session", s.id, "host", s.host)
	s.closeWith(4010, CloseNoPeerCert)
	return false
}

// metricsAllowed answers 401 to a /metrics request without the Bearer
// token Config.MetricsToken; it reports whether the request may go on.
func (h *Hub) metricsAllowed(w http.ResponseWriter, r *http.Request) bool {
	want := h.cfg.MetricsToken
	if want == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(want)) == 1 {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="synapse metrics"`)
	http.Error(w, "synapse: /metrics requires the hub's metrics token: send 'Authorization: Bearer TOKEN' (the hub's --metrics-token or --metrics-token-file)", http.StatusUnauthorized)
	return false
}
