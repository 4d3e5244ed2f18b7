// Package gate is the access gate of a Synapse hub: the checks a request
// or a frame passes before the hub does any work for it
// (docs/security.md).
//
// What it decides:
//
//   - Which HTTP requests are answered at all: RequestPolicy, the Host and
//     Origin rule that stops DNS rebinding and cross-site pages
//     (origin.go). The hub's Handler, `synapse mcp --http` and the
//     profiler listener (--pprof) apply the same one.
//   - Whether a signed verb's frame is genuine, fresh and not replayed:
//     Verifier, per-message HMAC with its replay cache (PROTOCOL.md §5;
//     auth.go), and the secrets it reads from flags and files
//     (ParseMessageAuthKey, ReadMessageAuthKeyFile, ReadTokenFile).
//   - How fast a socket or a remote host may make the hub work: Bucket
//     and HostBuckets, token buckets, and RateLimits, the frame limits
//     (ratelimit.go).
//
// What it never does: it holds no socket, writes no frame, closes
// nothing, counts no metric and reads no clock; its only I/O is reading
// the key and token files it is named. Its callers pass the time
// (the hub's clock, unix seconds) and act on the answer: package hub's
// sessions refuse, pause or close, and count what they did. It knows
// nothing of names, claims or the registry, and imports only the standard
// library, wire (a decoded frame) and pyjson (the canonical bytes a
// signature covers).
//
// Concurrency: a RequestPolicy is immutable once built; a Verifier and a
// HostBuckets carry their own mutex and are shared by every socket. A
// Bucket has no lock: it belongs to one goroutine (a session's reader, or
// the holder of the hub's heavy lane).
package gate
