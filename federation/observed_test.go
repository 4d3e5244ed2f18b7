package federation

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/synapse-hub/synapse/coord"
	"pgregory.net/rapid"
)

// claimDict is the full claim dict the claim-carrying kinds journal.
func claimDict(task, owner string, epoch int64, expires float64) string {
	return fmt.Sprintf(`{"task_id":%q,"owner":%q,"note":"","claimed_at":100.0,"lease_expires_at":%v,`+
		`"status":"claimed","data_ref":"","worktree":"wt","paths":["src/a.go","docs"],"epoch":%d,"version":0,`+
		`"checkpoint":"","git":null,"quota_principal":%q}`, task, owner, jsonFloat(expires), epoch, owner)
}

func jsonFloat(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// feed applies events to o as hub's log, numbering them from seq 1 on.
type feed struct {
	o   *Observed
	hub string
	seq int64
}

func (f *feed) apply(ts float64, kind, payload string) {
	f.seq++
	f.o.Apply(f.hub, ev(f.seq, ts, kind, payload))
}

func wantClaims(t *testing.T, o *Observed, now float64, want ...string) {
	t.Helper()
	var got []string
	for _, c := range o.Claims(now) {
		got = append(got, fmt.Sprintf("%s/%s:%s@%d", c.Hub, c.TaskID, c.Owner, c.Epoch))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Claims(%v) = %v, want %v", now, got, want)
	}
}

func TestObserved_ClaimKindsUpsertTheClaim(t *testing.T) {
	for _, kind := range []string{"claim", "task_update", "checkpoint", "handoff"} {
		t.Run(kind, func(t *testing.T) {
			o := NewObserved(ObservedLimits{})
			f := &feed{o: o, hub: "east"}
			f.apply(100, "claim", claimDict("T1", "P/alice", 1, 500))
			f.apply(150, kind, claimDict("T1", "P/bob", 1, 900))
			got := o.Claims(0)
			want := []ObservedClaim{{Hub: "east", TaskID: "T1", Owner: "P/bob", Worktree: "wt",
				Paths: []string{"src/a.go", "docs"}, Epoch: 1, Status: "claimed", LeaseExpiresAt: 900, ObservedAt: 150}}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Claims = %+v, want %+v", got, want)
			}
		})
	}
}

func TestObserved_ReleaseRemovesTheClaim(t *testing.T) {
	o := NewObserved(ObservedLimits{})
	f := &feed{o: o, hub: "east"}
	f.apply(100, "claim", claimDict("T1", "P/alice", 1, 500))
	f.apply(100, "claim", claimDict("T2", "P/alice", 2, 500))
	f.apply(110, "release", `{"task_id":"T1"}`)
	f.apply(111, "release", `{"task_id":"never-claimed"}`)
	wantClaims(t, o, 200, "east/T2:P/alice@2")
}

func TestObserved_ExpiryRemovesOnlyTheEpochObserved(t *testing.T) {
	o := NewObserved(ObservedLimits{})
	f := &feed{o: o, hub: "east"}
	f.apply(100, "claim", claimDict("T1", "P/alice", 1, 500))
	f.apply(400, "claim", claimDict("T1", "P/alice", 2, 900)) // a renewal takes a new epoch
	f.apply(501, "claim_expired", `{"task_id":"T1","owner":"P/alice","epoch":1,"lease_expires_at":500.0}`)
	wantClaims(t, o, 600, "east/T1:P/alice@2")
	f.apply(901, "claim_expired", `{"task_id":"T1","owner":"P/alice","epoch":2,"lease_expires_at":900.0}`)
	wantClaims(t, o, 0)
}

