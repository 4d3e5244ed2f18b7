// Package clustertest starts real etcd servers (embedded, etcd v3.7) for
// the tests of the packages that run hubs on etcd.
package clustertest

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/internal/testbin"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// Etcd is one embedded etcd member.
type Etcd struct {
	cfg       *embed.Config
	e         *embed.Etcd
	Endpoint  string // http://127.0.0.1:port, for clients
	closeOnce sync.Once
	stopped   bool
}

// StartTLS is Start serving clients over TLS (https://) with the pair in
// certFile and keyFile; with clientCA it requires client certificates
// signed by it.
func StartTLS(t testing.TB, certFile, keyFile, clientCA string) *Etcd {
	t.Helper()
	return start(t, true, func(cfg *embed.Config) {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: clientCA, ClientCertAuth: clientCA != ""}
		for i := range cfg.ListenClientUrls {
			cfg.ListenClientUrls[i].Scheme = "https"
			cfg.AdvertiseClientUrls[i].Scheme = "https"
		}
	})
}

// Start runs a single-member etcd in a temporary folder on loopback ports
// for the test's length. unsafeNoFsync skips fsync (unit tests only: a
// real deployment fsyncs every commit).
func Start(t testing.TB, unsafeNoFsync bool) *Etcd {
	t.Helper()
	return start(t, unsafeNoFsync, nil)
}

func start(t testing.TB, unsafeNoFsync bool, adjust func(*embed.Config)) *Etcd {
	t.Helper()
	for try := 1; ; try++ {
		x, err := startOnce(t, unsafeNoFsync, adjust)
		if err == nil {
			t.Cleanup(x.Close)
			return x
		}
		if !testbin.AddrInUse(err) || try == bindTries {
			t.Fatalf("start etcd: %v", err)
		}
	}
}

func startOnce(t testing.TB, unsafeNoFsync bool, adjust func(*embed.Config)) (*Etcd, error) {
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
	if adjust != nil {
		adjust(cfg)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, errors.New("etcd did not become ready in 30 s")
	}
	return &Etcd{cfg: cfg, e: e, Endpoint: cfg.AdvertiseClientUrls[0].String()}, nil
}

// Close stops the member (embed.Etcd panics when closed twice).
func (x *Etcd) Close() {
	x.closeOnce.Do(func() {
		if x.e != nil {
			x.e.Close()
		}
	})
}

// Restart starts the stopped member again on its data and ports: what a
// hub sees when its etcd comes back.
func (x *Etcd) Restart(t testing.TB) {
	t.Helper()
	x.Close()
	// Its ports were free a moment ago; another test of a parallel run may
	// hold one briefly (a free-port probe), so a busy port is tried again.
	var e *embed.Etcd
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if e, err = embed.StartEtcd(x.cfg); err == nil || !testbin.AddrInUse(err) || time.Now().After(deadline) {
			break
		}
	}
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
	u, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", testbin.FreePort(t)))
	return *u
}

// bindTries is how many sets of ports a start tries before it gives up: a
// port free when picked can be bound by another process before etcd binds it.
const bindTries = 5

// Cluster is a multi-member etcd, each member embedded in this process.
type Cluster struct {
	Members []*Etcd
}

// Endpoints lists every member's client URL.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.Endpoint
	}
	return out
}

// Leader is the index of the member that leads now, -1 if none does.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if m.e != nil && m.e.Server.Leader() == m.e.Server.MemberID() && !m.stopped {
			return i
		}
	}
	return -1
}

// Crash stops member i as a crash would: no leadership transfer, listeners
// closed (ETCD.md pitfall E3: Close would hand leadership over first).
func (c *Cluster) Crash(i int) {
	m := c.Members[i]
	m.stopped = true
	m.closeOnce.Do(func() {
		m.e.Server.HardStop()
		for _, l := range m.e.Clients {
			l.Close()
		}
		for _, l := range m.e.Peers {
			l.Close()
		}
		m.e.Close()
	})
}

// StartCluster runs an n-member etcd on loopback ports for the test's
// length (fsync on: members share this machine's disk).
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	for try := 1; ; try++ {
		c, err := startClusterOnce(t, n)
		if err == nil {
			for _, m := range c.Members {
				t.Cleanup(m.Close)
			}
			return c
		}
		if !testbin.AddrInUse(err) || try == bindTries {
			t.Fatalf("start etcd cluster: %v", err)
		}
	}
}

