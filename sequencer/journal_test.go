package sequencer

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// These tests run the sequencer on the real SQLite journal.

func openJournal(t *testing.T, path string, opts journal.Options) *journal.Store {
	t.Helper()
	st, err := journal.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// restart closes the sequencer and its journal the way the hub does, then
// reopens the file and replays it at now.
func restart(t *testing.T, s *Sequencer, st *journal.Store, now float64) (*journal.Store, *coord.State) {
	t.Helper()
	s.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openJournal(t, st.Path(), journal.Options{})
	t.Cleanup(func() { st.Close() })
	rec, err := journal.Replay(st, coord.Limits{}, now, journal.ReplayOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Degraded() {
		t.Fatalf("replay degraded: %+v", rec)
	}
	return st, rec.State
}

func TestRealJournal_CommittedClaimSurvivesRestart_INV_JA_1_INV_RR_1(t *testing.T) {
	st := openJournal(t, filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	s := start(t, coord.New(coord.Limits{}), st, Options{})
	submit(t, s, Request{Cmd: claim("a", "T1")})
	r := submit(t, s, Request{Cmd: coord.CheckpointRequest{Agent: "a", TaskID: "T1", Checkpoint: "step-3"}})
	if r.Seq != 2 {
		t.Errorf("checkpoint seq = %d, want 2", r.Seq)
	}
	submit(t, s, Request{Cmd: claim("b", "T2")})
	submit(t, s, Request{Cmd: coord.ReleaseRequest{Agent: "b", TaskID: "T2"}})
	want := image(t, s)

	_, replayed := restart(t, s, st, t0)
	if got := replayed.Image(); !reflect.DeepEqual(got, want) {
		t.Fatalf("replayed state:\n got %+v\nwant %+v", got, want)
	}
	if c := replayed.Claim("T1"); c == nil || c.Checkpoint != "step-3" {
		t.Fatalf("T1 after restart: %v", c)
	}
}

func TestRealJournal_IdempotencySurvivesRestart_INV_CR_1(t *testing.T) {
	st := openJournal(t, filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	s := start(t, coord.New(coord.Limits{}), st, Options{})
	key := idemKey("a", "claim", "k1")
	first := submit(t, s, keyed(claim("a", "T1"), key, "d1"))
	if first.Seq != 1 {
		t.Errorf("seq = %d, want 1", first.Seq)
	}

	st, replayed := restart(t, s, st, t0+1)
	epoch := replayed.Claim("T1").Epoch
	s = start(t, replayed, st, Options{Clock: (&fixedClock{t: t0 + 1}).now})
	r := submit(t, s, keyed(claim("a", "T1"), key, "d1"))
	if !r.Replayed || string(r.Response) != string(first.Response) {
		t.Fatalf("retry after restart: %+v, want the stored %s", r, first.Response)
	}
	if c := claimOf(t, s, "T1"); c.Epoch != epoch {
		t.Fatalf("the retry applied again after restart: epoch %d → %d", epoch, c.Epoch)
	}
	if _, err := s.Submit(context.Background(), keyed(claim("a", "T2"), key, "d2")); !errors.Is(err, ErrIdempotencyConflict) {
		t.Fatalf("changed request after restart: %v", err)
	}
}

// publishCount counts what OnCommit was given.
type publishCount struct{ n int }

func (p *publishCount) onCommit(evs []coord.Event) { p.n += len(evs) }

func TestRealJournal_ReadOnlyFileFailsClosed_INV_JA_2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	openJournal(t, path, journal.Options{}).Close() // create the schema
	st := openJournal(t, path, journal.Options{ReadOnly: true})
	t.Cleanup(func() { st.Close() })

	var pub publishCount
	s := start(t, coord.New(coord.Limits{}), st, Options{OnCommit: pub.onCommit})
	if _, err := s.Submit(context.Background(), keyed(claim("a", "T1"), idemKey("a", "claim", "k"), "d")); !errors.Is(err, ErrJournal) {
		t.Fatalf("err = %v, want ErrJournal", err)
	}
	if c := claimOf(t, s, "T1"); c != nil || pub.n != 0 {
		t.Fatalf("a failed append was published: claim %v, %d events", c, pub.n)
	}
	if _, err := s.Submit(context.Background(), Request{Cmd: claim("b", "T2")}); !errors.Is(err, ErrJournal) {
		t.Fatalf("after the failure: %v, want degraded", err)
	}
}

// As root, file modes do not stop SQLite, but the immutable attribute does:
// with chattr +i on the WAL the next write fails with SQLITE_IOERR_WRITE.
func TestRealJournal_WriteFailureMidRunRollsBack_INV_JA_2(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	st := openJournal(t, path, journal.Options{})
	t.Cleanup(func() { st.Close() })
	var pub publishCount
	s := start(t, mixedBatchState(), st, Options{OnCommit: pub.onCommit})
	submit(t, s, Request{Cmd: claim("z", "T0")})
	before, published := image(t, s), pub.n

	wal := path + "-wal"
	if out, err := exec.Command("chattr", "+i", wal).CombinedOutput(); err != nil {
		t.Skipf("cannot make the WAL immutable here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", wal).Run() })

	for _, cmd := range mixedBatch() {
		if _, err := s.Submit(context.Background(), Request{Cmd: cmd}); !errors.Is(err, ErrJournal) {
			t.Fatalf("%T: err = %v, want ErrJournal", cmd, err)
		}
	}
	if got := image(t, s); !reflect.DeepEqual(got, before) {
		t.Fatalf("state changed by a failed append:\n got %+v\nwant %+v", got, before)
	}
	if pub.n != published {
		t.Fatalf("%d events published after the failure", pub.n-published)
	}
}

func TestRealJournal_GroupCommitOneTransactionPerBatch(t *testing.T) {
	st := openJournal(t, filepath.Join(t.TempDir(), "journal.db"), journal.Options{})
	t.Cleanup(func() { st.Close() })
	j := &countingJournal{Journal: st}
	s := start(t, coord.New(coord.Limits{}), j, Options{})
	done := make(chan Reply, 64)
	for i := range 64 {
		go func() {
			r, _ := s.Submit(context.Background(), Request{Cmd: claim(agentName(i), taskName(i))})
			done <- r
		}()
	}
	seqs := map[int64]bool{}
	for range 64 {
		r := recv(t, done)
		if r.Seq == 0 || seqs[r.Seq] {
			t.Fatalf("seq %d missing or repeated", r.Seq)
		}
		seqs[r.Seq] = true
	}
	last, err := st.LastSeq()
	if err != nil || last != 64 {
		t.Fatalf("last seq %d (%v), want 64", last, err)
	}
	t.Logf("64 claims in %d appends", j.n)
}

// countingJournal counts appends; only the loop calls it.
type countingJournal struct {
	Journal
	n int
}

func (c *countingJournal) Append(ctx context.Context, b *journal.Batch) (int64, error) {
	c.n++
	return c.Journal.Append(ctx, b)
}
