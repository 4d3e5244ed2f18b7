// Package journal is the hub's durable event store: an SQLite file in WAL
// mode whose events, operations and receipt tables are the reference hub's
// (PROTOCOL.md §4), plus our own index, snapshots and metadata. Batches
// commit in one transaction at the durability their events need (INV-JA-4);
// replay rebuilds the coordination state from the newest snapshot and the
// events after it, quarantining rows it cannot read.
//
// Ownership: one goroutine (the hub's sequencer) appends; Append serialises
// on a mutex anyway. Reads (Scan, Operation, LastSeq) go through a separate
// read-only connection pool and may run concurrently with appends.
package journal

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synapse-hub/synapse/pyjson"

	_ "modernc.org/sqlite" // registers the pure-Go "sqlite" driver
)

// SchemaVersion is the version of our additions to the reference schema,
// kept in the meta table.
//
//	1: events_kind_idx, snapshots, meta
//	2: directed_chats and mailbox_watermarks (delivery.go), back-filled
//	   from the chat and mailbox_watermark rows already in the file
//	3: operations_committed_idx and idempotency_expired (retention.go);
//	   an older file gets them when it is opened for writing
//	4: operations.response_json may hold a deflated response (respz.go),
//	   which a schema-3 binary would send back as it is; no table changes
//
// A file of a newer version is refused (ErrNewerSchema): this binary does
// not know what its newer parts promise.
const SchemaVersion = 4

// Options tune Open. The zero value works.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection before failing (default 5 s, the reference's busy_timeout).
	BusyTimeout time.Duration
	// HubID is recorded in the meta table when the file is created; an
	// existing file keeps its own. Empty means a random "syn-xxxxxxxx".
	HubID string
	// ReadOnly opens the file with mode=ro: reads and replay work, Append
	// fails. For inspection tools, fault-injection tests, and a hub whose
	// journal cannot be written.
	ReadOnly bool
	// Immutable, with ReadOnly, also tells SQLite nothing will change the
	// file (immutable=1: no locks, no -shm). It is how a WAL-mode file is
	// read on a read-only file system where its -shm cannot be created;
	// since SQLite then ignores any WAL, Open refuses it when a WAL with
	// frames is beside the file.
	Immutable bool
	// KeepSnapshots is how many snapshots WriteSnapshot keeps (default 2).
	KeepSnapshots int
	// MaxPageCount, when positive, caps the file at that many pages on the
	// writer connection (PRAGMA max_page_count, which is per connection and
	// never below the file's current size): an append that would grow the
	// file further fails with SQLITE_FULL and rolls back, as on a full disk.
	// For fault-injection tests; a hub leaves it 0 (SQLite's default cap).
	MaxPageCount int
	// IdempotencyWindow, when positive, is how long an idempotency record
	// is kept after it committed (`synapse hub --idempotency-window`,
	// default 24 h there): a retry within it is answered with the stored
	// response, one after it with ErrIdempotencyExpired for one more
	// window (retention.go). 0 keeps every record forever.
	IdempotencyWindow time.Duration
	// CompactBatch, when positive, compacts the journal online: after each
	// snapshot a background goroutine drops the rows the oldest sound
	// snapshot covers, this many per transaction (compaction.go;
	// `synapse hub --journal-compact-batch`, DefaultCompactBatch there). 0
	// leaves every row until `synapse journal compact`.
	CompactBatch int
	// CompressResponses stores each idempotency record's response
	// deflated (respz.go; a hub that compacts online sets it): about a
	// quarter of the size, not readable by the reference's tooling.
	CompressResponses bool
	// Retain is how long chat, receipt and audit rows are kept (retain.go;
	// `synapse hub --retain`, DefaultRetain there); the zero value keeps
	// them forever.
	Retain Retain
	// KeepChatRows is how many of the newest chat rows retention keeps
	// whatever their age (0: DefaultKeepChatRows).
	KeepChatRows int
	// MaxBytes, when positive, caps the file the same way, in bytes
	// (rounded down to whole pages, never below the file's current size):
	// `synapse hub --journal-max-kb`. An append beyond it fails with
	// ErrDiskFull.
	MaxBytes int64
}

// Errors callers may compare against.
var (
	ErrClosed     = errors.New("journal: store is closed")
	ErrBadBatch   = errors.New("journal: invalid batch")
	ErrNotJournal = errors.New("journal: file has no journal schema")
	// ErrNewerSchema means the file was written by a newer synapse, whose
	// schema this binary does not know: it is refused rather than
	// written with rules older than the file's.
	ErrNewerSchema = errors.New("journal: file written by a newer synapse")
)

