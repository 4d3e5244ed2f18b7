// Package coord is the coordination authority of a Synapse hub: claims with
// leases, file scopes, epoch fencing, checkpoints, handoff, waits, resources
// and the task board.
//
// It is a deterministic state machine in the style of a raft FSM. It does no
// I/O, starts no goroutine and never reads the clock: time is an argument. A
// command is decided against the state into events (Decide); events are
// applied to the state (Apply). Replaying the events of a run from an empty
// state rebuilds that run's state exactly, which is what the journal's replay
// and the model tests rely on.
//
// A State is not safe for concurrent use: one goroutine (the hub's sequencer)
// owns it, and others see copies it publishes.
package coord
