package client

import (
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
