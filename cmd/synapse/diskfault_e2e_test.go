package main

// Disk faults under a real `synapse hub` process, seen over its socket and
// /health (docs/journal.md, "Disk faults"; docs/testing.md). In every case
// the hub either refuses mutations with a journal_unavailable error frame
// saying what is wrong and what to do, keeps serving reads and says
// degraded on /health — or refuses to start, naming 'synapse journal
// check'. Once the fault is cleared and the hub restarted, every grant it
// acknowledged is there and nothing it refused is (INV-JA-1, INV-JA-2).

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/internal/hubproc"
	"github.com/synapse-hub/synapse/internal/testbin"
)

// faultHub is one `synapse hub` child of a disk-fault test.
type faultHub struct {
	prefix []string // nsenter into the test's mount namespace, when one
	db     string
	port   int
	cmd    *exec.Cmd
	uri    string
	health string
	stderr *lockedBuffer
	exited chan struct{}
}

// lockedBuffer collects a child's stderr while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// hubCommand is `synapse hub` on db and port, run through prefix (nsenter
// into a test's mount namespace) when given.
func hubCommand(t *testing.T, prefix []string, db string, port int, extra ...string) *exec.Cmd {
	args := append([]string{testbin.Synapse(t), "hub", "--db", db, "--port", strconv.Itoa(port), "--no-mcp",
		"--max-claims-per-agent", "100000"}, extra...)
	args = append(append([]string{}, prefix...), args...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "SYNAPSE_TOKEN=")
	return cmd
}

// startFaultHub starts a hub and returns once it is listening.
func startFaultHub(t *testing.T, prefix []string, db string, port int, extra ...string) *faultHub {
	t.Helper()
	h, exited := tryStartFaultHub(t, prefix, db, port, extra...)
	if h == nil {
		t.Fatalf("the hub exited before listening:\n%s", exited)
	}
	return h
}

// tryStartFaultHub starts a hub and returns it once it is listening, or
// nil and its stderr if it exited first.
func tryStartFaultHub(t *testing.T, prefix []string, db string, port int, extra ...string) (*faultHub, string) {
	t.Helper()
	h := &faultHub{
		prefix: prefix, db: db, port: port,
		cmd:    hubCommand(t, prefix, db, port, extra...),
		uri:    "ws://127.0.0.1:" + strconv.Itoa(port),
		health: "http://127.0.0.1:" + strconv.Itoa(port) + "/health",
		stderr: &lockedBuffer{},
		exited: make(chan struct{}),
	}
	h.cmd.Stderr = h.stderr
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	up := hubproc.Listening(out)
	go func() { h.cmd.Wait(); close(h.exited) }()
	t.Cleanup(h.kill)
	select {
	case <-up:
		return h, ""
	case <-h.exited:
		return nil, h.stderr.String()
	case <-time.After(60 * time.Second):
		t.Fatalf("the hub did not start within 60 s:\n%s", h.stderr)
	}
	return nil, ""
}

// restart starts another hub on the same journal and port (the previous
// one stopped).
func (h *faultHub) restart(t *testing.T, extra ...string) *faultHub {
	t.Helper()
	return startFaultHub(t, h.prefix, h.db, h.port, extra...)
}

// kill SIGKILLs the hub and waits for it: every test restart is a crash,
// so what survives is what the journal held, not what a clean stop wrote.
func (h *faultHub) kill() {
	h.cmd.Process.Signal(syscall.SIGKILL)
	<-h.exited
}

// stop ends the hub cleanly (SIGTERM), so its WAL is checkpointed into the
// database file.
func (h *faultHub) stop(t *testing.T) {
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the hub did not stop within 60 s of SIGTERM")
	}
}

// healthOf reads /health.
func (h *faultHub) healthOf(t *testing.T) map[string]any {
	t.Helper()
	resp, err := http.Get(h.health)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body
}

func (h *faultHub) dial(t *testing.T, ctx context.Context, name string) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, client.Options{URI: h.uri, Name: name, NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ledger is what the hub answered: acknowledged grants (task → epoch) and
// refused claims.
type ledger struct {
	acked   map[string]int64
	refused []string
}

func newLedger() *ledger { return &ledger{acked: map[string]int64{}} }

// claim asks for task; a grant goes into the ledger, a journal refusal is
// returned, anything else fails the test.
func (l *ledger) claim(t *testing.T, ctx context.Context, c *client.Client, task string) *client.Refused {
	t.Helper()
	cl, err := c.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{"src/" + task}})
	if err == nil {
		l.acked[task] = cl.Epoch
		return nil
	}
	var ref *client.Refused
	if errors.As(err, &ref) && ref.Code == "journal_unavailable" {
		l.refused = append(l.refused, task)
		return ref
	}
	t.Fatalf("claim %s: %v; want a grant or journal_unavailable", task, err)
	return nil
}

