package journal

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"
)

// waitFor polls cond until it holds; the deadline only ends a test that
// would otherwise hang (nothing is asserted about how long it took).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened", what)
		}
	}
}

// Online compaction drops, in the background, the rows the oldest sound
// snapshot covers and nothing else: replay from the snapshots is the live
// state (INV-RR-1), audit and chat rows stay, a replay that would have to
// start below the floor says it is incomplete, and `journal check` finds the
// file sound.
func TestCompaction_DropsCoveredRowsOnlineReplayIsWhole_INV_RR_1(t *testing.T) {
	old := compactPause
	compactPause = 0
	t.Cleanup(func() { compactPause = old })
	st, err := Open(filepath.Join(t.TempDir(), "journal.db"), Options{CompactBatch: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
	for i := range 40 {
		r.now++
		r.step(t, coord.ClaimRequest{Agent: agents[i%4], TaskID: fmt.Sprintf("T%d", i%5), Paths: []string{"src"}, Worktree: "/r"})
		r.step(t, coord.PostProgress{Agent: agents[i%4], TaskID: "T0", Text: "x"})
		if i%7 == 0 {
			r.step(t, coord.ReleaseRequest{Agent: agents[i%4], TaskID: fmt.Sprintf("T%d", i%5)})
		}
	}
	if _, err := st.wc.ExecContext(context.Background(), `INSERT INTO events(ts, kind, payload) VALUES(1, 'chat', '{"payload":"hi"}')`); err != nil {
		t.Fatal(err)
	}
	first := r.snapshot(t) // the floor once a second snapshot exists
	r.now++
	r.step(t, coord.ClaimRequest{Agent: "p/z", TaskID: "Z"})
	r.snapshot(t)
	r.now++
	r.step(t, coord.ReleaseRequest{Agent: "p/z", TaskID: "Z"})

	covered := func() int {
		var n int
		st.rdb.QueryRow(`SELECT count(*) FROM events WHERE seq <= ? AND kind IN `+compactKinds, first).Scan(&n)
		return n
	}
	waitFor(t, "the covered rows dropped online", func() bool { return covered() == 0 })
	if st.CompactedRows() == 0 {
		t.Error("CompactedRows counts nothing")
	}
	counts := map[string]int{}
	st.Scan(0, func(_ int64, _ float64, kind string, _ []byte) error { counts[kind]++; return nil })
	if counts["chat"] != 1 || counts["claim_denial"] == 0 {
		t.Errorf("audit/chat rows lost: %v", counts)
	}
	var after int
	st.rdb.QueryRow(`SELECT count(*) FROM events WHERE seq > ? AND kind IN `+compactKinds, first).Scan(&after)
	if after == 0 {
		t.Error("rows above the floor were dropped")
	}
	want := imageAt(r.live, r.now)
	rec, err := Replay(st, coord.Limits{}, r.now, ReplayOptions{Logger: quietLog})
	if err != nil || rec.Degraded() {
		t.Fatal(err, rec.Warnings)
	}
	if got := rec.State.Image(); !reflect.DeepEqual(got, want) {
		t.Errorf("after online compaction\n got %+v\nwant %+v", got, want)
	}
	if full, _ := Replay(st, coord.Limits{}, r.now, ReplayOptions{NoSnapshot: true, Logger: quietLog}); !full.Incomplete {
		t.Error("replay of the compacted log without its snapshots not flagged incomplete")
	}
	if rep, err := Check(st.Path()); err != nil || !rep.OK() {
		t.Errorf("check after online compaction: %+v %v", rep, err)
	}
}

// Without CompactBatch nothing is dropped: the rows stay until `synapse
// journal compact`.
func TestCompaction_OffKeepsEveryRow(t *testing.T) {
	st := openTemp(t)
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
	for i := range 10 {
		r.now++
		r.step(t, coord.ClaimRequest{Agent: agents[i%4], TaskID: fmt.Sprintf("T%d", i)})
	}
	rows := func() (n int) {
		st.rdb.QueryRow(`SELECT count(*) FROM events`).Scan(&n)
		return n
	}
	before := rows()
	r.snapshot(t)
	r.snapshot(t)
	if st.compactKick != nil || st.CompactedRows() != 0 {
		t.Fatal("a store without CompactBatch compacts")
	}
	if n := rows(); n != before || n == 0 {
		t.Errorf("%d rows after two snapshots; want all %d", n, before)
	}
}

// compactChildEnv, when set to a journal's path, makes this test binary the
// child of TestCompaction_SIGKILLMidwayLosesNothing: it opens the journal
// compacting one row per transaction and waits to be killed.
const compactChildEnv = "SYNAPSE_JOURNAL_COMPACT_CHILD"

func TestMain(m *testing.M) {
	compactStartDelay = 0 // tests want a backlog compacted at once
	if path := os.Getenv(compactChildEnv); path != "" {
		compactPause = 0
		st, err := Open(path, Options{CompactBatch: 1})
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(2)
		}
		fmt.Println("compacting")
		for range time.Tick(time.Second) {
			_ = st // killed here, midway through its batches
		}
	}
	if path := os.Getenv(retainChildEnv); path != "" {
		expirePause, expireBatch, vacuumStep, vacuumSlackPages = 0, 1, 1, 1
		st, err := Open(path, Options{Retain: Retain{Chat: time.Second, Receipts: time.Second, Audit: time.Second}, KeepChatRows: 1})
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(2)
		}
		fmt.Println("retaining")
		for range time.Tick(time.Second) {
			_ = st // killed here, midway through its rows and pages
		}
	}
	os.Exit(m.Run())
}

