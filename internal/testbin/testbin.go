// Package testbin gives tests that run real `synapse` processes the binary,
// built once per test process, and free loopback ports.
package testbin

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
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
func FreePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
