package hubproc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

const parentEnv = "HUBPROC_TEST_PARENT"

// TestParentHelper is the parent process of TestDieWithParent: it starts a
// long sleep with DieWithParent, prints its pid and waits to be killed.
func TestParentHelper(t *testing.T) {
	if os.Getenv(parentEnv) == "" {
		return
	}
	cmd := exec.Command("sleep", "600")
	DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println(cmd.Process.Pid)
	select {}
}

// A child started with DieWithParent ends when its parent is SIGKILLed, so
// a killed benchmark or test leaves no hub process behind.
func TestDieWithParent(t *testing.T) {
	parent := exec.Command(os.Args[0], "-test.run=^TestParentHelper$")
	parent.Env = append(os.Environ(), parentEnv+"=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		t.Fatalf("parent said %q", line)
	}
	if err := syscall.Kill(child, 0); err != nil {
		t.Fatalf("the child is not running before its parent dies: %v", err)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// Killed, the child is a zombie until init reaps it: its state is Z,
		// or it is gone.
		st, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
		if err != nil || zombie(st) {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("the child (pid %d) outlived its parent by 20 s", child)
		}
	}
}

// zombie reads the state field of /proc/PID/stat.
func zombie(stat []byte) bool {
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && stat[i+2] == 'Z'
		}
	}
	return false
}