// Store is an open journal file.
type Store struct {
	path string
	opts Options

	mu     sync.Mutex // serialises Append, WriteSnapshot and Compact
	closed bool
	db     *sql.DB   // the writer pool: one connection
	wc     *sql.Conn // that connection, pinned so per-connection pragmas hold
	rdb    *sql.DB   // read-only pool
	insert *sql.Stmt // INSERT INTO events on wc
	hubID  string

	// What the last Replay of this store started from (SnapshotPosition).
	replayed      atomic.Bool
	replayFrom    atomic.Int64
	replayEnd     chan struct{} // closed when a Replay ends: the background rounds may start
	replayEndOnce sync.Once

	// The idempotency expiry goroutine (retention.go).
	stopExpiry chan struct{}
	expiryDone chan struct{}
	haltOnce   sync.Once
	expired    atomic.Int64
	retained   atomic.Int64 // rows the retention windows dropped (retain.go)
	vacuumed   atomic.Int64 // pages given back (vacuum.go)

	// Online compaction (compaction.go): the goroutine's channels, the
	// rows it dropped, and its cursor (under mu).
	compactKick     chan struct{}
	stopCompact     chan struct{}
	compactDone     chan struct{}
	haltCompactOnce sync.Once
	compacted       atomic.Int64
	compactFrom     int64

	// beforeCommit, when set (tests only), runs inside every append
	// transaction just before COMMIT, on the writer connection.
	beforeCommit func(conn *sql.Conn)
}

// The reference's tables (PROTOCOL.md §4.1), byte for byte, so its tooling
// opens our file; then ours.
const schema = `
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL,
                     kind TEXT NOT NULL, payload TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS operations (operation_key TEXT PRIMARY KEY, request_digest TEXT NOT NULL,
                     response_json TEXT NOT NULL, response_sha256 TEXT NOT NULL,
                     first_event_seq INTEGER NOT NULL, commit_seq INTEGER NOT NULL,
                     committed_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS operation_outbox (operation_key TEXT PRIMARY KEY REFERENCES operations,
                     intent_json TEXT NOT NULL, receipt_id TEXT);
CREATE TABLE IF NOT EXISTS delivery_receipts (message_seq INTEGER PRIMARY KEY REFERENCES events(seq),
                     sender TEXT NOT NULL, target TEXT NOT NULL, message_id INTEGER NOT NULL,
                     client_msg_id TEXT NOT NULL, state TEXT NOT NULL, delivered INTEGER,
                     deferred INTEGER NOT NULL, acked_by TEXT NOT NULL,
                     updated_event_seq INTEGER NOT NULL REFERENCES events(seq));
CREATE TABLE IF NOT EXISTS delivery_receipt_outbox (notification_id TEXT PRIMARY KEY,
                     message_seq INTEGER NOT NULL REFERENCES delivery_receipts,
                     phase TEXT NOT NULL, sender TEXT NOT NULL, frame_json TEXT NOT NULL,
                     attempts INTEGER NOT NULL DEFAULT 0, delivered_at REAL);
CREATE INDEX IF NOT EXISTS delivery_receipt_outbox_pending_idx ON delivery_receipt_outbox(sender, delivered_at);

CREATE INDEX IF NOT EXISTS events_kind_idx ON events(kind);
CREATE TABLE IF NOT EXISTS snapshots (seq INTEGER PRIMARY KEY, created_at REAL NOT NULL,
                     format INTEGER NOT NULL, sha256 TEXT NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
` + deliverySchema + retentionSchema

// Open opens the journal at path, creating it (mode 0600) with the schema
// when it does not exist. The file runs in WAL mode at synchronous=NORMAL;
// Append raises a durable batch to FULL.
func Open(path string, opts Options) (*Store, error) {
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 5 * time.Second
	}
	if opts.KeepSnapshots <= 0 {
		opts.KeepSnapshots = 2
	}
	if err := checkWhole(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("journal: open %s: %w", path, classify(err))
	}
	if !opts.ReadOnly {
		// Create the file ourselves so SQLite never creates it with the
		// umask's mode; SQLite gives the -wal and -shm files the mode of
		// the database file.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("journal: open %s: %w", path, classify(err))
		}
		f.Close()
		if err := tightenMode(path); err != nil {
			return nil, fmt.Errorf("journal: open %s: %w", path, classify(err))
		}
	} else if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("journal: open %s: %w", path, err)
	}
	if opts.Immutable {
		if !opts.ReadOnly {
			return nil, fmt.Errorf("journal: open %s: Immutable needs ReadOnly", path)
		}
		if wal, err := os.Stat(path + "-wal"); err == nil && wal.Size() > walHeaderSize {
			return nil, fmt.Errorf("journal: open %s: not immutable: its WAL holds commits the file does not", path)
		}
	}
	s := &Store{path: path, opts: opts, replayEnd: make(chan struct{})}
	if err := s.open(); err != nil {
		s.closeAll()
		if errors.Is(err, ErrNewerSchema) {
			return nil, fmt.Errorf("journal: open %s: %w", path, err)
		}
		return nil, fmt.Errorf("journal: open %s: %w", path, classify(probeFolder(path, err)))
	}
	s.startExpiry()
	s.startCompaction()
	return s, nil
}