func TestObserved_ClaimPastItsLeaseStopsAssertingWithoutARecord(t *testing.T) {
	// The reference's [obs] gap: expiry is never journalled, so time alone
	// must end the assertion.
	o := NewObserved(ObservedLimits{})
	f := &feed{o: o, hub: "east"}
	f.apply(100, "claim", claimDict("T1", "P/alice", 1, 500))
	wantClaims(t, o, 499.5, "east/T1:P/alice@1")
	if got := o.Asserting(499.5); !reflect.DeepEqual(got, map[string][]string{"P": {"east"}}) {
		t.Fatalf("Asserting before expiry = %v", got)
	}
	wantClaims(t, o, 500) // lease_expires_at == now is no longer live
	if got := o.Asserting(500); len(got) != 0 {
		t.Fatalf("Asserting at expiry = %v, want none", got)
	}
}

func TestObserved_LedgerTaskUpsertsTheBoard(t *testing.T) {
	o := NewObserved(ObservedLimits{})
	west, east := &feed{o: o, hub: "west"}, &feed{o: o, hub: "east"}
	task := func(id, title, status string, version int64) string {
		return fmt.Sprintf(`{"task_id":%q,"title":%q,"description":"d","depends_on":[],"status":%q,`+
			`"suggested_owner":"P/bob","project":"P","version":%d,"created_by":"P/alice",`+
			`"created_at":10.0,"updated_at":%d.5}`, id, title, status, version, version)
	}
	west.apply(10, "ledger_task", task("B", "second", "open", 1))
	west.apply(11, "ledger_task", task("A", "first", "open", 1))
	east.apply(12, "ledger_task", task("Z", "other hub", "open", 1))
	west.apply(13, "ledger_task", task("A", "first, renamed", "in_progress", 2))

	want := []ObservedTask{
		{Hub: "east", TaskID: "Z", Title: "other hub", Status: "open", SuggestedOwner: "P/bob", Project: "P", Version: 1, UpdatedAt: 1.5},
		{Hub: "west", TaskID: "A", Title: "first, renamed", Status: "in_progress", SuggestedOwner: "P/bob", Project: "P", Version: 2, UpdatedAt: 2.5},
		{Hub: "west", TaskID: "B", Title: "second", Status: "open", SuggestedOwner: "P/bob", Project: "P", Version: 1, UpdatedAt: 1.5},
	}
	if got := o.Board(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Board = %+v\nwant %+v", got, want)
	}
}

func note(task, text string) string {
	return fmt.Sprintf(`{"task_id":%q,"author":"P/alice","kind":"note","text":%q,"posted_at":5.0}`, task, text)
}

func noteTexts(o *Observed) []string {
	var out []string
	for _, n := range o.Notes() {
		out = append(out, n.Hub+":"+n.Text)
	}
	return out
}

func TestObserved_ProgressIsGrowOnlyAndKeepsTheNewest(t *testing.T) {
	o := NewObserved(ObservedLimits{MaxNotesPerPeer: 3})
	east, west := &feed{o: o, hub: "east"}, &feed{o: o, hub: "west"}
	for i := 1; i <= 5; i++ {
		east.apply(float64(i), "ledger_progress", note("T", fmt.Sprint(i)))
	}
	west.apply(1, "ledger_progress", note("T", "w1"))
	// The same task and text again is a new note, not a replacement.
	west.apply(2, "ledger_progress", note("T", "w1"))
	if got, want := noteTexts(o), []string{"east:3", "east:4", "east:5", "west:w1", "west:w1"}; !slices.Equal(got, want) {
		t.Fatalf("Notes = %v, want %v", got, want)
	}
	got := o.Notes()[0]
	want := ObservedNote{Hub: "east", TaskID: "T", Author: "P/alice", Kind: "note", Text: "3", PostedAt: 5, Seq: 3}
	if got != want {
		t.Fatalf("note = %+v, want %+v", got, want)
	}
}

