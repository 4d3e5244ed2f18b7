package journal

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/synapse-hub/synapse/coord"
	"pgregory.net/rapid"
)

// liveRun drives a coord.State the way the sequencer does: Step each
// command, journal the outcome's non-volatile events as one batch.
type liveRun struct {
	st   *Store
	live *coord.State
	now  float64
}

func (r *liveRun) step(t testing.TB, cmd coord.Command) coord.Outcome {
	t.Helper()
	o := r.live.Step(cmd, r.now)
	r.commit(t, o.Events)
	return o
}

func (r *liveRun) commit(t testing.TB, evs []coord.Event) {
	t.Helper()
	b := &Batch{TS: r.now}
	for _, ev := range evs {
		if rec, ok := Encode(ev); ok {
			b.Records = append(b.Records, rec)
		}
	}
	if _, err := r.st.Append(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

func (r *liveRun) snapshot(t testing.TB) int64 {
	t.Helper()
	seq, err := r.st.LastSeq()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.st.WriteSnapshot(seq, r.live.Image(), r.now); err != nil {
		t.Fatal(err)
	}
	return seq
}

// imageAt is what a restart at now must rebuild: the live state expired at
// now, without its waits (volatile: they die with their connections).
func imageAt(s *coord.State, now float64) coord.Image {
	s.Tick(now)
	img := s.Image()
	img.Waits = nil
	return img
}

var agents = []string{"p/a", "p/b", "p/c", "p/d"}

func genCommand(t *rapid.T) coord.Command {
	agent := rapid.SampledFrom(agents).Draw(t, "agent")
	task := fmt.Sprintf("T%d", rapid.IntRange(0, 6).Draw(t, "task"))
	switch rapid.IntRange(0, 9).Draw(t, "cmd") {
	case 0, 1:
		paths := rapid.SliceOfN(rapid.SampledFrom([]string{"src", "src/a", "src/b/c", "docs", "/abs", ""}), 0, 2).Draw(t, "paths")
		globs := rapid.SliceOfN(rapid.SampledFrom([]string{"src/**/*.go", "docs/*.md", "*", "../x"}), 0, 2).Draw(t, "globs")
		files := rapid.SliceOfN(rapid.SampledFrom([]string{"src/a/x.go", "docs/a.md", "go.mod", "../y"}), 0, 2).Draw(t, "files")
		return coord.ClaimRequest{Agent: agent, TaskID: task, Note: "n", Worktree: rapid.SampledFrom([]string{"", "/r"}).Draw(t, "wt"),
			Paths: paths, Globs: globs, Files: files, Shared: rapid.Bool().Draw(t, "shared"),
			TTL: rapid.Float64Range(1, 200).Draw(t, "ttl"), HasTTL: rapid.Bool().Draw(t, "hasttl"),
			BoardTask: rapid.SampledFrom([]string{"", "", "T1", "T2", "T3"}).Draw(t, "board")}
	case 2:
		return coord.ReleaseRequest{Agent: agent, TaskID: task, Outcome: rapid.SampledFrom([]string{"", "done", "failed"}).Draw(t, "outcome")}
	case 3:
		return coord.UpdateRequest{Agent: agent, TaskID: task, Status: rapid.SampledFrom([]string{"", "working", "done", "input_required"}).Draw(t, "st"), DataRef: "d"}
	case 4:
		return coord.CheckpointRequest{Agent: agent, TaskID: task, Checkpoint: rapid.StringMatching(`c[0-9]`).Draw(t, "cp")}
	case 5:
		return coord.HandoffRequest{Agent: agent, TaskID: task, To: rapid.SampledFrom(agents).Draw(t, "to"), ToOnline: true}
	case 6:
		return coord.WaitRequest{Agent: agent, TaskID: task}
	case 7:
		return coord.OfferResource{Agent: agent, Kind: "gpu", Name: task, Capacity: 2, Meta: rapid.SampledFrom([]string{"", `{"m":1}`}).Draw(t, "meta")}
	case 8:
		return coord.DeclareTask{Agent: agent, TaskID: task, Title: "t", DependsOn: []string{fmt.Sprintf("T%d", rapid.IntRange(0, 6).Draw(t, "dep"))}}
	default:
		return coord.PostProgress{Agent: agent, TaskID: task, Text: "x"}
	}
}

// Replay rebuilds exactly the live state, from the whole log and from a
// snapshot plus its tail (INV-RR-1: what is past due at restart is gone).
func TestReplay_EqualsLiveState(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir := t.TempDir()
		st, err := Open(dir+"/j.db", Options{})
		if err != nil {
			rt.Fatal(err)
		}
		defer st.Close()
		lim := coord.Limits{MaxNotesTotal: 5, MaxNotesPerAuthor: 3, MaxNotesPerTask: 2, MaxRetainedCheckpoints: 3, ResourceTTL: 60}
		r := &liveRun{st: st, live: coord.New(lim), now: 1e9}
		snapAt := rapid.IntRange(-1, 40).Draw(rt, "snapshot_at")
		n := rapid.IntRange(1, 60).Draw(rt, "commands")
		var snapSeq int64
		for i := range n {
			r.now += rapid.Float64Range(0, 40).Draw(rt, "dt")
			r.step(t, genCommand(rt))
			if i == snapAt {
				snapSeq = r.snapshot(t)
			}
		}
		restart := r.now + rapid.Float64Range(0, 300).Draw(rt, "downtime")
		want := imageAt(r.live, restart)

		full, err := Replay(st, lim, restart, ReplayOptions{NoSnapshot: true})
		if err != nil {
			rt.Fatal(err)
		}
		if full.Degraded() {
			rt.Fatalf("degraded: %+v", full.Quarantined)
		}
		if got := full.State.Image(); !reflect.DeepEqual(got, want) {
			rt.Fatalf("full replay\n got %+v\nwant %+v", got, want)
		}
		fromSnap, err := Replay(st, lim, restart, ReplayOptions{})
		if err != nil {
			rt.Fatal(err)
		}
		if fromSnap.SnapshotSeq != snapSeq {
			rt.Fatal("snapshot not used")
		}
		if got := fromSnap.State.Image(); !reflect.DeepEqual(got, want) {
			rt.Fatalf("snapshot replay\n got %+v\nwant %+v", got, want)
		}
	})
}

