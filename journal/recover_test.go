package journal

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// Recover gives a restarting hub what it starts from: the claims the
// journal holds, expired at now (INV-RR-1), and the hub id the journal
// keeps, whatever id a new start asks for.
func TestRecover_RestoresStateAndKeepsTheJournalsHubID_INV_RR_1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	st, err := Open(path, Options{HubID: "syn-first"})
	if err != nil {
		t.Fatal(err)
	}
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
	r.step(t, coord.ClaimRequest{Agent: "p/a", TaskID: "A"})
	r.step(t, coord.ClaimRequest{Agent: "p/b", TaskID: "B", TTL: 1, HasTTL: true})
	st.Close()

	rec, err := Recover(path, RecoverOptions{Open: Options{HubID: "syn-second"}, Now: r.now + 10})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Store.Close()
	if rec.HubID != "syn-first" {
		t.Errorf("hub id %q; want the journal's syn-first", rec.HubID)
	}
	if rec.Fault != nil || rec.DegradedReason != "" {
		t.Errorf("fault %v, degraded %q on a sound writable journal", rec.Fault, rec.DegradedReason)
	}
	if n := rec.State.ClaimCount(); n != 1 {
		t.Errorf("%d claims after replay at now+10; want 1 (B's 1 s lease expired)", n)
	}
}

// A journal with rows replay cannot use is served degraded, and Recover
// says why; a damaged file is ErrDamaged, not a replay error, and leaves
// nothing open.
func TestRecover_SaysWhyItIsDegradedAndRefusesADamagedFile_INV_JA_1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.wc.ExecContext(context.Background(), `INSERT INTO events(ts, kind, payload) VALUES(1, 'claim', 'not json')`); err != nil {
		t.Fatal(err)
	}
	st.Close()
	rec, err := Recover(path, RecoverOptions{Now: 1e9, Replay: ReplayOptions{Logger: quietLog}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rec.DegradedReason, "1 journal rows could not be replayed") {
		t.Errorf("degraded reason %q", rec.DegradedReason)
	}
	rec.Store.Close()

	fillJournal(t, path, 300)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, whole[:len(whole)-4096], 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Recover(path, RecoverOptions{Now: 1e9, Replay: ReplayOptions{Logger: quietLog}})
	var re *ReplayError
	if !errors.Is(err, ErrDamaged) || errors.As(err, &re) {
		t.Fatalf("Recover of a file cut short = %v; want ErrDamaged, not a replay error", err)
	}
}

// A journal that cannot be written is opened read-only, and Fault says
// why: the hub serves reads and refuses mutations instead of not starting
// (INV-JA-2).
func TestRecover_UnwritableFileIsReadOnlyWithAFault_INV_JA_2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
	r.step(t, coord.ClaimRequest{Agent: "p/a", TaskID: "A"})
	st.Close()
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
			t.Skipf("root, and no immutable attribute here: %v %s", err, out)
		}
		t.Cleanup(func() { exec.Command("chattr", "-i", path).Run() })
	} else if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	rec, err := Recover(path, RecoverOptions{Now: r.now + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Store.Close()
	if !errors.Is(rec.Fault, ErrReadOnly) {
		t.Fatalf("fault %v; want ErrReadOnly", rec.Fault)
	}
	if n := rec.State.ClaimCount(); n != 1 {
		t.Errorf("%d claims replayed from the read-only journal; want 1", n)
	}
}

var quietLog = slog.New(slog.DiscardHandler)
