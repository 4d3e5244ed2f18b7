package main

// tls: `synapse tls selfsigned`, a CA and certificates for trying TLS out
// and for tests, without openssl (package certs; docs/security.md, "TLS").

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/certs"
)

const tlsUsage = `Usage: synapse tls selfsigned --out DIR [--host NAME[,NAME…]]

Makes what a hub needs to serve TLS, for testing and trying it out:
  selfsigned   a CA and, signed by it, a certificate for the hub and one for
               peer hubs' client links, as PEM files in DIR

A fleet in production has its own CA; see docs/security.md, "TLS".
`

const selfsignedUsage = `Usage: synapse tls selfsigned --out DIR [--host NAME[,NAME…]] [--days N] [--ca DIR]

Writes, in DIR (created 0700; keys 0600):
  ca.pem, ca-key.pem           a new CA (or --ca DIR's, to sign with it)
  cert.pem, key.pem            the hub's certificate for --host, signed by it
  client.pem, client-key.pem   a client certificate for peer hubs

Then:
  synapse hub --tls-cert DIR/cert.pem --tls-key DIR/key.pem
  SYNAPSE_CA=DIR/ca.pem synapse who --uri wss://localhost:8876
Peer hubs: --ca DIR/ca.pem on the dialling hub; to require client
certificates, --tls-client-ca DIR/ca.pem on the hub dialled and
--tls-client-cert DIR/client.pem --tls-client-key DIR/client-key.pem on
the one dialling. Files are replaced whole, so a hub watching them reloads
the new pair.

Flags:
`

func runTLS(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, tlsUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, tlsUsage)
		return exitOK
	case "selfsigned":
		return runTLSSelfSigned(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "synapse tls: unknown verb %q: say selfsigned.\n", args[0])
	return exitUsage
}

func runTLSSelfSigned(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tls selfsigned", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, selfsignedUsage); fs.PrintDefaults() }
	out := fs.String("out", "", "`DIR` to write the PEM files in (required)")
	var hostList []string // --host may repeat; each comma-separated
	fs.Func("host", "DNS names and IPs the hub's certificate is valid for, comma-separated or repeated: every name clients dial it by (default localhost,127.0.0.1,::1)", func(v string) error {
		hostList = append(hostList, v)
		return nil
	})
	days := fs.Int("days", int(certs.DefaultValidity/(24*time.Hour)), "days the certificates are valid")
	ca := fs.String("ca", "", "sign with the CA in `DIR` (its ca.pem and ca-key.pem) instead of making a new one: a second hub's certificate the same clients trust")
	asJSON := fs.Bool("json", false, "print the files written as JSON")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(stderr, "tls selfsigned", "unexpected argument %q", pos[0])
	}
	if *out == "" {
		return usageError(stderr, "tls selfsigned", "--out DIR is required")
	}
	if *days <= 0 {
		return usageError(stderr, "tls selfsigned", "--days %d: want a positive number", *days)
	}
	var names []string
	if len(hostList) == 0 {
		hostList = []string{"localhost,127.0.0.1,::1"}
	}
	for _, h := range strings.Split(strings.Join(hostList, ","), ",") {
		if h = strings.TrimSpace(h); h != "" {
			names = append(names, h)
		}
	}
	if len(names) == 0 {
		return usageError(stderr, "tls selfsigned", "--host: name at least one host")
	}
	w, err := certs.SelfSigned(*out, certs.Options{Hosts: names, Validity: time.Duration(*days) * 24 * time.Hour, CA: *ca})
	if err != nil {
		fmt.Fprintf(stderr, "synapse tls selfsigned: %v\n", err)
		return exitRefused
	}
	if *asJSON {
		printJSON(stdout, map[string]any{"ca": w.CA, "ca_key": w.CAKey, "cert": w.Cert, "key": w.Key,
			"client_cert": w.ClientCert, "client_key": w.ClientKey, "hosts": w.Hosts, "not_after": w.NotAfter.UTC().Format(time.RFC3339)})
		return exitOK
	}
	fmt.Fprintf(stdout, "wrote %s (CA), %s and %s (the hub, for %s), %s and %s (peer hubs' client certificate); valid until %s.\n",
		w.CA, w.Cert, w.Key, strings.Join(w.Hosts, ", "), w.ClientCert, w.ClientKey, w.NotAfter.UTC().Format("2006-01-02"))
	fmt.Fprintf(stdout, "  serve:   synapse hub --tls-cert %s --tls-key %s\n  connect: SYNAPSE_CA=%s synapse who --uri wss://%s:8876\n",
		w.Cert, w.Key, w.CA, uriHost(w.Hosts[0]))
	return exitOK
}

// uriHost is host as it goes in a URI (an IPv6 address in brackets).
func uriHost(host string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}
