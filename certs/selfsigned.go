package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names SelfSigned writes in its folder.
const (
	CAFile         = "ca.pem"         // the CA's certificate: what clients trust (--ca, SYNAPSE_CA) and hubs check peers' certificates against (--tls-client-ca)
	CAKeyFile      = "ca-key.pem"     // the CA's key, to sign more certificates (keep it, or delete it)
	CertFile       = "cert.pem"       // the hub's certificate (--tls-cert)
	KeyFile        = "key.pem"        // its key (--tls-key)
	ClientCertFile = "client.pem"     // a client certificate (--tls-client-cert), for peer hubs
	ClientKeyFile  = "client-key.pem" // its key (--tls-client-key)
)

// DefaultValidity is how long SelfSigned's certificates are valid
// (synapse tls selfsigned --days).
const DefaultValidity = 365 * 24 * time.Hour

// Options configure SelfSigned.
type Options struct {
	Hosts    []string      // DNS names and IPs the hub's certificate names; default localhost, 127.0.0.1, ::1
	Validity time.Duration // default DefaultValidity
	Now      time.Time     // default time.Now(); certificates are valid from an hour before
	// CA signs with an existing CA (its ca.pem and ca-key.pem in this
	// folder) instead of making a new one: a second hub's certificate the
	// same clients trust.
	CA string
}

// Written are the files SelfSigned wrote.
type Written struct {
	CA, CAKey, Cert, Key, ClientCert, ClientKey string
	Hosts                                       []string
	NotAfter                                    time.Time
}

// SelfSigned writes a CA and, signed by it, a server certificate for
// opts.Hosts and a client certificate, as PEM files in dir (created 0700;
// keys 0600). It is for tests and for trying TLS out: a production fleet
// has its own CA.
func SelfSigned(dir string, opts Options) (Written, error) {
	if len(opts.Hosts) == 0 {
		opts.Hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	if opts.Validity <= 0 {
		opts.Validity = DefaultValidity
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Written{}, fmt.Errorf("certs: %w", err)
	}
	w := Written{
		CA: filepath.Join(dir, CAFile), CAKey: filepath.Join(dir, CAKeyFile),
		Cert: filepath.Join(dir, CertFile), Key: filepath.Join(dir, KeyFile),
		ClientCert: filepath.Join(dir, ClientCertFile), ClientKey: filepath.Join(dir, ClientKeyFile),
		Hosts: opts.Hosts, NotAfter: opts.Now.Add(opts.Validity),
	}
	notBefore := opts.Now.Add(-time.Hour)

	var ca *x509.Certificate
	var caKey *ecdsa.PrivateKey
	if opts.CA != "" {
		var err error
		if ca, caKey, err = readCA(filepath.Join(opts.CA, CAFile), filepath.Join(opts.CA, CAKeyFile)); err != nil {
			return Written{}, err
		}
		w.CA, w.CAKey = filepath.Join(opts.CA, CAFile), filepath.Join(opts.CA, CAKeyFile)
	} else {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return Written{}, fmt.Errorf("certs: CA key: %w", err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: "synapse test CA", Organization: []string{"synapse"}},
			NotBefore: notBefore, NotAfter: w.NotAfter,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return Written{}, fmt.Errorf("certs: CA: %w", err)
		}
		if ca, err = x509.ParseCertificate(der); err != nil {
			return Written{}, fmt.Errorf("certs: CA: %w", err)
		}
		caKey = key
		if err := writePEM(w.CA, "CERTIFICATE", der, 0o644); err != nil {
			return Written{}, err
		}
		if err := writeKey(w.CAKey, key); err != nil {
			return Written{}, err
		}
	}

	server := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: opts.Hosts[0], Organization: []string{"synapse"}},
		NotBefore: notBefore, NotAfter: w.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range opts.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			server.IPAddresses = append(server.IPAddresses, ip)
		} else {
			server.DNSNames = append(server.DNSNames, h)
		}
	}
	if err := issue(w.Cert, w.Key, server, ca, caKey); err != nil {
		return Written{}, err
	}
	client := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "synapse peer", Organization: []string{"synapse"}},
		NotBefore: notBefore, NotAfter: w.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := issue(w.ClientCert, w.ClientKey, client, ca, caKey); err != nil {
		return Written{}, err
	}
	return w, nil
}

// issue signs tmpl with a fresh key by ca and writes the pair.
func issue(certFile, keyFile string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("certs: key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("certs: certificate: %w", err)
	}
	// The key first: a Watch that sees the certificate change finds its key.
	if err := writeKey(keyFile, key); err != nil {
		return err
	}
	return writePEM(certFile, "CERTIFICATE", der, 0o644)
}

func readCA(certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: --ca: %w", err)
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: --ca: %w (the CA's key is needed to sign)", err)
	}
	cp, _ := pem.Decode(cb)
	kp, _ := pem.Decode(kb)
	if cp == nil || kp == nil {
		return nil, nil, fmt.Errorf("certs: --ca: %s or %s is not PEM", certFile, keyFile)
	}
	ca, err := x509.ParseCertificate(cp.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: --ca %s: %w", certFile, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kp.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: --ca %s: %w", keyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, errors.New("certs: --ca: the CA's key is not an ECDSA key ('synapse tls selfsigned' makes one)")
	}
	return ca, key, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("certs: key: %w", err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

// writePEM replaces path whole (a temporary file renamed over it), so a
// hub watching it never reads half a file.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := os.Chmod(tmp, mode); err != nil { // WriteFile keeps an existing file's mode
		return fmt.Errorf("certs: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}
