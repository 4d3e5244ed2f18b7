package journal

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/coord"
	"pgregory.net/rapid"
)

// Golden payloads: the shapes the reference hub puts on the wire and in its
// journal (traces/claims.jsonl, traces/board.jsonl), byte for byte.
func TestEncode_GoldenPayloads(t *testing.T) {
	claim := &coord.Claim{
		TaskID: "T2", Owner: "trace-9bc05c/bravo", ClaimedAt: 1795983588.3326812, ExpiresAt: 1795987188.3326812,
		Status: coord.StatusClaimed, Worktree: "/wt/bravo", Paths: []string{"src/core"}, Epoch: 2,
		QuotaPrincipal: "open-host:127.0.0.1",
	}
	gitClaim := *claim
	gitClaim.Git = &coord.Git{Branch: "feat", Base: "main", AutoReleaseOn: "merge"}
	gitClaim.PathIdentity = `{"version": 1, "worktree_path": "/wt/bravo"}`
	gitClaim.Paths, gitClaim.Status, gitClaim.Version, gitClaim.DataRef = nil, coord.StatusWorking, 3, "s3://x"
	tests := []struct {
		name string
		ev   coord.Event
		kind string
		full bool
		want string
	}{
		{"claim", coord.ClaimGranted{Claim: claim}, "claim", true,
			`{"task_id":"T2","owner":"trace-9bc05c/bravo","note":"","claimed_at":1795983588.3326812,"lease_expires_at":1795987188.3326812,"status":"claimed","data_ref":"","worktree":"/wt/bravo","paths":["src/core"],"epoch":2,"version":0,"checkpoint":"","git":null,"quota_principal":"open-host:127.0.0.1"}`},
		{"task_update with git and path identity", coord.TaskUpdated{Claim: &gitClaim}, "task_update", true,
			`{"task_id":"T2","owner":"trace-9bc05c/bravo","note":"","claimed_at":1795983588.3326812,"lease_expires_at":1795987188.3326812,"status":"working","data_ref":"s3://x","worktree":"/wt/bravo","paths":[],"epoch":2,"version":3,"checkpoint":"","git":{"branch":"feat","base":"main","auto_release_on":"merge"},"path_identity":{"version":1,"worktree_path":"/wt/bravo"},"quota_principal":"open-host:127.0.0.1"}`},
		{"release", coord.Released{TaskID: "T1", Owner: "a", Epoch: 4}, "release", true, `{"task_id":"T1"}`},
		{"ledger_task", coord.TaskPosted{Task: &coord.BoardTask{
			TaskID: "design", Title: "Design the API", Description: "sketch", DependsOn: []string{}, Status: "open",
			Project: "trace-bd958a", Version: 1, CreatedBy: "trace-bd958a/alpha", CreatedAt: 1795983601.7490144, UpdatedAt: 1795983601.7490144,
		}}, "ledger_task", true,
			`{"task_id":"design","title":"Design the API","description":"sketch","depends_on":[],"status":"open","suggested_owner":"","project":"trace-bd958a","version":1,"created_by":"trace-bd958a/alpha","created_at":1795983601.7490144,"updated_at":1795983601.7490144}`},
		{"ledger_task with causal parent", coord.TaskPosted{Task: &coord.BoardTask{
			TaskID: "b", Title: "B", DependsOn: []string{"a"}, Status: "done", Version: 2, CreatedAt: 1e9, UpdatedAt: 1e16,
		}, CausalParent: `{"hub": "h", "seq": 7}`}, "ledger_task", true,
			`{"task_id":"b","title":"B","description":"","depends_on":["a"],"status":"done","suggested_owner":"","project":"","version":2,"created_by":"","created_at":1000000000.0,"updated_at":1e+16,"causal_parent":{"hub":"h","seq":7}}`},
		{"ledger_progress", coord.ProgressPosted{Note: &coord.Note{
			TaskID: "build", Author: "trace-bd958a/bravo", Kind: "note", Text: "started the build", PostedAt: 1795983604.1860068,
		}}, "ledger_progress", false,
			`{"task_id":"build","author":"trace-bd958a/bravo","kind":"note","text":"started the build","posted_at":1795983604.1860068}`},
		{"resource", coord.ResourceOffered{Offer: &coord.Offer{Agent: "a", Kind: "gpu", Name: "g0", Capacity: 2, Meta: `{"mem": "80G"}`, OfferedAt: 1795983600}},
			"resource", false, `{"agent":"a","kind":"gpu","name":"g0","capacity":2,"meta":{"mem":"80G"},"offered_at":1795983600.0}`},
		{"resource without meta", coord.ResourceOffered{Offer: &coord.Offer{Agent: "a", Kind: "gpu", Name: "g0", Capacity: 1, OfferedAt: 0.5}},
			"resource", false, `{"agent":"a","kind":"gpu","name":"g0","capacity":1,"meta":{},"offered_at":0.5}`},
		{"claim_denial", coord.ClaimDenied{Claimant: "trace/alpha", TaskID: "T9", Code: coord.CodeScopeConflict, Worktree: "/wt", Paths: []string{"src/a"}},
			"claim_denial", true,
			`{"claimant":"trace/alpha","claimant_sha256":"704fff75b966defacf78838f4b61f37d18ab2a67929f15849a5ef79953863631","claimant_truncated":false,"decision":"deny","path_count":1,"reason_code":"SCOPE_CONFLICT","scope_sha256":"72a550f9416c4fcc69e2936ed9c8b23bc8196206b4ef3fbb4a89c785d5f8a556","task_id_sha256":"78a78a4e82ba75e9d1c5e1ce1f115c8eee46e98429f7f23f4f9c6a87222f3012"}`},
		// Python: json.dumps({"note": "café 😀\n\x7f\x01\"\\ </>\u2028"}, separators=(",", ":"))
		{"ascii escaping", coord.ProgressPosted{Note: &coord.Note{TaskID: "t", Author: "a", Kind: "note", Text: "café 😀\n\x7f\x01\"\\ </>\u2028", PostedAt: 1e-5}},
			"ledger_progress", false,
			`{"task_id":"t","author":"a","kind":"note","text":"caf\u00e9 \ud83d\ude00\n\u007f\u0001\"\\ </>\u2028","posted_at":1e-05}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, ok := Encode(tt.ev)
			if !ok {
				t.Fatal("not encoded")
			}
			if rec.Kind != tt.kind || rec.Durable != tt.full {
				t.Errorf("kind %q durable %v, want %q %v", rec.Kind, rec.Durable, tt.kind, tt.full)
			}
			if string(rec.Payload) != tt.want {
				t.Errorf("payload\n got %s\nwant %s", rec.Payload, tt.want)
			}
			if _, _, err := Decode(rec.Kind, rec.Payload); err != nil {
				t.Errorf("decode: %v", err)
			}
		})
	}
}

func TestEncode_VolatileEventsAreNotJournalled(t *testing.T) {
	for _, ev := range []coord.Event{
		coord.WaitAdded{Waiter: "a", TaskID: "t", Holder: "b"},
		coord.WaitReady{TaskID: "t"}, coord.WaitsDropped{Waiter: "a"}, coord.ResourceExpired{Key: "k"},
	} {
		if _, ok := Encode(ev); ok {
			t.Errorf("%T was encoded", ev)
		}
	}
}

func TestEncode_ClaimDenialTruncatesClaimant(t *testing.T) {
	long := strings.Repeat("é", 300)
	rec, _ := Encode(coord.ClaimDenied{Claimant: long, Code: coord.CodeLeaseLive})
	ev, ok, err := Decode(rec.Kind, rec.Payload)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	d := ev.(coord.ClaimDenied)
	if d.Claimant != strings.Repeat("é", 256) || d.Code != coord.CodeLeaseLive {
		t.Errorf("got %d chars, code %s", len([]rune(d.Claimant)), d.Code)
	}
	if !strings.Contains(string(rec.Payload), `"claimant_truncated":true`) {
		t.Error("not marked truncated")
	}
}

func TestDecode_RestoresVersion(t *testing.T) {
	p := `{"task_id":"T","owner":"o","claimed_at":1.0,"lease_expires_at":2.0,"status":"working","paths":[""],"epoch":7,"version":5}`
	ev, ok, err := Decode("task_update", []byte(p))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	c := ev.(coord.TaskUpdated).Claim
	if c.Version != 5 || c.Epoch != 7 || c.Paths != nil || c.QuotaPrincipal != "legacy-agent:o" {
		t.Errorf("got %+v", c)
	}
}

func TestDecode_RefusesInvalidRows(t *testing.T) {
	okClaim := `"task_id":"T","owner":"o","claimed_at":1.0,"lease_expires_at":2.0,"status":"claimed","paths":[],"epoch":1,"version":0`
	tests := []struct{ kind, payload string }{
		{"claim", `not json`},
		{"claim", `[1,2]`},
		{"claim", `"str"`},
		{"claim", `null`},
		{"claim", ``},
		{"claim", `{` + okClaim + `} trailing`},
		{"claim", `{"task_id":"T","claimed_at":1.0,"lease_expires_at":2.0,"status":"claimed","epoch":1}`}, // no owner
		{"claim", `{"owner":"o","claimed_at":1.0,"lease_expires_at":2.0,"status":"claimed","epoch":1}`},   // no task_id
		{"claim", `{"task_id":"","owner":"o","lease_expires_at":2.0,"status":"claimed","epoch":1}`},       // blank task_id
		{"claim", `{"task_id":"T","owner":"o","lease_expires_at":NaN,"status":"claimed","epoch":1}`},      // NaN
		{"claim", `{"task_id":"T","owner":"o","lease_expires_at":Infinity,"status":"claimed","epoch":1}`}, // Infinity
		{"claim", `{"task_id":"T","owner":"o","lease_expires_at":1e999,"status":"claimed","epoch":1}`},    // overflow
		{"claim", `{"task_id":"T","owner":"o","status":"claimed","epoch":1}`},                             // no expiry
		{"claim", `{"task_id":"T","owner":"o","lease_expires_at":2.0,"status":"sleeping","epoch":1}`},     // unknown status
		{"claim", `{"task_id":"T","owner":"o","lease_expires_at":2.0,"status":"claimed","epoch":-1}`},     // negative epoch
		{"claim", `{"task_id":"T","owner":"o","lease_expires_at":2.0,"status":"claimed","epoch":1.5}`},    // float epoch
		{"claim", `{"task_id":"T","owner":"o","lease_expires_at":2.0,"status":"claimed","epoch":"1"}`},    // string epoch
		{"claim", `{"task_id":"T","owner":"o","lease_expires_at":"2","status":"claimed","epoch":1}`},      // string time
		{"claim", `{"task_id":"T","owner":7,"lease_expires_at":2.0,"status":"claimed","epoch":1}`},        // int owner
		{"claim", `{` + okClaim + `,"paths":"src"}`},                                                      // paths not a list
		{"claim", `{` + okClaim + `,"paths":[null]}`},                                                     // null path
		{"claim", `{` + okClaim + `,"git":"main"}`},                                                       // git not an object
		{"claim", `{` + okClaim + `,"path_identity":[1]}`},                                                // identity not an object
		{"claim", `{` + okClaim + `,"version":-2}`},                                                       // negative version
		{"handoff", `{"task_id":"T"}`},
		{"release", `{}`},
		{"release", `{"task_id":3}`},
		{"claim_denial", `{"claimant":"a"}`},
		{"claim_denial", `{"claimant":"a","reason_code":"X","decision":"allow"}`},
		{"resource", `{"agent":"a","kind":"k","name":"n","capacity":1.5,"meta":{},"offered_at":1.0}`},
		{"resource", `{"agent":"a","kind":"k","name":"n","capacity":1,"meta":[],"offered_at":1.0}`},
		{"resource", `{"agent":"a","kind":"k","capacity":1,"meta":{},"offered_at":1.0}`},
		{"ledger_task", `{"task_id":"t","title":"x","status":"weird","version":1,"created_at":1.0,"updated_at":1.0}`},
		{"ledger_task", `{"task_id":"t","title":"x","version":1,"depends_on":[1],"created_at":1.0,"updated_at":1.0}`},
		{"ledger_task", `{"task_id":"t","version":1,"created_at":1.0,"updated_at":1.0}`},
		{"ledger_progress", `{"task_id":"t","author":"a","kind":"rant","text":"x","posted_at":1.0}`},
		{"ledger_progress", `{"task_id":"t","author":"a","text":"x"}`},
	}
	for _, tt := range tests {
		ev, ok, err := Decode(tt.kind, []byte(tt.payload))
		if err == nil || ok || ev != nil {
			t.Errorf("Decode(%s, %s) = %v, %v, %v; want an error", tt.kind, tt.payload, ev, ok, err)
		} else if !errors.Is(err, ErrBadPayload) {
			t.Errorf("error %v does not wrap ErrBadPayload", err)
		}
	}
}

func TestDecode_OtherKindsAreSkipped(t *testing.T) {
	for _, kind := range []string{"chat", "mailbox_watermark", "idempotency", "delivery_receipt_requested", "guard_denial", "finding", "whatever"} {
		if ev, ok, err := Decode(kind, []byte(`not even json`)); ev != nil || ok || err != nil {
			t.Errorf("Decode(%s) = %v %v %v", kind, ev, ok, err)
		}
	}
}

// Decode never panics, whatever the row holds.
func TestDecode_NeverPanics(t *testing.T) {
	kinds := []string{"claim", "task_update", "checkpoint", "handoff", "release", "claim_denial", "resource", "ledger_task", "ledger_progress"}
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom(kinds).Draw(t, "kind")
		var p []byte
		if rapid.Bool().Draw(t, "mutate") {
			rec, _ := Encode(genEvent(t))
			p = rec.Payload
			if len(p) > 0 {
				i := rapid.IntRange(0, len(p)-1).Draw(t, "i")
				p[i] = rapid.Byte().Draw(t, "b")
			}
		} else {
			p = rapid.SliceOf(rapid.Byte()).Draw(t, "raw")
		}
		Decode(kind, p)
	})
}

// Round trip: what Encode writes, Decode gives back, except the fields the
// reference's payloads do not carry (see Encode).
func TestCodec_RoundTrip(t *testing.T) { rapid.Check(t, roundTrip) }

// roundTrip is the property TestCodec_RoundTrip and FuzzEventRoundTrip
// share: one generated event through Encode and Decode.
func roundTrip(t *rapid.T) {
	ev := genEvent(t)
	rec, ok := Encode(ev)
	if !ok {
		t.Fatalf("%T not encoded", ev)
	}
	got, ok, err := Decode(rec.Kind, rec.Payload)
	if err != nil || !ok {
		t.Fatalf("decode %s %s: %v %v", rec.Kind, rec.Payload, ok, err)
	}
	if want := carried(ev); !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip of %s\n got %#v\nwant %#v", rec.Payload, got, want)
	}
}

// carried is ev without what its journal payload does not carry.
func carried(ev coord.Event) coord.Event {
	switch e := ev.(type) {
	case coord.ClaimGranted:
		e.Renewal = false
		return e
	case coord.HandedOff:
		e.From = ""
		return e
	case coord.Released:
		return coord.Released{TaskID: e.TaskID}
	case coord.TaskPosted:
		e.Update, e.Redeclared = false, false
		return e
	case coord.ClaimDenied:
		return coord.ClaimDenied{Claimant: e.Claimant, Code: e.Code}
	}
	return ev
}

func genText(t *rapid.T, label string) string {
	return rapid.OneOf(rapid.StringMatching(`[a-z0-9/_.-]{0,12}`), rapid.String()).Draw(t, label)
}

func genID(t *rapid.T, label string) string {
	return rapid.OneOf(rapid.StringMatching(`[a-zA-Z0-9/_.-]{1,12}`), rapid.StringN(1, 8, -1)).Draw(t, label)
}

func genTime(t *rapid.T, label string) float64 {
	return rapid.OneOf(
		rapid.Float64Range(0, 4e9),
		rapid.SampledFrom([]float64{0, 1, 1e16, 1e-5, 1795983588.3326812, math.MaxFloat64, math.SmallestNonzeroFloat64}),
	).Draw(t, label)
}

func genJSONObject(t *rapid.T, label string) string {
	return rapid.SampledFrom([]string{"", `{"a":1}`, `{"version":1,"worktree_path":"/r","paths":[{"git_path":"x"}]}`, `{"z":null,"a":[1.5,"\u00e9"]}`}).Draw(t, label)
}

func genClaim(t *rapid.T) *coord.Claim {
	c := &coord.Claim{
		TaskID: genID(t, "task"), Owner: genID(t, "owner"), Note: genText(t, "note"),
		Status:  coord.Status(rapid.IntRange(0, 4).Draw(t, "status")),
		DataRef: genText(t, "data_ref"), Worktree: genText(t, "worktree"),
		PathIdentity: genJSONObject(t, "identity"), Checkpoint: genText(t, "checkpoint"),
		QuotaPrincipal: genText(t, "principal"), ClaimedAt: genTime(t, "claimed_at"), ExpiresAt: genTime(t, "expires_at"),
		Epoch: rapid.Int64Min(0).Draw(t, "epoch"), Version: rapid.Int64Min(0).Draw(t, "version"),
	}
	if n := rapid.IntRange(0, 3).Draw(t, "paths"); n > 0 {
		for i := range n {
			c.Paths = append(c.Paths, genID(t, "path"+string(rune('0'+i))))
		}
	}
	if n := rapid.IntRange(0, 2).Draw(t, "globs"); n > 0 {
		for i := range n {
			c.Globs = append(c.Globs, genID(t, "glob"+string(rune('0'+i)))+"/**/*.go")
		}
	}
	if n := rapid.IntRange(0, 2).Draw(t, "files"); n > 0 {
		for i := range n {
			c.Files = append(c.Files, genID(t, "file"+string(rune('0'+i)))+"/x.go")
		}
	}
	if rapid.IntRange(0, 3).Draw(t, "shared") == 0 {
		c.Mode = coord.ModeShared
	}
	if rapid.Bool().Draw(t, "git") {
		c.Git = &coord.Git{Branch: genText(t, "branch"), Base: genText(t, "base"), AutoReleaseOn: genText(t, "auto")}
	}
	if rapid.Bool().Draw(t, "bound") {
		c.BoardTask = genID(t, "board_task")
	}
	return c
}

func genEvent(t *rapid.T) coord.Event {
	switch rapid.IntRange(0, 8).Draw(t, "event") {
	case 0:
		return coord.ClaimGranted{Claim: genClaim(t), Renewal: rapid.Bool().Draw(t, "renewal")}
	case 1:
		return coord.TaskUpdated{Claim: genClaim(t)}
	case 2:
		return coord.CheckpointSaved{Claim: genClaim(t)}
	case 3:
		return coord.HandedOff{Claim: genClaim(t), From: genID(t, "from")}
	case 4:
		return coord.Released{TaskID: genID(t, "task"), Owner: genID(t, "owner"), Epoch: rapid.Int64().Draw(t, "epoch")}
	case 5:
		return coord.ClaimDenied{Claimant: genText(t, "claimant"), TaskID: genText(t, "task"), Code: coord.CodeLeaseLive, Worktree: genText(t, "wt")}
	case 6:
		return coord.ResourceOffered{Offer: &coord.Offer{
			Agent: genID(t, "agent"), Kind: genID(t, "kind"), Name: genID(t, "name"),
			Capacity: rapid.IntRange(-5, 1<<40).Draw(t, "capacity"), Meta: genJSONObject(t, "meta"), OfferedAt: genTime(t, "at"),
		}}
	case 7:
		deps := rapid.SliceOfN(rapid.StringMatching(`[a-z]{1,4}`), 0, 3).Draw(t, "deps")
		if deps == nil {
			deps = []string{}
		}
		owner := rapid.SampledFrom([]string{"", "p/a"}).Draw(t, "owner")
		ownerClaim := ""
		if owner != "" {
			ownerClaim = genID(t, "owner_claim")
		}
		return coord.TaskPosted{Task: &coord.BoardTask{
			TaskID: genID(t, "task"), Title: genText(t, "title"), Description: genText(t, "desc"), DependsOn: deps,
			Status:         rapid.SampledFrom(ledgerStatuses).Draw(t, "status"),
			SuggestedOwner: genText(t, "suggested"), Project: genText(t, "project"), Version: rapid.Int64Min(0).Draw(t, "version"),
			CreatedBy: genText(t, "by"), CreatedAt: genTime(t, "created"), UpdatedAt: genTime(t, "updated"),
			Owner: owner, OwnerClaim: ownerClaim,
		}, CausalParent: rapid.SampledFrom([]string{"", `{"hub":"h","seq":3}`, `"x"`, `12`}).Draw(t, "parent"),
			Update: rapid.Bool().Draw(t, "update")}
	default:
		return coord.ProgressPosted{Note: &coord.Note{
			TaskID: genID(t, "task"), Author: genText(t, "author"), Kind: rapid.SampledFrom(progressKinds).Draw(t, "kind"),
			Text: genText(t, "text"), PostedAt: genTime(t, "at"),
		}}
	}
}

// A lapsed lease is journalled as an audit row (so a watching peer's fold
// stops treating it as asserting, PROTOCOL.md §6.4 [obs]) that replay
// skips: expiry is recomputed from lease_expires_at (INV-RR-1).
func TestEncode_ClaimExpiredIsAnAuditRowReplaySkips(t *testing.T) {
	rec, ok := Encode(coord.ClaimExpired{TaskID: "t", Epoch: 7})
	if !ok || rec.Kind != KindClaimExpired || rec.Durable || string(rec.Payload) != `{"task_id":"t","epoch":7}` {
		t.Fatalf("encoded %+v, %v", rec, ok)
	}
	if ev, ok, err := Decode(rec.Kind, rec.Payload); ok || err != nil || ev != nil {
		t.Fatalf("replay decoded %v %v %v; want it skipped", ev, ok, err)
	}
}

// Globs and the shared mode are additive: a plain claim's payload has
// neither key (so it is the reference's), a claim with them carries both,
// and a row written before them decodes as an exclusive literal claim.
func TestCodec_GlobsAndModeAreAdditive(t *testing.T) {
	plain := &coord.Claim{TaskID: "T1", Owner: "p/a", Worktree: "/r", Paths: []string{"src"}, Epoch: 1, ExpiresAt: 10}
	rec, _ := Encode(coord.ClaimGranted{Claim: plain})
	if strings.Contains(string(rec.Payload), "globs") || strings.Contains(string(rec.Payload), "mode") {
		t.Fatalf("a plain claim's payload names globs or a mode: %s", rec.Payload)
	}
	globbed := *plain
	globbed.Paths, globbed.Globs, globbed.Mode = nil, []string{"src/**/*.go", "docs/*.md"}, coord.ModeShared
	rec, _ = Encode(coord.ClaimGranted{Claim: &globbed})
	if !strings.Contains(string(rec.Payload), `"globs":["src/**/*.go","docs/*.md"]`) || !strings.Contains(string(rec.Payload), `"mode":"shared"`) {
		t.Fatalf("payload %s lacks the globs or the mode", rec.Payload)
	}
	ev, ok, err := Decode(rec.Kind, rec.Payload)
	if err != nil || !ok || !reflect.DeepEqual(ev.(coord.ClaimGranted).Claim, &globbed) {
		t.Fatalf("decoded %+v (%v), want %+v", ev, err, &globbed)
	}
	old := `{"task_id":"T1","owner":"p/a","status":"claimed","epoch":1,"lease_expires_at":10,"paths":["src"],"worktree":"/r"}`
	ev, _, err = Decode(KindClaim, []byte(old))
	if c := ev.(coord.ClaimGranted).Claim; err != nil || c.Globs != nil || c.Mode != coord.ModeExclusive {
		t.Fatalf("an old row decodes to %+v (%v)", c, err)
	}
	for _, bad := range []string{`"mode":"reading"`, `"globs":[null]`} {
		row := strings.Replace(old, `"worktree"`, bad+`,"worktree"`, 1)
		if _, _, err := Decode(KindClaim, []byte(row)); err == nil {
			t.Errorf("row %s decoded", row)
		}
	}
	// The root among paths beside globs stays, so applying the claim
	// widens it to the whole worktree rather than to the globs alone.
	row := strings.Replace(old, `"paths":["src"]`, `"paths":[""],"globs":["a/*"]`, 1)
	ev, _, _ = Decode(KindClaim, []byte(row))
	s := coord.New(coord.Limits{})
	s.Apply(ev)
	if c := s.Claim("T1"); !c.WholeWorktree() {
		t.Fatalf("a root path beside globs was applied as %+v", c)
	}
}

// Files are additive too (issue 19): a claim without them has no "files"
// key, so every row written before (or by the reference) reads as before;
// a claim with them round-trips; the root among paths beside files still
// widens the claim to the whole worktree when applied.
func TestCodec_FilesAreAdditive(t *testing.T) {
	plain := &coord.Claim{TaskID: "T1", Owner: "p/a", Worktree: "/r", Paths: []string{"src"}, Globs: []string{"*.go"}, Epoch: 1, ExpiresAt: 10}
	rec, _ := Encode(coord.ClaimGranted{Claim: plain})
	if strings.Contains(string(rec.Payload), "files") {
		t.Fatalf("a claim without files names them: %s", rec.Payload)
	}
	filed := *plain
	filed.Paths, filed.Files = nil, []string{"src/a/readme.md", "go.mod"}
	rec, _ = Encode(coord.ClaimGranted{Claim: &filed})
	if !strings.Contains(string(rec.Payload), `"files":["src/a/readme.md","go.mod"]`) {
		t.Fatalf("payload %s lacks the files", rec.Payload)
	}
	ev, ok, err := Decode(rec.Kind, rec.Payload)
	if err != nil || !ok || !reflect.DeepEqual(ev.(coord.ClaimGranted).Claim, &filed) {
		t.Fatalf("decoded %+v (%v), want %+v", ev, err, &filed)
	}
	old := `{"task_id":"T1","owner":"p/a","status":"claimed","epoch":1,"lease_expires_at":10,"paths":["src"],"worktree":"/r"}`
	if ev, _, err = Decode(KindClaim, []byte(old)); err != nil || ev.(coord.ClaimGranted).Claim.Files != nil {
		t.Fatalf("an old row decodes to %+v (%v)", ev, err)
	}
	if _, _, err := Decode(KindClaim, []byte(strings.Replace(old, `"worktree"`, `"files":["a",null],"worktree"`, 1))); err == nil {
		t.Error("a row with null among its files decoded")
	}
	row := strings.Replace(old, `"paths":["src"]`, `"paths":[""],"files":["a/b"]`, 1)
	ev, _, _ = Decode(KindClaim, []byte(row))
	s := coord.New(coord.Limits{})
	s.Apply(ev)
	if c := s.Claim("T1"); !c.WholeWorktree() {
		t.Fatalf("a root path beside files was applied as %+v", c)
	}
}

// Task-bound claims add board_task to a claim row and owner to a board task
// row, only when set: rows without them (every row the reference or an
// earlier Synapse wrote) decode exactly as before.
func TestCodec_TaskBoundFieldsAreAdditive(t *testing.T) {
	c := &coord.Claim{TaskID: "T1", Owner: "p/a", Status: coord.StatusClaimed, ExpiresAt: 10, Epoch: 1, QuotaPrincipal: "q", BoardTask: "design"}
	rec, _ := Encode(coord.ClaimGranted{Claim: c})
	if !strings.Contains(string(rec.Payload), `"board_task":"design"`) {
		t.Fatalf("claim row %s lacks board_task", rec.Payload)
	}
	got, _, err := Decode(rec.Kind, rec.Payload)
	if err != nil || got.(coord.ClaimGranted).Claim.BoardTask != "design" {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	c.BoardTask = ""
	rec, _ = Encode(coord.ClaimGranted{Claim: c})
	if strings.Contains(string(rec.Payload), "board_task") {
		t.Fatalf("unbound claim row %s names board_task", rec.Payload)
	}
	bt := &coord.BoardTask{TaskID: "design", Title: "D", DependsOn: []string{}, Status: "in_progress", Version: 2, Owner: "p/a", OwnerClaim: "T1"}
	rec, _ = Encode(coord.TaskPosted{Task: bt})
	got, _, err = Decode(rec.Kind, rec.Payload)
	if err != nil || got.(coord.TaskPosted).Task.Owner != "p/a" || got.(coord.TaskPosted).Task.OwnerClaim != "T1" {
		t.Fatalf("decoded %s as %+v, %v", rec.Payload, got, err)
	}
	old := `{"task_id":"design","title":"D","depends_on":[],"status":"open","version":1,"created_at":1,"updated_at":1}`
	got, _, err = Decode(KindLedgerTask, []byte(old))
	if err != nil || got.(coord.TaskPosted).Task.Owner != "" {
		t.Fatalf("old row decoded as %+v, %v", got, err)
	}
}
