package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/internal/hubproc"
	"github.com/synapse-hub/synapse/internal/testbin"
)

// armProc is a real 'synapse arm' process.
type armProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startArm(t *testing.T, bin, uri, dir string, extra ...string) *armProc {
	t.Helper()
	// env.txt is written before events.jsonl, which the tests wait on:
	// once an event is there, its environment line is too.
	script := `printf '%s|%s|%s|%s\n' "$SYNAPSE_SEQ" "$SYNAPSE_SENDER" "$SYNAPSE_PAYLOAD" "$SYNAPSE_NAME" >> "$ARM_DIR/env.txt"; cat >> "$ARM_DIR/events.jsonl"`
	args := append([]string{"arm", "proj/bravo", "--uri", uri, "--exec", script, "--cursor", filepath.Join(dir, "bravo.cursor"), "--backoff-min", "50ms", "--backoff-max", "200ms"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "ARM_DIR="+dir)
	cmd.Stderr = os.Stderr
	hubproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &armProc{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.done })
	return p
}

// events reads the seqs the command saw on stdin, in order.
func armEvents(t *testing.T, dir string) []int64 {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "events.jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var seqs []int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var fr struct {
			Seq int64 `json:"seq"`
		}
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		if err := json.Unmarshal(sc.Bytes(), &fr); err != nil {
			t.Fatalf("the command's stdin is not one JSON frame per message: %q", sc.Text())
		}
		seqs = append(seqs, fr.Seq)
	}
	return seqs
}

