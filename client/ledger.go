package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// A Ledger is a writer's local record of the epochs the hub granted it:
// one JSON file, kept next to the checkout the writer edits. The write-path
// checks (synapse guard, the git pre-commit check) compare it with the
// hub's live claims, so a writer whose lease moved on (lapsed and
// re-granted, handed off, renewed by someone else under its name) is
// refused instead of writing on a stale grant. See docs/claims.md,
// "Write-path fencing".
//
// The ledger is opt-in for SDK users: Record after each grant (and pass
// KeepOptions.OnRenew so background renewals are recorded too), Forget
// after a release. Every method reads and rewrites the whole file under an
// advisory lock and replaces it by rename, so concurrent writers in one
// checkout (the CLI and an MCP server, say) do not lose each other's
// records and a reader never sees half a file.
type Ledger struct {
	Path string // the JSON file; its folder is created on first Record
}

// LeaseRecord is one grant a writer recorded.
type LeaseRecord struct {
	Hub        string   `json:"hub"` // the hub URI the grant came from (informative)
	Agent      string   `json:"agent"`
	TaskID     string   `json:"task_id"`
	Worktree   string   `json:"worktree"`
	Paths      []string `json:"paths"`           // [] and no globs or files = the whole worktree
	Globs      []string `json:"globs,omitempty"` // glob patterns beside the paths
	Files      []string `json:"files,omitempty"` // files, each covering itself alone
	Epoch      int64    `json:"epoch"`
	RecordedAt string   `json:"recorded_at"` // RFC 3339, this machine's clock
	// ReleaseOn is the claimant's wish that git release the claim for it
	// (synapse claim --release-on): the post-commit or post-merge hook of
	// synapse git-hook releases it once its files are all committed, or
	// merged. Empty: never; the claim is released by hand.
	ReleaseOn ReleaseTrigger `json:"release_on,omitempty"`
	// ReleaseDue, when set, is a git hook's word that the claim is due for
	// release (the evidence: "committed in abc123") while its owner's name
	// was online in another process, which could not be bound to release
	// it: that process (synapse mcp) releases it, fenced on Epoch, and
	// drops the record (MarkReleaseDue). DueFiles are the files git changed.
	ReleaseDue string   `json:"release_due,omitempty"`
	DueFiles   []string `json:"due_files,omitempty"`
}

// ReleaseTrigger is the git event that releases a recorded claim.
type ReleaseTrigger string

const (
	ReleaseOnCommit ReleaseTrigger = "commit" // its files all committed in this checkout
	ReleaseOnMerge  ReleaseTrigger = "merge"  // its files' commits merged into a checkout of the repository
)

// ErrReleaseTrigger is returned for a release trigger that is neither
// commit nor merge.
var ErrReleaseTrigger = errors.New("client: release trigger is neither commit nor merge")

// ParseReleaseTrigger reads "commit", "merge", or "off" (and "", no
// trigger).
func ParseReleaseTrigger(s string) (ReleaseTrigger, error) {
	switch t := ReleaseTrigger(s); t {
	case ReleaseOnCommit, ReleaseOnMerge:
		return t, nil
	case "", "off":
		return "", nil
	}
	return "", fmt.Errorf("%w: %q (say commit, merge or off)", ErrReleaseTrigger, s)
}

// Covers reports whether the recorded scope covers rel, by the hub's own
// rule (Claim.Covers).
func (r LeaseRecord) Covers(rel string) bool {
	return (&Claim{Paths: r.Paths, Globs: r.Globs, Files: r.Files}).Covers(rel)
}

// ledgerFile is the ledger's on-disk form.
type ledgerFile struct {
	Version int           `json:"version"`
	Leases  []LeaseRecord `json:"leases"`
}

// ErrLedgerVersion is returned for a ledger written by a newer Synapse.
var ErrLedgerVersion = errors.New("client: lease ledger of an unknown version")

// Records returns every record; a missing file is an empty ledger.
func (l *Ledger) Records() ([]LeaseRecord, error) {
	var recs []LeaseRecord
	err := l.locked(false, func(f *ledgerFile) bool { recs = f.Leases; return false })
	return recs, err
}

// Lookup returns agent's record of task (false if none).
func (l *Ledger) Lookup(agent, task string) (LeaseRecord, bool, error) {
	recs, err := l.Records()
	if err != nil {
		return LeaseRecord{}, false, err
	}
	for _, r := range recs {
		if r.Agent == agent && r.TaskID == task {
			return r, true, nil
		}
	}
	return LeaseRecord{}, false, nil
}