// claimUntilRefused claims fresh tasks until the journal refuses one.
func (l *ledger) claimUntilRefused(t *testing.T, ctx context.Context, c *client.Client, prefix string, limit int) *client.Refused {
	t.Helper()
	for i := range limit {
		if ref := l.claim(t, ctx, c, fmt.Sprintf("%s%d", prefix, i)); ref != nil {
			return ref
		}
	}
	t.Fatalf("%d claims were all granted; the fault never showed", limit)
	return nil
}

// checkFaulted pins what a hub whose journal cannot be written looks like
// from outside (INV-JA-2): mutations refused with a sentence that says why
// and what to do, reads served and showing only acknowledged grants,
// /health degraded with the reason.
func (l *ledger) checkFaulted(t *testing.T, ctx context.Context, h *faultHub, c *client.Client, ref *client.Refused, cause string) {
	t.Helper()
	for _, want := range []string{cause, "nothing was applied", "restart the hub"} {
		if !strings.Contains(ref.Message, want) {
			t.Errorf("the refusal %q does not say %q", ref.Message, want)
		}
	}
	if ref := l.claim(t, ctx, c, "after-fault"); ref == nil {
		t.Fatal("a claim was granted after the journal failed")
	}
	for task := range l.acked {
		_, err := c.Release(ctx, task, client.ReleaseOptions{})
		var rel *client.Refused
		if !errors.As(err, &rel) || rel.Code != "journal_unavailable" {
			t.Fatalf("release of %s while the journal cannot be written: %v; want journal_unavailable", task, err)
		}
		break
	}
	short, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := c.TaskDeclare(short, client.TaskDeclaration{TaskID: "board-after-fault", Title: "refused"})
	var board *client.Refused
	if !errors.As(err, &board) || board.Code != "journal_unavailable" {
		t.Fatalf("a board task declared while the journal cannot be written: %v; want journal_unavailable", err)
	}
	_, err = c.Send(short, "all", "refused chat", client.SendOptions{})
	var chat *client.Refused
	if !errors.As(err, &chat) || chat.Code != "journal_unavailable" || !strings.Contains(chat.Message, cause) {
		t.Fatalf("a chat sent while the journal cannot be written: %v; want journal_unavailable saying %q", err, cause)
	}
	if _, err := c.Who(ctx); err != nil {
		t.Fatalf("who while degraded: %v", err)
	}
	if _, err := c.Board(ctx); err != nil {
		t.Fatalf("board while degraded: %v", err)
	}
	l.checkState(t, ctx, c, "while degraded")
	body := h.healthOf(t)
	if body["status"] != "degraded" || !strings.Contains(fmt.Sprint(body["degraded_reason"]), cause) {
		t.Fatalf("/health = %v; want degraded saying %q", body, cause)
	}
	if m := h.metric(t, "synapse_journal_unwritable"); m != "1" {
		t.Fatalf("synapse_journal_unwritable = %q; want 1", m)
	}
}

