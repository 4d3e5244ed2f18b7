package linz

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/internal/hubproc"
	"github.com/synapse-hub/synapse/internal/testbin"
)

func synapseBinary(t *testing.T) string { return testbin.Synapse(t) }

func freePort(t *testing.T) int { return testbin.FreePort(t) }

// hubProc is one `synapse hub` on a fixed port and journal, killed and
// restarted by the nemesis. Only the nemesis goroutine (and the test
// after it stops) calls its methods.
type hubProc struct {
	bin, db string
	noDB    bool     // --no-db: a restart forgets everything
	args    []string // more flags for every start (the journal's windows)
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
	cmd := exec.Command(h.bin, append(args, h.args...)...)
	cmd.Env = append(os.Environ(), "SYNAPSE_TOKEN=")
	hubproc.DieWithParent(cmd) // a killed test run leaves no hub behind
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	up := hubproc.Listening(out)
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
