package main

// TLS for `synapse hub` (issue 23 item 6; docs/security.md, "TLS"): the
// flags, the listener, reloading the certificate, the TLS of links to
// peer hubs, the warning off loopback without TLS, and the /metrics token.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/synapse-hub/synapse/certs"
	"github.com/synapse-hub/synapse/gate"
)

// tlsFlags are the TLS flags of `synapse hub`.
type tlsFlags struct {
	cert, key             string // the hub's own pair: serve wss:// and https://
	clientCA              string // peer hubs must present a client certificate signed by it
	clientCert, clientKey string // the pair this hub presents when it dials peers
	ca                    string // what this hub checks wss:// peers' certificates against
	reloadInterval        time.Duration
	metricsToken          string
	metricsTokenFile      string
	etcdCA                string // a fleet's etcd over https://: its CA,
	etcdCert, etcdKey     string // and the client pair etcd may require
}

// registerTLS adds the TLS flags.
func (f *hubFlags) registerTLS(fs *flag.FlagSet) {
	t := &f.tls
	fs.StringVar(&t.cert, "tls-cert", "", "serve TLS on the hub's port with the certificate (chain) in PEM `FILE`: wss:// for agents, https:// for the dashboard, /mcp, /metrics, /health; needs --tls-key. Re-read on SIGHUP and when the files change (a pair that does not load is logged and the old one kept)")
	fs.StringVar(&t.key, "tls-key", "", "the private key of --tls-cert, PEM `FILE` (not world-readable)")
	fs.DurationVar(&t.reloadInterval, "tls-reload-interval", certs.DefaultReloadInterval, "how often the hub looks at --tls-cert, --tls-key and --tls-client-cert for a change and reloads them; 0 = only on SIGHUP")
	fs.StringVar(&t.clientCA, "tls-client-ca", "", "peer hubs (federation links, a fleet's forwards) must present a TLS client certificate signed by the CA in PEM `FILE`; others are closed 4010. Agents need none. Needs --tls-cert")
	fs.StringVar(&t.clientCert, "tls-client-cert", "", "the certificate PEM `FILE` this hub presents to wss:// peers that ask for one (their --tls-client-ca); needs --tls-client-key")
	fs.StringVar(&t.clientKey, "tls-client-key", "", "the private key of --tls-client-cert, PEM `FILE`")
	fs.StringVar(&t.ca, "ca", "", "check wss:// peers' certificates (--claim-peer, --multihub-watch, a fleet's members) against the CA in PEM `FILE` (env SYNAPSE_CA; default the system's roots)")
	fs.StringVar(&t.etcdCA, "etcd-ca", "", "with --etcd https://…: check etcd's certificate against the CA in PEM `FILE` (default the system's roots)")
	fs.StringVar(&t.etcdCert, "etcd-cert", "", "with --etcd https://…: the client certificate PEM `FILE` etcd requires (its --client-cert-auth); needs --etcd-key")
	fs.StringVar(&t.etcdKey, "etcd-key", "", "the private key of --etcd-cert, PEM `FILE`")
	fs.StringVar(&t.metricsToken, "metrics-token", "", "/metrics answers 401 without 'Authorization: Bearer TOKEN' (shows in ps: prefer --metrics-token-file)")
	fs.StringVar(&t.metricsTokenFile, "metrics-token-file", "", "read --metrics-token from the first line of `PATH` (not world-readable)")
}

// hubTLS is a hub's TLS once its files are loaded.
type hubTLS struct {
	serving         *certs.Reloader // the hub's pair; nil: plain ws://
	clientPair      *certs.Reloader // the pair presented to peers; nil: none
	etcdPair        *certs.Reloader // the pair presented to etcd; nil: none
	etcd            *tls.Config     // the etcd client's; nil: plain http://
	server          *tls.Config     // the listener's
	peer            *tls.Config     // links to wss:// peers; nil: the system's roots
	self            *tls.Config     // the hub dialling its own port (its /mcp agents)
	requirePeerCert bool
	interval        time.Duration
	log             *slog.Logger
}

