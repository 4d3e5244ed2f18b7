package client

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/hub"
)

// Globs and shared claims through the SDK: granted and echoed, readers
// side by side, a writer refused with the holder's pattern and mode, and a
// renewal that keeps the globs and the mode (it must not widen a glob
// claim to the whole worktree).
func TestClaim_GlobsAndSharedReads(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a, b, w := th.dial(t, "p/alpha"), th.dial(t, "p/bravo"), th.dial(t, "p/writer")
	ra, err := a.Claim(ctx, ClaimRequest{TaskID: "R1", Globs: []string{"docs/**/*.md"}, Shared: true, TTL: time.Hour})
	if err != nil || !slices.Equal(ra.Globs, []string{"docs/**/*.md"}) || !ra.Shared() || len(ra.Paths) != 0 {
		t.Fatalf("claim %+v %v", ra, err)
	}
	if _, err := b.Claim(ctx, ClaimRequest{TaskID: "R2", Paths: []string{"docs/guide.md"}, Shared: true}); err != nil {
		t.Fatalf("a second reader was refused: %v", err)
	}
	_, err = w.Claim(ctx, ClaimRequest{TaskID: "W1", Globs: []string{"docs/*.md"}})
	ref := wantRefused(t, err, "SCOPE_CONFLICT")
	if ref.Holder == "" || ref.ConflictMode != "shared" || ref.ConflictPattern == "" {
		t.Fatalf("refusal %+v", ref)
	}
	if _, err := w.Claim(ctx, ClaimRequest{TaskID: "W2", Globs: []string{"src/**/*.go"}}); err != nil {
		t.Fatalf("a writer of other files was refused: %v", err)
	}
	re, err := a.Renew(ctx, ra)
	if err != nil || !slices.Equal(re.Globs, ra.Globs) || !re.Shared() || re.Epoch <= ra.Epoch {
		t.Fatalf("renewal %+v %v keeps neither the globs nor the mode", re, err)
	}
	for rel, want := range map[string]bool{"docs/a/b.md": true, "docs/x.md": true, "docs/x.go": false, "src/x.md": false} {
		if re.Covers(rel) != want {
			t.Errorf("Covers(%q) = %v, want %v", rel, !want, want)
		}
	}
}

// Files through the SDK (hub feature file_scopes): a file beside another
// agent's glob that does not match it is granted and covers itself alone;
// a renewal keeps it; a path that names an existing regular file of the
// Checkout is sent as a file, a folder or a missing file as a path; a
// lease record keeps the files (INV-ME-2).
func TestClaim_FilesCoverThemselves_INV_ME_2(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
	if _, err := a.Claim(ctx, ClaimRequest{TaskID: "GO", Globs: []string{"src/**/*.go"}}); err != nil {
		t.Fatal(err)
	}
	cl, err := b.Claim(ctx, ClaimRequest{TaskID: "README", Files: []string{"src/a/readme.md"}})
	if err != nil || !slices.Equal(cl.Files, []string{"src/a/readme.md"}) || len(cl.Paths) != 0 {
		t.Fatalf("claim %+v %v", cl, err)
	}
	for rel, want := range map[string]bool{"src/a/readme.md": true, "./src/a/readme.md": true, "src/a/readme.md/x": false, "src/a": false, "src/a/x.go": false} {
		if cl.Covers(rel) != want {
			t.Errorf("Covers(%q) = %v, want %v", rel, !want, want)
		}
	}
	re, err := b.Renew(ctx, cl)
	if err != nil || !slices.Equal(re.Files, cl.Files) || len(re.Paths) != 0 || re.Epoch <= cl.Epoch {
		t.Fatalf("renewal %+v %v does not keep the files", re, err)
	}
	l := &Ledger{Path: filepath.Join(t.TempDir(), "leases.json")}
	if err := l.Record("ws://hub", re); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := l.Lookup("p/bravo", "README"); err != nil || !ok || !slices.Equal(r.Files, re.Files) || !r.Covers("src/a/readme.md") || r.Covers("src/a/x") {
		t.Fatalf("lease record %+v %v %v", r, ok, err)
	}

	root := t.TempDir()
	for _, d := range []string{"src/dir", "src/a"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "src", "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("notes.txt", filepath.Join(root, "src", "link.txt")); err != nil {
		t.Fatal(err)
	}
	det, err := b.Claim(ctx, ClaimRequest{TaskID: "DET", Paths: []string{"src/notes.txt", "src/dir", "src/missing.txt", "src/link.txt"}, Worktree: root, Checkout: root})
	if err != nil || !slices.Equal(det.Files, []string{"src/notes.txt"}) || !slices.Equal(det.Paths, []string{"src/dir", "src/missing.txt", "src/link.txt"}) {
		t.Fatalf("claim with a checkout %+v %v: want the regular file as a file, the rest as paths", det, err)
	}
	// A hub without the feature: files are refused here, and a checkout's
	// file is sent as a path, as the reference takes it.
	old := th.dial(t, "p/carol")
	old.mu.Lock()
	old.welcome.Features = slices.DeleteFunc(slices.Clone(old.welcome.Features), func(f string) bool { return f == "file_scopes" })
	old.mu.Unlock()
	if _, err := old.Claim(ctx, ClaimRequest{TaskID: "F", Files: []string{"x"}}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("files sent to a hub without file_scopes: %v", err)
	}
	if cl, err := old.Claim(ctx, ClaimRequest{TaskID: "P", Paths: []string{"src/notes.txt"}, Worktree: "/other", Checkout: root}); err != nil ||
		len(cl.Files) != 0 || !slices.Equal(cl.Paths, []string{"src/notes.txt"}) {
		t.Fatalf("a checkout's file to a hub without file_scopes: %+v %v", cl, err)
	}
}