// dsn builds a modernc.org/sqlite URI: the _pragma parameters run on every
// new connection of the pool.
func dsn(path string, readOnly, immutable bool, busy time.Duration, pragmas ...string) string {
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	q := []string{fmt.Sprintf("_pragma=busy_timeout(%d)", busy.Milliseconds())}
	if readOnly {
		q = append(q, "mode=ro")
	}
	if immutable {
		q = append(q, "immutable=1")
	}
	for _, p := range pragmas {
		q = append(q, "_pragma="+p)
	}
	return "file:" + esc + "?" + strings.Join(q, "&")
}

func (s *Store) open() error {
	ctx := context.Background()
	var err error
	wp := []string{"synchronous(NORMAL)"}
	if !s.opts.ReadOnly {
		// auto_vacuum first: it takes only on a file with no page
		// written yet (a new one; vacuum.go), and is a no-op on any other.
		wp = append([]string{"auto_vacuum(INCREMENTAL)", "journal_mode(WAL)"}, wp...)
	}
	if s.opts.MaxPageCount > 0 {
		wp = append(wp, fmt.Sprintf("max_page_count(%d)", s.opts.MaxPageCount))
	}
	if s.db, err = sql.Open("sqlite", dsn(s.path, s.opts.ReadOnly, s.opts.Immutable, s.opts.BusyTimeout, wp...)); err != nil {
		return err
	}
	// One writer connection: SQLite admits one writer anyway, and pragmas
	// such as synchronous are per connection, so pinning it makes the
	// FULL/NORMAL switch in Append apply to the transaction that follows.
	s.db.SetMaxOpenConns(1)
	s.db.SetMaxIdleConns(1)
	s.db.SetConnMaxLifetime(0)
	if s.wc, err = s.db.Conn(ctx); err != nil {
		return err
	}
	if s.opts.MaxBytes > 0 {
		var pageSize int64
		if err = s.wc.QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
			return err
		}
		if _, err = s.wc.ExecContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", max(s.opts.MaxBytes/pageSize, 1))); err != nil {
			return err
		}
	}
	if !s.opts.ReadOnly {
		if err = s.createSchema(ctx); err != nil {
			return err
		}
		if err = s.chmodSidecars(); err != nil {
			return err
		}
	} else if err = s.checkSchema(ctx); err != nil {
		return err
	}
	if s.insert, err = s.wc.PrepareContext(ctx, `INSERT INTO events(seq, ts, kind, payload) VALUES(?, ?, ?, ?)`); err != nil {
		return err
	}
	if s.rdb, err = sql.Open("sqlite", dsn(s.path, false, s.opts.Immutable, s.opts.BusyTimeout, "query_only(1)")); err != nil {
		return err
	}
	s.rdb.SetMaxOpenConns(4)
	return s.wc.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'hub_id'`).Scan(&s.hubID)
}

func (s *Store) createSchema(ctx context.Context) error {
	hub := s.opts.HubID
	if hub == "" {
		var b [4]byte
		rand.Read(b[:])
		hub = "syn-" + hex.EncodeToString(b[:])
	}
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	version, err := s.schemaVersion(ctx)
	if err == nil && version > SchemaVersion {
		err = newerSchema(version)
	}
	if err == nil {
		_, err = s.wc.ExecContext(ctx, schema)
	}
	if err == nil && version < 2 { // a file of ours at v1, or the reference's own
		err = s.migrateDelivery(ctx)
	}
	if err == nil {
		_, err = s.wc.ExecContext(ctx, `INSERT OR IGNORE INTO meta(key, value) VALUES ('hub_id', ?)`, hub)
	}
	if err == nil && s.opts.IdempotencyWindow > 0 { // what this hub keeps, so `journal stats` can say why (tools open with none)
		_, err = s.wc.ExecContext(ctx, `INSERT OR REPLACE INTO meta(key, value) VALUES ('idempotency_window_seconds', ?)`,
			fmt.Sprint(s.opts.IdempotencyWindow.Seconds()))
	}
	if err == nil && s.opts.Retain != (Retain{}) {
		_, err = s.wc.ExecContext(ctx, `INSERT OR REPLACE INTO meta(key, value) VALUES ('retain', ?)`, s.opts.Retain.String())
	}
	if err == nil && version < SchemaVersion {
		_, err = s.wc.ExecContext(ctx, `INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)`, fmt.Sprint(SchemaVersion))
	}
	if err != nil {
		s.wc.ExecContext(ctx, "ROLLBACK")
		if errors.Is(err, ErrNewerSchema) {
			return err
		}
		return fmt.Errorf("create schema: %w", err)
	}
	_, err = s.wc.ExecContext(ctx, "COMMIT")
	return err
}

// schemaVersion reads the file's schema_version: 0 for a file without a
// meta table (new, or the reference's) or without the key.
func (s *Store) schemaVersion(ctx context.Context) (int, error) {
	var n int
	err := s.wc.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'`).Scan(&n)
	if err != nil || n == 0 {
		return 0, err
	}
	var v int
	err = s.wc.QueryRowContext(ctx, `SELECT COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'schema_version'), 0)`).Scan(&v)
	return v, err
}

