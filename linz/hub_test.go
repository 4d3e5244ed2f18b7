package linz

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// synapseBinary builds cmd/synapse once per test process.
func synapseBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "synapse-linz-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "synapse")
		if out, err := exec.Command("go", "build", "-o", binPath, "../cmd/synapse").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// hubProc is one `synapse hub` on a fixed port and journal, killed and
// restarted by the nemesis. Only the nemesis goroutine (and the test
// after it stops) calls its methods.
type hubProc struct {
	bin, db string
	noDB    bool // --no-db: a restart forgets everything
	port    int
	cmd     *exec.Cmd
}

func (h *hubProc) uri() string { return "ws://127.0.0.1:" + strconv.Itoa(h.port) }

// start runs the hub and waits for its listening banner. Leases as short
// as a second let the nemesis's pauses lapse them (INV-LL-2).
func (h *hubProc) start() error {
	args := []string{"hub", "--db", h.db, "--port", strconv.Itoa(h.port), "--no-mcp", "--min-ttl", "1", "--max-claims-per-agent", "100000"}
	if h.noDB {
		args = []string{"hub", "--no-db", "--port", strconv.Itoa(h.port), "--no-mcp", "--min-ttl", "1", "--max-claims-per-agent", "100000"}
	}
	cmd := exec.Command(h.bin, args...)
	cmd.Env = append(os.Environ(), "SYNAPSE_TOKEN=")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on") {
				close(up)
			}
		}
	}()
	select {
	case <-up:
		h.cmd = cmd
		return nil
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("hub did not start: %s", stderr.String())
	}
}

// kill SIGKILLs the hub: nothing is flushed, only what was committed to
// the journal survives.
func (h *hubProc) kill() {
	if h.cmd != nil {
		h.cmd.Process.Signal(syscall.SIGKILL)
		h.cmd.Wait()
		h.cmd = nil
	}
}

// pause stops the hub for d: sockets stay open, its clock keeps running,
// leases lapse.
func (h *hubProc) pause(d time.Duration) {
	if h.cmd == nil {
		return
	}
	h.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(d)
	h.cmd.Process.Signal(syscall.SIGCONT)
}
