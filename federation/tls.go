package federation

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"github.com/synapse-hub/synapse/certs"
)

// peerHTTPClient is what links dial peers with: net/http's default, or
// for wss:// peers cfg's roots and client certificate (Config.TLS).
func peerHTTPClient(cfg *tls.Config) *http.Client {
	if cfg == nil {
		return http.DefaultClient
	}
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"http/1.1"} // a WebSocket upgrade is HTTP/1.1
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	tr.ForceAttemptHTTP2 = false
	return &http.Client{Transport: tr}
}

// dialOptions are a link's WebSocket dial options.
func (f *Federation) dialOptions() *websocket.DialOptions {
	return &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled, HTTPClient: f.http}
}

// explainDial says what to do about a failed dial of a peer when it is
// about TLS (the CA, the scheme, the client certificate), as " (…)".
func explainDial(uri string, resp *http.Response, err error) string {
	body := ""
	if resp != nil && resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		body = strings.TrimSpace(string(b))
	}
	hint := certs.Explain(uri, body, err)
	if hint == "" {
		return ""
	}
	hint = strings.NewReplacer("--ca FILE or SYNAPSE_CA=FILE", "--ca FILE on this hub").Replace(hint)
	return " (" + hint + ")"
}
