package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
)

// plainToTLS is what Go's TLS server answers a plain HTTP request with
// (net/http); other servers say much the same.
const plainToTLS = "Client sent an HTTP request to an HTTPS server"

// Explain says what to do about a failed dial of uri, or "" when err is
// not about TLS. body is what the server answered, if it answered (a
// plain request to a TLS port gets a 400 saying so).
func Explain(uri, body string, err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	var alert tls.AlertError
	switch {
	case errors.As(err, &unknown):
		return "the hub's certificate is not signed by a CA this client trusts: give the hub's CA with --ca FILE or SYNAPSE_CA=FILE"
	case errors.As(err, &host):
		return "the hub's certificate does not name the host in " + uri + ": connect by a name it lists (" + strings.Join(certNames(host.Certificate), ", ") +
			") or issue it for this host ('synapse tls selfsigned --host NAME')"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return "the hub's certificate has expired (or this machine's clock is wrong): renew it; the hub reloads it on SIGHUP or when its files change"
	case errors.As(err, &invalid):
		return "the hub's certificate is not valid for a server: " + invalid.Error()
	case errors.As(err, &record), strings.Contains(errString(err), "server gave HTTP response to HTTPS client"):
		return "the hub does not speak TLS: use ws:// (or http://), or start the hub with --tls-cert and --tls-key"
	case errors.As(err, &alert) && alert == 116, strings.Contains(errString(err), "certificate required"):
		return "the hub requires a client certificate: give one with --tls-client-cert and --tls-client-key (a peer hub's)"
	case strings.Contains(body, plainToTLS):
		return "the hub speaks TLS: use wss:// (or https://) and give its CA with --ca FILE or SYNAPSE_CA=FILE"
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// certNames are the DNS names and IPs a certificate is valid for.
func certNames(c *x509.Certificate) []string {
	if c == nil {
		return nil
	}
	names := append([]string(nil), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	return names
}
