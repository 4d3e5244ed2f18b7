package linz

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/cluster/clustertest"
	"github.com/synapse-hub/synapse/internal/hubproc"
	"github.com/synapse-hub/synapse/internal/testbin"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// The fleet harness's etcd is three member processes, so that SIGKILL of
// the leader is a real crash: either Debian's etcd 3.4 binary (what many
// users run), or etcd 3.7 embedded in this test binary, re-executed as a
// child with its member's settings in $LINZ_ETCD_MEMBER (see TestMain).

// etcdKind names the etcd a fleet run uses.
type etcdKind string

const (
	etcdDebian   etcdKind = "etcd-3.4-debian"
	etcdEmbedded etcdKind = "etcd-3.7-embedded"
)

// etcdMember is one member's settings, the same for both kinds.
type etcdMember struct {
	Name    string   `json:"name"`
	Dir     string   `json:"dir"`
	Clients []string `json:"clients"` // listened on and advertised; the first is loopback
	Peer    string   `json:"peer"`
	Initial string   `json:"initial"` // the initial cluster, name=peerURL,…
}

// etcdProc is one running member.
type etcdProc struct {
	kind etcdKind
	bin  string // the etcd binary, or this test binary
	m    etcdMember
	log  *os.File
	cmd  *exec.Cmd
}

func (e *etcdProc) args() []string {
	cs := strings.Join(e.m.Clients, ",")
	return []string{"--name", e.m.Name, "--data-dir", e.m.Dir,
		"--listen-client-urls", cs, "--advertise-client-urls", cs,
		"--listen-peer-urls", e.m.Peer, "--initial-advertise-peer-urls", e.m.Peer,
		"--initial-cluster", e.m.Initial, "--initial-cluster-token", "linz-fleet", "--log-level", "error"}
}

// start runs the member (again, on its data directory after a kill).
func (e *etcdProc) start() error {
	var cmd *exec.Cmd
	if e.kind == etcdDebian {
		cmd = exec.Command(e.bin, e.args()...)
	} else {
		b, _ := json.Marshal(e.m)
		cmd = exec.Command(e.bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), "LINZ_ETCD_MEMBER="+string(b))
	}
	cmd.Stdout, cmd.Stderr = e.log, e.log
	hubproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	e.cmd = cmd
	return nil
}

// kill SIGKILLs the member: no leadership transfer, nothing flushed but
// what it fsynced.
func (e *etcdProc) kill() {
	if e.cmd != nil {
		e.cmd.Process.Signal(syscall.SIGKILL)
		e.cmd.Wait()
		e.cmd = nil
	}
}

// etcdCluster is the fleet's three-member etcd.
type etcdCluster struct {
	kind    etcdKind
	members []*etcdProc
}

// startEtcd runs three members of kind; extra, when not empty, is a
// further client address per member (host only: the root side of a
// partitioned hub's link), listened on beside loopback.
func startEtcd(t testing.TB, kind etcdKind, extra string) *etcdCluster {
	t.Helper()
	bin := ""
	switch kind {
	case etcdDebian:
		bin = clustertest.EtcdBinary(t)
	default:
		var err error
		if bin, err = os.Executable(); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	c := &etcdCluster{kind: kind}
	var initial []string
	for i := 0; i < 3; i++ {
		cp, pp := testbin.FreePort(t), testbin.FreePort(t)
		m := etcdMember{Name: fmt.Sprintf("m%d", i), Dir: filepath.Join(dir, fmt.Sprintf("m%d", i)),
			Clients: []string{fmt.Sprintf("http://127.0.0.1:%d", cp)}, Peer: fmt.Sprintf("http://127.0.0.1:%d", pp)}
		if extra != "" {
			m.Clients = append(m.Clients, fmt.Sprintf("http://%s:%d", extra, cp))
		}
		initial = append(initial, m.Name+"="+m.Peer)
		log, err := os.Create(filepath.Join(dir, m.Name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		c.members = append(c.members, &etcdProc{kind: kind, bin: bin, m: m, log: log})
	}
	for _, e := range c.members {
		e.m.Initial = strings.Join(initial, ",")
		if err := e.start(); err != nil {
			t.Fatalf("start etcd %s: %v", e.m.Name, err)
		}
		t.Cleanup(func() { e.kill(); e.log.Close() })
	}
	for i := range c.members {
		if err := c.healthy(i, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// endpoints are the members' client URLs on loopback, or (extra) on the
// address a partitioned hub reaches them at.
func (c *etcdCluster) endpoints(extra bool) []string {
	var out []string
	for _, e := range c.members {
		u := e.m.Clients[0]
		if extra && len(e.m.Clients) > 1 {
			u = e.m.Clients[1]
		}
		out = append(out, u)
	}
	return out
}

// healthy waits until member i answers /health.
func (c *etcdCluster) healthy(i int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(c.members[i].m.Clients[0] + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd member %s not healthy in %v (%v)", c.members[i].m.Name, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leader is the index of the member that says it leads, -1 if none does.
func (c *etcdCluster) leader() int {
	for i, e := range c.members {
		if e.cmd == nil {
			continue
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: e.m.Clients[:1], DialTimeout: time.Second})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, e.m.Clients[0])
		cancel()
		cli.Close()
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}

// TestMain re-executes this test binary as an embedded etcd 3.7 member
// when $LINZ_ETCD_MEMBER holds its settings; otherwise it runs the tests.
func TestMain(m *testing.M) {
	if s := os.Getenv("LINZ_ETCD_MEMBER"); s != "" {
		os.Exit(runEtcdMember(s))
	}
	os.Exit(m.Run())
}

func runEtcdMember(s string) int {
	var m etcdMember
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		fmt.Fprintln(os.Stderr, "LINZ_ETCD_MEMBER:", err)
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir, cfg.LogLevel = m.Name, m.Dir, "error"
	cfg.InitialCluster, cfg.InitialClusterToken = m.Initial, "linz-fleet"
	parse := func(ss ...string) []url.URL {
		var out []url.URL
		for _, s := range ss {
			u, err := url.Parse(s)
			if err != nil {
				panic(err)
			}
			out = append(out, *u)
		}
		return out
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = parse(m.Clients...), parse(m.Clients...)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = parse(m.Peer), parse(m.Peer)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded etcd:", err)
		return 1
	}
	select {
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "embedded etcd:", err)
		return 1
	case <-e.Server.StopNotify():
		return 1
	}
}