// INV-RR-2: the progress note caps hold after replay of a journal with
// more notes than the caps.
func TestReplay_ReappliesNoteCaps_INV_RR_2(t *testing.T) {
	st := openTemp(t)
	lim := coord.Limits{MaxNotesTotal: 50, MaxNotesPerAuthor: 20, MaxNotesPerTask: 10}
	// Journal written by a hub with looser caps (or the reference).
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
	for i := range 500 {
		r.now++
		r.step(t, coord.PostProgress{Agent: agents[i%4], TaskID: fmt.Sprintf("T%d", i%7), Text: fmt.Sprint(i)})
	}
	rec, err := Replay(st, lim, r.now, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notes := rec.State.Notes()
	byAuthor, byTask := map[string]int{}, map[string]int{}
	for _, n := range notes {
		byAuthor[n.Author]++
		byTask[n.TaskID]++
	}
	if len(notes) > 50 {
		t.Errorf("%d notes kept, cap 50", len(notes))
	}
	for a, k := range byAuthor {
		if k > 20 {
			t.Errorf("author %s keeps %d notes, cap 20", a, k)
		}
	}
	for task, k := range byTask {
		if k > 10 {
			t.Errorf("task %s keeps %d notes, cap 10", task, k)
		}
	}
	// The newest survive: the same caps applied live give the same notes.
	live := coord.New(lim)
	for i := range 500 {
		live.Step(coord.PostProgress{Agent: agents[i%4], TaskID: fmt.Sprintf("T%d", i%7), Text: fmt.Sprint(i)}, 1e9+float64(i+1))
	}
	if !reflect.DeepEqual(rec.State.Image().Notes, live.Image().Notes) {
		t.Error("replayed notes differ from live notes under the same caps")
	}
}

// INV-RR-3: a refused claim's audit row never becomes a lease.
func TestReplay_ClaimDenialNeverCreatesLease_INV_RR_3(t *testing.T) {
	st := openTemp(t)
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
	r.step(t, coord.ClaimRequest{Agent: "p/a", TaskID: "T", Worktree: "/r", Paths: []string{"src"}})
	o := r.step(t, coord.ClaimRequest{Agent: "p/b", TaskID: "T", Worktree: "/r", Paths: []string{"src"}})
	if o.Refusal == nil {
		t.Fatal("second claim was not refused")
	}
	o = r.step(t, coord.ClaimRequest{Agent: "p/b", TaskID: "U", Worktree: "/r", Paths: []string{"src/x"}})
	if o.Refusal == nil {
		t.Fatal("overlapping claim was not refused")
	}
	var denials int
	st.Scan(0, func(_ int64, _ float64, kind string, _ []byte) error {
		if kind == "claim_denial" {
			denials++
		}
		return nil
	})
	if denials != 2 {
		t.Fatalf("%d claim_denial rows, want 2", denials)
	}
	rec, err := Replay(st, coord.Limits{}, r.now+1, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.State.ClaimCount() != 1 || rec.State.Claim("T").Owner != "p/a" || rec.State.Claim("U") != nil {
		t.Errorf("claims after replay: %v", rec.State.Claims())
	}
}

// A corrupt or semantically invalid row is quarantined: startup succeeds,
// the rest is applied, and the store reports degraded.
func TestReplay_QuarantinesCorruptRows(t *testing.T) {
	st := openTemp(t)
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
	r.step(t, coord.ClaimRequest{Agent: "p/a", TaskID: "A"})
	bad := []struct{ kind, payload string }{
		{"claim", `not json`},
		{"claim", `[1,2,3]`},
		{"claim", `{"task_id":"X","lease_expires_at":2e9,"status":"claimed","epoch":9}`},
		{"task_update", `{"task_id":"A","owner":"p/a","lease_expires_at":NaN,"status":"claimed","epoch":9}`},
		{"ledger_progress", `{"task_id":"t","author":"a","kind":"note","text":"x","posted_at":"yesterday"}`},
	}
	for _, b := range bad {
		if _, err := st.wc.ExecContext(context.Background(), `INSERT INTO events(ts, kind, payload) VALUES(1, ?, ?)`, b.kind, b.payload); err != nil {
			t.Fatal(err)
		}
	}
	r.step(t, coord.ClaimRequest{Agent: "p/b", TaskID: "B"})
	want := imageAt(r.live, r.now+1)

	rec, err := Replay(st, coord.Limits{}, r.now+1, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Degraded() || rec.QuarantinedCount != len(bad) || len(rec.Quarantined) != len(bad) {
		t.Fatalf("degraded %v, quarantined %d: %+v", rec.Degraded(), rec.QuarantinedCount, rec.Quarantined)
	}
	for i, q := range rec.Quarantined {
		if q.Seq != int64(2+i) || q.Kind != bad[i].kind || q.Err == "" {
			t.Errorf("quarantined[%d] = %+v", i, q)
		}
	}
	if got := rec.State.Image(); !reflect.DeepEqual(got, want) {
		t.Errorf("state around the bad rows\n got %+v\nwant %+v", got, want)
	}
	rep, err := Check(st.Path())
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.BadCount != len(bad) {
		t.Errorf("check: %+v", rep)
	}
}

// A snapshot whose digest does not match is skipped with a warning; replay
// falls back to the older one (or the log) and still rebuilds the state.
func TestReplay_SkipsBadSnapshot(t *testing.T) {
	st := openTemp(t)
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
	r.step(t, coord.ClaimRequest{Agent: "p/a", TaskID: "A", Note: "one"})
	r.snapshot(t)
	first, _ := st.LastSeq()
	r.now++
	r.step(t, coord.UpdateRequest{Agent: "p/a", TaskID: "A", Status: "working"})
	second := r.snapshot(t)
	if _, from, err := st.SnapshotPosition(); err != nil || from != second {
		t.Errorf("SnapshotPosition before any replay: from %d, %v; want the newest snapshot, %d", from, err, second)
	}
	r.now++
	r.step(t, coord.ClaimRequest{Agent: "p/b", TaskID: "B"})
	if _, err := st.wc.ExecContext(context.Background(), `UPDATE snapshots SET body = CAST('garbage' AS BLOB) WHERE seq = (SELECT MAX(seq) FROM snapshots)`); err != nil {
		t.Fatal(err)
	}
	want := imageAt(r.live, r.now)
	rec, err := Replay(st, coord.Limits{}, r.now, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.SnapshotSeq != first || len(rec.Warnings) != 1 {
		t.Errorf("snapshot seq %d (want %d), warnings %q", rec.SnapshotSeq, first, rec.Warnings)
	}
	// What a restart replays is counted from the snapshot it could use,
	// not from the damaged newest one.
	if last, from, err := st.SnapshotPosition(); err != nil || last != rec.LastSeq || from != first {
		t.Errorf("SnapshotPosition after the replay = %d, %d, %v; want %d, %d", last, from, err, rec.LastSeq, first)
	}
	if rec.Degraded() {
		t.Error("a skipped snapshot should not degrade the hub while the log is whole")
	}
	if got := rec.State.Image(); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// Compaction drops what the snapshots cover and keeps audit and other kinds;
// replay after it still rebuilds the state.
func TestCompact_KeepsStateAndAuditRows(t *testing.T) {
	st := openTemp(t)
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
	for i := range 20 {
		r.now++
		r.step(t, coord.ClaimRequest{Agent: agents[i%4], TaskID: fmt.Sprintf("T%d", i%5), Paths: []string{"src"}, Worktree: "/r"})
		r.step(t, coord.PostProgress{Agent: agents[i%4], TaskID: "T0", Text: "x"})
	}
	if _, err := st.wc.ExecContext(context.Background(), `INSERT INTO events(ts, kind, payload) VALUES(1, 'chat', '{"payload":"hi"}')`); err != nil {
		t.Fatal(err)
	}
	r.snapshot(t)
	r.now++
	r.step(t, coord.ClaimRequest{Agent: "p/z", TaskID: "Z"})
	r.snapshot(t)
	r.now++
	r.step(t, coord.ReleaseRequest{Agent: "p/z", TaskID: "Z"})
	deleted, err := st.Compact(context.Background())
	if err != nil || deleted == 0 {
		t.Fatal(deleted, err)
	}
	counts := map[string]int{}
	st.Scan(0, func(_ int64, _ float64, kind string, _ []byte) error { counts[kind]++; return nil })
	if counts["chat"] != 1 || counts["claim_denial"] == 0 {
		t.Errorf("audit/chat rows lost: %v", counts)
	}
	want := imageAt(r.live, r.now)
	rec, err := Replay(st, coord.Limits{}, r.now, ReplayOptions{})
	if err != nil || rec.Degraded() {
		t.Fatal(err, rec.Warnings)
	}
	if got := rec.State.Image(); !reflect.DeepEqual(got, want) {
		t.Errorf("after compaction\n got %+v\nwant %+v", got, want)
	}
	// Without snapshots the compacted log is incomplete, and replay says so.
	full, _ := Replay(st, coord.Limits{}, r.now, ReplayOptions{NoSnapshot: true})
	if !full.Incomplete || !full.Degraded() {
		t.Error("replay of a compacted log without its snapshot not flagged")
	}
	if rep, err := Check(st.Path()); err != nil || !rep.OK() {
		t.Errorf("check after compaction: %+v %v", rep, err)
	}
}

// The binary snapshot body restores the image it was written from.
func TestSnapshot_ImageRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := coord.New(coord.Limits{ResourceTTL: 1e6})
		now := 1e9
		for range rapid.IntRange(0, 40).Draw(rt, "n") {
			now++
			s.Step(genCommand(rt), now)
		}
		img := s.Image()
		img.Waits = nil
		got, err := DecodeImage(EncodeImage(img))
		if err != nil {
			rt.Fatal(err)
		}
		if !reflect.DeepEqual(got, img) {
			rt.Fatalf("got %+v\nwant %+v", got, img)
		}
	})
}

func TestSnapshot_DecodeRefusesDamage(t *testing.T) {
	s := coord.New(coord.Limits{})
	s.Step(coord.ClaimRequest{Agent: "a", TaskID: "T", Paths: []string{"x"}}, 1)
	body := EncodeImage(s.Image())
	for i := range body {
		if _, err := DecodeImage(body[:i]); err == nil {
			t.Errorf("truncated at %d decoded", i)
		}
	}
}

// A body that decodes but holds what no state could — found by
// FuzzDecodeImage (claims out of order or repeated, which FromImage would
// silently merge) or alongside it — is refused, not restored: replay falls
// back to an older snapshot or the log.
func TestSnapshot_DecodeRefusesImagesNoStateHolds(t *testing.T) {
	claim := func(task string, epoch int64, paths ...string) coord.Claim {
		return coord.Claim{TaskID: task, Owner: "a", QuotaPrincipal: "p", ExpiresAt: 10, Epoch: epoch, Paths: paths}
	}
	for name, img := range map[string]coord.Image{
		"repeated claim":                 {Epoch: 2, Claims: []coord.Claim{claim("T", 1), claim("T", 2)}},
		"claims out of order":            {Epoch: 2, Claims: []coord.Claim{claim("U", 1), claim("T", 2)}},
		"epoch above the image's":        {Epoch: 1, Claims: []coord.Claim{claim("T", 2)}},
		"the root among a claim's paths": {Epoch: 1, Claims: []coord.Claim{claim("T", 1, "docs", "")}},
		"the root among a claim's files": {Epoch: 1, Claims: []coord.Claim{{TaskID: "T", Owner: "a", QuotaPrincipal: "p", ExpiresAt: 10, Epoch: 1, Files: []string{"a", ""}}}},
		"repeated offer":                 {Offers: []coord.Offer{{Agent: "a", Kind: "k", Name: "n"}, {Agent: "a", Kind: "k", Name: "n"}}},
		"repeated board task":            {Tasks: []coord.BoardTask{{TaskID: "B", DependsOn: []string{}}, {TaskID: "B", DependsOn: []string{}}}},
		"repeated retained checkpoint":   {Retained: []coord.RetainedCheckpoint{{TaskID: "T"}, {TaskID: "T"}}},
		"board holder without its claim": {Tasks: []coord.BoardTask{{TaskID: "B", DependsOn: []string{}, Owner: "a"}}},
		"board claim without its holder": {Tasks: []coord.BoardTask{{TaskID: "B", DependsOn: []string{}, OwnerClaim: "T"}}},
	} {
		if _, err := DecodeImage(EncodeImage(img)); !errors.Is(err, ErrBadSnapshot) || !errors.Is(err, coord.ErrBadImage) {
			t.Errorf("%s: DecodeImage = %v, want ErrBadSnapshot wrapping coord.ErrBadImage", name, err)
		}
	}
	// A status past a byte must not wrap round to 0 (claimed).
	w := imgWriter{b: append([]byte(nil), snapshotMagic...)}
	w.i(1)
	w.u(1)
	w.s("T")
	w.s("a")
	w.s("")
	w.u(256) // status
	w.s("")
	w.s("")
	w.ss(nil)
	w.s("")
	w.s("")
	w.u(0) // no git
	w.s("p")
	w.f(0)
	w.f(10)
	w.i(1)
	w.i(0)
	for range 4 { // retained, offers, tasks, notes
		w.u(0)
	}
	if img, err := DecodeImage(w.b); !errors.Is(err, ErrBadSnapshot) {
		t.Errorf("status 256 decoded as %+v, %v", img, err)
	}
}

// A long replay reports its progress.
func TestReplay_ReportsProgress(t *testing.T) {
	st := openTemp(t)
	live := coord.New(coord.Limits{})
	b := &Batch{TS: 1e9}
	for i := 0; i < ProgressEvery/2+10; i++ {
		for _, cmd := range []coord.Command{
			coord.ClaimRequest{Agent: "p/a", TaskID: fmt.Sprintf("T%d", i%50)},
			coord.ReleaseRequest{Agent: "p/a", TaskID: fmt.Sprintf("T%d", i%50)},
		} {
			for _, ev := range live.Step(cmd, 1e9).Events {
				if rec, ok := Encode(ev); ok {
					b.Records = append(b.Records, rec)
				}
			}
		}
	}
	if _, err := st.Append(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	last, _ := st.LastSeq()
	var calls []int64
	rec, err := Replay(st, coord.Limits{}, 1e9, ReplayOptions{Progress: func(done, total int64) {
		if total != last {
			t.Errorf("progress total %d, want %d", total, last)
		}
		calls = append(calls, done)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != rec.Events/ProgressEvery || len(calls) == 0 || calls[0] != ProgressEvery {
		t.Fatalf("progress calls %v for %d events", calls, rec.Events)
	}
}

// The bindings of task-bound claims ride in a trailing section written only
// when there are some: an image without them encodes as before, and one
// with them round-trips.
func TestSnapshot_TaskBoundBindingsRoundTrip(t *testing.T) {
	s := coord.New(coord.Limits{})
	s.Step(coord.DeclareTask{Agent: "a", TaskID: "B", Title: "b"}, 1)
	plain := s.Image()
	before := EncodeImage(plain)
	s.Step(coord.ClaimRequest{Agent: "a", TaskID: "T", Paths: []string{"x"}, BoardTask: "B"}, 2)
	s.Step(coord.ClaimRequest{Agent: "a", TaskID: "U", Paths: []string{"y"}}, 2)
	img := s.Image()
	got, err := DecodeImage(EncodeImage(img))
	if err != nil || !reflect.DeepEqual(got, img) {
		t.Fatalf("got %+v, %v\nwant %+v", got, err, img)
	}
	if got.Claims[0].BoardTask != "B" || got.Tasks[0].Owner != "a" || got.Tasks[0].OwnerClaim != "T" {
		t.Fatalf("bindings lost: %+v", got)
	}
	got, err = DecodeImage(before)
	if err != nil || !reflect.DeepEqual(got, plain) {
		t.Fatalf("a body without bindings: %+v, %v", got, err)
	}
}

// Claims' files ride in their own tagged section, written only when some
// claim has files: an image without them encodes byte for byte as before
// (the golden body is what Synapse wrote before files existed, globs and a
// shared claim included), and one with them round-trips, beside globs or
// alone.
func TestSnapshot_FilesSectionOnlyWhenNeeded(t *testing.T) {
	const golden = "53594e534e41503104020147016100000000000000000e6c65676163792d6167656e743a61000000000000f03f000000000022ac40" +
		"020001500162000000000104646f63730000000e6c65676163792d6167656e743a620000000000000040000000000024ac40040000000000" +
		"0000010200010b7372632f2a2a2f2a2e676f00010001"
	s := coord.New(coord.Limits{})
	s.Step(coord.ClaimRequest{Agent: "a", TaskID: "G", Globs: []string{"src/**/*.go"}}, 1)
	s.Step(coord.ClaimRequest{Agent: "b", TaskID: "P", Paths: []string{"docs"}, Shared: true}, 2)
	if got := hex.EncodeToString(EncodeImage(s.Image())); got != golden {
		t.Fatalf("an image without files encodes as\n%s\nnot as before\n%s", got, golden)
	}
	body, _ := hex.DecodeString(golden)
	if got, err := DecodeImage(body); err != nil || !reflect.DeepEqual(got, s.Image()) {
		t.Fatalf("the body written before files reads as %+v, %v", got, err)
	}
	s.Step(coord.ClaimRequest{Agent: "c", TaskID: "F", Files: []string{"src/a/readme.md", "go.mod"}}, 3)
	img := s.Image()
	got, err := DecodeImage(EncodeImage(img))
	if err != nil || !reflect.DeepEqual(got, img) {
		t.Fatalf("got %+v, %v\nwant %+v", got, err, img)
	}
	if c := got.Claims[0]; c.TaskID != "F" || !reflect.DeepEqual(c.Files, []string{"src/a/readme.md", "go.mod"}) || c.Paths != nil {
		t.Fatalf("files lost: %+v", c)
	}
	only := coord.New(coord.Limits{})
	only.Step(coord.ClaimRequest{Agent: "b", TaskID: "F", Files: []string{"x"}}, 1)
	if got, err := DecodeImage(EncodeImage(only.Image())); err != nil || !reflect.DeepEqual(got, only.Image()) {
		t.Fatalf("files alone: %+v, %v", got, err)
	}
}

// Replay skips claim_expired rows, so an expired lease lingers until the
// final Tick. It must not free the board task a later claim of the same
// agent took: the board task records which claim holds it.
func TestReplay_LingeringExpiredClaimDoesNotFreeALaterHolder(t *testing.T) {
	st, err := Open(t.TempDir()+"/j.db", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
	r.step(t, coord.DeclareTask{Agent: "p/a", TaskID: "X", Title: "x"})
	r.step(t, coord.ClaimRequest{Agent: "p/a", TaskID: "C", Paths: []string{"c"}, BoardTask: "X", TTL: 30, HasTTL: true})
	r.now += 31
	r.commit(t, r.live.Tick(r.now).Events)
	r.step(t, coord.ClaimRequest{Agent: "p/a", TaskID: "D", Paths: []string{"d"}, BoardTask: "X"})
	want := imageAt(r.live, r.now)
	got, err := Replay(st, coord.Limits{}, r.now, ReplayOptions{NoSnapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	if img := got.State.Image(); !reflect.DeepEqual(img, want) {
		t.Fatalf("replay\n got %+v\nwant %+v", img.Tasks, want.Tasks)
	}
}
