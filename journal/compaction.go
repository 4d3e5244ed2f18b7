package journal

import (
	"context"
	"fmt"
	"time"
)

// Online compaction (docs/journal.md, Compaction). A snapshot covers the
// claim-family, board and resource rows at or below its seq: replay starts
// from the newest sound snapshot and never reads them again, and falls back
// at most to the oldest snapshot kept. With Options.CompactBatch set, a
// background goroutine drops the rows the oldest sound snapshot covers,
// after every snapshot written and once the hub's replay ends (a backlog
// from before), in batches of CompactBatch rows and more while batches stay
// within compactBudget, each its own short transaction on the writer, so a
// commit waits for at most one batch. Audit rows (denials,
// expiries, federation records), chats, receipts and idempotency records
// are not touched here (idempotency records expire by their own window,
// retention.go). SQLite reuses the pages freed, so the file stops growing
// once the rows a workload adds are balanced by those dropped.
//
// Crash safety: each batch commits on its own and first raises
// compacted_through to the floor, so a SIGKILL at any point leaves a file
// whose replay from the newest sound snapshot is whole, and a replay that
// would have to start below the floor (every newer snapshot damaged) says
// it is incomplete (Recovered.Incomplete) instead of rebuilding less.
//
// Who owns what: the goroutine (started by Open, stopped by Close before
// the store closes) owns its cursor; every write takes the writer mutex
// like Append.

// compactKinds are the rows a snapshot covers (the state it images).
const compactKinds = `('claim', 'task_update', 'checkpoint', 'handoff', 'release', 'resource', 'ledger_task', 'ledger_progress')`

// DefaultCompactBatch is how many rows one compaction transaction drops
// when a hub compacts online (`synapse hub --journal-compact-batch`).
const DefaultCompactBatch = 32

// Tunables; variables so tests can shorten them.
var (
	// compactPause is the least pause between two batches of one round,
	// so commits queued behind a batch go first; a batch that took longer
	// is followed by a pause as long as it took, so compaction holds the
	// writer at most half the time.
	compactPause = time.Millisecond
	// compactBudget is how long one batch should hold the writer: a round
	// doubles its batch (from CompactBatch up to maxCompactBatch) while a
	// batch takes under half of it, and halves it when one takes longer.
	compactBudget = time.Millisecond
	// compactStartDelay is the longest a store waits after Open for its
	// first round of compaction and expiry (a backlog from before): it
	// starts as soon as the hub's replay ends (Replay), and after this on
	// a store that is never replayed.
	compactStartDelay = 10 * time.Second
)

// maxCompactBatch bounds a batch however fast batches go.
const maxCompactBatch = 1024

// startCompaction starts the compaction goroutine when the store compacts
// online; a first round runs once the replay ends (or compactStartDelay
// after Open).
func (s *Store) startCompaction() {
	if s.opts.CompactBatch <= 0 || s.opts.ReadOnly {
		return
	}
	s.compactKick = make(chan struct{}, 1)
	s.stopCompact = make(chan struct{})
	s.compactDone = make(chan struct{})
	go func() {
		defer close(s.compactDone)
		if !s.awaitStart(s.stopCompact) {
			return
		}
		for {
			s.compactRound()
			select {
			case <-s.stopCompact:
				return
			case <-s.compactKick:
			}
		}
	}()
}

// awaitStart waits for the end of the store's replay or compactStartDelay,
// whichever comes first; false when stop closes first.
func (s *Store) awaitStart(stop chan struct{}) bool {
	first := time.NewTimer(compactStartDelay)
	defer first.Stop()
	select {
	case <-stop:
		return false
	case <-s.replayEnd:
	case <-first.C:
	}
	return true
}

// endReplay tells the background goroutines the hub's replay is over.
func (s *Store) endReplay() { s.replayEndOnce.Do(func() { close(s.replayEnd) }) }

// adapt is the next batch size after a batch of limit rows took took, and
// the pause before it.
func adapt(limit, least int, took time.Duration) (int, time.Duration) {
	switch {
	case took < compactBudget/2 && limit < maxCompactBatch:
		limit = min(2*limit, maxCompactBatch)
	case took > compactBudget && limit > least:
		limit = max(limit/2, least)
	}
	return limit, max(compactPause, took)
}

