package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/sequencer"
)

const journalUsage = `Usage: synapse journal check|compact|stats PATH [flags]

Inspects and maintains a hub's journal file (SQLite, see docs/journal.md).

  check PATH    verifies the file read-only: the schema, seq order, that every
                row decodes, every snapshot's checksum and body. Exit 1 when it
                finds a problem, with what to do about it.
  compact PATH  drops the claim, board and resource rows a snapshot covers
                (audit kinds are kept). When events were appended after the
                newest snapshot it first replays the file and writes a fresh
                one. Stop the hub first: a locked file is refused.
  stats PATH    rows per kind, last seq, snapshots, file size.

Run 'synapse journal <verb> --help' for its flags.
`

func runJournal(args []string, stdout, stderr io.Writer) int {
	verbs := map[string]func([]string, io.Writer, io.Writer) int{
		"check":   runJournalCheck,
		"compact": runJournalCompact,
		"stats":   runJournalStats,
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, journalUsage)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, journalUsage)
		return 0
	}
	run, ok := verbs[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "synapse journal: unknown verb %q: say check, compact or stats.\n", args[0])
		return 2
	}
	return run(args[1:], stdout, stderr)
}

// journalFlags parses a verb's flags and its one PATH argument, which may
// come before or after the flags. When it returns no path, the verb exits
// with code: 0 after --help, 2 for a usage error.
func journalFlags(fs *flag.FlagSet, usage string, args []string, stderr io.Writer) (path string, code int) {
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	var paths []string
	for {
		if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
			return "", 0
		} else if err != nil {
			return "", 2
		}
		if fs.NArg() == 0 {
			break
		}
		paths = append(paths, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(paths) != 1 || paths[0] == "" {
		fmt.Fprintf(stderr, "synapse journal %s: give exactly one journal file, e.g. 'synapse journal %s hub.db'.\n", fs.Name(), fs.Name())
		return "", 2
	}
	return paths[0], 0
}

// openFailure explains why a journal could not be opened and what to do.
func openFailure(stderr io.Writer, verb, path string, err error) int {
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(stderr, "synapse journal %s: no file at %s: check the path.\n", verb, path)
	case errors.Is(err, journal.ErrNotJournal):
		fmt.Fprintf(stderr, "synapse journal %s: %s is an SQLite file but not a Synapse journal (%v).\n", verb, path, err)
	case errors.Is(err, journal.ErrDamaged):
		fmt.Fprintf(stderr, "synapse journal %s: %s is damaged: %v.\n"+
			"It was cut short or corrupted (a torn copy, a bad disk); nothing was changed. Restore it from a backup or a complete copy\n"+
			"(the file with its -wal, copied while no hub runs on it). Do not start a hub on it (docs/journal.md, Disk faults).\n", verb, path, err)
	case isLocked(err):
		fmt.Fprintf(stderr, "synapse journal %s: %s is locked by another process, most likely a running hub.\n"+
			"Stop the hub, then run this again; nothing was changed.\n", verb, path)
	default:
		fmt.Fprintf(stderr, "synapse journal %s: %v\n", verb, err)
	}
	return 1
}

