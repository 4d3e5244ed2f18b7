package journal

import (
	"errors"
	"fmt"
	"time"

	"github.com/synapse-hub/synapse/coord"
)

// RecoverOptions tune Recover.
type RecoverOptions struct {
	Open   Options      // how the file is opened (HubID for a new journal, MaxBytes)
	Limits coord.Limits // the caps replay re-applies (INV-RR-2)
	Now    float64      // unix seconds: replay ends with Tick(Now) (INV-RR-1)
	Replay ReplayOptions
}

// Recovery is what a hub starts from: its journal, open, and the state
// replayed from it.
type Recovery struct {
	// Store is the journal, open; the caller closes it.
	Store *Store
	// Fault, when not nil, is why Store could only be opened read-only (it
	// wraps ErrReadOnly): the hub serves reads and refuses every mutation
	// until it restarts on a writable journal (hub.Config.JournalFault).
	Fault error
	// Recovered is the replayed state.
	*Recovered
	// HubID is the hub identity the journal keeps across restarts.
	HubID string
	// DegradedReason, when not "", is why the state may not be the journal's
	// full truth (hub.Config.Degraded): rows were quarantined or compacted
	// history is missing.
	DegradedReason string
	// Took is how long opening and replaying took.
	Took time.Duration
}

// ReplayError is a failure to read the journal while replaying it, after
// it opened (a damaged file is ErrDamaged whether found opening or
// replaying).
type ReplayError struct{ Err error }

func (e *ReplayError) Error() string { return "replay: " + e.Err.Error() }
func (e *ReplayError) Unwrap() error { return e.Err }

// Recover opens the journal at path for a hub and replays it. When the
// file, its folder or its file system is read-only it opens it read-only
// instead and says why in Fault, so the hub serves reads rather than not
// starting at all; on a read-only file system after a clean stop there is
// no -shm and none can be made, so it is then opened immutable (Open
// refuses that when a WAL holds commits). On error nothing is left open.
func Recover(path string, o RecoverOptions) (*Recovery, error) {
	start := time.Now()
	store, fault, err := openForHub(path, o.Open)
	if err != nil {
		return nil, err
	}
	rec, err := Replay(store, o.Limits, o.Now, o.Replay)
	if err != nil {
		store.Close()
		if errors.Is(err, ErrDamaged) {
			return nil, err
		}
		return nil, &ReplayError{Err: err}
	}
	r := &Recovery{Store: store, Fault: fault, Recovered: rec, HubID: store.HubID()}
	if rec.Degraded() {
		r.DegradedReason = fmt.Sprintf("%d journal rows could not be replayed (incomplete history: %v)", rec.QuarantinedCount, rec.Incomplete)
	}
	r.Took = time.Since(start)
	return r, nil
}

// openForHub opens the journal for writing, or read-only (then immutable)
// when it cannot be written, returning why as fault.
func openForHub(path string, opts Options) (store *Store, fault, err error) {
	store, err = Open(path, opts)
	if !errors.Is(err, ErrReadOnly) {
		return store, nil, err
	}
	ro := opts
	ro.ReadOnly = true
	store, roErr := Open(path, ro)
	if roErr != nil {
		ro.Immutable = true
		store, roErr = Open(path, ro)
	}
	if roErr != nil {
		return nil, nil, err // the first error says why it cannot be written
	}
	return store, err, nil
}
