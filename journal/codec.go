package journal

import "github.com/synapse-hub/synapse/coord"

// Encode turns a coord event into its journal record, with the reference's
// kind and payload keys (PROTOCOL.md §4.2). Volatile events (expiry, waits)
// are not journalled: ok is false for them.
func Encode(ev coord.Event) (rec Record, ok bool) {
	panic("journal.Encode: not implemented yet")
}

// Decode turns a journal row back into the coord event it records. A kind
// the core does not replay (chat, mailbox, audit kinds other than
// claim_denial, unknown kinds) gives ok=false and no error; a row that
// cannot be a valid event gives an error and is quarantined by replay.
func Decode(kind string, payload []byte) (ev coord.Event, ok bool, err error) {
	panic("journal.Decode: not implemented yet")
}