// isLocked reports whether err is SQLite's SQLITE_BUSY: another connection
// held a write lock for longer than the busy timeout.
func isLocked(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// fileSizes returns the sizes of the database file and its WAL.
func fileSizes(path string) (db, wal int64) {
	if fi, err := os.Stat(path); err == nil {
		db = fi.Size()
	}
	if fi, err := os.Stat(path + "-wal"); err == nil {
		wal = fi.Size()
	}
	return db, wal
}

func writeJSON(stdout, stderr io.Writer, verb string, v any) int {
	if err := json.NewEncoder(stdout).Encode(v); err != nil {
		fmt.Fprintf(stderr, "synapse journal %s: %v\n", verb, err)
		return 1
	}
	return 0
}

// mb renders a byte count for people.
func mb(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
}

func when(unix float64) string {
	return time.Unix(0, int64(unix*1e9)).UTC().Format(time.RFC3339)
}

// snapshotJSON is one snapshot in the --json output of check and stats.
type snapshotJSON struct {
	Seq       int64   `json:"seq"`
	CreatedAt float64 `json:"created_at"`
	Format    int     `json:"format"`
	Bytes     int     `json:"bytes"`
	Err       string  `json:"error,omitempty"`
}

func snapshotsJSON(in []journal.SnapshotInfo) []snapshotJSON {
	out := make([]snapshotJSON, 0, len(in))
	for _, s := range in {
		out = append(out, snapshotJSON{s.Seq, s.CreatedAt, s.Format, s.Size, s.Err})
	}
	return out
}

func printSnapshots(w io.Writer, snaps []journal.SnapshotInfo) {
	if len(snaps) == 0 {
		fmt.Fprintln(w, "snapshots  none (a restart replays the whole log)")
		return
	}
	fmt.Fprintf(w, "snapshots  %d, newest first\n", len(snaps))
	for _, s := range snaps {
		state := "ok"
		if s.Err != "" {
			state = "UNUSABLE: " + s.Err
		}
		fmt.Fprintf(w, "  seq %-10d %s  %9s  %s\n", s.Seq, when(s.CreatedAt), mb(int64(s.Size)), state)
	}
}

func printKinds(w io.Writer, kinds map[string]int64) {
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { // most rows first
		if d := kinds[b] - kinds[a]; d != 0 {
			return int(min(max(d, -1), 1))
		}
		return strings.Compare(a, b)
	})
	for _, k := range names {
		fmt.Fprintf(w, "  %-18s %10d\n", k, kinds[k])
	}
}

// ---- check

const checkUsage = `Usage: synapse journal check PATH [--json]

Verifies a journal file without changing it: the schema, that seqs increase,
that every row decodes, and every snapshot's checksum and body. It can run
while the hub runs. Exit 0 when the file is sound, 1 when it found problems
(listed with what to do) or could not read the file, 2 for a usage error.

Flags:
`

type checkJSON struct {
	Path      string                `json:"path"`
	OK        bool                  `json:"ok"`
	HubID     string                `json:"hub_id"`
	LastSeq   int64                 `json:"last_seq"`
	Events    int64                 `json:"events"`
	Kinds     map[string]int64      `json:"kinds"`
	BadCount  int                   `json:"bad_count"`
	BadRows   []journal.Quarantined `json:"bad_rows"`
	Snapshots []snapshotJSON        `json:"snapshots"`
	Problems  []string              `json:"problems"`
}

func runJournalCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object for scripts")
	path, code := journalFlags(fs, checkUsage, args, stderr)
	if path == "" {
		return code
	}
	r, err := journal.Check(path)
	if err != nil {
		return openFailure(stderr, "check", path, err)
	}
	if !r.OK() {
		code = 1
	}
	if *asJSON {
		out := checkJSON{path, r.OK(), r.HubID, r.LastSeq, r.Events, r.Kinds, r.BadCount, r.Bad, snapshotsJSON(r.Snapshots), r.Problems}
		if out.BadRows == nil {
			out.BadRows = []journal.Quarantined{}
		}
		if out.Problems == nil {
			out.Problems = []string{}
		}
		if writeJSON(stdout, stderr, "check", out) != 0 {
			return 1
		}
		return code
	}
	fmt.Fprintf(stdout, "journal    %s (hub %s)\n", path, r.HubID)
	fmt.Fprintf(stdout, "events     %d rows, last seq %d\n", r.Events, r.LastSeq)
	printSnapshots(stdout, r.Snapshots)
	if r.OK() {
		fmt.Fprintln(stdout, "\nOK: schema, seq order, every row and every snapshot are sound.")
		return 0
	}
	fmt.Fprintln(stdout, "\nPROBLEMS:")
	for _, p := range r.Problems {
		fmt.Fprintf(stdout, "  %s\n", p)
	}
	if r.BadCount > 0 {
		fmt.Fprintf(stdout, "  %d row(s) do not decode:\n", r.BadCount)
		for _, q := range r.Bad {
			fmt.Fprintf(stdout, "    seq %d (%s): %s\n", q.Seq, q.Kind, q.Err)
		}
		if len(r.Bad) < r.BadCount {
			fmt.Fprintf(stdout, "    ... and %d more\n", r.BadCount-len(r.Bad))
		}
	}
	badSnaps := 0
	for _, s := range r.Snapshots {
		if s.Err != "" {
			badSnaps++
			fmt.Fprintf(stdout, "  snapshot at seq %d is unusable: %s\n", s.Seq, s.Err)
		}
	}
	fmt.Fprintf(stdout, "\nWhat to do: first keep a copy of the file (stop the hub, cp %s %s.bak).\n", path, path)
	if r.BadCount > 0 {
		fmt.Fprintln(stdout, "A hub starting on it skips the rows above (quarantine) and starts degraded: it refuses\n"+
			"mutations until they are dealt with. Compare them with the reference hub's history or\n"+
			"remove them from the copy, then run check again.")
	}
	if badSnaps > 0 {
		fmt.Fprintln(stdout, "An unusable snapshot is skipped on replay (an older one or the whole log is used);\n"+
			"'synapse journal compact' writes a fresh one once the rows are sound.")
	}
	if len(r.Problems) > 0 {
		fmt.Fprintln(stdout, "Schema or ordering problems mean the file was changed by something other than the hub:\n"+
			"restore it from a backup if you have one.")
	}
	return code
}

