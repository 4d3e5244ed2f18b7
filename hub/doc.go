// Package hub is a Synapse hub on the wire: SYNAPSE CHANNEL protocol v2 over
// WebSocket, compatible with the reference hub's clients (PROTOCOL.md §1–2),
// with /health and /metrics served as HTTP on the same port (§7.1).
//
// # Rooms
//
// The hub keeps the sockets and the verbs; the other rooms are packages
// behind small interfaces the hub implements:
//
//   - package gate: the Host and Origin policy, the token and per-message
//     HMAC checks, the token buckets (auth.go and ratelimit.go call it per
//     socket);
//   - package delivery: chat history, dead letters, the mailbox and its
//     projection, receipts and the pending window (delivery.go implements
//     its Directory, Conn, Sockets, Committer and Events);
//   - package dashboard: the dashboard's HTTP side, behind Backend
//     (dashboard.go: dashHost and the one-instant state gather);
//   - package federation: ownership, forwarding, peers, behind Host
//     (federation.go: fedHost).
//
// What stays here, file by file:
//
//   - hub.go: Config, the Hub, New, Handler, Close; setting.go the Settings
//     a Config leaves to default, sets or turns off; basics.go the clock and
//     the submit gate every room uses.
//   - session.go: a session (one socket, or one verb a peer forwarded: its
//     kind), sending, replies and refusals. ingress.go: the upgrade, the
//     read loop and each frame's way through the gates (PROTOCOL.md §1.4)
//     to the verb table. auth.go and ratelimit.go: the gates' per-socket
//     side; lane.go the heavy lane.
//   - verbs.go: the verb table and the claim-family and board verbs;
//     queries.go the read-only ones; namespaces.go the namespace verbs;
//     chat.go the chat verb and its fan-out; fleetchat.go a fleet's chats
//     other than letters (posted to etcd, relayed by every hub's watch,
//     the history rebuilt from it); events.go the broadcasts of a
//     commit; fleetview.go a fleet's reads (state, board, who for every
//     hub) and the roster this hub publishes; fleetfeed.go the fleet's
//     claim and board changes on the dashboard's stream; fleetdeps.go a
//     task-bound claim's dependencies on other hubs' boards.
//   - registry.go: names bound to sessions, their indexes, roles, last_seen,
//     takeover damping and cards; namelease.go name leases; presence.go
//     presence_update in each form; recipients.go who a chat or a broadcast
//     reaches.
//   - metrics.go: /metrics and /health; journalfault.go the journal's
//     faults as refusals.
//   - identity.go: identity pins, the gate on the frame that binds a name
//     (its store is read and written on the read goroutine, never under
//     Hub.mu); channels.go private channels (issue 23 items 2, 5).
//   - access.go: credentials on a socket, granted roles and the access
//     rules (package access decides): the gate of each frame (aclRequests,
//     channel verbs included), the filters of reads, who may reclaim a pin
//     (mayReclaimPin); verbs_access.go the admin verbs; tls.go TLS
//     (issue 23). On a fleet the registry's and the pins' store is the
//     fleet's etcd (cluster.Access), whose watch calls CredentialRevoked
//     and PinReclaimed; a forward's credential is checked by the owner
//     (forwardedPrincipal).
//
// hub.go and session.go declare the Hub and the session, which hold every
// room's state: every file uses them and they name every file's types.
// Between the other files each reference goes one way, but for
// federation.go and ingress.go (ingress.go says why).
//
// # Who owns what
//
//   - Each socket has one session and two goroutines. The read goroutine
//     decodes frames, runs the gates and the verb handlers; it is the only
//     one that calls Submit or Query for that socket. The writes belong to
//     package transport: a socket's own replies are written by its reader
//     when it releases the frame it handled, broadcasts by one flusher
//     goroutine, and a writer goroutine only for a socket the kernel does
//     not take everything from. One keepalive goroutine pings every socket.
//   - Enqueueing never blocks: a full queue disconnects that socket (slow
//     consumer), so no sender, no other socket and never the sequencer waits
//     on a slow reader.
//   - The registry, the presence batches and delivery's Locked state are
//     guarded by Hub.mu. Broadcasts are enqueued while holding mu, so every
//     socket sees broadcasts in one total order.
//   - The coord.State belongs to the sequencer. Claim-family and board
//     mutations go through Submit; their broadcasts are encoded once and
//     enqueued from OnCommit (events.go), on the sequencer goroutine, after
//     the commit. The render cache (Hub.rendered) is touched only on that
//     goroutine: Render fills it, OnCommit empties it.
//   - Refusals and other private replies are sent by the submitting session
//     after Submit returns, so they follow the commit too.
//
// # Lock order
//
// Outermost first: while holding one of these, take only those below it.
//
//  1. delivery's ack lock (the journal mailbox's ackMu): held across a
//     commit, so a receipt is settled once.
//  2. The private channels' lock (channels.go, channelRoom.mu): a channel
//     chat is kept and fanned out under it, taking the journal's lock and
//     then Hub.mu. Never taken under Hub.mu or on the sequencer goroutine.
//  3. The sequencer: Submit and Query wait for its goroutine, which runs
//     OnCommit, Render, Query functions and Committed callbacks, and those
//     take Hub.mu.
//  4. Hub.mu.
//  5. Leaves, taken under Hub.mu or alone, and never holding another: the
//     dashboard Feed's lock, a transport Conn's queue lock and the
//     flusher's, the federation's directory lock (DeliverRemote), gate's
//     Verifier and HostBuckets locks, the fleet view's lock (Config.Fleet's
//     Agents, cluster.Owners.mu).
//
// Alone, never with Hub.mu or each other: the access registry's writer
// lock (access.Registry.wmu, held across its store write, etcd on a
// fleet, by the admin verbs' reader), Hub.subMu (beginSubmit against
// Close), the heavy lane's lock (a frame holds the lane's turn, not its
// lock, while it runs and may take Hub.mu then), delivery's pending
// Window lock (under the ack lock, or on the sequencer goroutine), the
// keepalive's lock, the claims' and tasks' encoding caches (encodings.mu).
//
// Never while holding Hub.mu: Submit or Query (the sequencer may be
// waiting for mu in OnCommit), the ack lock, a network wait (another hub,
// etcd: the session releases its socket first, releaseBeforeWait), or a
// call into federation other than DeliverRemote and RemotePeer. The
// federation calls fedHost without holding its own locks.
package hub