func newerSchema(v int) error {
	return fmt.Errorf("%w: its schema is version %d, this binary knows versions up to %d; run the newer synapse on it (or a copy), nothing was changed", ErrNewerSchema, v, SchemaVersion)
}

// checkSchema verifies a file opened read-only has our tables.
func (s *Store) checkSchema(ctx context.Context) error {
	for _, t := range []string{"events", "operations", "snapshots", "meta"} {
		var n int
		if err := s.wc.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, t).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: no table %s", ErrNotJournal, t)
		}
	}
	if v, err := s.schemaVersion(ctx); err != nil || v > SchemaVersion {
		if err == nil {
			err = newerSchema(v)
		}
		return err
	}
	return nil
}

// tightenMode drops group and other permissions from an existing file
// (the reference keeps its store 0600). It never adds permissions.
func tightenMode(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return os.Chmod(path, m&^0o077)
	}
	return nil
}

func (s *Store) chmodSidecars() error {
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := tightenMode(s.path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// HubID returns the hub id recorded in the file.
func (s *Store) HubID() string { return s.hubID }

// Close closes the store. Appends after Close fail with ErrClosed.
func (s *Store) Close() error {
	s.halt()           // before the mutex: an expiry round holds it
	s.haltCompaction() // and so does a compaction batch
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.closeAll()
}

func (s *Store) closeAll() error {
	var errs []error
	if s.insert != nil {
		errs = append(errs, s.insert.Close())
	}
	if s.wc != nil {
		errs = append(errs, s.wc.Close())
	}
	if s.db != nil {
		errs = append(errs, s.db.Close())
	}
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	return errors.Join(errs...)
}

// Append commits a batch in one transaction and returns the seq of its
// first row. Records get consecutive seqs in order, every row the batch's
// TS. For each Operation it also writes the `operations` row, in the same
// transaction: either the whole batch is durable or none of it is
// (INV-JA-2). A batch that needs FULL durability commits with
// synchronous=FULL, any other at NORMAL (INV-JA-4).
//
// ctx is consulted only before the transaction begins: once started, Append
// runs to COMMIT or ROLLBACK whatever happens to ctx, so a cancelled caller
// never leaves a half-written batch behind (INV-JA-3). A batch with no
// records and no operations writes nothing and returns 0.
func (s *Store) Append(ctx context.Context, b *Batch) (firstSeq int64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("journal: append batch: %w", err)
	}
	if len(b.Records) == 0 && len(b.Operations) == 0 {
		return 0, nil
	}
	ops, err := prepareOperations(b.Operations, s.opts.CompressResponses)
	if err != nil {
		return 0, fmt.Errorf("journal: append batch: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	first, err := s.appendLocked(context.WithoutCancel(ctx), b, ops)
	if err != nil {
		return 0, fmt.Errorf("journal: append batch: %w", classify(s.probeWritable(err)))
	}
	return first, nil
}

// preparedOp is an Operation with its response in canonical form, and as
// the row stores it (respz.go).
type preparedOp struct {
	Operation
	stored any // the canonical text, or its deflated bytes
	sha    string
}

// prepareOperations canonicalises (and with compress, deflates) the
// responses before the writer mutex is taken.
func prepareOperations(in []Operation, compress bool) ([]preparedOp, error) {
	ops := make([]preparedOp, len(in))
	for i, op := range in {
		if op.Key == "" {
			return nil, fmt.Errorf("%w: operation %d has no key", ErrBadBatch, i)
		}
		c, ok := pyjson.CanonicalRaw(op.Response)
		if !ok {
			return nil, fmt.Errorf("%w: operation %q: response is not JSON", ErrBadBatch, op.Key)
		}
		var stored any = string(c)
		if compress {
			if z := encodeResponse(c); z[0] == respZ1 {
				stored = z
			}
		}
		ops[i] = preparedOp{op, stored, sha256Hex(c)}
	}
	return ops, nil
}

func (s *Store) appendLocked(ctx context.Context, b *Batch, ops []preparedOp) (int64, error) {
	durable := b.Durable()
	if durable {
		if _, err := s.wc.ExecContext(ctx, "PRAGMA synchronous = FULL"); err != nil {
			return 0, err
		}
		defer s.wc.ExecContext(ctx, "PRAGMA synchronous = NORMAL")
	}
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, err
	}
	first, err := s.writeBatch(ctx, b, ops)
	if err == nil && s.beforeCommit != nil {
		s.beforeCommit(s.wc)
	}
	if err == nil {
		if _, err = s.wc.ExecContext(ctx, "COMMIT"); err == nil {
			return first, nil
		}
	}
	if _, rbErr := s.wc.ExecContext(ctx, "ROLLBACK"); rbErr != nil {
		err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
	}
	return 0, err
}

// writeBatch inserts the batch's rows with explicit seqs, continuing the
// AUTOINCREMENT sequence, so a record's Stamp knows its seq.
func (s *Store) writeBatch(ctx context.Context, b *Batch, ops []preparedOp) (int64, error) {
	var last int64
	if err := s.wc.QueryRowContext(ctx, `SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)`).Scan(&last); err != nil {
		return 0, err
	}
	first := last + 1
	for _, r := range b.Records {
		if r.Kind == "" {
			return 0, fmt.Errorf("%w: record without kind", ErrBadBatch)
		}
		last++
		payload, exec := r.Payload, []Statement(nil)
		if r.Stamp != nil {
			var p []byte
			if p, exec = r.Stamp(last); p != nil {
				payload = p
			}
		}
		if _, err := s.insert.ExecContext(ctx, last, b.TS, r.Kind, string(payload)); err != nil {
			return 0, fmt.Errorf("insert %s event: %w", r.Kind, err)
		}
		for _, st := range exec {
			if _, err := s.wc.ExecContext(ctx, st.SQL, st.Args...); err != nil {
				return 0, fmt.Errorf("%s event %d: %w", r.Kind, last, err)
			}
		}
	}
	// The operations row is the idempotency record, stored once: commit_seq
	// is the batch's last event (first-1 when it wrote none). The
	// reference also wrote it as an `idempotency` event with the same
	// response; its replay seeds its cache from the operations table too
	// (PROTOCOL.md §4.5 step 5), so the copy only doubled the file.
	for _, op := range ops {
		if _, err := s.wc.ExecContext(ctx, `INSERT INTO operations(operation_key, request_digest, response_json,
			response_sha256, first_event_seq, commit_seq, committed_at) VALUES(?, ?, ?, ?, ?, ?, ?)`,
			op.Key, op.RequestDigest, op.stored, op.sha, first, last, b.TS); err != nil {
			return 0, fmt.Errorf("insert operation %q: %w", op.Key, err)
		}
	}
	return first, nil
}

// Operation returns the idempotency record stored under key (INV-CR-1).
// Operation rows survive restart and are kept for Options.IdempotencyWindow
// (forever without one), so the store itself is the idempotency guard: a
// replayed request is looked up here. Response is the stored response in
// canonical form (compact, ASCII-escaped). A key whose record expired gives
// an error matching ErrIdempotencyExpired (an *ExpiredError) for one more
// window; after that it is unknown.
func (s *Store) Operation(key string) (Operation, bool, error) {
	var op Operation
	var resp []byte
	err := s.rdb.QueryRow(`SELECT request_digest, response_json, committed_at FROM operations WHERE operation_key = ?`, key).Scan(&op.RequestDigest, &resp, &op.CommittedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return Operation{}, false, s.expiredOperation(key)
	}
	if err != nil {
		return Operation{}, false, fmt.Errorf("journal: operation: %w", err)
	}
	if op.Response, err = decodeResponse(resp); err != nil {
		return Operation{}, false, fmt.Errorf("journal: operation %q: %w", key, err)
	}
	op.Key = key
	return op, true, nil
}

// LastSeq returns the highest seq ever assigned (0 for an empty journal).
// Compaction never lowers it.
func (s *Store) LastSeq() (int64, error) {
	var n int64
	err := s.rdb.QueryRow(`SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("journal: last seq: %w", err)
	}
	return n, nil
}

// scanBatch is how many rows one Scan query reads.
var scanBatch = 8192

// Scan calls fn for every event with seq > after, in seq order. payload is
// only valid during the call. An error from fn stops the scan and is
// returned as is. Rows appended while Scan runs may or may not be seen.
func (s *Store) Scan(after int64, fn func(seq int64, ts float64, kind string, payload []byte) error) error {
	kinds := make(map[string]string) // interned kind strings
	var kindBuf, payload sql.RawBytes
	for {
		rows, err := s.rdb.Query(`SELECT seq, ts, kind, payload FROM events WHERE seq > ? ORDER BY seq LIMIT ?`, after, scanBatch)
		if err != nil {
			return fmt.Errorf("journal: scan: %w", classify(err))
		}
		n := 0
		for rows.Next() {
			var seq int64
			var ts float64
			if err := rows.Scan(&seq, &ts, &kindBuf, &payload); err != nil {
				// Every column is NOT NULL: a row that does not scan is a
				// damaged page (SQLite reads a cut-off page as zeros).
				rows.Close()
				return fmt.Errorf("journal: scan: %w: the row after seq %d: %w", ErrDamaged, after, err)
			}
			kind, ok := kinds[string(kindBuf)]
			if !ok {
				kind = string(kindBuf)
				kinds[kind] = kind
			}
			n++
			after = seq
			if err := fn(seq, ts, kind, payload); err != nil {
				rows.Close()
				return err
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("journal: scan: %w", classify(err))
		}
		if n < scanBatch {
			return nil
		}
	}
}

// Row is one events row as a peer pulls it (PROTOCOL.md §6.3).
type Row struct {
	Seq     int64
	TS      float64
	Kind    string
	Payload []byte
}

// Page reads at most limit rows after seq, in seq order, for a peer
// pulling the log, and the first seq a puller may rely on: the row after
// a compaction's covered span (1 when never compacted). Below it rows were
// dropped selectively, so a cursor there is moved up to it and the kept
// audit rows are not served.
func (s *Store) Page(after int64, limit int) (rows []Row, start int64, err error) {
	through, err := s.compactedThrough()
	if err != nil {
		return nil, 0, err
	}
	start = through + 1
	after = max(after, through)
	q, err := s.rdb.Query(`SELECT seq, ts, kind, payload FROM events WHERE seq > ? ORDER BY seq LIMIT ?`, after, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("journal: page: %w", err)
	}
	defer q.Close()
	for q.Next() {
		var r Row
		if err := q.Scan(&r.Seq, &r.TS, &r.Kind, &r.Payload); err != nil {
			return nil, 0, fmt.Errorf("journal: page: %w", err)
		}
		rows = append(rows, r)
	}
	if err := q.Err(); err != nil {
		return nil, 0, fmt.Errorf("journal: page: %w", err)
	}
	return rows, start, nil
}

// ScanKinds calls fn for every row of the given kinds, in seq order (the
// kind index makes it cheap on a large log).
func (s *Store) ScanKinds(kinds []string, fn func(kind string, payload []byte) error) error {
	if len(kinds) == 0 {
		return nil
	}
	args := make([]any, len(kinds))
	for i, k := range kinds {
		args[i] = k
	}
	q, err := s.rdb.Query(`SELECT kind, payload FROM events WHERE kind IN (?`+strings.Repeat(",?", len(kinds)-1)+`) ORDER BY seq`, args...)
	if err != nil {
		return fmt.Errorf("journal: scan kinds: %w", err)
	}
	defer q.Close()
	for q.Next() {
		var kind string
		var payload []byte
		if err := q.Scan(&kind, &payload); err != nil {
			return fmt.Errorf("journal: scan kinds: %w", err)
		}
		if err := fn(kind, payload); err != nil {
			return err
		}
	}
	return q.Err()
}