// awaitEvents waits (up to a minute: a generous bound, not a timing
// claim) until the command has run n times.
func awaitEvents(t *testing.T, dir string, n int) []int64 {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := armEvents(t, dir)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitCursor waits until the cursor file holds seq.
func awaitCursor(t *testing.T, path string, seq int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if got, err := loadArmCursor(path, "proj/bravo"); err == nil && got == seq {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("the cursor is at %d (%v), not %d", got, err, seq)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sendTo(t *testing.T, uri, to, text string) {
	t.Helper()
	if code, _, e := runCmd("send", to, text, "--uri", uri, "--name", "proj/alpha"); code > exitRefused {
		t.Fatalf("send: %d %s", code, e)
	}
}

// arm runs its command once per message after its cursor, in seq order,
// across a stop (SIGTERM), a crash while idle (SIGKILL) and messages sent
// while it was down: none lost, none run twice; the agent's own mailbox is
// left alone without --ack (issue 21 item 2, INV-DG-1).
func TestArm_RunsOncePerMessageAcrossRestarts_INV_DG_1(t *testing.T) {
	bin := testbin.Synapse(t)
	uri := journalHub(t)
	dir := t.TempDir()
	sendTo(t, uri, "proj/bravo", "one") // before arm ever ran: in the mailbox
	a := startArm(t, bin, uri, dir)
	sendTo(t, uri, "proj/bravo", "two")
	sendTo(t, uri, "proj/bravo", "three")
	if got := awaitEvents(t, dir, 3); len(got) != 3 {
		t.Fatalf("first run: %v", got)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	<-a.done
	if a.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("arm exited %d on SIGTERM", a.cmd.ProcessState.ExitCode())
	}
	sendTo(t, uri, "proj/bravo", "four") // while it is down
	a = startArm(t, bin, uri, dir)
	got := awaitEvents(t, dir, 4)
	if len(got) != 4 {
		t.Fatalf("after a stop: %v", got)
	}
	awaitCursor(t, filepath.Join(dir, "bravo.cursor"), got[3]) // idle: the crash below is not during a command
	a.cmd.Process.Kill()
	<-a.done
	sendTo(t, uri, "proj/bravo", "five")
	startArm(t, bin, uri, dir)
	sendTo(t, uri, "proj/bravo", "six")
	got = awaitEvents(t, dir, 6)
	if len(got) != 6 {
		t.Fatalf("after a crash: %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("a message ran twice or out of order: %v", got)
		}
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env.txt"))
	lines := strings.Split(strings.TrimSpace(string(env)), "\n")
	if len(lines) != 6 || !strings.HasSuffix(lines[0], "|proj/alpha|one|proj/bravo") || !strings.HasSuffix(lines[5], "|proj/alpha|six|proj/bravo") {
		t.Fatalf("the command's environment: %q", lines)
	}
	// Without --ack the agent still finds every message in its mailbox.
	b := agent(t, uri, "proj/bravo")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if left, err := b.Inbox(ctx); err != nil || len(left) != 6 {
		t.Fatalf("arm without --ack consumed the agent's mailbox: %d left, %v", len(left), err)
	}
}

// --ack acknowledges a message once the command exited 0: it leaves the
// agent's mailbox (issue 21 item 2).
func TestArm_AckAcknowledgesAfterTheCommand_Issue21_2(t *testing.T) {
	bin := testbin.Synapse(t)
	uri := journalHub(t)
	dir := t.TempDir()
	sendTo(t, uri, "proj/bravo", "one")
	a := startArm(t, bin, uri, dir, "--ack", "--max-events", "1")
	<-a.done
	if code := a.cmd.ProcessState.ExitCode(); code != 0 || len(armEvents(t, dir)) != 1 {
		t.Fatalf("exit %d, events %v", code, armEvents(t, dir))
	}
	if code, out, _ := runCmd("inbox", "--uri", uri, "--name", "proj/bravo"); code != 0 || !strings.Contains(out, "No message is waiting") {
		t.Fatalf("--ack left the message in the mailbox: %s", out)
	}
}

// Bad flags are usage errors that start nothing (issue 21 item 2).
func TestArm_BadFlags_Issue21_2(t *testing.T) {
	isolate(t)
	for _, args := range [][]string{
		{"arm"},
		{"arm", "proj/bravo"}, // no --exec
		{"arm", "proj/bravo-rx", "--exec", "true"},
		{"arm", "proj/bravo", "--exec", "true", "--retries", "-1"},
		{"arm", "proj/bravo", "--exec", "true", "--exec-timeout", "0s"},
		{"arm", "proj/bravo", "--exec", "true", "--backoff-min", "1s", "--backoff-max", "10ms"},
	} {
		if code, _, e := runCmd(args...); code != exitUsage {
			t.Errorf("%v: exit %d, want 2: %s", args, code, e)
		}
	}
	cur := filepath.Join(t.TempDir(), "c")
	os.WriteFile(cur, []byte(`{"identity":"proj/other","seq":3}`), 0o600)
	if code, _, e := runCmd("arm", "proj/bravo", "--exec", "true", "--cursor", cur, "--uri", "ws://127.0.0.1:1"); code != exitUsage || !strings.Contains(e, "proj/other's") {
		t.Errorf("another agent's cursor: exit %d %s", code, e)
	}
}

// --print-unit prints a systemd template unit that systemd-analyze
// accepts (where Debian's systemd is installed), and its instance's
// environment file; --install-unit writes them (issue 21 item 2).
func TestArm_UnitsForSystemdAndLaunchd_Issue21_2(t *testing.T) {
	isolate(t)
	cfgHome := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	bin := testbin.Synapse(t)
	code, out, e := runCmd("arm", "proj/bravo", "--exec", `tmux send-keys -t agent "check inbox" Enter`, "--uri", "ws://127.0.0.1:9999", "--print-unit", "--launchd=false", "--command", bin)
	if code != 0 || !strings.Contains(out, "ExecStart=\""+bin+"\" arm %I") || !strings.Contains(out, "Restart=on-failure") ||
		!strings.Contains(out, `SYNAPSE_ARM_EXEC="tmux send-keys -t agent \"check inbox\" Enter"`) || !strings.Contains(out, "synapse-arm@proj-bravo.service") {
		t.Fatalf("--print-unit: %d\n%s\n%s", code, out, e)
	}
	if code, out, _ := runCmd("arm", "proj/bravo", "--exec", "say hi", "--print-unit", "--launchd", "--command", bin); code != 0 ||
		!strings.Contains(out, "<string>dev.synapse.arm.proj.bravo</string>") || !strings.Contains(out, "<key>SYNAPSE_ARM_EXEC</key><string>say hi</string>") {
		t.Fatalf("--launchd: %s", out)
	}
	if code, out, e := runCmd("arm", "proj/bravo", "--exec", "true", "--install-unit", "--launchd=false", "--command", bin); code != 0 || !strings.Contains(out, "systemctl --user daemon-reload") {
		t.Fatalf("--install-unit: %d %s %s", code, out, e)
	}
	unit := filepath.Join(cfgHome, "systemd", "user", "synapse-arm@.service")
	if _, err := os.Stat(filepath.Join(cfgHome, "synapse", "arm", "proj-bravo.env")); err != nil {
		t.Fatal(err)
	}
	verifyUnit(t, unit, "synapse-arm@proj-bravo.service")
}

// verifyUnit runs systemd-analyze verify on the unit (copied under the
// instance's name for a template), where Debian's systemd is installed.
func verifyUnit(t *testing.T, path, as string) {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed: the unit is not verified")
		return
	}
	dir := t.TempDir()
	dst := filepath.Join(dir, as)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(dst, b, 0o644)
	out, err := exec.Command(sa, "verify", "--man=no", dst).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify %s: %v\n%s\n%s", as, err, out, b)
	}
}
