package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultReloadInterval is how often Watch looks at the certificate files
// for a change (synapse hub --tls-reload-interval).
const DefaultReloadInterval = 10 * time.Second

// ErrNoPair is returned when a certificate pair cannot be loaded.
var ErrNoPair = errors.New("certs: cannot load the certificate pair")

// Reloader serves a certificate pair read from two PEM files. Handshakes
// take the current pair (GetCertificate); Reload replaces it only with a
// pair that loads, so a half-written or mismatched pair leaves the hub on
// the one it had. Connections already open keep the certificate they
// were handshaken with.
type Reloader struct {
	certFile, keyFile string
	log               *slog.Logger

	cur atomic.Pointer[tls.Certificate]

	mu    sync.Mutex // serialises Reload; guards seen
	seen  stamp      // the files as they were at the last attempt
	loads atomic.Int64
}

// stamp is what Watch compares to notice that a file changed: each
// file's size, modification time and identity (a file renamed over it,
// as SelfSigned and most tools replace certificates, is another file even
// within a coarse clock tick).
type stamp struct{ cert, key os.FileInfo }

func stampOf(certFile, keyFile string) stamp {
	var s stamp
	s.cert, _ = os.Stat(certFile)
	s.key, _ = os.Stat(keyFile)
	return s
}

func (s stamp) same(o stamp) bool { return sameFile(s.cert, o.cert) && sameFile(s.key, o.key) }

func sameFile(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// NewReloader loads the pair in certFile and keyFile; it fails if that
// pair does not load. log (default slog.Default) is told of each reload.
func NewReloader(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, log: log}
	r.seen = stampOf(certFile, keyFile)
	c, err := loadPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.cur.Store(c)
	r.loads.Add(1)
	return r, nil
}

// loadPair reads and checks a pair: the key matches the certificate, and
// the certificate parses.
func loadPair(certFile, keyFile string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w %s and %s: %v", ErrNoPair, certFile, keyFile, err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%w %s: %v", ErrNoPair, certFile, err)
		}
	}
	return &c, nil
}

// GetCertificate is tls.Config.GetCertificate: the current pair.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cur.Load(), nil
}

// Leaf is the current certificate.
func (r *Reloader) Leaf() *x509.Certificate { return r.cur.Load().Leaf }

// Loads counts the pairs loaded, the first included.
func (r *Reloader) Loads() int64 { return r.loads.Load() }

// Files are the certificate and key files the reloader reads.
func (r *Reloader) Files() (cert, key string) { return r.certFile, r.keyFile }

// Reload reads the files again. A pair that loads replaces the current
// one for every handshake from now on; one that does not is reported (and
// logged) and the current pair stays.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = stampOf(r.certFile, r.keyFile)
	return r.reloadLocked()
}

func (r *Reloader) reloadLocked() error {
	c, err := loadPair(r.certFile, r.keyFile)
	if err != nil {
		old := r.cur.Load().Leaf
		r.log.Error("tls: the new certificate pair does not load; still serving the old one",
			"err", err, "serving", Describe(old))
		return err
	}
	r.cur.Store(c)
	r.loads.Add(1)
	r.log.Info("tls: certificate reloaded", "cert", r.certFile, "serving", Describe(c.Leaf))
	return nil
}

// Watch reloads when either file's size or modification time changes,
// looking every interval (DefaultReloadInterval if 0) until ctx ends. A
// pair that fails to load is tried again once a file changes again, so a
// pair written one file at a time is picked up when both are there.
func (r *Reloader) Watch(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		if now := stampOf(r.certFile, r.keyFile); !now.same(r.seen) {
			r.seen = now
			_ = r.reloadLocked() // logged
		}
		r.mu.Unlock()
	}
}

// Describe names a certificate for a log or a banner: its subject, the
// names it is valid for and when it expires.
func Describe(c *x509.Certificate) string {
	if c == nil {
		return "none"
	}
	names := certNames(c)
	subject := c.Subject.CommonName
	if subject == "" {
		subject = c.Subject.String()
	}
	return fmt.Sprintf("%q for %s, expires %s", subject, strings.Join(names, ","), c.NotAfter.UTC().Format(time.RFC3339))
}