func TestObserved_IgnoresKindsItDoesNotFold(t *testing.T) {
	o := NewObserved(ObservedLimits{})
	f := &feed{o: o, hub: "east"}
	f.apply(1, "claim", claimDict("T1", "P/alice", 1, 500))
	for _, kind := range []string{"chat", "idempotency", "claim_denial", "resource", "mailbox_watermark",
		"multihub_partition", "multihub_heal", "delivery_receipt_requested", "something_new"} {
		// Shaped like a release, so folding one by mistake would show.
		f.apply(2, kind, `{"task_id":"T1"}`)
	}
	wantClaims(t, o, 0, "east/T1:P/alice@1")
	if s := o.Stats(); s.Ignored != 9 || s.Applied != 1 || s.Malformed != 0 {
		t.Fatalf("Stats = %+v, want 9 ignored, 1 applied", s)
	}
}

func TestObserved_CountsAndIgnoresMalformedPayloads(t *testing.T) {
	cases := map[string]struct{ kind, payload string }{
		"not an object":        {"claim", `["T1"]`},
		"null":                 {"release", `null`},
		"not JSON":             {"claim", `{"task_id":`},
		"claim without owner":  {"claim", `{"task_id":"T1","status":"claimed","epoch":3,"lease_expires_at":900.0}`},
		"claim without expiry": {"claim", `{"task_id":"T1","owner":"X/eve","status":"claimed","epoch":3}`},
		"claim without epoch":  {"handoff", `{"task_id":"T1","owner":"X/eve","status":"claimed","lease_expires_at":900.0}`},
		"epoch as text":        {"claim", `{"task_id":"T1","owner":"X/eve","status":"claimed","epoch":"3","lease_expires_at":900.0}`},
		"fractional epoch":     {"claim", `{"task_id":"T1","owner":"X/eve","status":"claimed","epoch":1.5,"lease_expires_at":900.0}`},
		"negative epoch":       {"claim", `{"task_id":"T1","owner":"X/eve","status":"claimed","epoch":-1,"lease_expires_at":900.0}`},
		"paths not a list":     {"claim", `{"task_id":"T1","owner":"X/eve","status":"claimed","epoch":3,"lease_expires_at":900.0,"paths":"a"}`},
		"release without task": {"release", `{}`},
		"empty task id":        {"release", `{"task_id":""}`},
		"expiry without epoch": {"claim_expired", `{"task_id":"T1","owner":"P/alice"}`},
		"task without title":   {"ledger_task", `{"task_id":"B","version":1}`},
		"task version as text": {"ledger_task", `{"task_id":"B","title":"t","version":"1"}`},
		"note without text":    {"ledger_progress", `{"task_id":"T","author":"a"}`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			o := NewObserved(ObservedLimits{})
			f := &feed{o: o, hub: "east"}
			f.apply(1, "claim", claimDict("T1", "P/alice", 1, 500))
			f.apply(2, c.kind, c.payload)
			wantClaims(t, o, 0, "east/T1:P/alice@1")
			if len(o.Board()) != 0 || len(o.Notes()) != 0 {
				t.Fatalf("a malformed record reached the board or notes")
			}
			if s := o.Stats(); s.Malformed != 1 || s.Applied != 1 {
				t.Fatalf("Stats = %+v, want 1 malformed", s)
			}
		})
	}
	o := NewObserved(ObservedLimits{})
	o.Apply("", ev(1, 1, "claim", claimDict("T1", "P/alice", 1, 500)))
	if s := o.Stats(); s.Malformed != 1 || len(o.Claims(0)) != 0 {
		t.Fatalf("an event with no hub id was folded: %+v", s)
	}
}

func TestObserved_SkipsEventsAlreadyApplied(t *testing.T) {
	o := NewObserved(ObservedLimits{})
	o.Apply("east", ev(1, 1, "claim", claimDict("T1", "P/alice", 1, 500)))
	o.Apply("east", ev(2, 2, "release", `{"task_id":"T1"}`))
	o.Apply("east", ev(1, 1, "claim", claimDict("T1", "P/alice", 1, 500))) // re-delivered
	wantClaims(t, o, 0)
	if s := o.Stats(); s.Stale != 1 {
		t.Fatalf("Stats = %+v, want 1 stale", s)
	}
}

