package journal

import "errors"

// Advice says, for people, what is wrong with the journal db behind err
// (a failed append or open: ErrDiskFull, ErrReadOnly, ErrDamaged) and what
// the hub's operator should do about it.
func Advice(db string, err error) (cause, todo string) {
	switch {
	case errors.Is(err, ErrDiskFull):
		return "the hub's journal is out of space (its disk is full, or --journal-max-kb was reached)",
			"free space on the disk of " + db + " (or raise --journal-max-kb), then restart the hub"
	case errors.Is(err, ErrReadOnly):
		return "the hub's journal cannot be written (read-only file, folder or file system)",
			"make " + db + " and its folder writable by the hub (permissions, a read-write mount), then restart the hub"
	case errors.Is(err, ErrDamaged):
		return "the hub's journal file is damaged",
			"stop the hub and run 'synapse journal check " + db + "'"
	}
	return "the hub's journal failed", "see the hub's log, then restart the hub"
}
