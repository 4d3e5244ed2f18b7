package journal

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// Snapshot bodies live in files beside the database; a damaged or missing
// file is a damaged snapshot (replay falls back), never a wrong state.
func TestSnapshotFile_DamagedOrMissingFallsBack(t *testing.T) {
	for _, damage := range []string{"truncate", "remove"} {
		t.Run(damage, func(t *testing.T) {
			st := openTemp(t)
			r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
			r.step(t, coord.ClaimRequest{Agent: "p/a", TaskID: "A"})
			first := r.snapshot(t)
			r.now++
			r.step(t, coord.ClaimRequest{Agent: "p/b", TaskID: "B"})
			newest := r.snapshot(t)
			r.now++
			r.step(t, coord.ClaimRequest{Agent: "p/c", TaskID: "C"})
			f := st.snapshotFile(newest)
			info, err := os.Stat(f)
			if err != nil {
				t.Fatalf("the newest snapshot's body file: %v", err)
			}
			if info.Mode().Perm() != 0o600 {
				t.Errorf("snapshot file mode %v, want 0600", info.Mode().Perm())
			}
			if damage == "truncate" {
				os.WriteFile(f, []byte("SYNSNAP1"), 0o600)
			} else {
				os.Remove(f)
			}
			want := imageAt(r.live, r.now)
			rec, err := Replay(st, coord.Limits{}, r.now, ReplayOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rec.SnapshotSeq != first || len(rec.Warnings) != 1 {
				t.Errorf("started from %d (want the older %d), warnings %q", rec.SnapshotSeq, first, rec.Warnings)
			}
			if got := rec.State.Image(); !reflect.DeepEqual(got, want) {
				t.Errorf("replayed %+v\nwant %+v", got, want)
			}
		})
	}
}

// Files of pruned snapshots, and leftovers of a crash between a file and
// its row, are swept away: the folder holds what the rows name.
func TestSnapshotFile_PrunedAndOrphanFilesAreRemoved(t *testing.T) {
	st := openTemp(t)
	r := &liveRun{st: st, live: coord.New(coord.Limits{}), now: 1e9}
	if err := os.MkdirAll(st.snapshotDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(st.snapshotDir(), "999999.snap"), []byte("orphan"), 0o600)
	os.WriteFile(filepath.Join(st.snapshotDir(), "7.snap.tmp"), []byte("torn"), 0o600)
	var seqs []int64
	for i := range 4 {
		r.now++
		r.step(t, coord.ClaimRequest{Agent: "p/a", TaskID: string(rune('A' + i))})
		seqs = append(seqs, r.snapshot(t))
	}
	entries, err := os.ReadDir(st.snapshotDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	infos, _ := st.Snapshots()
	if len(names) != len(infos) || len(infos) != st.opts.KeepSnapshots {
		t.Fatalf("files %v for %d snapshot rows (keep %d)", names, len(infos), st.opts.KeepSnapshots)
	}
	for _, in := range infos {
		if _, err := os.Stat(st.snapshotFile(in.Seq)); err != nil || in.Err != "" {
			t.Errorf("snapshot %d: file %v, err %q", in.Seq, err, in.Err)
		}
	}
	if infos[0].Seq != seqs[len(seqs)-1] {
		t.Errorf("newest snapshot %d, want %d", infos[0].Seq, seqs[len(seqs)-1])
	}
}