func TestObserved_ForgetDropsEverythingOfOnePeer(t *testing.T) {
	o := NewObserved(ObservedLimits{})
	east, west := &feed{o: o, hub: "east"}, &feed{o: o, hub: "west"}
	east.apply(1, "claim", claimDict("T1", "P/alice", 1, 500))
	east.apply(2, "ledger_task", `{"task_id":"B","title":"t","version":1}`)
	east.apply(3, "ledger_progress", note("B", "n"))
	west.apply(1, "claim", claimDict("T2", "P/bob", 1, 500))

	o.Forget("east")
	wantClaims(t, o, 0, "west/T2:P/bob@1")
	if len(o.Board()) != 0 || len(o.Notes()) != 0 {
		t.Fatalf("Forget left east's board or notes")
	}
	// What comes of east afterwards starts afresh, even from seq 1.
	o.Apply("east", ev(1, 9, "claim", claimDict("T3", "P/carol", 4, 500)))
	wantClaims(t, o, 0, "east/T3:P/carol@4", "west/T2:P/bob@1")
}

func TestObserved_BoundsClaimsPerPeer(t *testing.T) {
	o := NewObserved(ObservedLimits{MaxClaimsPerPeer: 2})
	east, west := &feed{o: o, hub: "east"}, &feed{o: o, hub: "west"}
	east.apply(100, "claim", claimDict("T1", "P/a", 1, 300))
	east.apply(100, "claim", claimDict("T2", "P/a", 2, 1000))
	east.apply(200, "claim", claimDict("T3", "P/a", 3, 1000)) // full, and nothing expired by ts 200
	east.apply(200, "claim", claimDict("T1", "P/b", 4, 1000)) // an upsert fits at the bound
	west.apply(200, "claim", claimDict("T9", "P/a", 1, 1000)) // another peer has its own bound
	wantClaims(t, o, 0, "east/T1:P/b@4", "east/T2:P/a@2", "west/T9:P/a@1")
	if s := o.Stats(); s.Dropped != 1 || s.Applied != 4 {
		t.Fatalf("Stats = %+v, want 1 dropped, 4 applied", s)
	}

	// A claim whose lease ran out by the peer's own clock makes room.
	east.apply(400, "claim", claimDict("T2", "P/a", 5, 350))
	east.apply(400, "claim", claimDict("T4", "P/a", 6, 1000))
	wantClaims(t, o, 0, "east/T1:P/b@4", "east/T4:P/a@6", "west/T9:P/a@1")
}

func TestObserved_BoundsTasksPerPeer(t *testing.T) {
	o := NewObserved(ObservedLimits{MaxTasksPerPeer: 1})
	f := &feed{o: o, hub: "east"}
	f.apply(1, "ledger_task", `{"task_id":"A","title":"a","version":1}`)
	f.apply(2, "ledger_task", `{"task_id":"B","title":"b","version":1}`)
	f.apply(3, "ledger_task", `{"task_id":"A","title":"a2","version":2}`)
	board := o.Board()
	if len(board) != 1 || board[0].TaskID != "A" || board[0].Title != "a2" {
		t.Fatalf("Board = %+v, want only A, updated", board)
	}
	if s := o.Stats(); s.Dropped != 1 {
		t.Fatalf("Stats = %+v, want 1 dropped", s)
	}
}

func TestObserved_AssertingNamesTheNamespacesOfLiveClaims(t *testing.T) {
	o := NewObserved(ObservedLimits{})
	east, west, north := &feed{o: o, hub: "east"}, &feed{o: o, hub: "west"}, &feed{o: o, hub: "north"}
	east.apply(1, "claim", claimDict("T1", "PROJ/alice", 1, 500))
	east.apply(1, "claim", claimDict("T2", "PROJ/bob", 2, 500)) // same namespace: east is named once
	east.apply(1, "claim", claimDict("T3", "bare", 3, 500))     // a bare name is namespace ""
	west.apply(1, "claim", claimDict("T1", "PROJ/carol/x", 1, 500))
	west.apply(1, "claim", claimDict("T4", "OTHER/dave", 2, 500))
	north.apply(1, "claim", claimDict("T5", "LATE/erin", 1, 50)) // expired by now
	north.apply(1, "claim", claimDict("T6", "GONE/fay", 2, 500))
	north.apply(2, "release", `{"task_id":"T6"}`)

	want := map[string][]string{"PROJ": {"east", "west"}, "": {"east"}, "OTHER": {"west"}}
	if got := o.Asserting(100); !reflect.DeepEqual(got, want) {
		t.Fatalf("Asserting = %v, want %v", got, want)
	}
}

