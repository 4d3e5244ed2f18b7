package mcpserver

import (
	"context"
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
