package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// SelfSigned's files make a pair that loads, a client certificate, and a
// CA that verifies both; keys are not world-readable (issue 23 item 6).
func TestSelfSigned_WritesAVerifiablePairAndClientCert_Issue23_TLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	w, err := SelfSigned(dir, Options{Hosts: []string{"hub.example", "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := LoadPool(w.CA)
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]string{{w.Cert, w.Key}, {w.ClientCert, w.ClientKey}} {
		c, err := loadPair(pair[0], pair[1])
		if err != nil {
			t.Fatal(err)
		}
		usage := x509.ExtKeyUsageServerAuth
		if pair[0] == w.ClientCert {
			usage = x509.ExtKeyUsageClientAuth
		}
		if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("%s does not verify against %s: %v", pair[0], w.CA, err)
		}
		fi, _ := os.Stat(pair[1])
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %04o; want 0600", pair[1], fi.Mode().Perm())
		}
	}
	c, _ := loadPair(w.Cert, w.Key)
	if err := c.Leaf.VerifyHostname("hub.example"); err != nil {
		t.Error(err)
	}
	if err := c.Leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Error(err)
	}
	// Signing with the same CA: a second hub the same clients trust.
	w2, err := SelfSigned(t.TempDir(), Options{CA: dir, Hosts: []string{"other.example"}})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := loadPair(w2.Cert, w2.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.example"}); err != nil {
		t.Errorf("a certificate signed with --ca does not verify against that CA: %v", err)
	}
}

// Watch reloads once the files change, and a pair that does not load
// keeps the old one until the files change again (issue 23 item 6).
func TestReloader_WatchReloadsChangedFiles_KeepsOldOnBrokenPair_Issue23_TLS(t *testing.T) {
	dir := t.TempDir()
	first, err := SelfSigned(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReloader(first.Cert, first.Key, quiet())
	if err != nil {
		t.Fatal(err)
	}
	firstLeaf := r.Leaf()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Watch(ctx, 20*time.Millisecond)

	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30 s: %s", what)
			}
		}
	}
	if _, err := SelfSigned(dir, Options{Hosts: []string{"second.example"}}); err != nil {
		t.Fatal(err)
	}
	waitFor("Watch did not reload the new pair", func() bool { return r.Loads() == 2 })
	if r.Leaf().Equal(firstLeaf) || r.Leaf().DNSNames[0] != "second.example" {
		t.Fatalf("serving %s; want the second pair", Describe(r.Leaf()))
	}
	second := r.Leaf()

	// Half a pair: the certificate file is cut short.
	if err := os.WriteFile(first.Cert, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); !errors.Is(err, ErrNoPair) {
		t.Fatalf("Reload of a cut-short certificate: %v; want ErrNoPair", err)
	}
	if got, _ := r.GetCertificate(nil); !got.Leaf.Equal(second) {
		t.Fatal("a broken pair replaced the one being served")
	}
	if _, err := SelfSigned(dir, Options{Hosts: []string{"third.example"}}); err != nil {
		t.Fatal(err)
	}
	waitFor("Watch did not reload the pair written after a broken one", func() bool { return r.Leaf().DNSNames[0] == "third.example" })
}

// Explain names what to do for each TLS failure a client meets, against
// real handshakes.
func TestExplain_SaysWhatToDo_Issue23_TLS(t *testing.T) {
	w, err := SelfSigned(t.TempDir(), Options{Hosts: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReloader(w.Cert, w.Key, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", ServerConfig(r, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	handshake := func(cfg *tls.Config) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), cfg)
		if err == nil {
			c.Close()
		}
		return err
	}
	good, _ := ClientConfig(w.CA, nil)
	good.ServerName = "localhost"
	if err := handshake(good); err != nil {
		t.Fatalf("the right CA and name: %v", err)
	}
	other, _ := SelfSigned(t.TempDir(), Options{})
	wrong, _ := ClientConfig(other.CA, nil)
	wrong.ServerName = "localhost"
	if hint := Explain("wss://localhost", "", handshake(wrong)); !strings.Contains(hint, "--ca FILE or SYNAPSE_CA") {
		t.Errorf("wrong CA: %q", hint)
	}
	named, _ := ClientConfig(w.CA, nil)
	named.ServerName = "elsewhere.example"
	if hint := Explain("wss://elsewhere.example", "", handshake(named)); !strings.Contains(hint, "does not name") || !strings.Contains(hint, "localhost") {
		t.Errorf("wrong host: %q", hint)
	}
	if hint := Explain("ws://x", "Client sent an HTTP request to an HTTPS server.", errors.New("status 400")); !strings.Contains(hint, "use wss://") {
		t.Errorf("plain to TLS: %q", hint)
	}
	if hint := Explain("ws://x", "", errors.New("connection refused")); hint != "" {
		t.Errorf("not about TLS: %q", hint)
	}
}
