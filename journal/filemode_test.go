//go:build unix

package journal

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The journal and its WAL sidecars are private to the hub's user.
func TestOpen_FileMode0600(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	st := openTemp(t)
	if _, err := st.Append(context.Background(), &Batch{TS: 1, Records: []Record{rec("chat", `{}`, true)}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{st.Path(), st.Path() + "-wal", st.Path() + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s has mode %o, want 600", filepath.Base(p), m)
		}
	}
	// An existing file with a looser mode is tightened.
	p := filepath.Join(t.TempDir(), "loose.db")
	os.WriteFile(p, nil, 0o644)
	st2, err := Open(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st2.Close()
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("loose file left at %o", fi.Mode().Perm())
	}
}
