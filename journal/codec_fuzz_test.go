package journal

import (
	"errors"
	"reflect"
	"testing"

	"github.com/synapse-hub/synapse/coord"
	"pgregory.net/rapid"
)

// FuzzDecodeRow feeds arbitrary (kind, payload) rows to Decode, as a
// damaged or hostile journal would: it never panics; a refusal is
// ErrBadPayload (what replay quarantines) and gives no event; an accepted
// row is an event of the kind it names, which Encode writes back to a row
// that decodes to the same event and re-encodes to the same bytes; and
// applying it to a state does not panic (replay would quarantine the row,
// but the decoder should have refused it).
func FuzzDecodeRow(f *testing.F) {
	claim := `{"task_id":"T2","owner":"p/b","note":"","claimed_at":1795983588.3326812,"lease_expires_at":1795987188.3326812,` +
		`"status":"claimed","data_ref":"","worktree":"/wt","paths":["src/core"],"epoch":2,"version":0,"checkpoint":"",` +
		`"git":{"branch":"feat","base":"main","auto_release_on":"merge"},"path_identity":{"version":1},"quota_principal":"open-host:127.0.0.1"}`
	for _, row := range [][2]string{
		{KindClaim, claim}, {KindTaskUpdate, claim}, {KindCheckpoint, claim}, {KindHandoff, claim},
		{KindClaim, `{"task_id":"T","owner":"a","status":"working","epoch":1,"lease_expires_at":10,"paths":[""]}`},
		{KindRelease, `{"task_id":"T2"}`},
		{KindClaimExpired, `{"task_id":"T2","epoch":2}`},
		{KindClaimDenial, `{"claimant":"p/c","claimant_sha256":"x","claimant_truncated":false,"decision":"deny","path_count":1,"reason_code":"SCOPE_CONFLICT"}`},
		{KindResource, `{"agent":"p/a","kind":"gpu","name":"g0","capacity":2,"meta":{"b":1,"a":[1.5]},"offered_at":1795983588.5}`},
		{KindLedgerTask, `{"task_id":"B1","title":"t","description":"","depends_on":["B0"],"status":"open","suggested_owner":"","project":"p",` +
			`"version":1,"created_by":"p/a","created_at":1.5,"updated_at":2.5,"causal_parent":{"hub":"h","seq":3}}`},
		{KindLedgerProgress, `{"task_id":"B1","author":"p/a","kind":"note","text":"half done","posted_at":1795983590.25}`},
		{KindClaim, `{"task_id":"T","owner":"a","status":"claimed","epoch":-1,"lease_expires_at":1e999}`},
		{KindResource, `[]`}, {"chat", `{"x":1}`}, {KindLedgerTask, ``},
	} {
		f.Add(row[0], []byte(row[1]))
	}
	f.Fuzz(func(t *testing.T, kind string, payload []byte) {
		ev, ok, err := Decode(kind, payload)
		if err != nil {
			if !errors.Is(err, ErrBadPayload) || ok || ev != nil {
				t.Fatalf("refusal (%v, %v, %v) is not a bare ErrBadPayload", ev, ok, err)
			}
			return
		}
		if !ok {
			if ev != nil {
				t.Fatalf("a skipped %q row gave an event %#v", kind, ev)
			}
			return
		}
		if ev.Kind() != kind {
			t.Fatalf("a %q row decoded to a %q event", kind, ev.Kind())
		}
		rec, ok := Encode(ev)
		if !ok {
			t.Fatalf("decoded %T is not journalled", ev)
		}
		again, ok, err := Decode(rec.Kind, rec.Payload)
		if err != nil || !ok {
			t.Fatalf("Encode wrote %s %s, which does not decode: %v", rec.Kind, rec.Payload, err)
		}
		if !reflect.DeepEqual(again, ev) {
			t.Fatalf("row %s\nre-encoded %s\ndecodes to %#v\nnot %#v", payload, rec.Payload, again, ev)
		}
		if rec2, _ := Encode(again); string(rec2.Payload) != string(rec.Payload) {
			t.Fatalf("encoding is not a fixed point:\n%s\n%s", rec.Payload, rec2.Payload)
		}
		if err := apply(coord.New(coord.Limits{}), ev); err != nil {
			t.Fatalf("a decoded row panics the core: %v\n%s %s", err, kind, payload)
		}
	})
}