// kickCompaction asks for a round (after a snapshot); it never blocks.
func (s *Store) kickCompaction() {
	if s.compactKick == nil {
		return
	}
	select {
	case s.compactKick <- struct{}{}:
	default: // a round is already asked for
	}
}

// compactRound drops covered rows batch by batch until none is left below
// the floor, each batch sized to compactBudget (adapt); a failure ends the
// round (the rows stay, which keeps every promise) and the next snapshot
// tries again.
func (s *Store) compactRound() {
	floor, err := s.compactionFloor()
	if err != nil || floor <= 0 {
		return
	}
	limit := s.opts.CompactBatch
	for {
		t0 := time.Now()
		n, err := s.CompactBatch(context.Background(), floor, limit)
		s.compacted.Add(n)
		if err != nil || n < int64(limit) {
			return
		}
		var pause time.Duration
		limit, pause = adapt(limit, s.opts.CompactBatch, time.Since(t0))
		select {
		case <-s.stopCompact:
			return
		case <-time.After(pause):
		}
	}
}

// compactionFloor is the seq of the oldest sound snapshot: the rows at or
// below it that it images may go (0: none).
func (s *Store) compactionFloor() (int64, error) {
	infos, _, err := s.snapshots()
	if err != nil {
		return 0, err
	}
	var floor int64
	for _, in := range infos {
		if in.Err == "" {
			floor = in.Seq // the list is newest first: ends at the oldest sound one
		}
	}
	return floor, nil
}

// CompactBatch drops at most limit of the rows at or below floor that a
// snapshot covers, oldest first, in one transaction that also raises
// compacted_through to floor. It returns how many rows went. The caller
// makes sure a sound snapshot at floor exists (compactionFloor).
func (s *Store) CompactBatch(ctx context.Context, floor int64, limit int) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	bg := context.WithoutCancel(ctx)
	if _, err := s.wc.ExecContext(bg, "BEGIN IMMEDIATE"); err != nil {
		return 0, fmt.Errorf("journal: compact: %w", classify(err))
	}
	_, err := s.wc.ExecContext(bg, `INSERT INTO meta(key, value) VALUES('compacted_through', ?)
		ON CONFLICT(key) DO UPDATE SET value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))`, floor)
	var n, upTo int64
	if err == nil {
		// From the cursor: the rows of these kinds at or below it are gone
		// already, so no batch scans the rows kept below it again.
		n, upTo, err = s.deleteCovered(bg, floor, limit)
	}
	if err == nil {
		_, err = s.wc.ExecContext(bg, "COMMIT")
	}
	if err != nil {
		s.wc.ExecContext(bg, "ROLLBACK")
		return 0, fmt.Errorf("journal: compact: %w", classify(err))
	}
	s.compactFrom = max(s.compactFrom, upTo)
	if n < int64(limit) {
		s.compactFrom = max(s.compactFrom, floor) // nothing of these kinds is left at or below it
	}
	return n, nil
}

// deleteCovered deletes the batch and returns how many rows went and the
// highest seq among them; inside CompactBatch's transaction.
func (s *Store) deleteCovered(ctx context.Context, floor int64, limit int) (n, upTo int64, err error) {
	rows, err := s.wc.QueryContext(ctx, `DELETE FROM events WHERE seq IN (SELECT seq FROM events
		WHERE seq > ? AND seq <= ? AND kind IN `+compactKinds+` ORDER BY seq LIMIT ?) RETURNING seq`, s.compactFrom, floor, limit)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return 0, 0, err
		}
		n, upTo = n+1, max(upTo, seq)
	}
	return n, upTo, rows.Err()
}

// CompactedRows is how many rows this store's online compaction dropped.
func (s *Store) CompactedRows() int64 { return s.compacted.Load() }

// haltCompaction stops the compaction goroutine and waits for it; Close
// calls it before taking the writer mutex, which a batch holds.
func (s *Store) haltCompaction() {
	if s.stopCompact == nil {
		return
	}
	s.haltCompactOnce.Do(func() { close(s.stopCompact) })
	<-s.compactDone
}
