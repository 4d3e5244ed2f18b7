package mcpserver

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/client"
)

// The claim tool takes globs and shared: readers overlap, a writer is
// refused with the holder's pattern and mode.
func TestTools_ClaimGlobsAndShared(t *testing.T) {
	uri := startHub(t)
	reader := dial(t, uri, "proj/reader")
	if _, err := reader.Claim(context.Background(), client.ClaimRequest{TaskID: "R1", Globs: []string{"docs/*.md"}, Shared: true}); err != nil {
		t.Fatal(err)
	}
	cs, _ := connectInMemory(t, New(Options{Client: serverClient(t, uri, "proj/me")}))
	var out ClaimResult
	res := call(t, cs, "claim", map[string]any{"task_id": "R2", "globs": []string{"docs/**"}, "shared": true}, &out)
	if res.IsError || !out.Granted || !slices.Equal(out.Claim.Globs, []string{"docs/**"}) || out.Claim.Mode != "shared" ||
		!strings.Contains(text(res), "docs/** (shared)") {
		t.Fatalf("shared glob claim: %q %+v", text(res), out)
	}
	out = ClaimResult{}
	res = call(t, cs, "claim", map[string]any{"task_id": "W1", "paths": []string{"docs/a.md"}}, &out)
	if !res.IsError || out.Code != "SCOPE_CONFLICT" || out.Holder != "proj/reader" || out.ConflictPattern != "docs/*.md" || out.ConflictMode != "shared" {
		t.Fatalf("writer beside a reader: %q %+v", text(res), out)
	}
}

// The claim tool takes files, and with a checkout it claims a path that is
// an existing regular file there as a file: both are granted beside
// another agent's glob of Go files, which a folder is not (INV-ME-2).
func TestTools_ClaimFilesAndDetectedFiles(t *testing.T) {
	uri := startHub(t)
	other := dial(t, uri, "proj/other")
	if _, err := other.Claim(context.Background(), client.ClaimRequest{TaskID: "GO", Globs: []string{"src/**/*.go"}}); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "src", "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "src", "a", "readme.md"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cs, _ := connectInMemory(t, New(Options{Client: dial(t, uri, "proj/me"), Checkout: root}))
	var out ClaimResult
	res := call(t, cs, "claim", map[string]any{"task_id": "F", "files": []string{"src/b/new.md"}}, &out)
	if res.IsError || !out.Granted || !slices.Equal(out.Claim.Files, []string{"src/b/new.md"}) || !strings.Contains(text(res), "the file src/b/new.md") {
		t.Fatalf("files: %q %+v", text(res), out)
	}
	out = ClaimResult{}
	res = call(t, cs, "claim", map[string]any{"task_id": "P", "paths": []string{"src/a/readme.md"}}, &out)
	if res.IsError || !out.Granted || !slices.Equal(out.Claim.Files, []string{"src/a/readme.md"}) || len(out.Claim.Paths) != 0 {
		t.Fatalf("an existing file among paths: %q %+v", text(res), out)
	}
	out = ClaimResult{}
	res = call(t, cs, "claim", map[string]any{"task_id": "D", "paths": []string{"src/a"}}, &out)
	if !res.IsError || out.Code != "SCOPE_CONFLICT" || out.ConflictPattern != "src/**/*.go" {
		t.Fatalf("a folder beside the glob: %q %+v", text(res), out)
	}
}
