package journal

import (
	"reflect"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// FuzzScanClaim holds the fast claim scanner to encoding/json: whatever it
// accepts, json.Unmarshal accepts too and decodes to the same fields (so a
// replayed or mirrored claim is the claim that was written, INV-JA-1);
// whatever it refuses goes to encoding/json, which is the definition.
func FuzzScanClaim(f *testing.F) {
	for _, c := range scanSamples() {
		rec, _ := Encode(coord.ClaimGranted{Claim: c})
		f.Add(rec.Payload)
	}
	for _, s := range []string{
		` { "task_id" : "T" , "paths" : [ ] , "globs" : null , "epoch" : 1 } `,
		`{"task_id":"a","task_id":null,"epoch":1,"epoch":2}`,
		`{"TASK_ID":"T"}`, `{"epoch":1.0}`, `{"epoch":01}`, `{"claimed_at":-0}`, `{"claimed_at":1e400}`,
		`{"note":"a\"b"}`, `{"note":"\u00e9"}`, "{\"note\":\"\xff\"}", `{"paths":["a",null]}`, `{"git":{"branch":"b"}}`,
		`{"path_identity":{"version":1}}`, `{}`, `{} x`, `{"a":1}`, `[]`, ``, `{"epoch":-9223372036854775809}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var fast claimJSON
		if !scanClaim(payload, &fast) {
			return
		}
		var slow claimJSON
		if err := unmarshalObject(payload, &slow); err != nil {
			t.Fatalf("the scanner accepted what encoding/json refuses (%v): %q", err, payload)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: scanner %+v, encoding/json %+v", payload, fast, slow)
		}
	})
}

// Every claim the encoder writes takes the fast path, and decodes to the
// claim encoded (INV-JA-1: a replayed claim is the claim acknowledged).
func TestScanClaim_TheEncodersFormTakesTheFastPath_INV_JA_1(t *testing.T) {
	for _, c := range scanSamples() {
		rec, _ := Encode(coord.ClaimGranted{Claim: c})
		var p claimJSON
		if !scanClaim(rec.Payload, &p) {
			t.Fatalf("the encoder's form fell back to encoding/json: %s", rec.Payload)
		}
		got, err := decodeClaim(rec.Payload)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := Encode(coord.ClaimGranted{Claim: got})
		if string(again.Payload) != string(rec.Payload) {
			t.Fatalf("decoded claim re-encodes differently:\n%s\n%s", rec.Payload, again.Payload)
		}
	}
}

func scanSamples() []*coord.Claim {
	return []*coord.Claim{
		{TaskID: "w1-123", Owner: "ns3/agent", Paths: []string{"w1-123"}, ExpiresAt: 1.7e9 + 0.25, ClaimedAt: 1.7e9, Epoch: 12, QuotaPrincipal: "ns3/agent"},
		{TaskID: "T", Owner: "a", Status: coord.StatusWorking, Note: "half", Globs: []string{"src/**/*.go"}, Files: []string{"go.mod"},
			Mode: coord.ModeShared, Checkpoint: "c1", Version: 4, Epoch: 1, ExpiresAt: 10, BoardTask: "B1", DataRef: "d", Worktree: "/wt"},
		{TaskID: "whole", Owner: "p/b", Epoch: 3, ExpiresAt: 5},
	}
}

func BenchmarkDecodeClaim(b *testing.B) {
	rec, _ := Encode(coord.ClaimGranted{Claim: scanSamples()[0]})
	b.Run("scanner", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeClaim(rec.Payload); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p claimJSON
			if err := unmarshalObject(rec.Payload, &p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
