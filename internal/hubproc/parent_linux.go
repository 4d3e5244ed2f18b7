package hubproc

import (
	"os/exec"
	"syscall"
)

// DieWithParent has the kernel SIGKILL cmd's process when the process that
// started it dies, however it dies: a benchmark or a test killed or crashed
// does not leave its hub child running (and holding its port). Call it
// before cmd.Start.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
