package journal

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Idempotency retention (docs/journal.md, Retention). An operation — the
// `operations` row and its `idempotency` event — is kept for
// Options.IdempotencyWindow after it committed, then expired by a
// background goroutine in small batches, each its own short transaction
// on the writer, so a commit waits at most one batch. An expired key leaves
// a tombstone (the first 16 bytes of its key's sha256 and when it
// committed) for one more window, so a retry that comes too late is told so
// (ErrIdempotencyExpired) instead of being applied a second time; after
// that the key is unknown.
//
// Who owns what: the expiry goroutine (started by Open, stopped by Close
// before the store closes) owns nothing but its timer; every write it does
// takes the store's writer mutex like Append.

// ErrIdempotencyExpired is what Operation returns (wrapped, with when the
// key committed) for a key whose record expired: the first request's
// response is no longer kept, and a retry must not be applied again.
var ErrIdempotencyExpired = errors.New("journal: idempotency record expired")

// Tunables of the expiry goroutine; variables so tests can shorten them.
var (
	// expireEvery is the longest the goroutine sleeps between two rounds;
	// a window shorter than 4 times it is looked at every window/4.
	expireEvery = 10 * time.Second
	// expireBatch is how many records one transaction expires: a commit
	// waits for at most one batch (about a millisecond).
	expireBatch = 128
	// expirePause separates two batches of one round, so commits queued
	// behind a batch go first.
	expirePause = 2 * time.Millisecond
)

// retentionSchema is schema 3: the index expiry reads operations by, and
// the tombstones of expired keys.
const retentionSchema = `
CREATE INDEX IF NOT EXISTS operations_committed_idx ON operations(committed_at);
CREATE TABLE IF NOT EXISTS idempotency_expired (key_sha BLOB PRIMARY KEY, committed_at REAL NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idempotency_expired_at_idx ON idempotency_expired(committed_at);
`

// keySHA is the tombstone's name for a key.
func keySHA(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:16]
}

// ExpiredError is ErrIdempotencyExpired with when the key first committed.
type ExpiredError struct {
	Key         string
	CommittedAt float64 // unix seconds
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("journal: idempotency record of the key committed at %s expired",
		time.Unix(0, int64(e.CommittedAt*1e9)).UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrIdempotencyExpired) true.
func (e *ExpiredError) Is(target error) bool { return target == ErrIdempotencyExpired }

// expiredOperation looks key up among the tombstones.
func (s *Store) expiredOperation(key string) error {
	var at float64
	err := s.rdb.QueryRow(`SELECT committed_at FROM idempotency_expired WHERE key_sha = ?`, keySHA(key)).Scan(&at)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("journal: operation: %w", classify(err))
	}
	return &ExpiredError{Key: key, CommittedAt: at}
}