// ---- compact

const compactUsage = `Usage: synapse journal compact PATH [--vacuum] [--json]

Drops the claim, board and resource rows (claim, task_update, checkpoint,
handoff, release, resource, ledger_task, ledger_progress) at or below the
oldest kept snapshot; every audit kind (idempotency, claim_denial, chat, ...)
is kept. When events were appended after the newest snapshot, it first replays
the file and writes a fresh snapshot of that state, so more can go.

Stop the hub first: a file locked by a running hub is refused, and so is one
whose replay is degraded (run 'synapse journal check' then). After compaction
the file replays correctly only with its snapshots (docs/journal.md).
--vacuum also rewrites the file to give the freed space back.

Flags:
`

type compactJSON struct {
	Path             string `json:"path"`
	SnapshotWritten  bool   `json:"snapshot_written"`
	SnapshotSeq      int64  `json:"snapshot_seq"`      // newest snapshot after the run
	CompactedThrough int64  `json:"compacted_through"` // rows at or below it were candidates
	RowsRemoved      int64  `json:"rows_removed"`
	Vacuumed         bool   `json:"vacuumed"`
	BytesBefore      int64  `json:"bytes_before"` // database file + WAL
	BytesAfter       int64  `json:"bytes_after"`
}

func runJournalCompact(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	vacuum := fs.Bool("vacuum", false, "rewrite the file afterwards to give the freed space back (slower; blocks the file)")
	asJSON := fs.Bool("json", false, "print one JSON object for scripts")
	busy := fs.Duration("busy-timeout", 2*time.Second, "how long to wait for a lock another process holds before giving up")
	path, code := journalFlags(fs, compactUsage, args, stderr)
	if path == "" {
		return code
	}
	fail := func(err error) int { return openFailure(stderr, "compact", path, err) }
	// Read-only first: opening for writing would give any SQLite file our schema.
	ro, err := journal.Open(path, journal.Options{ReadOnly: true, BusyTimeout: *busy})
	if err != nil {
		return fail(err)
	}
	ro.Close()
	out := compactJSON{Path: path}
	db, wal := fileSizes(path)
	out.BytesBefore = db + wal

	st, err := journal.Open(path, journal.Options{BusyTimeout: *busy})
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	progress := func(s string) {
		if !*asJSON {
			fmt.Fprintln(stderr, "compact:", s)
		}
	}
	written, seq, err := freshSnapshot(st, progress)
	if err != nil {
		if isLocked(err) || errors.Is(err, journal.ErrNotJournal) {
			return fail(err)
		}
		fmt.Fprintf(stderr, "synapse journal compact: %v\n", err)
		return 1
	}
	out.SnapshotWritten, out.SnapshotSeq = written, seq
	progress("dropping covered rows")
	if out.RowsRemoved, err = st.Compact(context.Background()); err != nil {
		return fail(err)
	}
	if snaps, err := st.Snapshots(); err == nil {
		for _, s := range snaps {
			if s.Err == "" {
				out.CompactedThrough = s.Seq // ends at the oldest sound one, Compact's floor
			}
		}
	}
	if *vacuum {
		progress("vacuum")
		if err := st.Vacuum(context.Background()); err != nil {
			return fail(err)
		}
		out.Vacuumed = true
	}
	if err := st.Close(); err != nil {
		return fail(err)
	}
	db, wal = fileSizes(path)
	out.BytesAfter = db + wal
	if *asJSON {
		return writeJSON(stdout, stderr, "compact", out)
	}
	if out.SnapshotWritten {
		fmt.Fprintf(stdout, "snapshot   written at seq %d (events had been appended after the newest one)\n", out.SnapshotSeq)
	} else if out.SnapshotSeq > 0 {
		fmt.Fprintf(stdout, "snapshot   newest at seq %d is current\n", out.SnapshotSeq)
	}
	fmt.Fprintf(stdout, "compacted  %d rows removed, through seq %d (the oldest kept snapshot)\n", out.RowsRemoved, out.CompactedThrough)
	fmt.Fprintf(stdout, "size       %s before, %s after", mb(out.BytesBefore), mb(out.BytesAfter))
	if !out.Vacuumed && out.RowsRemoved > 0 {
		fmt.Fprint(stdout, " (freed pages are reused by the hub; --vacuum gives them back to the disk)")
	}
	fmt.Fprintln(stdout)
	return 0
}

