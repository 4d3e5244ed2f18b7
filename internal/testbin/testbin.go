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
	once sync.Once
	path string
	err  error
)

// Synapse builds cmd/synapse once per test process and returns its path.
func Synapse(tb testing.TB) string {
	tb.Helper()
	once.Do(func() {
		dir, e := os.MkdirTemp("", "synapse-bin-")
		if e != nil {
			err = e
			return
		}
		path = filepath.Join(dir, "synapse")
		if out, e := exec.Command("go", "build", "-o", path, "github.com/synapse-hub/synapse/cmd/synapse").CombinedOutput(); e != nil {
			err = fmt.Errorf("build: %v\n%s", e, out)
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	return path
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
