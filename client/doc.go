// Package client is the Go SDK of a Synapse hub: an agent's connection
// speaking the SYNAPSE CHANNEL protocol v2 over WebSocket, with typed calls
// for claims, messages, queries and the task board.
//
//	c, err := client.Dial(ctx, client.Options{Name: "proj/alpha"})
//	...
//	cl, err := c.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src/"}})
//	var ref *client.Refused
//	if errors.As(err, &ref) { // LEASE_LIVE, SCOPE_CONFLICT, ...
//		fmt.Println(ref.Message, "held by", ref.Holder)
//	}
//
// # Connection
//
// Dial connects (Options.URI, default $SYNAPSE_URI or ws://127.0.0.1:8876),
// registers the name with the reference clients' heartbeat (token, roles and
// its fan-out: by default only the broadcasts that name it, Options.Fanout),
// sends a ping as the registration's ack, and returns once the hub has bound
// the name.
// The client then sends a keepalive heartbeat every 20 s. When the socket
// drops, calls in flight fail with ErrDisconnected and the client redials
// with jittered exponential backoff, registering again (taking its own name
// over, since the hub may not have reaped the dead socket yet). Claims are
// not tied to the socket: they live until their leases expire.
//
// Not implemented yet: mailbox replay. Directed chats sent to this agent
// while it was disconnected are not fetched on reconnect, and the client
// sends no acks.
//
// # Calls and replies
//
// The protocol has no request ids. Replies are matched to calls by their
// type family, task and agent (see dispatch.go for the rules); a plain
// error frame goes to the oldest call in flight, which is exact because
// the hub answers one socket's frames in order. Every call takes a context;
// a call whose context ends still absorbs its late reply.
//
// Refusals are *Refused errors carrying the hub's reason_code or
// error_code, its sentence and, for claims, the holder. On a federated hub
// a refusal by the namespace's ownership also carries the namespace, how
// the hub resolves it and the owner hub (OWNER_UNREACHABLE,
// NAMESPACE_UNGOVERNED, ...); Namespaces shows the whole ownership map.
// A call the hub is too old for fails with ErrUnsupported. Transport
// problems are ErrUnreachable (Dial), *RejectedError (the hub refused the
// connection: name conflict, bad token, capacity), ErrDisconnected and
// ErrClosed.
//
// # Events
//
// Subscribe delivers broadcasts and unsolicited private frames (directed
// chats, presence, other agents' grants) on a bounded channel; a slow
// subscriber loses frames rather than stalling the client.
//
// # Waiting and leases
//
// Wait blocks until a task is free, woken by the hub's additive wait_ready
// frame (polling once a second on a hub without it). KeepLease renews a
// claim in the background at a third of its lease and reports a refused
// renewal on Keeper.Lost.
//
// # Write-path fencing
//
// A Ledger records the epochs an agent was granted, in a file beside the
// checkout it edits (the CLI and synapse mcp use <git dir>/synapse/leases.json).
// synapse guard and the git pre-commit check compare it with the hub's live
// claims and refuse a write under a claim that moved on. Opting in is
// Ledger.Record after each grant, KeepOptions.OnRenew for a keeper (each
// renewal is a fresh epoch) and Ledger.Forget after a release; see
// docs/claims.md, "Write-path fencing".
package client
