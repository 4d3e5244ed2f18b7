package client

import (
	"fmt"
	"net/http"
	"os"

	"github.com/synapse-hub/synapse/certs"
)

// HTTPClient is the http.Client a client with these options reaches a
// hub's HTTP routes with (/health, /metrics): the TLS of TLS or CA.
func (o Options) HTTPClient() (*http.Client, error) {
	if o.CA == "" {
		o.CA = envCA()
	}
	return o.httpClient()
}

// httpClient is what the client dials its hubs with: net/http's default
// for ws:// and http://, and for wss:// and https:// the TLS of
// Options.TLS, else Options.CA's roots (SYNAPSE_CA), else the system's.
func (o *Options) httpClient() (*http.Client, error) {
	cfg := o.TLS
	if cfg == nil && o.CA != "" {
		var err error
		if cfg, err = certs.ClientConfig(o.CA, nil); err != nil {
			return nil, fmt.Errorf("client: the hub's CA (--ca, SYNAPSE_CA, Options.CA): %w", err)
		}
	}
	return certs.HTTPClient(cfg), nil
}

// explainDial is the hint after a failed dial: the CA to give, the scheme
// to use (certs.Explain), or "".
func explainDial(uri, body string, err error) string {
	if hint := certs.Explain(uri, body, err); hint != "" {
		return " (" + hint + ")"
	}
	return ""
}

// envCA is the CA file clients trust by default.
func envCA() string { return os.Getenv("SYNAPSE_CA") }
