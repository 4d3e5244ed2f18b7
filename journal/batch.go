package journal

// Record is one event ready for the events table: the reference's kind and
// its JSON payload (a compact object), with its durability class.
type Record struct {
	Kind    string
	Payload []byte
	Durable bool // commit with synchronous=FULL (INV-JA-4)
	// Stamp, when set, runs inside the append transaction once the
	// record's seq is known, before its row is inserted: it returns the
	// payload to store (nil keeps Payload) and statements to run in the
	// same transaction right after the row (the receipt and mailbox
	// tables, docs/journal.md). Records of one Append get consecutive
	// seqs in order, so a record may name its neighbours' seqs (seq-1, …).
	// It must not block; on an error the whole batch rolls back.
	Stamp func(seq int64) (payload []byte, exec []Statement)
}

// Statement is one SQL statement an append runs in its transaction.
type Statement struct {
	SQL  string
	Args []any
}

// Operation is an idempotency record (INV-CR-1, INV-DG-2), committed in the
// same transaction as the events it produced.
type Operation struct {
	Key           string // sender + "\x00" + type + "\x00" + idem_key
	RequestDigest string // sha256 hex of the canonical request
	Response      []byte // the response frame the first request got
	// CommittedAt is when the first request committed (unix seconds), as
	// Operation reads it; Append takes the batch's TS instead.
	CommittedAt float64
}

// Batch is what the sequencer commits at once: every record of a group of
// commands, in order, in one transaction (group commit).
type Batch struct {
	TS         float64 // append wall clock, shared by every row of the batch
	Records    []Record
	Operations []Operation
}

// Durable reports whether the batch needs synchronous=FULL.
func (b *Batch) Durable() bool {
	if len(b.Operations) > 0 {
		return true
	}
	for _, r := range b.Records {
		if r.Durable {
			return true
		}
	}
	return false
}