// killChild runs this test binary as a child with env=path, waits for it
// to print ready (its store open, its background work started), lets it
// work for d and SIGKILLs it.
func killChild(t *testing.T, env, path, ready string, d time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), env+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != ready+"\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %q", line)
	}
	time.Sleep(d)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
}

// A hub SIGKILLed while its journal compacts online loses nothing: however
// many covered rows went before the kill, replay from the snapshots is the
// state the rows made (INV-JA-1, INV-RR-1), the file checks sound, and the
// next start finishes the work.
func TestCompaction_SIGKILLMidwayLosesNothing_INV_JA_1_INV_RR_1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
	for i := range 400 {
		r.now++
		task := fmt.Sprintf("T%d", i%9)
		r.step(t, coord.ClaimRequest{Agent: agents[i%4], TaskID: task, Worktree: "/r", Paths: []string{task}})
		if i%3 == 0 {
			r.step(t, coord.ReleaseRequest{Agent: agents[i%4], TaskID: task})
		}
	}
	first := r.snapshot(t)
	r.now++
	r.step(t, coord.ClaimRequest{Agent: "p/z", TaskID: "Z"})
	r.snapshot(t)
	st.Close()
	want := imageAt(r.live, r.now)
	covered := func(st *Store) (n int) {
		st.rdb.QueryRow(`SELECT count(*) FROM events WHERE seq <= ? AND kind IN `+compactKinds, first).Scan(&n)
		return n
	}
	for kill := range 4 {
		killChild(t, compactChildEnv, path, "compacting", time.Duration(kill*3)*time.Millisecond) // a few batches in, then more each time

		st, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("kill %d: reopen: %v", kill, err)
		}
		left := covered(st)
		rec, err := Replay(st, coord.Limits{}, r.now, ReplayOptions{Logger: quietLog})
		if err != nil || rec.Degraded() {
			st.Close()
			t.Fatalf("kill %d (%d covered rows left): replay %v %v", kill, left, err, rec.Warnings)
		}
		if got := rec.State.Image(); !reflect.DeepEqual(got, want) {
			t.Errorf("kill %d (%d covered rows left): state\n got %+v\nwant %+v", kill, left, got, want)
		}
		st.Close()
		if rep, err := Check(path); err != nil || !rep.OK() {
			t.Errorf("kill %d: check %+v %v", kill, rep, err)
		}
		t.Logf("kill %d: %d covered rows left", kill, left)
	}
	st, err = Open(path, Options{CompactBatch: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	waitFor(t, "the next start finishing the compaction", func() bool { return covered(st) == 0 })
}