// FuzzEventRoundTrip drives the rapid generators of TestCodec_RoundTrip
// from fuzz input: what Encode writes, Decode gives back, except the fields
// the payloads do not carry (carried).
func FuzzEventRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("0123456789abcdef0123456789abcdef"))
	f.Fuzz(rapid.MakeFuzz(roundTrip))
}

// FuzzDecodeImage feeds arbitrary and mutated snapshot bodies to
// DecodeImage: it never panics; it refuses with ErrBadSnapshot, or gives an
// image that passes the state's own check (coord.Image.Check), that
// FromImage rebuilds exactly (FromImage(img).Image() is img), and that
// EncodeImage writes back to a body decoding to the same image.
func FuzzDecodeImage(f *testing.F) {
	for _, img := range seedImages() {
		f.Add(EncodeImage(img))
	}
	f.Add([]byte("SYNSNAP1"))
	f.Add([]byte("SYNSNAP1\x00\x01"))
	f.Add([]byte("not a snapshot"))
	f.Fuzz(func(t *testing.T, body []byte) {
		img, err := DecodeImage(body)
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("refusal %v is not ErrBadSnapshot", err)
			}
			return
		}
		if err := img.Check(); err != nil {
			t.Fatalf("DecodeImage accepted an image its state refuses: %v", err)
		}
		if got := coord.FromImage(coord.Limits{}, img).Image(); !reflect.DeepEqual(got, img) {
			t.Fatalf("FromImage does not rebuild the snapshot:\n got %+v\nwant %+v", got, img)
		}
		again, err := DecodeImage(EncodeImage(img))
		if err != nil || !reflect.DeepEqual(again, img) {
			t.Fatalf("re-encoded image decodes to %+v (%v), not %+v", again, err, img)
		}
	})
}

// seedImages are snapshots of real states: claims with and without paths,
// git and identity, retained checkpoints, offers, board tasks and notes.
func seedImages() []coord.Image {
	s := coord.New(coord.Limits{})
	const t0 = 1_795_983_588.0
	steps := []coord.Command{
		coord.ClaimRequest{Agent: "p/a", TaskID: "T1", Worktree: "/wt", Paths: []string{"src/core", "docs"}, TTL: 60, HasTTL: true},
		coord.ClaimRequest{Agent: "p/b", TaskID: "T2", Worktree: "/wt2", TTL: 5, HasTTL: true,
			Git: &coord.Git{Branch: "feat", Base: "main"}, PathIdentity: `{"version":1}`},
		coord.CheckpointRequest{Agent: "p/b", TaskID: "T2", Checkpoint: "step 3"},
		coord.ClaimRequest{Agent: "p/c", TaskID: "T3", Worktree: "/wt", Globs: []string{"lib/**/*.go"}, Shared: true, TTL: 60, HasTTL: true},
		coord.ClaimRequest{Agent: "p/d", TaskID: "T4", Worktree: "/wt", Files: []string{"lib/a.md", "go.mod"}, TTL: 60, HasTTL: true},
		coord.UpdateRequest{Agent: "p/a", TaskID: "T1", Status: "working", Note: "é"},
	}
	for i, c := range steps {
		s.Step(c, t0+float64(i))
	}
	imgs := []coord.Image{{}, s.Image()}
	s.Tick(t0 + 30) // T2 lapses: its checkpoint is retained
	imgs = append(imgs, s.Image())
	img := s.Image()
	img.Offers = []coord.Offer{{Agent: "p/a", Kind: "gpu", Name: "g0", Capacity: 2, Meta: `{"a":1}`, OfferedAt: t0}}
	img.Tasks = []coord.BoardTask{{TaskID: "B1", Title: "t", DependsOn: []string{"B0"}, Status: "open", Version: 1, CreatedAt: t0, UpdatedAt: t0}}
	img.Notes = []coord.Note{{TaskID: "B1", Author: "p/a", Kind: "note", Text: "half", PostedAt: t0}}
	imgs = append(imgs, img)
	s.Step(coord.DeclareTask{Agent: "p/a", TaskID: "B2", Title: "bound"}, t0+31) // a task-bound claim
	s.Step(coord.ClaimRequest{Agent: "p/c", TaskID: "T3", Paths: []string{"x"}, BoardTask: "B2", TTL: 60, HasTTL: true}, t0+31)
	return append(imgs, s.Image())
}
