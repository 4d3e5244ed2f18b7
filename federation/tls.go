package federation

import (
	"io"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"github.com/synapse-hub/synapse/certs"
)

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