// ExpireOperations expires at most limit operations that committed before
// now - Options.IdempotencyWindow, oldest first, in one transaction: their
// `operations` rows and `idempotency` events go, a tombstone of each
// stays; tombstones older than a second window go too. It returns how many
// operations it expired. With no window it does nothing. The background
// goroutine calls it; so may a test, with its own now.
func (s *Store) ExpireOperations(ctx context.Context, now float64, limit int) (int, error) {
	w := s.opts.IdempotencyWindow.Seconds()
	if w <= 0 || s.opts.ReadOnly {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("journal: expire operations: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	bg := context.WithoutCancel(ctx)
	n, err := s.expireLocked(bg, now-w, now-2*w, limit)
	if err != nil {
		return 0, fmt.Errorf("journal: expire operations: %w", classify(err))
	}
	return n, nil
}

func (s *Store) expireLocked(ctx context.Context, cutoff, forget float64, limit int) (int, error) {
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, err
	}
	n, err := s.expireIn(ctx, cutoff, forget, limit)
	if err == nil {
		_, err = s.wc.ExecContext(ctx, "COMMIT")
	}
	if err != nil {
		s.wc.ExecContext(ctx, "ROLLBACK")
		return 0, err
	}
	return n, nil
}

func (s *Store) expireIn(ctx context.Context, cutoff, forget float64, limit int) (int, error) {
	type op struct {
		key    string
		commit int64
		at     float64
	}
	rows, err := s.wc.QueryContext(ctx, `SELECT operation_key, commit_seq, committed_at FROM operations
		WHERE committed_at < ? ORDER BY committed_at LIMIT ?`, cutoff, limit)
	if err != nil {
		return 0, err
	}
	var ops []op
	for rows.Next() {
		var o op
		if err := rows.Scan(&o.key, &o.commit, &o.at); err != nil {
			rows.Close()
			return 0, err
		}
		ops = append(ops, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, o := range ops {
		if _, err := s.wc.ExecContext(ctx, `DELETE FROM events WHERE seq = ? AND kind = 'idempotency'`, o.commit); err != nil {
			return 0, err
		}
		if _, err := s.wc.ExecContext(ctx, `DELETE FROM operations WHERE operation_key = ?`, o.key); err != nil {
			return 0, err
		}
		if _, err := s.wc.ExecContext(ctx, `INSERT OR REPLACE INTO idempotency_expired(key_sha, committed_at) VALUES(?, ?)`, keySHA(o.key), o.at); err != nil {
			return 0, err
		}
	}
	_, err = s.wc.ExecContext(ctx, `DELETE FROM idempotency_expired WHERE key_sha IN
		(SELECT key_sha FROM idempotency_expired WHERE committed_at < ? ORDER BY committed_at LIMIT ?)`, forget, limit)
	return len(ops), err
}

// startExpiry starts the expiry goroutine when the store keeps a window:
// an idempotency window or a retention window (retain.go).
func (s *Store) startExpiry() {
	every := expireEvery
	for _, w := range []time.Duration{s.opts.IdempotencyWindow, s.opts.Retain.shortest()} {
		if w > 0 {
			every = min(every, w/4)
		}
	}
	if s.opts.ReadOnly || (s.opts.IdempotencyWindow <= 0 && s.opts.Retain.shortest() <= 0) {
		return
	}
	s.stopExpiry = make(chan struct{})
	s.expiryDone = make(chan struct{})
	go func() {
		defer close(s.expiryDone)
		if !s.awaitStart(s.stopExpiry) { // a restart may find a backlog: at once after the replay
			return
		}
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-s.stopExpiry:
				return
			case <-t.C:
			}
			s.expireRound()
			t.Reset(every)
		}
	}()
}

// expireRound expires batches until one comes back short, then drops what
// the retention windows no longer keep and gives back free pages
// (vacuum.go), pausing between batches; a failure is logged by nobody and
// retried next round (the rows stay, which keeps every promise).
func (s *Store) expireRound() {
	pause := func(d time.Duration) bool {
		select {
		case <-s.stopExpiry:
			return false
		case <-time.After(max(d, expirePause)):
			return true
		}
	}
	for limit := expireBatch; s.opts.IdempotencyWindow > 0; {
		now := float64(time.Now().UnixNano()) / 1e9
		t0 := time.Now()
		n, err := s.ExpireOperations(context.Background(), now, limit)
		s.expired.Add(int64(n))
		if err != nil || n < limit {
			break
		}
		var wait time.Duration
		if limit, wait = adapt(limit, expireBatch, time.Since(t0)); !pause(wait) {
			return
		}
	}
	for s.opts.Retain.shortest() > 0 {
		now := float64(time.Now().UnixNano()) / 1e9
		st, err := s.RetainRows(context.Background(), now, expireBatch)
		s.retained.Add(st.total())
		if err != nil || st.total() == 0 {
			break
		}
		if !pause(expirePause) {
			return
		}
	}
	s.vacuumRound(func() bool { return pause(expirePause) })
}

// Kept says what the journal keeps and why, for `synapse journal stats`.
type Kept struct {
	Operations int64 // idempotency records answering retries
	Tombstones int64 // expired keys still refused as idempotency_expired
	// Window is the idempotency window the last hub with one kept (meta
	// idempotency_window_seconds); not WindowKnown: kept forever.
	Window      time.Duration
	WindowKnown bool
	// ReplayRows is what a restart would replay now: the rows after the
	// newest snapshot (every row without one).
	ReplayRows int64
	// Retain is the retention the last hub with one kept (meta retain);
	// not RetainKnown: every chat, receipt and audit row is kept.
	Retain      Retain `json:"retain"`
	RetainKnown bool   `json:"retain_known"`
	// What those windows keep now: chat rows, the directed ones among
	// them still waiting for an identity's ack or dead-lettered, receipt
	// rows, and audit rows.
	Chats, DirectedWaiting, Receipts, Audit int64
	// Pages is the file's page accounting (free pages are reused, and
	// given back beyond a slack when AutoVacuum is incremental).
	Pages PageStats
}

// Kept reads what the journal keeps.
func (s *Store) Kept() (Kept, error) {
	var k Kept
	err := s.rdb.QueryRow(`SELECT (SELECT count(*) FROM operations), (SELECT count(*) FROM idempotency_expired)`).Scan(&k.Operations, &k.Tombstones)
	if err == nil {
		var w float64
		switch err = s.rdb.QueryRow(`SELECT CAST(value AS REAL) FROM meta WHERE key = 'idempotency_window_seconds'`).Scan(&w); {
		case errors.Is(err, sql.ErrNoRows):
			err = nil
		case err == nil:
			k.Window, k.WindowKnown = time.Duration(w*float64(time.Second)), true
		}
	}
	if err == nil {
		var from int64
		if err = s.rdb.QueryRow(`SELECT COALESCE(MAX(seq), 0) FROM snapshots`).Scan(&from); err == nil {
			err = s.rdb.QueryRow(`SELECT count(*) FROM events WHERE seq > ?`, from).Scan(&k.ReplayRows)
		}
	}
	if err == nil {
		var spec string
		switch err = s.rdb.QueryRow(`SELECT value FROM meta WHERE key = 'retain'`).Scan(&spec); {
		case errors.Is(err, sql.ErrNoRows):
			err = nil
		case err == nil:
			k.Retain, err = ParseRetain(spec, Retain{})
			k.RetainKnown = err == nil
		}
	}
	if err == nil {
		err = s.rdb.QueryRow(`SELECT (SELECT count(*) FROM events WHERE kind = 'chat'), (SELECT count(*) FROM delivery_receipts),
			(SELECT count(*) FROM events WHERE kind IN `+kindList(auditKinds)+`)`).Scan(&k.Chats, &k.Receipts, &k.Audit)
	}
	if err == nil {
		k.DirectedWaiting, err = s.countWaiting()
	}
	if err == nil {
		k.Pages, err = s.Pages()
	}
	if err != nil {
		return Kept{}, fmt.Errorf("journal: kept: %w", classify(err))
	}
	return k, nil
}

// countWaiting counts the directed chats that wait for someone (Waiting).
func (s *Store) countWaiting() (int64, error) {
	marks, err := s.Watermarks()
	if err != nil {
		return 0, err
	}
	wm := func(id string) (int64, error) { return marks[id], nil }
	var n int64
	err = s.ScanDirected(0, func(d DirectedChat) error {
		w, err := Waiting(d.Seq, d.Sender, d.Target, d.Dead, wm)
		if w {
			n++
		}
		return err
	})
	return n, err
}

// IdempotencyWindow is how long an idempotency record is kept after it
// committed (Options.IdempotencyWindow; 0: forever).
func (s *Store) IdempotencyWindow() time.Duration { return s.opts.IdempotencyWindow }

// ExpiredOperations is how many operations this store's expiry removed.
func (s *Store) ExpiredOperations() int64 { return s.expired.Load() }

// halt stops the expiry goroutine and waits for it; Close calls it before
// taking the writer mutex, which a round holds.
func (s *Store) halt() {
	if s.stopExpiry == nil {
		return
	}
	s.haltOnce.Do(func() { close(s.stopExpiry) })
	<-s.expiryDone
}
