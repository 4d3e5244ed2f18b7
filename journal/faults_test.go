package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// fillJournal appends n chat rows of ~250 bytes and closes the store, so
// the file is checkpointed and its WAL removed.
func fillJournal(t *testing.T, path string, n int) {
	t.Helper()
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p := fmt.Sprintf(`{"i":%d,"pad":"%0200d"}`, i, i)
		if _, err := st.Append(context.Background(), &Batch{TS: 1, Records: []Record{rec("chat", p, true)}}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
}

// A file cut short is refused before SQLite reads it: cut inside its last
// page SQLite served every row and took appends, silently (INV-JA-1).
func TestOpen_RefusesAFileCutShort_INV_JA_1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	fillJournal(t, path, 300)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{100, 2048, 4096, 3 * 4096} {
		if err := os.WriteFile(path, whole[:len(whole)-cut], 0o600); err != nil {
			t.Fatal(err)
		}
		for _, ro := range []bool{false, true} {
			st, err := Open(path, Options{ReadOnly: ro})
			if !errors.Is(err, ErrDamaged) {
				if st != nil {
					st.Close()
				}
				t.Fatalf("cut %d bytes, read-only %v: Open = %v; want ErrDamaged", cut, ro, err)
			}
		}
		if _, err := Check(path); !errors.Is(err, ErrDamaged) {
			t.Fatalf("cut %d bytes: Check = %v; want ErrDamaged", cut, err)
		}
	}
	os.WriteFile(path, whole, 0o600)
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("the whole file: %v", err)
	}
	st.Close()
}

// MaxBytes caps the file: the append past it fails with ErrDiskFull,
// writes nothing, and the rows before it stay (INV-JA-2).
func TestAppend_PastMaxBytesIsDiskFull_INV_JA_2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	fillJournal(t, path, 1)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Open(path, Options{MaxBytes: fi.Size() + 16<<10})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var appended int
	for i := range 10000 {
		p := fmt.Sprintf(`{"i":%d,"pad":"%0200d"}`, i, i)
		_, err = st.Append(context.Background(), &Batch{TS: 2, Records: []Record{rec("chat", p, true)}})
		if err != nil {
			break
		}
		appended++
	}
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("append past the cap: %v; want ErrDiskFull", err)
	}
	if rows := scanAll(t, st, 0); len(rows) != 1+appended {
		t.Fatalf("%d rows after the failed append; want %d", len(rows), 1+appended)
	}
}

// A file that cannot be written gives ErrReadOnly from Open: mode 0400 for
// a user, the immutable attribute for root (whom file modes do not stop).
func TestOpen_ReadOnlyFileIsErrReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	fillJournal(t, path, 1)
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
			t.Skipf("root, and no immutable attribute here: %v %s", err, out)
		}
		t.Cleanup(func() { exec.Command("chattr", "-i", path).Run() })
	} else if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Open of an unwritable file = %v; want ErrReadOnly", err)
	}
	st, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open of an unwritable file: %v", err)
	}
	defer st.Close()
	if rows := scanAll(t, st, 0); len(rows) != 1 {
		t.Fatalf("%d rows; want 1", len(rows))
	}
}

// A folder that refuses new files (as a user: mode 0500) gives ErrReadOnly:
// SQLite cannot create the -wal and -shm beside the file. After a clean
// close there are none, so only an immutable read-only open reads it.
func TestOpen_UnwritableFolderIsErrReadOnly(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores folder modes; the process tests use a read-only mount instead")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	fillJournal(t, path, 1)
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	if _, err := Open(path, Options{}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Open in a 0500 folder = %v; want ErrReadOnly", err)
	}
	st, err := Open(path, Options{ReadOnly: true, Immutable: true})
	if err != nil {
		t.Fatalf("immutable read-only Open in a 0500 folder: %v", err)
	}
	defer st.Close()
	if rows := scanAll(t, st, 0); len(rows) != 1 {
		t.Fatalf("%d rows; want 1", len(rows))
	}
}