// freshSnapshot writes a snapshot at the journal's last seq when events
// follow the newest sound snapshot, so compaction can drop them next time
// round. The state is the journal replayed, expired at the last row's time
// as the hub had it. It refuses a degraded replay (a snapshot would make the
// loss permanent once compacted) and a journal that grew while it read (a
// hub is running). It returns whether it wrote one and the newest
// snapshot's seq.
func freshSnapshot(st *journal.Store, progress func(string)) (bool, int64, error) {
	last, err := st.LastSeq()
	if err != nil {
		return false, 0, err
	}
	snaps, err := st.Snapshots()
	if err != nil {
		return false, 0, err
	}
	var newest int64
	if i := slices.IndexFunc(snaps, func(s journal.SnapshotInfo) bool { return s.Err == "" }); i >= 0 {
		newest = snaps[i].Seq
	}
	if newest >= last {
		return false, newest, nil
	}
	at, err := lastTS(st, last, newest)
	if err != nil {
		return false, 0, err
	}
	progress(fmt.Sprintf("replaying seq %d..%d for a fresh snapshot", newest+1, last))
	rec, err := journal.Replay(st, coord.Limits{}, at, journal.ReplayOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return false, 0, err
	}
	if rec.Degraded() {
		return false, 0, fmt.Errorf("replay is degraded (%d row(s) quarantined, incomplete=%v): nothing was changed; "+
			"run 'synapse journal check %s' and deal with what it lists first", rec.QuarantinedCount, rec.Incomplete, st.Path())
	}
	if now, err := st.LastSeq(); err != nil || now != last || rec.LastSeq != last {
		return false, 0, fmt.Errorf("the journal grew from seq %d while it was read: a hub is writing to it; "+
			"stop the hub, then run this again (nothing was changed)", last)
	}
	progress(fmt.Sprintf("writing snapshot at seq %d (%d claims)", last, rec.State.ClaimCount()))
	if err := st.WriteSnapshot(last, rec.State.Image(), at); err != nil {
		return false, 0, err
	}
	return true, last, nil
}

// lastTS returns the time of the newest row: the clock reading of the batch
// that wrote seq last. The row may be gone (compacted), so it falls back to
// the newest row after the snapshot.
func lastTS(st *journal.Store, last, snapSeq int64) (float64, error) {
	var at float64
	for _, after := range []int64{last - 1, snapSeq} {
		err := st.Scan(after, func(_ int64, ts float64, _ string, _ []byte) error {
			at = max(at, ts)
			return nil
		})
		if err != nil || at > 0 {
			return at, err
		}
	}
	return 0, fmt.Errorf("journal: no row after seq %d although the last seq is %d", snapSeq, last)
}

// ---- stats

