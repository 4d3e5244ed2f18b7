package hub

import (
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

// journalName is how the operator finds the hub's journal: its path.
func (h *Hub) journalName() string {
	if h.cfg.Journal != nil {
		return h.cfg.Journal.Path()
	}
	return "the journal"
}

// journalRefusal is the error frame's text for a mutation refused because
// the journal cannot be written: what was refused, why, and that nothing
// of it was applied.
func journalRefusal(db, what string, err error) string {
	cause, todo := journal.Advice(db, err)
	return fmt.Sprintf("%s was refused: %s, so nothing was applied and no change is accepted until the hub's operator acts (%s). Reads still work.", what, cause, todo)
}

// journalHealth is /health's degraded_reason for a journal that cannot be
// written.
func journalHealth(db string, err error) string {
	cause, todo := journal.Advice(db, err)
	return fmt.Sprintf("%s: mutations are refused, reads work. To recover: %s. (%v)", cause, todo, err)
}
