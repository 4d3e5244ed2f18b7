package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Disk faults an Open, Append or Scan error may carry (errors.Is), so the hub
// can tell its operator what to do (docs/journal.md, "Disk faults").
var (
	// ErrDiskFull: the file system is full (SQLITE_FULL, ENOSPC), or the
	// file reached Options.MaxBytes. Nothing of the failed batch was
	// written; free space and restart.
	ErrDiskFull = errors.New("journal: no space left for the journal (disk full or its size cap reached)")
	// ErrReadOnly: the file, its folder or its file system cannot be
	// written (SQLITE_READONLY, EROFS, EACCES, EPERM).
	ErrReadOnly = errors.New("journal: the journal cannot be written (read-only file, folder or file system)")
	// ErrDamaged: the file is not whole (cut short, as by a torn copy or a
	// bad disk) or SQLite found it malformed (SQLITE_CORRUPT, SQLITE_NOTADB).
	ErrDamaged = errors.New("journal: the journal file is damaged")
)

// classify wraps err with the disk fault it shows, if any.
func classify(err error) error {
	if err == nil || errors.Is(err, ErrDiskFull) || errors.Is(err, ErrReadOnly) || errors.Is(err, ErrDamaged) {
		return err
	}
	var fault error
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_FULL:
			fault = ErrDiskFull
		case sqlite3.SQLITE_READONLY:
			fault = ErrReadOnly
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			fault = ErrDamaged
		}
	}
	switch {
	case fault != nil:
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		fault = ErrDiskFull
	case errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		fault = ErrReadOnly
	default:
		return err
	}
	return fmt.Errorf("%w: %w", fault, err)
}

// checkWhole refuses a database file that is shorter than it says it is:
// a size that is not a whole number of pages, or fewer pages than the
// header counts. SQLite itself would read the missing bytes as zeros and
// may serve what is left without an error (a cut inside the last page
// went unnoticed by both SQLite and replay), so a torn copy must be caught
// before the file is used. With WAL frames beside the file the check is
// skipped: a crash during a checkpoint legitimately leaves the header ahead
// of the file, and the WAL still holds those pages.
func checkWhole(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return err // a new, empty file
	}
	if wal, err := os.Stat(path + "-wal"); err == nil && wal.Size() > walHeaderSize {
		return nil
	}
	if hot, err := os.Stat(path + "-journal"); err == nil && hot.Size() > 0 {
		return nil // a rollback journal (the reference's files) restores the file on open
	}
	var h [100]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return fmt.Errorf("%w: %d bytes, shorter than SQLite's 100-byte header", ErrDamaged, fi.Size())
	}
	if string(h[:16]) != "SQLite format 3\x00" {
		return nil // not SQLite: Open's own error says so
	}
	pageSize := int64(binary.BigEndian.Uint16(h[16:18]))
	if pageSize == 1 {
		pageSize = 65536
	}
	if pageSize < 512 {
		return fmt.Errorf("%w: header gives page size %d", ErrDamaged, pageSize)
	}
	if fi.Size()%pageSize != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of %d-byte pages (cut short)", ErrDamaged, fi.Size(), pageSize)
	}
	pages := int64(binary.BigEndian.Uint32(h[28:32]))
	counter, validFor := binary.BigEndian.Uint32(h[24:28]), binary.BigEndian.Uint32(h[92:96])
	if counter == validFor && pages > 0 && fi.Size() < pages*pageSize {
		return fmt.Errorf("%w: %d bytes, the header counts %d pages of %d bytes (cut short)", ErrDamaged, fi.Size(), pages, pageSize)
	}
	return nil
}

// walHeaderSize is the size of a WAL file's header: a WAL no longer than
// it holds no frames.
const walHeaderSize = 32

// probeWritable wraps an append's I/O error with ErrReadOnly when the
// journal's files can no longer be opened for writing: SQLite reports a
// write refused on an open file (chattr +i, a file system forced
// read-only) only as SQLITE_IOERR, without the reason.
func (s *Store) probeWritable(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_IOERR {
		return err
	}
	for _, p := range []string{s.path, s.path + "-wal"} {
		f, oerr := os.OpenFile(p, os.O_WRONLY, 0)
		if oerr == nil {
			f.Close()
			continue
		}
		if errors.Is(classify(oerr), ErrReadOnly) {
			return fmt.Errorf("%w: %w (%v)", ErrReadOnly, err, oerr)
		}
	}
	return err
}

// probeFolder wraps Open's SQLITE_CANTOPEN with ErrReadOnly when the
// file's folder refuses a new file: SQLite could not create the -wal or
// -shm beside the database, and says only that it cannot open it.
func probeFolder(path string, err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_CANTOPEN {
		return err
	}
	f, perr := os.CreateTemp(filepath.Dir(path), ".synapse-probe-*")
	if perr == nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if errors.Is(classify(perr), ErrReadOnly) {
		return fmt.Errorf("%w: %w (the folder: %v)", ErrReadOnly, err, perr)
	}
	return err
}
