// Package testbin gives tests that run real `synapse` processes the binary,
// built once per test process, and free loopback ports.
package testbin

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var (
	mu     sync.Mutex
	builds = map[string]*build{} // by build tags
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Synapse builds cmd/synapse once per test process and returns its path.
func Synapse(tb testing.TB) string {
	tb.Helper()
	return SynapseTagged(tb, "")
}

// SynapseTagged is Synapse built with the comma-separated build tags
// (once per test process and tag set): the linearizability harness's
// deliberately broken build is one.
func SynapseTagged(tb testing.TB, tags string) string {
	tb.Helper()
	mu.Lock()
	b := builds[tags]
	if b == nil {
		b = &build{}
		builds[tags] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		dir, e := os.MkdirTemp("", "synapse-bin-")
		if e != nil {
			b.err = e
			return
		}
		b.path = filepath.Join(dir, "synapse")
		args := []string{"build", "-o", b.path}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		args = append(args, "github.com/synapse-hub/synapse/cmd/synapse")
		if out, e := exec.Command("go", args...).CombinedOutput(); e != nil {
			b.err = fmt.Errorf("build (tags %q): %v\n%s", tags, e, out)
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// FreePort returns a loopback port nothing listens on at the moment.
//
// The port comes from below the kernel's ephemeral range (32768-60999 here),
// which is where port 0 and every outgoing connection's local end are taken:
// a port picked by listening on port 0 and freed could be taken a moment
// later by a client's connection, and the server meant for it would fail to
// bind (CI saw etcd do so). Each test process walks the range from its own
// random start and never hands a port out twice, so processes running side
// by side rarely meet; a bind that still fails is the caller's to retry.
func FreePort(tb testing.TB) int {
	tb.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	if portNext == 0 {
		portNext = portLow + rand.IntN(portHigh-portLow)
	}
	for range portHigh - portLow {
		p := portNext
		if portNext++; portNext == portHigh {
			portNext = portLow
		}
		if portGiven[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		portGiven[p] = true
		return p
	}
	tb.Fatal("no free loopback port in 20000-32767")
	return 0
}

// AddrInUse reports whether err is a failed bind to a port that is taken.
func AddrInUse(err error) bool {
	return err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use"))
}

const portLow, portHigh = 20000, 32768

var (
	portMu    sync.Mutex
	portNext  int
	portGiven = map[int]bool{}
)
