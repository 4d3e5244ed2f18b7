package journal

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/synapse-hub/synapse/coord"
)

// A snapshot is the coord.Image of the state right after the event at its
// seq, so replay can start from it and read only the events after it.
//
// The body is a file beside the database (see WriteSnapshot); rows written
// by earlier versions hold it inline, and both are read. It is a compact
// binary encoding (format 1): a magic, then each
// section as a uvarint count followed by its items, strings as uvarint
// length + bytes, ints as varints, floats as 8 little-endian bytes. It
// restores a 100k-claim image several times faster than JSON would (see
// docs/journal.md). Optional sections follow the notes, each absent when it
// has nothing to say: task-bound claims' bindings (writeBindings), then tagged
// sections (claims' globs and shared modes; claims' files). Waits are not written: they are volatile and die with
// their connections. The sha256 column is the digest of the body, checked
// before the body is trusted.
const snapshotFormat = 1

var snapshotMagic = []byte("SYNSNAP1")

// ErrBadSnapshot is returned for a snapshot whose digest or body is wrong.
var ErrBadSnapshot = errors.New("journal: bad snapshot")

// WriteSnapshot stores img as the state after the event at seq and keeps
// only the newest Options.KeepSnapshots snapshots. The caller must take img
// when exactly the events up to seq have been applied (between batches).
//
// The body goes to its own file, <db>.snapshots/<seq>.snap (mode 0600,
// written to a temporary name, fsynced, renamed): only a small metadata
// row enters the database, so a snapshot holds the journal's writer for a
// row insert instead of the whole body (tens of ms at 100k claims), and
// the WAL does not have to copy the body back into the database.
func (s *Store) WriteSnapshot(seq int64, img coord.Image, createdAt float64) error {
	body := EncodeImage(img)
	if err := s.writeSnapshotFile(seq, body); err != nil {
		return fmt.Errorf("journal: write snapshot: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	ctx := context.Background()
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("journal: write snapshot: %w", err)
	}
	_, err := s.wc.ExecContext(ctx, `INSERT OR REPLACE INTO snapshots(seq, created_at, format, sha256, body) VALUES(?, ?, ?, ?, x'')`,
		seq, createdAt, snapshotFormat, sha256Hex(body))
	if err == nil {
		_, err = s.wc.ExecContext(ctx, `DELETE FROM snapshots WHERE seq NOT IN (SELECT seq FROM snapshots ORDER BY seq DESC LIMIT ?)`, s.opts.KeepSnapshots)
	}
	if err == nil {
		_, err = s.wc.ExecContext(ctx, "COMMIT")
	}
	if err != nil {
		s.wc.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("journal: write snapshot: %w", err)
	}
	s.pruneSnapshotFiles(ctx)
	s.kickCompaction()
	return nil
}

// SnapshotPosition returns the journal's last seq and the seq of the
// snapshot a state rebuilt from it starts at: the one the last Replay of
// this store started from (0 for none, a damaged newest snapshot skipped),
// or, before any Replay, the newest stored snapshot. last - from is what a
// restart would replay now; the sequencer counts on from it, so records
// add up across restarts.
func (s *Store) SnapshotPosition() (last, from int64, err error) {
	if last, err = s.LastSeq(); err != nil {
		return 0, 0, err
	}
	if s.replayed.Load() {
		return last, s.replayFrom.Load(), nil
	}
	err = s.rdb.QueryRow(`SELECT COALESCE(MAX(seq), 0) FROM snapshots`).Scan(&from)
	if err != nil {
		return 0, 0, fmt.Errorf("journal: snapshot position: %w", err)
	}
	return last, from, nil
}

// snapshotDir is where snapshot bodies live: beside the database.
func (s *Store) snapshotDir() string { return s.path + ".snapshots" }

func (s *Store) snapshotFile(seq int64) string {
	return filepath.Join(s.snapshotDir(), strconv.FormatInt(seq, 10)+".snap")
}

func (s *Store) writeSnapshotFile(seq int64, body []byte) error {
	dir := s.snapshotDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	final := s.snapshotFile(seq)
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(dir); err == nil { // make the rename durable
		d.Sync()
		d.Close()
	}
	return nil
}

// pruneSnapshotFiles removes body files no row refers to (pruned snapshots,
// and leftovers of a crash between the file and its row). Best effort.
func (s *Store) pruneSnapshotFiles(ctx context.Context) {
	entries, err := os.ReadDir(s.snapshotDir())
	if err != nil {
		return
	}
	keep := make(map[string]bool)
	rows, err := s.wc.QueryContext(ctx, `SELECT seq FROM snapshots`)
	if err != nil {
		return
	}
	for rows.Next() {
		var seq int64
		if rows.Scan(&seq) == nil {
			keep[strconv.FormatInt(seq, 10)+".snap"] = true
		}
	}
	rows.Close()
	for _, e := range entries {
		if !keep[e.Name()] {
			os.Remove(filepath.Join(s.snapshotDir(), e.Name()))
		}
	}
}

// SnapshotInfo describes one stored snapshot.
type SnapshotInfo struct {
	Seq       int64
	CreatedAt float64
	Format    int
	Size      int
	Err       string // why it cannot be used; "" when it is sound
}

// Snapshots describes the stored snapshots, newest first.
func (s *Store) Snapshots() ([]SnapshotInfo, error) {
	infos, _, err := s.snapshots()
	return infos, err
}

// snapshots returns the stored snapshots, newest first, with their bodies.
func (s *Store) snapshots() ([]SnapshotInfo, [][]byte, error) {
	rows, err := s.rdb.Query(`SELECT seq, created_at, format, sha256, body FROM snapshots ORDER BY seq DESC`)
	if err != nil {
		return nil, nil, fmt.Errorf("journal: read snapshots: %w", err)
	}
	defer rows.Close()
	var infos []SnapshotInfo
	var bodies [][]byte
	for rows.Next() {
		var in SnapshotInfo
		var sum string
		var body []byte
		if err := rows.Scan(&in.Seq, &in.CreatedAt, &in.Format, &sum, &body); err != nil {
			return nil, nil, fmt.Errorf("journal: read snapshots: %w", err)
		}
		if len(body) == 0 { // the body lives in its file (see WriteSnapshot)
			b, err := os.ReadFile(s.snapshotFile(in.Seq))
			if err != nil {
				in.Err = "body file unreadable: " + err.Error()
			}
			body = b
		}
		in.Size = len(body)
		switch {
		case in.Err != "":
		case in.Format != snapshotFormat:
			in.Err = fmt.Sprintf("unknown format %d", in.Format)
		case sha256Hex(body) != sum:
			in.Err = "sha256 mismatch"
		}
		infos = append(infos, in)
		bodies = append(bodies, body)
	}
	return infos, bodies, rows.Err()
}

// Compact deletes the claim-family, board and resource events that a
// snapshot covers. It keeps every other kind (chat, mailbox watermarks,
// receipts, idempotency, claim_denial and the other audit kinds), which
// replay or the reference's tooling still read. The floor is the OLDEST
// kept snapshot, so replay can still fall back to it when the newest is
// damaged. It returns how many rows it deleted; with no snapshot it does
// nothing. After Compact the file no longer replays without its snapshots.
func (s *Store) Compact(ctx context.Context) (deleted int64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("journal: compact: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	infos, _, err := s.snapshots()
	if err != nil {
		return 0, err
	}
	var floor int64 = -1
	for _, in := range infos {
		if in.Err == "" {
			floor = in.Seq // ends at the oldest sound one
		}
	}
	if floor <= 0 {
		return 0, nil
	}
	bg := context.WithoutCancel(ctx)
	if _, err := s.wc.ExecContext(bg, "BEGIN IMMEDIATE"); err != nil {
		return 0, fmt.Errorf("journal: compact: %w", err)
	}
	res, err := s.wc.ExecContext(bg, `DELETE FROM events WHERE seq <= ? AND kind IN
		('claim', 'task_update', 'checkpoint', 'handoff', 'release', 'resource', 'ledger_task', 'ledger_progress')`, floor)
	if err == nil {
		deleted, _ = res.RowsAffected()
		_, err = s.wc.ExecContext(bg, `INSERT INTO meta(key, value) VALUES('compacted_through', ?)
			ON CONFLICT(key) DO UPDATE SET value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))`, floor)
	}
	if err == nil {
		_, err = s.wc.ExecContext(bg, "COMMIT")
	}
	if err != nil {
		s.wc.ExecContext(bg, "ROLLBACK")
		return 0, fmt.Errorf("journal: compact: %w", err)
	}
	return deleted, nil
}

// Vacuum rewrites the file to give the space freed by Compact back to the
// file system, and turns on incremental auto_vacuum (vacuum.go) so a
// running hub gives free pages back from then on. It blocks appends while
// it runs.
func (s *Store) Vacuum(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, err := s.wc.ExecContext(ctx, "PRAGMA auto_vacuum = INCREMENTAL"); err != nil {
		return fmt.Errorf("journal: vacuum: %w", err)
	}
	if _, err := s.wc.ExecContext(ctx, "VACUUM"); err != nil {
		return fmt.Errorf("journal: vacuum: %w", err)
	}
	return nil
}

// compactedThrough returns the floor of the last compaction (0 if none).
func (s *Store) compactedThrough() (int64, error) {
	var v int64
	err := s.rdb.QueryRow(`SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'compacted_through'`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// EncodeImage returns the snapshot body (format 1) of img. Waits are left
// out.
func EncodeImage(img coord.Image) []byte {
	w := imgWriter{b: make([]byte, 0, 64+len(img.Claims)*160+len(img.Notes)*96)}
	w.b = append(w.b, snapshotMagic...)
	w.i(img.Epoch)
	w.u(len(img.Claims))
	for i := range img.Claims {
		c := &img.Claims[i]
		w.s(c.TaskID)
		w.s(c.Owner)
		w.s(c.Note)
		w.u(int(c.Status))
		w.s(c.DataRef)
		w.s(c.Worktree)
		w.ss(c.Paths)
		w.s(c.PathIdentity)
		w.s(c.Checkpoint)
		if c.Git == nil {
			w.u(0)
		} else {
			w.u(1)
			w.s(c.Git.Branch)
			w.s(c.Git.Base)
			w.s(c.Git.AutoReleaseOn)
		}
		w.s(c.QuotaPrincipal)
		w.f(c.ClaimedAt)
		w.f(c.ExpiresAt)
		w.i(c.Epoch)
		w.i(c.Version)
	}
	w.u(len(img.Retained))
	for _, r := range img.Retained {
		w.s(r.TaskID)
		w.s(r.Checkpoint)
	}
	w.u(len(img.Offers))
	for _, o := range img.Offers {
		w.s(o.Agent)
		w.s(o.Kind)
		w.s(o.Name)
		w.i(int64(o.Capacity))
		w.s(o.Meta)
		w.f(o.OfferedAt)
	}
	w.u(len(img.Tasks))
	for _, t := range img.Tasks {
		w.s(t.TaskID)
		w.s(t.Title)
		w.s(t.Description)
		w.ss(t.DependsOn)
		w.s(t.Status)
		w.s(t.SuggestedOwner)
		w.s(t.Project)
		w.i(t.Version)
		w.s(t.CreatedBy)
		w.f(t.CreatedAt)
		w.f(t.UpdatedAt)
	}
	w.u(len(img.Notes))
	for _, n := range img.Notes {
		w.s(n.TaskID)
		w.s(n.Author)
		w.s(n.Kind)
		w.s(n.Text)
		w.f(n.PostedAt)
	}
	writeBindings(&w, img, hasClaimScopes(img.Claims) || hasClaimFiles(img.Claims))
	w.claimScopes(img.Claims)
	w.claimFiles(img.Claims)
	return w.b
}

// Tagged sections after the bindings: zero or more, each a uvarint tag and
// its body, written only when they have something to say (the bindings are
// then written too, empty if need be), so an image without them encodes as
// before and older bodies read as before.
const (
	sectionClaimScopes = 1 // claims with globs or a shared mode: index, globs, mode
	sectionClaimFiles  = 2 // claims with files: index, files
)

// claimScopes writes the section of claims holding globs or a shared mode.
func (w *imgWriter) claimScopes(claims []coord.Claim) {
	var idx []int
	for i := range claims {
		if len(claims[i].Globs) > 0 || claims[i].Mode != coord.ModeExclusive {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	w.u(sectionClaimScopes)
	w.u(len(idx))
	for _, i := range idx {
		w.u(i)
		w.ss(claims[i].Globs)
		w.u(int(claims[i].Mode))
	}
}

// claimFiles writes the section of claims holding files (issue 19), only
// when some claim does.
func (w *imgWriter) claimFiles(claims []coord.Claim) {
	if !hasClaimFiles(claims) {
		return
	}
	var idx []int
	for i := range claims {
		if len(claims[i].Files) > 0 {
			idx = append(idx, i)
		}
	}
	w.u(sectionClaimFiles)
	w.u(len(idx))
	for _, i := range idx {
		w.u(i)
		w.ss(claims[i].Files)
	}
}

func hasClaimFiles(claims []coord.Claim) bool {
	for i := range claims {
		if len(claims[i].Files) > 0 {
			return true
		}
	}
	return false
}

// sections reads the tagged sections after the notes.
func (r *imgReader) sections(img *coord.Image) {
	for r.err == nil && len(r.b) > 0 {
		switch tag := r.u(); tag {
		case sectionClaimScopes:
			n := r.n()
			for range n {
				i := r.u()
				globs := r.scope()
				mode := r.u()
				if r.err != nil {
					return
				}
				if i >= uint64(len(img.Claims)) {
					r.fail("claim scope index")
					return
				}
				img.Claims[i].Globs, img.Claims[i].Mode = globs, coord.Mode(min(mode, 255))
			}
		case sectionClaimFiles:
			n := r.n()
			for range n {
				i := r.u()
				files := r.scope()
				if r.err != nil {
					return
				}
				if i >= uint64(len(img.Claims)) {
					r.fail("claim files index")
					return
				}
				img.Claims[i].Files = files
			}
		default:
			r.fail("section tag")
			return
		}
	}
}

func hasClaimScopes(claims []coord.Claim) bool {
	for i := range claims {
		if len(claims[i].Globs) > 0 || claims[i].Mode != coord.ModeExclusive {
			return true
		}
	}
	return false
}

// writeBindings appends the task-bound claims' section: the claims' board
// tasks, then the board tasks' owners and owner claims, each keyed by index. It is
// written only when some claim or task has one, so an image without
// task-bound claims encodes exactly as before and earlier bodies (which end
// after the notes) read as images without bindings.
//
// force writes it (empty) when tagged sections follow, so the reader finds
// them after it.
func writeBindings(w *imgWriter, img coord.Image, force bool) {
	var claims, tasks []int
	for i := range img.Claims {
		if img.Claims[i].BoardTask != "" {
			claims = append(claims, i)
		}
	}
	for i := range img.Tasks {
		if img.Tasks[i].Owner != "" || img.Tasks[i].OwnerClaim != "" {
			tasks = append(tasks, i)
		}
	}
	if len(claims) == 0 && len(tasks) == 0 && !force {
		return
	}
	w.u(len(claims))
	for _, i := range claims {
		w.u(i)
		w.s(img.Claims[i].BoardTask)
	}
	w.u(len(tasks))
	for _, i := range tasks {
		w.u(i)
		w.s(img.Tasks[i].Owner)
		w.s(img.Tasks[i].OwnerClaim)
	}
}

// readBindings reads what writeBindings wrote, if anything is left.
func readBindings(r *imgReader, img *coord.Image) {
	if len(r.b) == 0 {
		return
	}
	for n := r.n(); n > 0 && r.err == nil; n-- {
		if i := r.u(); i < uint64(len(img.Claims)) {
			img.Claims[i].BoardTask = r.s()
		} else {
			r.fail("claim binding index")
		}
	}
	for n := r.n(); n > 0 && r.err == nil; n-- {
		if i := r.u(); i < uint64(len(img.Tasks)) {
			img.Tasks[i].Owner, img.Tasks[i].OwnerClaim = r.is(), r.s()
		} else {
			r.fail("board owner index")
		}
	}
}

// DecodeImage reads a snapshot body written by EncodeImage. Claims come
// back with nil Paths for the whole worktree and board tasks with non-nil
// DependsOn, as the core holds them.
func DecodeImage(body []byte) (coord.Image, error) {
	var img coord.Image
	if len(body) < len(snapshotMagic) || string(body[:len(snapshotMagic)]) != string(snapshotMagic) {
		return img, fmt.Errorf("%w: no magic", ErrBadSnapshot)
	}
	r := imgReader{b: body[len(snapshotMagic):], intern: make(map[string]string)}
	img.Epoch = r.i()
	if n := r.n(); n > 0 {
		img.Claims = make([]coord.Claim, n)
		for i := range img.Claims {
			c := &img.Claims[i]
			c.TaskID = r.s()
			c.Owner = r.is()
			c.Note = r.s()
			c.Status = r.status()
			c.DataRef = r.s()
			c.Worktree = r.is()
			c.Paths = r.scope()
			c.PathIdentity = r.s()
			c.Checkpoint = r.s()
			if r.u() == 1 {
				c.Git = &coord.Git{Branch: r.s(), Base: r.s(), AutoReleaseOn: r.s()}
			}
			c.QuotaPrincipal = r.is()
			c.ClaimedAt = r.f()
			c.ExpiresAt = r.f()
			c.Epoch = r.i()
			c.Version = r.i()
		}
	}
	if n := r.n(); n > 0 {
		img.Retained = make([]coord.RetainedCheckpoint, n)
		for i := range img.Retained {
			img.Retained[i] = coord.RetainedCheckpoint{TaskID: r.s(), Checkpoint: r.s()}
		}
	}
	if n := r.n(); n > 0 {
		img.Offers = make([]coord.Offer, n)
		for i := range img.Offers {
			img.Offers[i] = coord.Offer{Agent: r.is(), Kind: r.is(), Name: r.s(), Capacity: int(r.i()), Meta: r.s(), OfferedAt: r.f()}
		}
	}
	if n := r.n(); n > 0 {
		img.Tasks = make([]coord.BoardTask, n)
		for i := range img.Tasks {
			img.Tasks[i] = coord.BoardTask{
				TaskID: r.s(), Title: r.s(), Description: r.s(), DependsOn: r.ss(true), Status: r.is(),
				SuggestedOwner: r.is(), Project: r.is(), Version: r.i(), CreatedBy: r.is(), CreatedAt: r.f(), UpdatedAt: r.f(),
			}
		}
	}
	if n := r.n(); n > 0 {
		img.Notes = make([]coord.Note, n)
		for i := range img.Notes {
			img.Notes[i] = coord.Note{TaskID: r.s(), Author: r.is(), Kind: r.is(), Text: r.s(), PostedAt: r.f()}
		}
	}
	readBindings(&r, &img)
	r.sections(&img)
	if r.err == nil && len(r.b) != 0 {
		r.err = errors.New("trailing bytes")
	}
	if r.err != nil {
		return coord.Image{}, fmt.Errorf("%w: %v", ErrBadSnapshot, r.err)
	}
	if err := img.Check(); err != nil {
		return coord.Image{}, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	return img, nil
}

type imgWriter struct{ b []byte }

func (w *imgWriter) u(v int)     { w.b = binary.AppendUvarint(w.b, uint64(v)) }
func (w *imgWriter) i(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *imgWriter) f(v float64) { w.b = binary.LittleEndian.AppendUint64(w.b, math.Float64bits(v)) }
func (w *imgWriter) s(v string)  { w.u(len(v)); w.b = append(w.b, v...) }
func (w *imgWriter) ss(v []string) {
	w.u(len(v))
	for _, s := range v {
		w.s(s)
	}
}

// imgReader reads what imgWriter wrote. The first error sticks; reads after
// it return zero values, so decoding needs one check at the end.
type imgReader struct {
	b      []byte
	err    error
	intern map[string]string // repeated names (owners, worktrees, principals) share one string
}

func (r *imgReader) fail(what string) {
	if r.err == nil {
		r.err = errors.New("truncated " + what)
	}
	r.b = nil
}

func (r *imgReader) u() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// n reads a count, refusing one larger than the bytes left could hold.
func (r *imgReader) n() int {
	v := r.u()
	if v > uint64(len(r.b)) {
		r.fail("count")
		return 0
	}
	return int(v)
}

func (r *imgReader) i() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *imgReader) f() float64 {
	if len(r.b) < 8 {
		r.fail("float")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

func (r *imgReader) bytes() []byte {
	n := r.u()
	if n > uint64(len(r.b)) {
		r.fail("string")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *imgReader) s() string { return string(r.bytes()) }

// status reads a claim status, refusing one out of range before it is
// narrowed to a byte (status 256 must not read as 0, claimed).
func (r *imgReader) status() coord.Status {
	v := r.u()
	if v > uint64(coord.StatusFailed) {
		if r.err == nil {
			r.err = fmt.Errorf("claim status %d", v)
		}
		r.b = nil
		return 0
	}
	return coord.Status(v)
}

// is reads a string that is likely repeated and shares it.
func (r *imgReader) is() string {
	b := r.bytes()
	if v, ok := r.intern[string(b)]; ok {
		return v
	}
	v := string(b)
	if len(r.intern) < 1<<16 {
		r.intern[v] = v
	}
	return v
}

// ss reads a string list of likely repeated strings (shared, like is);
// an empty list is nil unless nonNil.
func (r *imgReader) ss(nonNil bool) []string { return r.list(nonNil, r.is) }

// scope reads a claim's paths, globs or files: not shared, as scopes
// seldom repeat (exclusive claims cannot overlap), so sharing them would
// only grow the intern table.
func (r *imgReader) scope() []string { return r.list(false, r.s) }

func (r *imgReader) list(nonNil bool, read func() string) []string {
	n := r.n()
	if n == 0 {
		if nonNil {
			return []string{}
		}
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = read()
	}
	return out
}
