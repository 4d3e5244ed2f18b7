// Package clustertest starts real etcd servers (embedded, etcd v3.7) for
// the tests of the packages that run hubs on etcd.
package clustertest

import (
	"fmt"
	"net"
	"net/url"

	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Etcd is one embedded etcd member.
type Etcd struct {
	cfg       *embed.Config
	e         *embed.Etcd
	Endpoint  string // http://127.0.0.1:port, for clients
	closeOnce sync.Once
}

// Start runs a single-member etcd in a temporary folder on loopback ports
// for the test's length. unsafeNoFsync skips fsync (unit tests only: a
// real deployment fsyncs every commit).
func Start(t testing.TB, unsafeNoFsync bool) *Etcd {
	t.Helper()
	dir := t.TempDir()
	cfg := embed.NewConfig()
	cfg.Name = "m0"
	cfg.Dir = filepath.Join(dir, "m0")
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	cfg.UnsafeNoFsync = unsafeNoFsync
	cu, pu := freeURL(t), freeURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String() // embed.NewConfig filled it from the defaults
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		t.Fatal("etcd did not become ready in 30 s")
	}
	x := &Etcd{cfg: cfg, e: e, Endpoint: cu.String()}
	t.Cleanup(x.Close)
	return x
}

// Close stops the member (embed.Etcd panics when closed twice).
func (x *Etcd) Close() { x.closeOnce.Do(func() { x.e.Close() }) }

// Restart starts the stopped member again on its data and ports: what a
// hub sees when its etcd comes back.
func (x *Etcd) Restart(t testing.TB) {
	t.Helper()
	x.Close()
	e, err := embed.StartEtcd(x.cfg)
	if err != nil {
		t.Fatalf("restart etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd did not come back in 30 s")
	}
	x.e, x.closeOnce = e, sync.Once{}
}

func freeURL(t testing.TB) url.URL {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	u, _ := url.Parse(fmt.Sprintf("http://%s", ln.Addr()))
	return *u
}
