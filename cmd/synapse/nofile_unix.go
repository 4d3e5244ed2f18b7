//go:build unix

package main

import (
	"fmt"
	"syscall"
)

// raiseNoFile makes sure this process may hold need open files (a load run
// holds one socket per agent): it raises the soft RLIMIT_NOFILE as far as
// the hard limit allows, and says what to do when that is not enough. A
// hub started as a child is this binary too: Go raises its soft limit to
// the hard one at start.
func raiseNoFile(need int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("open files limit: %w", err)
	}
	if lim.Cur >= uint64(need) {
		return nil
	}
	if lim.Max < uint64(need) {
		return fmt.Errorf("%d sockets need %d open files, and this shell allows at most %d: raise it (ulimit -Hn, as root) and run again", need-64, need, lim.Max)
	}
	lim.Cur = uint64(need)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise the open files limit to %d: %w", need, err)
	}
	return nil
}
