package linz

import (
	"errors"
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

// child is a hub process the nemesis kills and pauses: one `synapse hub`
// (hubProc) or one hub of a fleet (fleetHub). Only the nemesis goroutine
// (and the test after it stops) calls its methods.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// launch starts cmd and waits for its listening banner; it fails when the
// process exits first or prints none within a minute.
func (c *child) launch(cmd *exec.Cmd) error {
	hubproc.DieWithParent(cmd) // a killed test run leaves no hub behind
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	up := hubproc.Listening(out)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-up:
		c.cmd, c.done = cmd, done
		return nil
	case <-done:
		return errors.New("it exited before listening")
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		return errors.New("it printed no listening banner in a minute")
	}
}

// kill SIGKILLs the hub: nothing is flushed, only what was committed (to
// the journal, or etcd) survives.
func (c *child) kill() {
	if c.cmd != nil {
		c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
		c.cmd = nil
	}
}

// dump asks the hub for its goroutines (SIGQUIT: the Go runtime writes
// them to stderr, the hub's log) and waits for it to exit: how a hub that
// stopped answering is seen from the inside.
func (c *child) dump() {
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
	}
	c.cmd = nil
}

// pause stops the hub for d: sockets stay open, its clock keeps running,
// leases lapse.
func (c *child) pause(d time.Duration) {
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(d)
	c.cmd.Process.Signal(syscall.SIGCONT)
}

// hubProc is one `synapse hub` on a fixed port and journal, killed and
// restarted by the nemesis.
type hubProc struct {
	child
	bin, db string
	noDB    bool     // --no-db: a restart forgets everything
	args    []string // more flags for every start (the journal's windows)
	port    int
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
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := h.launch(cmd); err != nil {
		return fmt.Errorf("hub did not start (%v): %s", err, stderr.String())
	}
	return nil
}