// metric reads one unlabelled sample from /metrics.
func (h *faultHub) metric(t *testing.T, name string) string {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(h.health, "/health") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// checkState: the hub's claims are exactly the acknowledged grants, at
// their epochs; no refused claim is visible (INV-JA-1, INV-JA-2).
func (l *ledger) checkState(t *testing.T, ctx context.Context, c *client.Client, when string) {
	t.Helper()
	st, err := c.State(ctx)
	if err != nil {
		t.Fatalf("state %s: %v", when, err)
	}
	have := map[string]int64{}
	for _, cl := range st.ActiveClaims {
		have[cl.TaskID] = cl.Epoch
	}
	for task, epoch := range l.acked {
		if have[task] != epoch {
			t.Errorf("%s: acknowledged grant %s (epoch %d) is %v", when, task, epoch, have[task])
		}
	}
	for _, task := range l.refused {
		if _, ok := have[task]; ok {
			t.Errorf("%s: refused claim %s is visible", when, task)
		}
	}
	if len(have) != len(l.acked) {
		t.Errorf("%s: %d claims, %d acknowledged", when, len(have), len(l.acked))
	}
}

// checkRecovered: after the fault is cleared and the hub restarted, it is
// healthy, holds every acknowledged grant and none refused, and grants
// again.
func (l *ledger) checkRecovered(t *testing.T, ctx context.Context, h *faultHub) {
	t.Helper()
	if body := h.healthOf(t); body["status"] != "ok" || h.metric(t, "synapse_journal_unwritable") != "0" {
		t.Fatalf("/health after recovery = %v, synapse_journal_unwritable %q; want ok, 0", body, h.metric(t, "synapse_journal_unwritable"))
	}
	c := h.dial(t, ctx, "proj/recovered")
	l.checkState(t, ctx, c, "after recovery")
	b, err := c.Board(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range b.Tasks {
		if task.TaskID == "board-after-fault" {
			t.Fatal("the board task refused while the journal could not be written is on the board")
		}
	}
	if len(l.refused) > 0 {
		if ref := l.claim(t, ctx, c, l.refused[0]); ref != nil {
			t.Fatalf("claim after recovery refused: %s", ref.Message)
		}
	}
}

// beginFaultRun starts a hub on db (through prefix) and has proj/alpha
// claim n tasks T0..T(n-1), every grant acknowledged into the ledger.
func beginFaultRun(t *testing.T, prefix []string, db string, n int) (context.Context, *ledger, *faultHub, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	l := newLedger()
	h := startFaultHub(t, prefix, db, testbin.FreePort(t))
	alpha := h.dial(t, ctx, "proj/alpha")
	for i := range n {
		l.claim(t, ctx, alpha, fmt.Sprintf("T%d", i))
	}
	return ctx, l, h, alpha
}

// The journal reaches its size cap (--journal-max-kb, SQLITE_FULL exactly
// as on a full disk): runs wherever the tests run, root or not.
func TestHubProcess_JournalCapReached_RefusesMutationsKeepsAcknowledged_INV_JA_2(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	db := filepath.Join(t.TempDir(), "hub.db")
	ctx, l, h, alpha := beginFaultRun(t, nil, db, 3)
	h.stop(t)
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	capKB := fi.Size()/1024 + 16
	h = h.restart(t, "--journal-max-kb", strconv.FormatInt(capKB, 10))
	alpha = h.dial(t, ctx, "proj/alpha")
	ref := l.claimUntilRefused(t, ctx, alpha, "fill", 5000)
	t.Logf("%d grants acknowledged before the %d KiB cap; refusal: %s", len(l.acked), capKB, ref.Message)
	l.checkFaulted(t, ctx, h, alpha, ref, "out of space")
	if !strings.Contains(h.stderr.String(), "journal append failed") {
		t.Errorf("the hub's log does not report the failed append:\n%s", h.stderr)
	}
	h.kill()

	h = h.restart(t) // room again: no cap
	l.checkRecovered(t, ctx, h)
}

// mountNamespace is a private mount namespace (unshare -rm, which needs no
// root where user namespaces are allowed) holding a small tmpfs at dir: a
// real file system a test can fill, or put read-only, without touching the
// machine's. Processes join it with prefix; the test reaches its files at
// root+dir.
type mountNamespace struct {
	dir, root string
	prefix    []string
}

func newMountNamespace(t *testing.T, size string) *mountNamespace {
	t.Helper()
	for _, tool := range []string{"unshare", "nsenter", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s here: %v", tool, err)
		}
	}
	dir := t.TempDir()
	holder := exec.Command("unshare", "-rm", "sh", "-c", `mount -t tmpfs -o size=$1 tmpfs "$0" && echo mounted && exec sleep 3600`, dir, size)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	holder.Stderr = &stderr
	if err := holder.Start(); err != nil {
		t.Skipf("cannot make a mount namespace here: %v", err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	line := make([]byte, len("mounted\n"))
	if _, err := out.Read(line); err != nil || string(line) != "mounted\n" {
		t.Skipf("cannot mount a tmpfs in a user namespace here (%v %q): %s", err, line, stderr.String())
	}
	pid := strconv.Itoa(holder.Process.Pid)
	ns := &mountNamespace{dir: dir, root: "/proc/" + pid + "/root",
		prefix: []string{"nsenter", "-t", pid, "-U", "-m", "--preserve-credentials", "--"}}
	probe := append(append([]string{}, ns.prefix...), "true")
	if out, err := exec.Command(probe[0], probe[1:]...).CombinedOutput(); err != nil {
		t.Skipf("cannot enter the mount namespace here: %v %s", err, out)
	}
	return ns
}

// path is where the test reaches name in the namespace's tmpfs.
func (m *mountNamespace) path(name string) string { return m.root + filepath.Join(m.dir, name) }

// run runs a shell command inside the namespace.
func (m *mountNamespace) run(t *testing.T, script string) {
	t.Helper()
	args := append(append([]string{}, m.prefix...), "sh", "-c", script, m.dir)
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// fill writes a file until the file system has no space left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", path, err)
			}
			break
		}
	}
	for len(chunk) > 1 { // the last pages too
		chunk = chunk[:len(chunk)/2]
		f.Write(chunk)
	}
}

