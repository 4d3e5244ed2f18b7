package wire

import "strings"

// Sidecars are the names that serve an identity beside it (PROTOCOL.md §1,
// "Sidecars"): <identity>-rx is its durable mailbox and wake listener,
// <identity>-pane-rx a provider pane bridge. A directed message to X
// reaches a live X when X or one of its sidecars is connected, and a
// sidecar may replay and ack X's mailbox.
var sidecarSuffixes = [...]string{"-rx", "-pane-rx"}

// Sidecars returns the sidecar names of identity id, in the order the hub
// tries them.
func Sidecars(id string) [2]string {
	return [2]string{id + sidecarSuffixes[0], id + sidecarSuffixes[1]}
}

// Identity maps a sidecar name (X-rx, X-pane-rx) to the identity X it
// serves; any other name is its own identity.
func Identity(name string) string {
	if s, ok := strings.CutSuffix(name, "-pane-rx"); ok && s != "" {
		return s
	}
	if s, ok := strings.CutSuffix(name, "-rx"); ok && s != "" {
		return s
	}
	return name
}

// SidecarOf reports whether name is id itself or one of id's sidecars.
func SidecarOf(name, id string) bool {
	if name == id {
		return true
	}
	rest, ok := strings.CutPrefix(name, id)
	return ok && (rest == sidecarSuffixes[0] || rest == sidecarSuffixes[1])
}