// setUp loads the TLS files the flags name. A file that does not load
// is an error before the hub listens.
func (t tlsFlags) setUp(log *slog.Logger) (*hubTLS, error) {
	h := &hubTLS{interval: t.reloadInterval, log: log}
	if (t.cert == "") != (t.key == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: give both (make a pair for testing with 'synapse tls selfsigned --out DIR')")
	}
	if (t.clientCert == "") != (t.clientKey == "") {
		return nil, errors.New("--tls-client-cert and --tls-client-key go together: give both")
	}
	if t.clientCA != "" && t.cert == "" {
		return nil, errors.New("--tls-client-ca checks peers' client certificates during the TLS handshake: it needs --tls-cert and --tls-key")
	}
	if t.reloadInterval < 0 {
		return nil, fmt.Errorf("--tls-reload-interval %s: want 0 (SIGHUP only) or a positive duration", t.reloadInterval)
	}
	var err error
	if t.cert != "" {
		if err := checkKeyFile(t.key, "--tls-key"); err != nil {
			return nil, err
		}
		if h.serving, err = certs.NewReloader(t.cert, t.key, log); err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		var clientCAs *x509.CertPool
		if t.clientCA != "" {
			if clientCAs, err = certs.LoadPool(t.clientCA); err != nil {
				return nil, fmt.Errorf("--tls-client-ca: %w", err)
			}
			h.requirePeerCert = true
		}
		h.server = certs.ServerConfig(h.serving, clientCAs)
		h.self = certs.PinnedConfig(h.serving)
	}
	if t.clientCert != "" {
		if err := checkKeyFile(t.clientKey, "--tls-client-key"); err != nil {
			return nil, err
		}
		if h.clientPair, err = certs.NewReloader(t.clientCert, t.clientKey, log); err != nil {
			return nil, fmt.Errorf("--tls-client-cert/--tls-client-key: %w", err)
		}
	}
	ca := t.ca
	if ca == "" {
		ca = os.Getenv("SYNAPSE_CA")
	}
	if ca != "" || h.clientPair != nil {
		if h.peer, err = certs.ClientConfig(ca, h.clientPair); err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
	}
	if (t.etcdCert == "") != (t.etcdKey == "") {
		return nil, errors.New("--etcd-cert and --etcd-key go together: give both")
	}
	if t.etcdCert != "" {
		if err := checkKeyFile(t.etcdKey, "--etcd-key"); err != nil {
			return nil, err
		}
		if h.etcdPair, err = certs.NewReloader(t.etcdCert, t.etcdKey, log); err != nil {
			return nil, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
		}
	}
	if t.etcdCA != "" || h.etcdPair != nil {
		if h.etcd, err = certs.ClientConfig(t.etcdCA, h.etcdPair); err != nil {
			return nil, fmt.Errorf("--etcd-ca: %w", err)
		}
	}
	return h, nil
}

// checkKeyFile refuses a private key every local user can read.
func checkKeyFile(path, flagName string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flagName, err)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		return fmt.Errorf("%s %s is readable by every user (mode %04o): run 'chmod 600 %s'", flagName, path, fi.Mode().Perm(), path)
	}
	return nil
}

// on reports whether the hub serves TLS.
func (h *hubTLS) on() bool { return h != nil && h.serving != nil }

// scheme is the WebSocket scheme clients dial: wss or ws.
func (h *hubTLS) scheme() string {
	if h.on() {
		return "wss"
	}
	return "ws"
}

// httpScheme is the HTTP scheme of the dashboard, /mcp and /metrics.
func (h *hubTLS) httpScheme() string {
	if h.on() {
		return "https"
	}
	return "http"
}

// listener wraps ln in TLS when the hub serves it.
func (h *hubTLS) listener(ln net.Listener) net.Listener {
	if !h.on() {
		return ln
	}
	return tls.NewListener(ln, h.server)
}

// reload re-reads every pair; each that does not load keeps its old one.
func (h *hubTLS) reload() {
	for _, r := range h.pairs() {
		_ = r.Reload() // logged
	}
}

// keepFresh reloads the pairs on SIGHUP and, every --tls-reload-interval,
// when their files change, until ctx ends.
func (h *hubTLS) keepFresh(ctx context.Context) {
	if len(h.pairs()) == 0 {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				h.log.Info("tls: SIGHUP: reloading the certificates")
				h.reload()
			}
		}
	}()
	if h.interval > 0 {
		for _, r := range h.pairs() {
			go r.Watch(ctx, h.interval)
		}
	}
}

// pairs are the certificate pairs the hub reads from files.
func (h *hubTLS) pairs() []*certs.Reloader {
	var out []*certs.Reloader
	for _, r := range []*certs.Reloader{h.serving, h.clientPair, h.etcdPair} {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// describe is the banner's tls line.
func (h *hubTLS) describe() string {
	if !h.on() {
		return "tls: off (plain ws:// and http://; --tls-cert and --tls-key turn it on)"
	}
	cert, _ := h.serving.Files()
	s := fmt.Sprintf("tls: %s, %s; reloaded on SIGHUP", cert, certs.Describe(h.serving.Leaf()))
	if h.interval > 0 {
		s += fmt.Sprintf(" and when its files change (checked every %s)", h.interval)
	}
	if h.requirePeerCert {
		s += "; peer hubs must present a client certificate (--tls-client-ca)"
	}
	return s
}

// plaintextWarning is what a hub listening on host says when anyone off
// this machine could reach it in clear: "" on loopback or with TLS.
func plaintextWarning(host string, tlsOn bool) string {
	if tlsOn || isLoopbackHost(host) {
		return ""
	}
	return fmt.Sprintf("WARNING: listening on %s without TLS: the connect token, every claim and every chat cross the network in clear, "+
		"and anyone on the path can read or change them. Serve TLS with --tls-cert FILE --tls-key FILE "+
		"(try 'synapse tls selfsigned --out DIR --host NAME'), put the hub behind a TLS-terminating proxy or an SSH tunnel, "+
		"or listen on 127.0.0.1 (docs/security.md, \"TLS\")", host)
}

// metricsToken is the token /metrics requires: --metrics-token, or the
// first line of --metrics-token-file; "" = none.
func (t tlsFlags) resolveMetricsToken() (string, error) {
	if t.metricsTokenFile == "" {
		return t.metricsToken, nil
	}
	if t.metricsToken != "" {
		return "", errors.New("give the metrics token once: --metrics-token or --metrics-token-file, not both")
	}
	tok, err := gate.ReadTokenFile(t.metricsTokenFile)
	if err != nil {
		return "", fmt.Errorf("--metrics-token-file: %w", err)
	}
	return tok, nil
}
