package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
)

// ErrNoCA is returned when a CA file holds no certificate.
var ErrNoCA = errors.New("certs: no CA certificate")

// LoadPool reads the PEM certificates in file as a pool of roots.
func LoadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("certs: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w in %s: want PEM blocks of type CERTIFICATE (the ca.pem 'synapse tls selfsigned' writes)", ErrNoCA, file)
	}
	return pool, nil
}

// ClientConfig is the TLS a client dials a wss:// or https:// hub with:
// the roots in caFile, or the system's when it is "", and, if clientCert
// is not nil, the certificate pair it presents when the hub asks for one
// (a peer hub's, --tls-client-cert; read at each handshake, so a reload
// applies to the next connection).
//
// It names no application protocol: a WebSocket dialer asks for HTTP/1.1,
// etcd's gRPC for h2.
func ClientConfig(caFile string, clientCert *Reloader) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := LoadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if clientCert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return clientCert.cur.Load(), nil
		}
	}
	return cfg, nil
}

// HTTPClient is an http.Client that dials https:// (and wss://, which a
// WebSocket dialer turns into https://) with cfg over HTTP/1.1, as a
// WebSocket upgrade needs; nil cfg is net/http's default client.
func HTTPClient(cfg *tls.Config) *http.Client {
	if cfg == nil {
		return http.DefaultClient
	}
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	tr.ForceAttemptHTTP2 = false
	return &http.Client{Transport: tr}
}

// ServerConfig is the TLS a hub serves with: r's current pair, HTTP/1.1
// (WebSocket upgrades need it), and, when clientCAs is not nil, client
// certificates verified against it if a client presents one (the hub
// decides who must: docs/security.md, "Peer certificates").
func ServerConfig(r *Reloader, clientCAs *x509.CertPool) *tls.Config {
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"http/1.1"},
		GetCertificate: r.GetCertificate,
	}
	if clientCAs != nil {
		cfg.ClientCAs = clientCAs
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg
}

// PinnedConfig trusts one certificate, whichever r serves at the time of
// the handshake, and no CA: how a hub dials its own port (its /mcp agents),
// whatever names its certificate lists.
func PinnedConfig(r *Reloader) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is not checked against roots; VerifyConnection checks
		// the leaf is exactly this hub's own.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, r.Leaf().Raw) {
				return errors.New("certs: the hub's own port served a certificate that is not the hub's")
			}
			return nil
		},
	}
}
