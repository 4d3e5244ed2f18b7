//go:build !linux

package hubproc

import "os/exec"

// DieWithParent does nothing where the kernel has no parent-death signal:
// a child outlives a parent that crashes.
func DieWithParent(cmd *exec.Cmd) {}
