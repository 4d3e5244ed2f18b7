// Package certs is TLS for Synapse's hubs and clients (docs/security.md,
// "TLS"): what a hub serves, what a client trusts, and how each failure is
// explained.
//
//   - Reloader serves a hub's certificate pair from its files and reads
//     them again on Reload (SIGHUP) or when Watch sees them change, keeping
//     the pair it has when the new one does not load (reload.go).
//   - ClientConfig is the tls.Config a client dials wss:// with: the CA it
//     trusts (--ca, SYNAPSE_CA) and the client certificate it presents, if
//     any; PinnedConfig trusts exactly one certificate, a hub's own, for
//     the hub dialling itself (client.go).
//   - Explain turns a failed dial into what to do next: the CA to give,
//     the scheme to use, the host the certificate names (explain.go).
//   - SelfSigned writes a CA and a certificate signed by it, for tests and
//     for trying TLS out without openssl (selfsigned.go).
//
// It imports only the standard library. A Reloader is safe for concurrent
// use: the handshakes of every connection read its current pair while
// Reload replaces it.
package certs