// startClusterOnce starts every member; on any member's failure it closes
// the others and returns the first error.
func startClusterOnce(t testing.TB, n int) (*Cluster, error) {
	dir := t.TempDir()
	cfgs := make([]*embed.Config, n)
	initial := ""
	for i := range cfgs {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		cfg.LogLevel = "error"
		cfg.LogOutputs = []string{filepath.Join(dir, cfg.Name+".log")}
		cu, pu := freeURL(t), freeURL(t)
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
		cfg.InitialClusterToken = "synapse-test"
		if i > 0 {
			initial += ","
		}
		initial += cfg.Name + "=" + pu.String()
		cfgs[i] = cfg
	}
	c := &Cluster{}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, cfg := range cfgs {
		cfg.InitialCluster = initial
		x := &Etcd{cfg: cfg, Endpoint: cfg.ListenClientUrls[0].String()}
		c.Members = append(c.Members, x)
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				errs[i] = err
				return
			}
			x.e = e
			select {
			case <-e.Server.ReadyNotify():
			case <-time.After(60 * time.Second):
				errs[i] = fmt.Errorf("member %d not ready in 60 s", i)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, m := range c.Members {
			m.Close()
		}
		return nil, err
	}
	return c, nil
}

// Binary is an etcd server run from its binary as a child process (for
// example Debian's etcd-server, etcd 3.4): what many users run.
type Binary struct {
	Endpoint string
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process has been waited for
	log      string        // its log file
}

// EtcdBinary finds an etcd binary: $SYNAPSE_ETCD_BIN, else /usr/bin/etcd.
// Under CI (CI set) a missing binary fails the test, since ./deps.sh installs
// Debian's etcd-server; elsewhere the test is skipped with how to get it.
func EtcdBinary(t testing.TB) string {
	t.Helper()
	path := os.Getenv("SYNAPSE_ETCD_BIN")
	if path == "" {
		path = "/usr/bin/etcd"
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no etcd binary at %s: ./deps.sh installs Debian's etcd-server", path)
		}
		t.Skipf("no etcd binary at %s (apt-get install etcd-server, or set SYNAPSE_ETCD_BIN)", path)
	}
	return path
}

// StartBinary runs the etcd binary at path on loopback ports in a temporary
// folder for the test's length and waits until it answers.
func StartBinary(t testing.TB, path string) *Binary {
	t.Helper()
	return StartBinaryCluster(t, path, 1).Members[0]
}

// BinaryCluster is an n-member etcd, each member a child process of the
// etcd binary: killing one with SIGKILL is a real crash.
type BinaryCluster struct {
	Members []*Binary
}

// Endpoints lists every member's client URL.
func (c *BinaryCluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.Endpoint
	}
	return out
}

// Kill sends SIGKILL to member i.
func (c *BinaryCluster) Kill(i int) {
	c.Members[i].kill()
}

func (b *Binary) kill() {
	b.cmd.Process.Kill()
	<-b.exited
}

// StartBinaryCluster runs n members of the etcd binary at path. A member
// that exits because a port it was given is taken meanwhile makes the whole
// cluster start again on other ports.
func StartBinaryCluster(t testing.TB, path string, n int) *BinaryCluster {
	t.Helper()
	for try := 1; ; try++ {
		c, err := startBinaryClusterOnce(t, path, n)
		if err == nil {
			t.Cleanup(func() {
				for _, m := range c.Members {
					m.kill()
				}
			})
			return c
		}
		if !testbin.AddrInUse(err) || try == bindTries {
			t.Fatal(err)
		}
	}
}

func startBinaryClusterOnce(t testing.TB, path string, n int) (*BinaryCluster, error) {
	dir := t.TempDir()
	type urls struct{ c, p url.URL }
	us := make([]urls, n)
	initial := ""
	for i := range us {
		us[i] = urls{freeURL(t), freeURL(t)}
		if i > 0 {
			initial += ","
		}
		initial += fmt.Sprintf("m%d=%s", i, us[i].p.String())
	}
	c := &BinaryCluster{}
	stop := func(err error) (*BinaryCluster, error) {
		for _, m := range c.Members {
			m.kill()
		}
		return nil, err
	}
	for i, u := range us {
		name := fmt.Sprintf("m%d", i)
		cmd := exec.Command(path, "--name", name, "--data-dir", filepath.Join(dir, name),
			"--listen-client-urls", u.c.String(), "--advertise-client-urls", u.c.String(),
			"--listen-peer-urls", u.p.String(), "--initial-advertise-peer-urls", u.p.String(),
			"--initial-cluster", initial, "--initial-cluster-token", "synapse-test", "--log-level", "error")
		logPath := filepath.Join(dir, name+".log")
		logf, err := os.Create(logPath)
		if err != nil {
			return stop(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			logf.Close()
			return stop(fmt.Errorf("start %s: %v", path, err))
		}
		m := &Binary{Endpoint: u.c.String(), cmd: cmd, exited: make(chan struct{}), log: logPath}
		go func() {
			cmd.Wait()
			logf.Close()
			close(m.exited)
		}()
		c.Members = append(c.Members, m)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, m := range c.Members {
		for {
			resp, err := http.Get(m.Endpoint + "/health")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-m.exited:
				out, _ := os.ReadFile(m.log)
				return stop(fmt.Errorf("etcd member %s exited before it was healthy: %s", m.Endpoint, out))
			default:
			}
			if time.Now().After(deadline) {
				return stop(fmt.Errorf("etcd member %s not healthy in 60 s", m.Endpoint))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c, nil
}
