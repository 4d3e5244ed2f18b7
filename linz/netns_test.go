package linz

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
)

// netPart puts one hub in a network namespace of its own, reached over two
// veth pairs that exist only inside this machine: the front link, over
// which agents and the other hubs reach it and it reaches them, and the
// etcd link, over which it reaches the etcd members. Cutting the etcd link
// partitions the hub from etcd while its agents still reach it (issue 22,
// item 4). Nothing listens on an address outside the machine: the other
// hubs listen on the front link's root end, etcd on loopback and the etcd
// link's root end.
type netPart struct {
	ns                 string
	rootVeth, nsVeth   string // front link
	rootEtcd, nsEtcd   string // etcd link
	rootFront, nsFront string // front link addresses (root end, namespace end)
	rootEtcdA, nsEtcdA string // etcd link addresses
	cut                atomic.Bool
}

var netSeq atomic.Int32

// newNetPart makes the namespace and links, or says why it cannot (not
// root, no iproute2, no network namespaces here).
func newNetPart() (*netPart, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("network namespaces need root (this is uid %d)", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("no ip command (apt-get install iproute2): %v", err)
	}
	k := int(netSeq.Add(1))
	pid := os.Getpid()
	tag := fmt.Sprintf("%d%d", pid%100000, k)
	a, b := 100+pid%100, (pid/100+k*7)%250
	p := &netPart{ns: "linz" + tag,
		rootVeth: "lzf" + tag + "r", nsVeth: "lzf" + tag + "n",
		rootEtcd: "lze" + tag + "r", nsEtcd: "lze" + tag + "n",
		rootFront: fmt.Sprintf("10.%d.%d.1", a, b), nsFront: fmt.Sprintf("10.%d.%d.2", a, b),
		rootEtcdA: fmt.Sprintf("10.%d.%d.5", a, b), nsEtcdA: fmt.Sprintf("10.%d.%d.6", a, b)}
	steps := [][]string{
		{"netns", "add", p.ns},
		{"link", "add", p.rootVeth, "type", "veth", "peer", "name", p.nsVeth},
		{"link", "add", p.rootEtcd, "type", "veth", "peer", "name", p.nsEtcd},
		{"link", "set", p.nsVeth, "netns", p.ns},
		{"link", "set", p.nsEtcd, "netns", p.ns},
		{"addr", "add", p.rootFront + "/30", "dev", p.rootVeth},
		{"addr", "add", p.rootEtcdA + "/30", "dev", p.rootEtcd},
		{"link", "set", p.rootVeth, "up"},
		{"link", "set", p.rootEtcd, "up"},
		{"-n", p.ns, "addr", "add", p.nsFront + "/30", "dev", p.nsVeth},
		{"-n", p.ns, "addr", "add", p.nsEtcdA + "/30", "dev", p.nsEtcd},
		{"-n", p.ns, "link", "set", "lo", "up"},
		{"-n", p.ns, "link", "set", p.nsVeth, "up"},
		{"-n", p.ns, "link", "set", p.nsEtcd, "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			p.close()
			return nil, err
		}
	}
	return p, nil
}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// command runs bin with args inside the namespace. ip netns exec execs
// bin, so the process is bin itself: signals reach it.
func (p *netPart) command(bin string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", p.ns, bin}, args...)...)
}

// partition takes the etcd link down at the namespace's end: the hub's
// packets to etcd have no route and established connections hang, while
// its front link stays up.
func (p *netPart) partition() error {
	p.cut.Store(true)
	return ip("-n", p.ns, "link", "set", p.nsEtcd, "down")
}

// heal brings the etcd link back.
func (p *netPart) heal() error {
	err := ip("-n", p.ns, "link", "set", p.nsEtcd, "up")
	if err == nil {
		p.cut.Store(false)
	}
	return err
}

// close removes the links and the namespace (deleting one end of a veth
// removes both).
func (p *netPart) close() {
	_ = ip("link", "del", p.rootVeth)
	_ = ip("link", "del", p.rootEtcd)
	_ = ip("netns", "del", p.ns)
}