// A real full file system: the journal on an 8 MiB tmpfs that a filler
// file then fills (ENOSPC, SQLITE_FULL). Freeing the space and restarting
// brings the hub back with every acknowledged grant.
func TestHubProcess_FullFileSystem_RefusesMutationsKeepsAcknowledged_INV_JA_2(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	ns := newMountNamespace(t, "8m")
	db := filepath.Join(ns.dir, "hub.db")
	ctx, l, h, alpha := beginFaultRun(t, ns.prefix, db, 3)
	fill(t, ns.path("filler"))
	ref := l.claimUntilRefused(t, ctx, alpha, "fill", 5000)
	t.Logf("%d grants acknowledged before the disk filled; refusal: %s", len(l.acked), ref.Message)
	l.checkFaulted(t, ctx, h, alpha, ref, "out of space")
	h.kill()

	// Restarted while the disk is still full: it refuses to start saying
	// so, or starts and refuses the first mutation as above.
	if h, exited := tryStartFaultHub(t, h.prefix, db, h.port); h == nil {
		if !strings.Contains(exited, "Free space") {
			t.Fatalf("a hub on a full disk exited without saying to free space:\n%s", exited)
		}
		t.Logf("on a full disk the hub did not start: %s", exited)
	} else {
		alpha = h.dial(t, ctx, "proj/alpha")
		ref := l.claim(t, ctx, alpha, "still-full")
		if ref == nil {
			t.Fatal("a claim was granted on a full disk")
		}
		l.checkFaulted(t, ctx, h, alpha, ref, "out of space")
		h.kill()
	}
	if err := os.Remove(ns.path("filler")); err != nil {
		t.Fatal(err)
	}

	h = h.restart(t)
	l.checkRecovered(t, ctx, h)
}

// chattr runs chattr on the journal's files that exist (root only: the
// immutable attribute is what stops root, whom file modes do not).
func chattr(t *testing.T, flag string, paths ...string) error {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if out, err := exec.Command("chattr", flag, p).CombinedOutput(); err != nil {
			return fmt.Errorf("chattr %s %s: %v %s", flag, p, err, out)
		}
	}
	return nil
}

// makeReadOnly makes the journal file unwritable and returns the undo:
// chmod 0400 for a user, chattr +i for root (file modes do not stop root).
func makeReadOnly(t *testing.T, paths ...string) (undo func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		for _, p := range paths {
			if err := os.Chmod(p, 0o400); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
		return func() {
			for _, p := range paths {
				os.Chmod(p, 0o600)
			}
		}
	}
	if err := chattr(t, "+i", paths...); err != nil {
		chattr(t, "-i", paths...)
		t.Skipf("running as root, where only the immutable attribute makes a file read-only, and it is not available here: %v", err)
	}
	undo = func() { chattr(t, "-i", paths...) }
	t.Cleanup(undo) // t.TempDir cannot remove an immutable file
	return undo
}

// A journal that cannot be written at startup — a read-only file, or the
// whole file system mounted read-only — after a crash left its WAL: the
// hub starts, serves reads (every acknowledged grant, from the WAL too),
// refuses every mutation and says degraded; made writable again and
// restarted, it is healthy with every grant (INV-JA-1, INV-JA-2).
func TestHubProcess_ReadOnlyJournalAtStartup_ServesReadsRefusesMutations_INV_JA_2(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	for _, stop := range []string{"crash", "clean stop"} {
		t.Run("file after a "+stop, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "hub.db")
			readOnlyAtStartup(t, nil, db, stop == "crash", func() func() { return makeReadOnly(t, db) })
		})
		t.Run("file system after a "+stop, func(t *testing.T) {
			ns := newMountNamespace(t, "8m")
			readOnlyAtStartup(t, ns.prefix, filepath.Join(ns.dir, "hub.db"), stop == "crash", func() func() {
				ns.run(t, `mount --bind "$0" "$0" && mount -o remount,bind,ro "$0"`)
				return func() { ns.run(t, `umount "$0"`) }
			})
		})
	}
}