func TestObserved_ClaimsAreCopies(t *testing.T) {
	o := NewObserved(ObservedLimits{})
	o.Apply("east", ev(1, 1, "claim", claimDict("T1", "P/alice", 1, 500)))
	o.Claims(0)[0].Paths[0] = "changed"
	if p := o.Claims(0)[0].Paths[0]; p != "src/a.go" {
		t.Fatalf("a caller's edit reached the view: %q", p)
	}
}

// Whatever a peer's log holds, re-delivering any part of it changes nothing,
// and Asserting is exactly the namespaces of the live Claims.
func TestObserved_RedeliveryIsIdempotentAndAssertingFollowsClaims_Property(t *testing.T) {
	hubs := []string{"east", "west"}
	owners := []string{"P/a", "P/b", "Q/c", "bare"}
	tasks := []string{"T1", "T2", "T3"}
	rapid.Check(t, func(t *rapid.T) {
		logs := map[string][]Event{}
		for _, hub := range hubs {
			n := rapid.IntRange(0, 25).Draw(t, hub+" length")
			for seq := int64(1); seq <= int64(n); seq++ {
				task := rapid.SampledFrom(tasks).Draw(t, "task")
				ts := float64(seq * 10)
				var kind, payload string
				switch rapid.IntRange(0, 3).Draw(t, "op") {
				case 0, 1:
					kind = rapid.SampledFrom([]string{"claim", "task_update", "handoff"}).Draw(t, "kind")
					ttl := float64(rapid.IntRange(1, 100).Draw(t, "ttl"))
					payload = claimDict(task, rapid.SampledFrom(owners).Draw(t, "owner"), seq, ts+ttl)
				case 2:
					kind, payload = "release", fmt.Sprintf(`{"task_id":%q}`, task)
				default:
					epoch := rapid.Int64Range(1, seq).Draw(t, "epoch")
					kind, payload = "claim_expired", fmt.Sprintf(`{"task_id":%q,"epoch":%d}`, task, epoch)
				}
				logs[hub] = append(logs[hub], ev(seq, ts, kind, payload))
			}
		}

		once, again := NewObserved(ObservedLimits{}), NewObserved(ObservedLimits{})
		for _, hub := range hubs {
			for _, e := range logs[hub] {
				once.Apply(hub, e)
			}
			// Polls that overlap: each delivers from some earlier seq on.
			for next := 0; next < len(logs[hub]); {
				from := rapid.IntRange(0, next).Draw(t, "from")
				to := rapid.IntRange(next+1, len(logs[hub])).Draw(t, "to")
				for _, e := range logs[hub][from:to] {
					again.Apply(hub, e)
				}
				next = to
			}
		}

		now := rapid.Float64Range(0, 300).Draw(t, "now")
		if a, b := once.Claims(now), again.Claims(now); !reflect.DeepEqual(a, b) {
			t.Fatalf("re-delivery changed the claims:\n%+v\n%+v", a, b)
		}
		want := map[string][]string{}
		for _, c := range once.Claims(now) {
			ns := coord.NamespaceOf(c.Owner)
			if !slices.Contains(want[ns], c.Hub) {
				want[ns] = append(want[ns], c.Hub) // Claims is sorted by hub
			}
		}
		if got := once.Asserting(now); !reflect.DeepEqual(got, want) {
			t.Fatalf("Asserting(%v) = %v, but the live claims give %v", now, got, want)
		}
	})
}
