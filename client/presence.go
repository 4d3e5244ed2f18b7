package client

import (
	"maps"
	"slices"
)

// Online is who is online as welcome and presence_update frames tell it,
// in either form a hub sends (docs/protocol.md "Presence"): the
// reference's, whose online_agents replaces the view, and the compact one
// a scoped client gets (Options.Scoped), whose left and joined lists are
// applied to it. The zero value is empty. It is not safe for concurrent
// use: feed it from one goroutine, such as a Subscribe loop.
type Online struct {
	names map[string]struct{}
}

// Reset makes names the whole view: a welcome's online_agents (which
// lists everyone but the client itself), after a Dial or a reconnect.
func (o *Online) Reset(names []string) {
	o.names = make(map[string]struct{}, len(names))
	for _, n := range names {
		o.names[n] = struct{}{}
	}
}

// Apply folds one frame into the view and reports whether it was a
// presence_update.
func (o *Online) Apply(f Frame) bool {
	if f.Type != "presence_update" {
		return false
	}
	if o.names == nil {
		o.names = map[string]struct{}{}
	}
	var list, left, joined []string
	switch {
	case f.Has("online_agents") && f.DecodeField("online_agents", &list) == nil:
		o.Reset(list)
	case f.Has("joined") || f.Has("left"):
		_ = f.DecodeField("left", &left)
		_ = f.DecodeField("joined", &joined)
		for _, n := range left { // a name that left and came back is in both
			delete(o.names, n)
		}
		for _, n := range joined {
			o.names[n] = struct{}{}
		}
	case f.String("event") == "joined":
		o.names[f.String("agent")] = struct{}{}
	case f.String("event") == "left":
		delete(o.names, f.String("agent"))
	}
	return true
}

// Has reports whether name is online.
func (o *Online) Has(name string) bool { _, ok := o.names[name]; return ok }

// Len is how many names are online.
func (o *Online) Len() int { return len(o.names) }

// Names returns the online names, sorted.
func (o *Online) Names() []string { return slices.Sorted(maps.Keys(o.names)) }
