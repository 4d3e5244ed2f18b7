package wire

// Interned strings for the parser: the field names and values the hot verbs
// (registration heartbeat, claim and renewal, release, task_update, chat,
// ack) carry in nearly every frame. Decoding them hands out these constants
// instead of allocating a copy per frame. (A switch on string(b) neither
// allocates nor hashes; the compiler turns it into a search on length and
// content.)

// fieldName returns b as a string, a constant when it is a common field name.
func fieldName(b []byte) string {
	switch string(b) {
	// the envelope (PROTOCOL.md §1.3)
	case "sender":
		return "sender"
	case "target":
		return "target"
	case "type":
		return "type"
	case "payload":
		return "payload"
	case "timestamp":
		return "timestamp"
	case "token":
		return "token"
	case "idem_key":
		return "idem_key"
	case "auth":
		return "auth"
	case "signature":
		return "signature"
	case "channel":
		return "channel"
	// registration heartbeat
	case "mailbox":
		return "mailbox"
	case "since_seq":
		return "since_seq"
	case "roles":
		return "roles"
	case "name":
		return "name"
	case "model":
		return "model"
	case "capacity":
		return "capacity"
	// the claim family and task_update
	case "task_id":
		return "task_id"
	case "paths":
		return "paths"
	case "worktree":
		return "worktree"
	case "ttl_seconds":
		return "ttl_seconds"
	case "epoch":
		return "epoch"
	case "expected_version":
		return "expected_version"
	case "takeover":
		return "takeover"
	case "lease":
		return "lease"
	case "note":
		return "note"
	case "status":
		return "status"
	case "checkpoint":
		return "checkpoint"
	case "data_ref":
		return "data_ref"
	case "path_identity":
		return "path_identity"
	case "git":
		return "git"
	case "evidence":
		return "evidence"
	case "to_agent":
		return "to_agent"
	// chat and ack
	case "client_msg_id":
		return "client_msg_id"
	case "receipt_requested":
		return "receipt_requested"
	case "seq":
		return "seq"
	case "text":
		return "text"
	}
	return string(b)
}

// commonValue returns b boxed when it is a common string value: boxing a
// constant allocates nothing, boxing a fresh string does.
func commonValue(b []byte) (any, bool) {
	switch string(b) {
	case "System":
		return "System", true
	case "all":
		return "all", true
	case "online":
		return "online", true
	case "heartbeat":
		return "heartbeat", true
	case "claim":
		return "claim", true
	case "release":
		return "release", true
	case "task_update":
		return "task_update", true
	case "chat":
		return "chat", true
	case "ack":
		return "ack", true
	case "checkpoint":
		return "checkpoint", true
	case "handoff":
		return "handoff", true
	}
	return nil, false
}