// readOnlyAtStartup acknowledges three grants, stops the hub (a crash
// leaves them in the WAL; a clean stop checkpoints them and removes it),
// makes the journal read-only and checks the hub that starts on it.
func readOnlyAtStartup(t *testing.T, prefix []string, db string, crash bool, makeRO func() (undo func())) {
	ctx, l, h, _ := beginFaultRun(t, prefix, db, 3)
	if crash {
		h.kill() // the grants are in the WAL, not yet in the database file
	} else {
		h.stop(t)
	}
	undo := makeRO()

	h = h.restart(t)
	if !strings.Contains(h.stderr.String(), "the journal cannot be written") {
		t.Errorf("the hub's log does not say the journal is read-only:\n%s", h.stderr)
	}
	l.refusedThenRecovered(t, ctx, h, h.dial(t, ctx, "proj/alpha"), undo)
}

// The journal's files become unwritable under a running hub. Only a write
// refused on the open file shows: chattr +i as root (SQLITE_IOERR_WRITE,
// which the journal diagnoses as read-only). File modes do not reach a
// file already open — the hub keeps committing, durably, and meets the
// fault at its next start (the test above) — so as a user this test has
// nothing to inject and skips.
func TestHubProcess_JournalTurnsReadOnlyUnderARunningHub_INV_JA_2(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: no way to make an open file unwritable (chmod does not affect open descriptors); the startup case is tested")
	}
	db := filepath.Join(t.TempDir(), "hub.db")
	ctx, l, h, alpha := beginFaultRun(t, nil, db, 3)
	l.refusedThenRecovered(t, ctx, h, alpha, makeReadOnly(t, db, db+"-wal"))
}

// refusedThenRecovered: on a hub whose journal cannot be written, a claim
// is refused and the hub looks faulted (checkFaulted); killed, the fault
// undone and restarted, it has recovered (checkRecovered).
func (l *ledger) refusedThenRecovered(t *testing.T, ctx context.Context, h *faultHub, c *client.Client, undo func()) {
	t.Helper()
	ref := l.claim(t, ctx, c, "refused")
	if ref == nil {
		t.Fatal("a claim was granted on a journal that cannot be written")
	}
	t.Logf("refusal: %s\n/health: %v", ref.Message, h.healthOf(t)["degraded_reason"])
	l.checkFaulted(t, ctx, h, c, ref, "cannot be written")
	h.kill()
	undo()
	l.checkRecovered(t, ctx, h.restart(t))
}

// copyFile copies src to dst (a backup the test restores).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// runSynapse runs the binary to its end and returns its exit code and
// combined output.
func runSynapse(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testbin.Synapse(t), args...)
	cmd.Env = append(os.Environ(), "SYNAPSE_TOKEN=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	t.Fatalf("synapse %v: %v\n%s", args, err, out)
	return 0, ""
}

