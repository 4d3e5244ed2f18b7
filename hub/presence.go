package hub

// Presence: the sorted list of bound names and the presence_update frames
// that tell the sockets about it (PROTOCOL.md §1.4 step 11, §2.14), with
// our coalescing and compact form (docs/protocol.md "Presence", feature
// presence_delta).
//
// Who owns what: all of it is registry state, guarded by Hub.mu; a batch's
// window timer takes Hub.mu before it flushes.
//
// Why: the reference sends the whole online list to every socket on every
// bind, so a connect storm of N agents costs N² frames and N³ bytes. A
// socket that asked for more (presence:"full" or "compact", or scoped
// fan-out: our SDK asks) gets the changes that come within one window as
// one frame, encoded once for every socket of its form, and in the compact
// form without the list. A socket that asked for nothing is a reference
// client, which reads only event and agent: it gets the reference's frame
// for every change, in order, however close together they come, because a
// merged frame would hide all but the last change from it.

import (
	"slices"
	"time"

	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

// DefaultPresenceWindow is Config.PresenceWindow's default. A change after
// a quiet window goes out at once; the ones that follow within the window
// wait for its end and go out together.
const DefaultPresenceWindow = 100 * time.Millisecond

// presenceForm is the shape of the presence_update frames a socket gets.
type presenceForm int

const (
	presenceReference presenceForm = iota // the reference's: one frame per change, online_agents in each
	presenceFull                          // asked "full": online_agents, changes of a window merged
	presenceCompact                       // joined/left and online_count, no list, merged
	presenceNone                          // asked "none": no presence_update, a welcome without the list
	presenceForms                         // how many forms there are
)

// batchedForms are the forms whose changes wait for a window's end.
var batchedForms = [...]presenceForm{presenceFull, presenceCompact}

// presenceChange is one bind (joined) or unbind of a name.
type presenceChange struct {
	name   string
	joined bool
}

// presenceBatch is what the sockets of one form have not been told yet.
type presenceBatch struct {
	form    presenceForm
	changes []presenceChange // in the order they happened
	sent    time.Time        // when the batch last went out
	timer   *time.Timer      // armed while changes wait for the window's end
	seq     uint64           // numbers its frames from 1: a socket whose presenceSeq is seq missed none
}

// presenceForm is the form s asked for: its presence field, else compact
// with scoped fan-out and the reference's otherwise.
func (s *session) presenceForm() presenceForm {
	switch {
	case s.presenceAsk == "full":
		return presenceFull
	case s.presenceAsk == "none":
		return presenceNone
	case s.presenceAsk == "compact" || s.scoped:
		return presenceCompact
	}
	return presenceReference
}

// receivesBroadcasts reports whether s is bound and authenticated and has
// not lost its name: the sockets broadcasts and presence go to.
func (s *session) receivesBroadcasts() bool {
	return s.name != "" && !s.superseded && s.authed
}

// onlineLocked is the sorted list of bound names, sidecars included. It
// changes in place as names bind and leave: callers read it under Hub.mu
// and keep nothing of it (onlineJSONLocked is the encoding to keep).
func (r *registry) onlineLocked() []string { return r.online }

// onlineJSONLocked is onlineLocked as a JSON array, encoded once per change
// and shared by every welcome and presence_update until the next.
func (r *registry) onlineJSONLocked() []byte {
	if r.onlineJSON == nil {
		r.onlineJSON = pyjson.AppendStrings(nil, r.online)
	}
	return r.onlineJSON
}

// presenceLocked tells that name was bound (joined) or freed, after the
// registry's bind or unbind changed the online list: the reference's
// sockets are told now, the others now or at the end of the window.
func (h *Hub) presenceLocked(name string, joined bool) {
	h.reg.presenceChanges++
	if h.feed.Listening() {
		h.feed.Presence(name, joined, h.now())
	}
	h.presenceEachLocked(presenceChange{name, joined})
	for _, f := range batchedForms {
		b := &h.reg.presence[f]
		b.changes = append(b.changes, presenceChange{name, joined})
		h.presenceDueLocked(b)
	}
}

// presenceEachLocked tells every socket of the reference's form about one
// change with the reference's frame, encoded once: the online list as it
// is now, event and agent. A connect storm of them costs what it costs on
// the reference, N² frames; a storm of our own clients costs none of it.
func (h *Hub) presenceEachLocked(c presenceChange) {
	if len(h.reg.refPresence) == 0 {
		return
	}
	frame := h.presenceFrameLocked(presenceReference, &presenceNews{last: c}, true)
	n := 0
	for s := range h.reg.refPresence {
		if s.send(frame) {
			n++
		}
	}
	h.m.framesOut.WithLabelValues("presence_update").Add(float64(n))
}

// presenceJoinLocked records that s bound a new name. If the window holds
// the change back, s is told at once, alone: its own join stays the first
// thing after its welcome (PROTOCOL.md §1.4 step 11), before any replayed
// mail, as a reference client may wait for it.
func (h *Hub) presenceJoinLocked(s *session) {
	h.presenceLocked(s.name, true)
	form := s.presenceForm()
	switch form {
	case presenceReference:
		return // it went out at once, to s too
	case presenceNone:
		return // it asked for none
	}
	b := &h.reg.presence[form]
	if len(b.changes) == 0 {
		return // it went out at once, to s too
	}
	// The full form always carries the list; a compact socket that missed
	// a compact frame since its welcome gets it too. Either then knows
	// everything, and skips the batch's frame unless more changes come.
	listed := b.form == presenceFull || s.presenceSeq != b.seq
	if listed {
		s.presenceKnown = h.reg.presenceChanges
	}
	if b.form == presenceCompact {
		s.presenceSeq = b.seq
	}
	alone := &presenceNews{joined: []string{s.name}, last: presenceChange{s.name, true}}
	if s.send(h.presenceFrameLocked(b.form, alone, listed)) {
		h.m.framesOut.WithLabelValues("presence_update").Inc()
	}
}

// presenceDueLocked sends b now if its last frame is a window old, or arms
// the timer that sends it when the window ends.
func (h *Hub) presenceDueLocked(b *presenceBatch) {
	if b.timer != nil {
		return
	}
	wait := h.cfg.PresenceWindow - time.Since(b.sent)
	if wait <= 0 {
		h.flushPresenceLocked(b)
		return
	}
	b.timer = time.AfterFunc(wait, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		b.timer = nil
		if !h.closing.Load() {
			h.flushPresenceLocked(b)
		}
	})
}

