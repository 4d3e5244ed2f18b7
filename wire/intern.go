package wire

// Interned strings for the parser: the field names and values the hot verbs
// (registration heartbeat, claim and renewal, release, task_update, chat,
// ack) carry in nearly every frame. Decoding them hands out these shared
// strings instead of allocating a copy per frame.

var fieldNames = interned(
	// the envelope (PROTOCOL.md §1.3)
	"sender", "target", "type", "payload", "timestamp", "token", "idem_key", "auth", "signature", "channel",
	// registration heartbeat
	"mailbox", "since_seq", "roles", "name", "model", "capacity",
	// the claim family and task_update
	"task_id", "paths", "worktree", "ttl_seconds", "epoch", "expected_version", "takeover", "lease", "note",
	"status", "checkpoint", "data_ref", "path_identity", "git", "evidence", "to_agent",
	// chat and ack
	"client_msg_id", "receipt_requested", "seq", "text",
)

// commonValues are boxed once: turning a string into an any allocates, a
// stored interface does not.
var commonValues = func() map[string]any {
	m := make(map[string]any)
	for s := range interned(
		"System", "all", "online",
		"heartbeat", "claim", "release", "task_update", "chat", "ack", "checkpoint", "handoff",
	) {
		m[s] = s
	}
	return m
}()

func interned(names ...string) map[string]string {
	m := make(map[string]string, len(names))
	for _, s := range names {
		m[s] = s
	}
	return m
}

// fieldName returns b as a string, shared when it is a common field name.
func fieldName(b []byte) string {
	if s, ok := fieldNames[string(b)]; ok {
		return s
	}
	return string(b)
}

// commonValue returns b boxed, shared, when it is a common string value.
func commonValue(b []byte) (any, bool) {
	v, ok := commonValues[string(b)]
	return v, ok
}
