package journal

import (
	"context"
	"fmt"
)

// Free pages (docs/journal.md, Free pages). SQLite reuses the pages that
// expiry, retention and compaction free, so a file stops growing once its
// rows are balanced; with auto_vacuum=INCREMENTAL (every file this package
// creates, and one `synapse journal compact --vacuum` rewrote) it also
// shrinks: after each retention round the expiry goroutine gives back the
// free pages beyond a slack, vacuumStep pages per transaction on the
// writer, so a commit waits for at most one step. A file without it (an
// older one, or the reference's) keeps its size until it is vacuumed with
// the hub stopped.

// Tunables; variables so tests can shorten them.
var (
	// vacuumStep is how many pages one incremental_vacuum gives back.
	vacuumStep = 256
	// vacuumSlackPages is how many free pages are always kept for reuse
	// (at 4 KiB pages, 8 MiB), besides an eighth of the file.
	vacuumSlackPages int64 = 2048
)

// incrementalVacuum is PRAGMA auto_vacuum's value for INCREMENTAL.
const incrementalVacuum = 2

// PageStats is the file's page accounting.
type PageStats struct {
	PageSize, Pages, Free int64
	AutoVacuum            int64 // 0 none, 1 full, 2 incremental
}

// Pages reads the file's page accounting.
func (s *Store) Pages() (PageStats, error) {
	var p PageStats
	err := s.rdb.QueryRow(`SELECT (SELECT page_size FROM pragma_page_size), (SELECT page_count FROM pragma_page_count),
		(SELECT freelist_count FROM pragma_freelist_count), (SELECT auto_vacuum FROM pragma_auto_vacuum)`).
		Scan(&p.PageSize, &p.Pages, &p.Free, &p.AutoVacuum)
	if err != nil {
		return p, fmt.Errorf("journal: pages: %w", classify(err))
	}
	return p, nil
}

// slack is how many free pages a file of pages keeps for reuse.
func slack(pages int64) int64 { return max(vacuumSlackPages, pages/8) }

// VacuumStep gives back at most vacuumStep free pages beyond the slack, in
// one transaction, and returns how many went (0: nothing to give back, or
// a file without incremental auto_vacuum).
func (s *Store) VacuumStep(ctx context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.opts.ReadOnly {
		return 0, nil
	}
	bg := context.WithoutCancel(ctx)
	var mode, pages, free int64
	if err := s.wc.QueryRowContext(bg, `SELECT (SELECT auto_vacuum FROM pragma_auto_vacuum), (SELECT page_count FROM pragma_page_count),
		(SELECT freelist_count FROM pragma_freelist_count)`).Scan(&mode, &pages, &free); err != nil {
		return 0, fmt.Errorf("journal: vacuum step: %w", classify(err))
	}
	excess := free - slack(pages)
	if mode != incrementalVacuum || excess <= 0 {
		return 0, nil
	}
	n := min(excess, int64(vacuumStep))
	if _, err := s.wc.ExecContext(bg, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", n)); err != nil {
		return 0, fmt.Errorf("journal: vacuum step: %w", classify(err))
	}
	return n, nil
}

// vacuumRound steps until nothing is left to give back; pause returns
// false when the store is stopping.
func (s *Store) vacuumRound(pause func() bool) {
	for {
		n, err := s.VacuumStep(context.Background())
		s.vacuumed.Add(n)
		if err != nil || n == 0 || !pause() {
			return
		}
	}
}

// VacuumedPages is how many pages this store's rounds gave back.
func (s *Store) VacuumedPages() int64 { return s.vacuumed.Load() }