// flushPresenceLocked sends b's changes as one presence_update to every
// socket of its form that does not know them yet, encoded once for all.
func (h *Hub) flushPresenceLocked(b *presenceBatch) {
	if len(b.changes) == 0 {
		return
	}
	news, ok := netPresence(b.changes)
	clear(b.changes)
	b.changes = b.changes[:0]
	b.sent = time.Now()
	if !ok {
		return
	}
	seq := b.seq
	b.seq++
	var shared, sharedListed []byte
	n := 0
	for s := range h.reg.sessions {
		if !s.receivesBroadcasts() || s.presenceForm() != b.form {
			continue
		}
		withList := true
		if b.form == presenceCompact {
			// A socket that missed a compact frame (sent between its
			// welcome and its bind, or while it had the full form) gets
			// the list again.
			withList = s.presenceSeq != seq
			s.presenceSeq = b.seq
		}
		var out []byte
		switch {
		case s.presenceKnown == h.reg.presenceChanges:
			continue // a newcomer told alone, and nothing changed since
		case !withList:
			if shared == nil {
				shared = h.presenceFrameLocked(b.form, news, false)
			}
			out = shared
		default:
			if sharedListed == nil {
				sharedListed = h.presenceFrameLocked(b.form, news, true)
			}
			out = sharedListed
		}
		if s.send(out) {
			n++
		}
	}
	h.m.framesOut.WithLabelValues("presence_update").Add(float64(n))
}

// presenceNews is a batch's net effect, with its lists encoded once.
type presenceNews struct {
	joined []string       // online now, and joined during the batch (sorted)
	left   []string       // online before the batch, and left during it (sorted)
	last   presenceChange // the latest change in joined or left

	joinedJSON, leftJSON []byte
}

// netPresence reduces a batch to its net effect. A name that left and came
// back is in both lists (apply left first); one that came and went is in
// neither. ok is false when nothing is left to tell.
func netPresence(changes []presenceChange) (news *presenceNews, ok bool) {
	if len(changes) == 1 {
		c := changes[0]
		if c.joined {
			return &presenceNews{joined: []string{c.name}, last: c}, true
		}
		return &presenceNews{left: []string{c.name}, last: c}, true
	}
	before := make(map[string]bool, len(changes)) // online when the batch began
	after := make(map[string]bool, len(changes))
	for _, c := range changes {
		if _, seen := before[c.name]; !seen {
			before[c.name] = !c.joined // a name's changes alternate
		}
		after[c.name] = c.joined
	}
	news = &presenceNews{}
	for name, on := range after {
		if on {
			news.joined = append(news.joined, name)
		}
		if before[name] {
			news.left = append(news.left, name)
		}
	}
	slices.Sort(news.joined)
	slices.Sort(news.left)
	met := make(map[string]bool, len(after))
	for i := len(changes) - 1; i >= 0; i-- {
		c := changes[i]
		if met[c.name] {
			continue // not its name's last change
		}
		met[c.name] = true
		if c.joined || before[c.name] {
			news.last = c
			return news, true
		}
	}
	return nil, false
}

// presenceFrameLocked encodes one presence_update about news. The
// reference's fields come first: online_agents (when withList), then event
// and agent, its latest change. A reference frame, and a full frame for a
// single change, is exactly the reference's; otherwise joined and left list
// the whole batch, and a compact frame ends with online_count.
func (h *Hub) presenceFrameLocked(form presenceForm, news *presenceNews, withList bool) []byte {
	event := "left"
	if news.last.joined {
		event = "joined"
	}
	f := wire.NewFrame("presence_update", "all", "Presence update", h.now(), h.cfg.HubID)
	if withList {
		f.Raw("online_agents", h.reg.onlineJSONLocked())
	}
	f.Str("event", event).Str("agent", news.last.name)
	if form == presenceReference || form == presenceFull && len(news.joined)+len(news.left) == 1 {
		return f.Bytes()
	}
	if news.joinedJSON == nil {
		news.joinedJSON = pyjson.AppendStrings(nil, news.joined)
		news.leftJSON = pyjson.AppendStrings(nil, news.left)
	}
	f.Raw("joined", news.joinedJSON).Raw("left", news.leftJSON)
	if form == presenceCompact {
		f.Int("online_count", int64(len(h.reg.online)))
	}
	return f.Bytes()
}