// Record stores cl's grant (its owner, scope and epoch) from hub,
// replacing the owner's earlier record of the same task; a renewal keeps
// the earlier record's ReleaseOn.
func (l *Ledger) Record(hub string, cl *Claim) error {
	return l.record(hub, cl, nil)
}

// RecordReleaseOn is Record that also sets the record's ReleaseOn (""
// clears it).
func (l *Ledger) RecordReleaseOn(hub string, cl *Claim, on ReleaseTrigger) error {
	if _, err := ParseReleaseTrigger(string(on)); err != nil {
		return err
	}
	return l.record(hub, cl, &on)
}

func (l *Ledger) record(hub string, cl *Claim, on *ReleaseTrigger) error {
	rec := LeaseRecord{Hub: hub, Agent: cl.Owner, TaskID: cl.TaskID, Worktree: cl.Worktree, Paths: slices.Clone(cl.Paths),
		Globs: slices.Clone(cl.Globs), Files: slices.Clone(cl.Files), Epoch: cl.Epoch, RecordedAt: time.Now().UTC().Format(time.RFC3339)}
	if rec.Paths == nil {
		rec.Paths = []string{}
	}
	return l.locked(true, func(f *ledgerFile) bool {
		f.Leases = slices.DeleteFunc(f.Leases, func(r LeaseRecord) bool {
			same := r.Agent == rec.Agent && r.TaskID == rec.TaskID
			if same {
				rec.ReleaseOn = r.ReleaseOn
			}
			return same
		})
		if on != nil {
			rec.ReleaseOn = *on
		}
		f.Leases = append(f.Leases, rec)
		return true
	})
}

// MarkReleaseDue marks agent's record of task at epoch due for release with
// evidence, for the process holding agent's name to release (ReleaseDue).
// It reports false when no such record is there (released, renewed under
// another epoch, or never recorded).
func (l *Ledger) MarkReleaseDue(agent, task string, epoch int64, evidence string, files []string) (bool, error) {
	marked := false
	err := l.locked(true, func(f *ledgerFile) bool {
		for i := range f.Leases {
			if r := &f.Leases[i]; r.Agent == agent && r.TaskID == task && r.Epoch == epoch {
				r.ReleaseDue, r.DueFiles, marked = evidence, slices.Clone(files), true
			}
		}
		return marked
	})
	return marked, err
}

// Forget drops agent's record of task (a release); no record is no error.
func (l *Ledger) Forget(agent, task string) error {
	return l.locked(true, func(f *ledgerFile) bool {
		n := len(f.Leases)
		f.Leases = slices.DeleteFunc(f.Leases, func(r LeaseRecord) bool { return r.Agent == agent && r.TaskID == task })
		return len(f.Leases) != n
	})
}

// locked reads the ledger under its lock, lets fn change it, and writes it
// back (temporary file, fsync, rename) when fn says so.
func (l *Ledger) locked(write bool, fn func(*ledgerFile) bool) error {
	if l == nil || l.Path == "" {
		return errors.New("client: lease ledger has no path")
	}
	// Readers need no lock: a writer replaces the file by rename.
	if write {
		if err := os.MkdirAll(filepath.Dir(l.Path), 0o755); err != nil {
			return fmt.Errorf("client: lease ledger: %w", err)
		}
		unlock, err := lockFile(l.Path + ".lock")
		if err != nil {
			return fmt.Errorf("client: lease ledger: lock: %w", err)
		}
		defer unlock()
	}
	f := ledgerFile{Version: 1}
	switch b, err := os.ReadFile(l.Path); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("client: lease ledger: %w", err)
	default:
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("client: lease ledger %s: %w", l.Path, err)
		}
		if f.Version != 1 {
			return fmt.Errorf("%w: %d in %s", ErrLedgerVersion, f.Version, l.Path)
		}
	}
	if !fn(&f) || !write {
		return nil
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("client: lease ledger: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(l.Path), filepath.Base(l.Path)+".tmp*")
	if err != nil {
		return fmt.Errorf("client: lease ledger: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("client: lease ledger: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("client: lease ledger: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("client: lease ledger: %w", err)
	}
	if err := os.Rename(tmp.Name(), l.Path); err != nil {
		return fmt.Errorf("client: lease ledger: %w", err)
	}
	return nil
}