const statsUsage = `Usage: synapse journal stats PATH [--json]

Rows per kind, last seq, snapshots and file size of a journal, read-only,
and what it keeps and why: the rows a restart would replay now, the
idempotency records kept under the window the last hub used
(--idempotency-window) and the expired keys still refused, the chat,
receipt and audit rows kept under its --retain windows (directed mail that
waits is kept whatever its age), and the free pages. It can run while
the hub runs; it reads every row (about a second per million).

Flags:
`

type statsJSON struct {
	Path      string           `json:"path"`
	HubID     string           `json:"hub_id"`
	FileBytes int64            `json:"file_bytes"`
	WALBytes  int64            `json:"wal_bytes"`
	LastSeq   int64            `json:"last_seq"`
	Events    int64            `json:"events"`
	Kinds     map[string]int64 `json:"kinds"`
	Snapshots []snapshotJSON   `json:"snapshots"`
	Kept      journal.Kept     `json:"kept"`
}

func runJournalStats(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object for scripts")
	path, code := journalFlags(fs, statsUsage, args, stderr)
	if path == "" {
		return code
	}
	st, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		return openFailure(stderr, "stats", path, err)
	}
	defer st.Close()
	out := statsJSON{Path: path, HubID: st.HubID(), Kinds: map[string]int64{}}
	out.FileBytes, out.WALBytes = fileSizes(path)
	if out.LastSeq, err = st.LastSeq(); err != nil {
		return openFailure(stderr, "stats", path, err)
	}
	err = st.Scan(0, func(_ int64, _ float64, kind string, _ []byte) error {
		out.Events++
		out.Kinds[kind]++
		return nil
	})
	if err != nil {
		return openFailure(stderr, "stats", path, err)
	}
	snaps, err := st.Snapshots()
	if err != nil {
		return openFailure(stderr, "stats", path, err)
	}
	out.Snapshots = snapshotsJSON(snaps)
	if out.Kept, err = st.Kept(); err != nil {
		return openFailure(stderr, "stats", path, err)
	}
	if *asJSON {
		return writeJSON(stdout, stderr, "stats", out)
	}
	fmt.Fprintf(stdout, "journal    %s (hub %s)\n", path, out.HubID)
	fmt.Fprintf(stdout, "file       %s + %s WAL\n", mb(out.FileBytes), mb(out.WALBytes))
	fmt.Fprintf(stdout, "last seq   %d\n", out.LastSeq)
	fmt.Fprintf(stdout, "events     %d rows\n", out.Events)
	printKinds(stdout, out.Kinds)
	printSnapshots(stdout, snaps)
	printKept(stdout, out.Kept)
	return 0
}

// printKept says what the journal keeps and why.
func printKept(w io.Writer, k journal.Kept) {
	fmt.Fprintf(w, "restart    replays %d rows after the newest snapshot (the hub snapshots every %d)\n", k.ReplayRows, sequencer.DefaultSnapshotEvery)
	window := "no window recorded (a hub with --idempotency-window 0, or before schema 3): kept forever"
	switch {
	case k.WindowKnown:
		window = fmt.Sprintf("--idempotency-window %s: each answers a retry that long, then expires", k.Window)
	}
	fmt.Fprintf(w, "idempotency %d records kept (%s); %d expired keys refused as idempotency_expired for one more window\n",
		k.Operations, window, k.Tombstones)
	retain := "no --retain recorded (a hub with every window 0, or before it existed): kept forever"
	if k.RetainKnown {
		retain = "--retain " + k.Retain.String() + " (0s = forever)"
	}
	fmt.Fprintf(w, "retention  %s\n", retain)
	fmt.Fprintf(w, "           %d chat rows (the newest %d always kept; %d directed ones wait for an ack or are dead letters, kept until then), %d receipts, %d audit rows\n",
		k.Chats, journal.DefaultKeepChatRows, k.DirectedWaiting, k.Receipts, k.Audit)
	p := k.Pages
	vac := "free pages are reused, never given back (an older file: 'synapse journal compact --vacuum' with the hub stopped turns that on)"
	if p.AutoVacuum == 2 {
		vac = "incremental vacuum: free pages beyond a slack are given back as the hub runs"
	}
	fmt.Fprintf(w, "pages      %d of %d bytes, %d free (%s)\n", p.Pages, p.PageSize, p.Free, vac)
}
