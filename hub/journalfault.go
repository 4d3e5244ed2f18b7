package hub

import (
	"errors"
	"fmt"

	"github.com/synapse-hub/synapse/journal"
)

// journalErr is why the hub cannot write its journal, or nil: the
// sequencer's failed append (it refuses mutations from then on), else the
// journal that could only be opened read-only at startup
// (Config.JournalFault). Either way nothing more is written until the
// operator fixes the disk and restarts the hub (docs/journal.md, "Disk
// faults").
func (h *Hub) journalErr() error {
	if err := h.seq.Err(); err != nil {
		return err
	}
	return h.cfg.JournalFault
}

// journalFault says, for people, what is wrong with the journal behind err
// and what the hub's operator should do about it.
func (h *Hub) journalFault(err error) (cause, todo string) {
	db := "the journal"
	if h.cfg.Journal != nil {
		db = h.cfg.Journal.Path()
	}
	switch {
	case errors.Is(err, journal.ErrDiskFull):
		return "the hub's journal is out of space (its disk is full, or --journal-max-kb was reached)",
			"free space on the disk of " + db + " (or raise --journal-max-kb), then restart the hub"
	case errors.Is(err, journal.ErrReadOnly):
		return "the hub's journal cannot be written (read-only file, folder or file system)",
			"make " + db + " and its folder writable by the hub (permissions, a read-write mount), then restart the hub"
	case errors.Is(err, journal.ErrDamaged):
		return "the hub's journal file is damaged",
			"stop the hub and run 'synapse journal check " + db + "'"
	}
	return "the hub's journal failed", "see the hub's log, then restart the hub"
}

// journalRefusal is the error frame's text for a mutation refused because
// the journal cannot be written: what was refused, why, and that nothing
// of it was applied.
func (h *Hub) journalRefusal(what string, err error) string {
	cause, todo := h.journalFault(err)
	return fmt.Sprintf("%s was refused: %s, so nothing was applied and no change is accepted until the hub's operator acts (%s). Reads still work.", what, cause, todo)
}

// journalHealth is /health's degraded_reason for a journal that cannot be
// written.
func (h *Hub) journalHealth(err error) string {
	cause, todo := h.journalFault(err)
	return fmt.Sprintf("%s: mutations are refused, reads work. To recover: %s. (%v)", cause, todo, err)
}