// A journal file cut short (a torn copy, a bad disk): the hub refuses to
// start, says the file is damaged and names 'synapse journal check', which
// says the same and exits 1; nothing is served from a file missing part of
// what was acknowledged. The complete copy restored, the hub starts with
// every grant (INV-JA-1).
func TestHubProcess_JournalCutShort_RefusesToStart_INV_JA_1(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "hub.db")
	ctx, l, h, alpha := beginFaultRun(t, nil, db, 40)
	h.stop(t) // clean: the WAL is checkpointed into the file and removed
	if _, err := os.Stat(db + "-wal"); err == nil {
		t.Fatal("a clean stop left a WAL")
	}
	whole := filepath.Join(dir, "whole.db")
	copyFile(t, db, whole)
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		size int64
	}{
		{"inside the last page", fi.Size() - 100},
		{"inside an earlier page", fi.Size() - 4096 - 2048},
		{"at a page boundary", fi.Size() - 2*4096},
	} {
		t.Run(c.name, func(t *testing.T) {
			copyFile(t, whole, db)
			if err := os.Truncate(db, c.size); err != nil {
				t.Fatal(err)
			}
			code, out := runSynapse(t, "hub", "--db", db, "--port", strconv.Itoa(h.port), "--no-mcp")
			if code != 1 || !strings.Contains(out, "damaged") || !strings.Contains(out, "synapse journal check "+db) {
				t.Fatalf("a hub on a journal cut to %d of %d bytes: exit %d\n%s\nwant exit 1 naming the damage and 'synapse journal check'", c.size, fi.Size(), code, out)
			}
			t.Logf("synapse hub: %s", out)
			code, out = runSynapse(t, "journal", "check", db)
			if code != 1 || !strings.Contains(out, "damaged") {
				t.Fatalf("journal check on the cut file: exit %d\n%s\nwant exit 1 saying it is damaged", code, out)
			}
		})
	}
	copyFile(t, whole, db)
	h = h.restart(t)
	l.checkRecovered(t, ctx, h)

	// After a crash, with a WAL beside the file, a page the WAL holds a
	// newer copy of may be cut without harm; any other refuses the start.
	// Either way nothing acknowledged goes missing while the hub says ok.
	alpha = h.dial(t, ctx, "proj/alpha")
	for i := range 5 {
		l.claim(t, ctx, alpha, fmt.Sprintf("W%d", i))
	}
	h.kill()
	copyFile(t, db, whole)
	copyFile(t, db+"-wal", whole+"-wal")
	fi, err = os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int64{100, 2048, 4096 + 2048, 2 * 4096, 8 * 4096} {
		t.Run(fmt.Sprintf("after a crash, %d bytes cut", cut), func(t *testing.T) {
			copyFile(t, whole, db)
			copyFile(t, whole+"-wal", db+"-wal")
			os.Remove(db + "-shm")
			if err := os.Truncate(db, fi.Size()-cut); err != nil {
				t.Fatal(err)
			}
			h, exited := tryStartFaultHub(t, h.prefix, db, h.port)
			if h == nil {
				if !strings.Contains(exited, "damaged") || !strings.Contains(exited, "synapse journal check "+db) {
					t.Fatalf("the hub refused to start without naming the damage and 'synapse journal check':\n%s", exited)
				}
				t.Logf("refused to start: %s", exited)
				return
			}
			defer h.kill()
			if body := h.healthOf(t); body["status"] != "ok" {
				t.Fatalf("/health = %v", body)
			}
			l.checkState(t, ctx, h.dial(t, ctx, "proj/reader"), "started on the cut file")
			t.Log("started: the cut pages had newer copies in the WAL")
		})
	}
}

// walFrames returns the byte offsets of the valid frames of a WAL file
// (those carrying its header's salts) and which of them end a commit.
func walFrames(t *testing.T, wal []byte) (offsets []int64, commits []bool) {
	t.Helper()
	if len(wal) < 32 {
		t.Fatalf("WAL of %d bytes", len(wal))
	}
	pageSize := int64(binary.BigEndian.Uint32(wal[8:12]))
	salt := wal[16:24]
	for off := int64(32); off+24+pageSize <= int64(len(wal)); off += 24 + pageSize {
		if !bytes.Equal(wal[off+8:off+16], salt) {
			break
		}
		offsets = append(offsets, off)
		commits = append(commits, binary.BigEndian.Uint32(wal[off+4:off+8]) != 0)
	}
	return offsets, commits
}

// The normal crash: the hub is SIGKILLed and the last transaction in its
// WAL is torn, cut inside its commit frame — what a power cut does to a
// commit still being written, before its fsync and so before its grant
// was acknowledged. SQLite drops the torn transaction on open; the hub
// starts healthy with every earlier grant (INV-JA-1) and without the torn
// one, which was never acknowledged.
func TestHubProcess_TornWALTail_KeepsEveryEarlierCommit_INV_JA_1(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	db := filepath.Join(t.TempDir(), "hub.db")
	ctx, l, h, alpha := beginFaultRun(t, nil, db, 5)
	l.claim(t, ctx, alpha, "torn") // its commit is the one the cut tears
	h.kill()

	wal, err := os.ReadFile(db + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	offsets, commits := walFrames(t, wal)
	last := len(offsets) - 1
	if last < 1 || !commits[last] {
		t.Fatalf("WAL of %d frames (commits %v): want a commit frame last", len(offsets), commits)
	}
	if err := os.Truncate(db+"-wal", offsets[last]+24+100); err != nil { // 100 bytes into its page
		t.Fatal(err)
	}
	delete(l.acked, "torn")
	l.refused = append(l.refused, "torn") // must not be visible

	h = h.restart(t)
	l.checkRecovered(t, ctx, h)
	h.stop(t)
	if code, out := runSynapse(t, "journal", "check", db); code != 0 {
		t.Fatalf("journal check after a torn WAL tail: exit %d\n%s", code, out)
	}
}
