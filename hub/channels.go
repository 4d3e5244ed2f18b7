package hub

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/synapse-hub/synapse/dashboard"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/wire"
)

// Private channels (issue 23 item 5; docs/security.md, "Private
// channels"): named audiences, the reference's verbs and rules
// (PROTOCOL.md §2.1–2.2). A channel has an owner (its creator), a label,
// members and pending invites. Membership is invite-only: only the owner
// invites, an agent joins only a channel it was invited to (the invite is
// spent), and a channel is dropped when its last member leaves. A chat to
// a channel — its "channel" field, as the reference's clients send it, or
// target "channel:<name>" — reaches the online members only (and their
// sidecars), is kept in the channel's own history, never in the public
// one, the mailbox or a resume, and only members read it back. A
// non-member's chat, history request or invite is refused with a typed
// error, and nothing changes. With access rules in force (--acl), each
// verb must also pass them (access.go, aclRequests: the reference's
// `message channel:<name>` for create, invite, join, leave and chat,
// `recall channel:<name>` for history); a rule cannot admit anyone the
// rules here refuse, so membership stays invite-only under any ACL.
//
// The room's lock (channelRoom.mu) orders each channel's chats: a chat is
// numbered, written to the store and fanned out under it, so every member
// sees a channel in one order. It is taken before Hub.mu (the fan-out
// takes Hub.mu under it), never under Hub.mu, and never on the sequencer
// goroutine; the store's writes (the journal's lock) are taken under it.

// Channel bounds (the reference's).
const (
	maxChannels       = 4096 // channels kept at once
	maxChannelName    = 200  // bytes of a channel id
	channelHistoryMax = 1000 // messages each channel retains
	channelTarget     = "channel:"
)

// ChannelStore keeps private channels durably. *journal.Store is one
// (journal/channels.go). Without one a hub keeps channels in memory.
type ChannelStore interface {
	CreateChannel(c journal.Channel) error
	SetChannelMember(channel, member, state, by string, at float64) error
	DropChannel(channel string) error
	AppendChannelMessage(channel string, m journal.ChannelMessage, frame func(seq int64) []byte, forgetThrough int64) (journal.ChannelMessage, error)
	Channels(keep int) ([]journal.Channel, error)
}

// channelRoom is every channel, under mu.
type channelRoom struct {
	mu     sync.Mutex
	store  ChannelStore // nil: in memory only
	byName map[string]*channelState
	seq    int64 // the last message seq given, in memory only
}

type channelState struct {
	name, owner, label string
	created            float64
	members            map[string]bool
	invited            map[string]bool
	history            []journal.ChannelMessage // oldest first, at most channelHistoryMax
}

// initChannels loads the channels the store keeps.
func (h *Hub) initChannels() error {
	r := &h.chans
	r.byName = make(map[string]*channelState)
	switch {
	case h.cfg.Channels != nil:
		r.store = h.cfg.Channels
	case h.cfg.Journal != nil:
		r.store = h.cfg.Journal
	}
	if r.store == nil {
		return nil
	}
	list, err := r.store.Channels(channelHistoryMax)
	if err != nil {
		return err
	}
	for _, c := range list {
		st := &channelState{name: c.Name, owner: c.Owner, label: c.Label, created: c.CreatedAt,
			members: map[string]bool{}, invited: map[string]bool{}, history: c.Messages}
		for m, state := range c.Members {
			switch state {
			case journal.ChannelMember:
				st.members[m] = true
			case journal.ChannelInvited:
				st.invited[m] = true
			}
		}
		r.byName[c.Name] = st
		if n := len(c.Messages); n > 0 { // the newest holds the channel's highest msg_id (channelChat)
			var m struct {
				MsgID int64 `json:"msg_id"`
			}
			if json.Unmarshal(c.Messages[n-1].Frame, &m) == nil {
				h.history.RaiseMsgID(m.MsgID)
			}
		}
	}
	return nil
}

// chatChannel reports the channel a chat is for: its "channel" field, or
// a target "channel:<name>".
func chatChannel(in *wire.Inbound) (string, bool) {
	if c := strings.TrimSpace(in.Str("channel")); c != "" {
		return c, true
	}
	if t := strings.TrimSpace(in.Str("target")); strings.HasPrefix(t, channelTarget) {
		return strings.TrimSpace(t[len(channelTarget):]), true
	}
	return "", false
}

// validChannel reports whether name may name a channel.
func validChannel(name string) bool {
	return name != "" && len(name) <= maxChannelName && !strings.ContainsAny(name, "\x00\n\r")
}

// channelDone answers a channel verb: its refusal when code is set, else
// done.
func (s *session) channelDone(sender, channel, code, msg, done string) {
	if code != "" {
		s.channelResult(sender, channel, false, code, msg)
		return
	}
	s.channelResult(sender, channel, true, "", done)
}

// channelResult is a channel verb's private reply (the reference's
// channel_result): ok, the message, and the roster only when the
// requester is a member afterwards, so a refusal never shows a channel's
// members to someone outside it.
func (s *session) channelResult(sender, channel string, ok bool, code, msg string) {
	r := &s.h.chans
	members := []string{}
	r.mu.Lock()
	if c := r.byName[channel]; ok && c != nil && c.members[sender] {
		members = sortedKeys(c.members)
	}
	r.mu.Unlock()
	f := s.frame("channel_result", sender, msg).Str("channel", channel).Bool("ok", ok).Strs("members", members)
	if !ok {
		f.Str("error_code", code)
	}
	s.h.m.framesOut.WithLabelValues("channel_result").Inc()
	s.reply(f.Bytes())
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// storeErr is the refusal of a change the store could not keep: nothing
// changed.
func storeErr(err error) string {
	return "The channel change was not kept (" + err.Error() + "); nothing changed. Check the hub's journal (`synapse doctor`) and retry."
}

// channelCreate: channel_create {channel, label}.
func (s *session) channelCreate(sender string, in *wire.Inbound) {
	h := s.h
	name := strings.TrimSpace(in.Str("channel"))
	if !validChannel(name) {
		s.channelResult(sender, name, false, "invalid_channel", "invalid channel id: give channel as 1 to 200 bytes without newlines")
		return
	}
	label := strings.TrimSpace(in.Str("label"))
	if label == "" {
		label = name
	}
	r := &h.chans
	r.mu.Lock()
	var code, msg string
	switch {
	case r.byName[name] != nil:
		code, msg = "channel_exists", "channel '"+name+"' already exists"
	case len(r.byName) >= maxChannels:
		code, msg = "channels_full", "channel registry is full: ask members of unused channels to leave them"
	default:
		now := h.now()
		if r.store != nil {
			if err := r.store.CreateChannel(journal.Channel{Name: name, Owner: sender, Label: label, CreatedAt: now}); err != nil {
				code, msg = "journal_unavailable", storeErr(err)
				break
			}
		}
		r.byName[name] = &channelState{name: name, owner: sender, label: label, created: now,
			members: map[string]bool{sender: true}, invited: map[string]bool{}}
	}
	r.mu.Unlock()
	s.channelDone(sender, name, code, msg, "created channel '"+name+"'")
}

// channelInvite: channel_invite {channel, invitee}. Only the owner
// invites; the invite lets the invitee join once.
func (s *session) channelInvite(sender string, in *wire.Inbound) {
	h := s.h
	name := strings.TrimSpace(in.Str("channel"))
	invitee := strings.TrimSpace(in.Str("invitee"))
	r := &h.chans
	r.mu.Lock()
	c := r.byName[name]
	owner := c != nil && c.owner == sender
	r.mu.Unlock()
	if !owner {
		s.channelResult(sender, name, false, "not_channel_owner", "cannot invite to '"+name+"': no such channel or you are not its owner")
		return
	}
	if invitee == "" {
		s.channelResult(sender, name, false, "invalid_invitee", "invalid invitee: give invitee, the agent name to invite")
		return
	}
	r.mu.Lock()
	var code, msg string
	c = r.byName[name]
	switch {
	case c == nil:
		code, msg = "no_channel", "channel '"+name+"' does not exist"
	case c.members[invitee]:
		code, msg = "already_member", "'"+invitee+"' is already a member of '"+name+"'"
	case c.invited[invitee]:
		code, msg = "already_invited", "'"+invitee+"' is already invited to '"+name+"'"
	default:
		if r.store != nil {
			if err := r.store.SetChannelMember(name, invitee, journal.ChannelInvited, sender, h.now()); err != nil {
				code, msg = "journal_unavailable", storeErr(err)
				break
			}
		}
		c.invited[invitee] = true
	}
	r.mu.Unlock()
	s.channelDone(sender, name, code, msg, "invited '"+invitee+"' to '"+name+"'")
}

// channelJoin: channel_join {channel}, for an invited agent (or the
// owner, back after leaving).
func (s *session) channelJoin(sender string, in *wire.Inbound) {
	h := s.h
	name := strings.TrimSpace(in.Str("channel"))
	r := &h.chans
	r.mu.Lock()
	var code, msg string
	c := r.byName[name]
	switch {
	case c == nil || (!c.invited[sender] && c.owner != sender && !c.members[sender]):
		code, msg = "not_invited", "cannot join '"+name+"': no such channel or you were not invited (ask its owner for channel_invite)"
	case c.members[sender]:
		code, msg = "already_member", "already a member of '"+name+"'"
	default:
		if r.store != nil {
			if err := r.store.SetChannelMember(name, sender, journal.ChannelMember, sender, h.now()); err != nil {
				code, msg = "journal_unavailable", storeErr(err)
				break
			}
		}
		c.members[sender] = true
		delete(c.invited, sender)
	}
	r.mu.Unlock()
	s.channelDone(sender, name, code, msg, "joined '"+name+"'")
}

// channelLeave: channel_leave {channel}. The last member's leave drops
// the channel and its history.
func (s *session) channelLeave(sender string, in *wire.Inbound) {
	h := s.h
	name := strings.TrimSpace(in.Str("channel"))
	r := &h.chans
	r.mu.Lock()
	var code, msg string
	c := r.byName[name]
	switch {
	case c == nil:
		code, msg = "no_channel", "channel '"+name+"' does not exist"
	case !c.members[sender]:
		code, msg = "not_channel_member", "not a member of '"+name+"'"
	case len(c.members) == 1:
		if r.store != nil {
			if err := r.store.DropChannel(name); err != nil {
				code, msg = "journal_unavailable", storeErr(err)
				break
			}
		}
		delete(r.byName, name)
	default:
		if r.store != nil {
			if err := r.store.SetChannelMember(name, sender, "", sender, h.now()); err != nil {
				code, msg = "journal_unavailable", storeErr(err)
				break
			}
		}
		delete(c.members, sender)
	}
	r.mu.Unlock()
	s.channelDone(sender, name, code, msg, "left '"+name+"'")
}

// channelInfo is one channel as channel_list shows it (additive
// channel_info) and the dashboard lists it.
type channelInfo struct {
	Channel  string   `json:"channel"`
	Label    string   `json:"label"`
	Owner    string   `json:"owner"`
	Members  []string `json:"members"`
	Invited  []string `json:"invited,omitempty"`
	Created  float64  `json:"created_at"`
	Retained int      `json:"retained_messages"`
}

// channelsFor lists the channels member belongs to ("" = every channel:
// the operator's view), sorted.
func (r *channelRoom) channelsFor(member string) []channelInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []channelInfo
	for _, c := range r.byName {
		if member != "" && !c.members[member] {
			continue
		}
		out = append(out, channelInfo{Channel: c.name, Label: c.label, Owner: c.owner, Members: sortedKeys(c.members),
			Invited: sortedKeys(c.invited), Created: c.created, Retained: len(c.history)})
	}
	slices.SortFunc(out, func(a, b channelInfo) int { return strings.Compare(a.Channel, b.Channel) })
	return out
}

// channelList: channel_list_request → channel_list {channels: [ids]} (the
// reference's), plus channel_info with each one's label, owner and
// members.
func (s *session) channelList(sender string) {
	list := s.h.chans.channelsFor(sender)
	names := make([]string, 0, len(list))
	for _, c := range list {
		names = append(names, c.Channel)
	}
	if list == nil {
		list = []channelInfo{}
	}
	info, _ := json.Marshal(list)
	s.h.m.framesOut.WithLabelValues("channel_list").Inc()
	s.reply(s.frame("channel_list", sender, "channel list").Strs("channels", names).Raw("channel_info", info).Bytes())
}

// channelHistory: channel_history_request {channel, limit (default 20)}
// → channel_history {channel, messages, retention}, for members only.
func (s *session) channelHistory(sender string, in *wire.Inbound) {
	h := s.h
	name := strings.TrimSpace(in.Str("channel"))
	limit := int64(20)
	if in.Has("limit") {
		if l, ok := in.LenientInt("limit"); ok {
			limit = max(l, 0)
		}
	}
	r := &h.chans
	r.mu.Lock()
	c := r.byName[name]
	if c == nil || !c.members[sender] {
		r.mu.Unlock()
		s.channelResult(sender, name, false, "not_channel_member", "not a member of channel '"+name+"'")
		return
	}
	var picked [][]byte
	{
		msgs := c.history
		if int64(len(msgs)) > limit {
			msgs = msgs[int64(len(msgs))-limit:]
		}
		for _, m := range msgs {
			picked = append(picked, m.Frame)
		}
	}
	r.mu.Unlock()
	f := s.frame("channel_history", sender, "channel history").Str("channel", name).Append("messages", func(b []byte) []byte {
		return wire.List(b, picked, func(b, fr []byte) []byte { return append(b, fr...) })
	}).Raw("retention", []byte(`{"max_messages":`+itoa(channelHistoryMax)+`}`))
	h.m.framesOut.WithLabelValues("channel_history").Inc()
	s.reply(f.Bytes())
}

// channelChat relays a chat to a channel's online members (and their
// sidecars), the sender's echo included: numbered, kept (in the store
// first: published only after it is kept, INV-JA-1) and fanned out under
// the room's lock, so members see one order. A non-member is refused and
// nothing is kept or sent.
func (s *session) channelChat(sender, name string, in *wire.Inbound) {
	h := s.h
	r := &h.chans
	r.mu.Lock()
	member := r.byName[name] != nil && r.byName[name].members[sender]
	r.mu.Unlock()
	if !member {
		h.m.framesOut.WithLabelValues("error").Inc()
		s.reply(s.frame("error", sender, "not a member of channel '"+name+"'").Str("error_code", "not_channel_member").Str("channel", name).Bytes())
		return
	}
	target := in.Str("target")
	if !in.Has("target") || in.Value("target") == nil {
		target = "all"
	}
	addChannel := in.Str("channel") == ""
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.byName[name]
	if c == nil || !c.members[sender] { // dropped, or left, meanwhile
		s.fail(sender, "not_channel_member", "not a member of channel '"+name+"'")
		return
	}
	// A channel chat takes its msg_id from the public counter, as every
	// chat the reference relays carries one. Public history then has gaps
	// where channel chats went, which nothing reads as loss: msg_ids only
	// have to grow (resume and history compare them, never count them).
	// Taken under the room's lock, so a channel's own chats are numbered in
	// its order and its newest kept chat holds its highest msg_id, which
	// initChannels gives back to the counter after a restart, so a
	// member's cursor past a channel chat does not skip the public chats
	// after it (but for a channel dropped since, whose chats are gone, as
	// public ones past the retention window are).
	msgID := h.history.NextMsgID()
	now := h.now()
	var seq int64
	build := chatBuilder(h.cfg.HubID, sender, target, in, func(f *wire.Frame) {
		if addChannel {
			f.Str("channel", name)
		}
		f.Int("channel_seq", seq)
	})
	frame := func(n int64) []byte { seq = n; return build(now, msgID) }
	var forget int64
	if len(c.history) >= channelHistoryMax {
		forget = c.history[len(c.history)-channelHistoryMax].Seq
	}
	m := journal.ChannelMessage{TS: now, Sender: sender}
	if r.store != nil {
		var err error
		if m, err = r.store.AppendChannelMessage(name, m, frame, forget); err != nil {
			s.fail(sender, "journal_unavailable", journalRefusal(h.journalName(), "The channel message", err)+" It was not delivered.")
			return
		}
	} else {
		r.seq++
		m.Seq = r.seq
		m.Frame = frame(m.Seq)
	}
	c.history = append(c.history, m)
	if n := len(c.history); n > channelHistoryMax {
		c.history = slices.Clone(c.history[n-channelHistoryMax:])
	}
	h.mu.Lock()
	sent := 0
	send := func(rs *session) {
		if rs != nil && rs.send(m.Frame) {
			sent++
		}
	}
	for member := range c.members {
		send(h.reg.byName[member])
		for _, n := range wire.Sidecars(member) {
			send(h.reg.byName[n])
		}
	}
	h.mu.Unlock()
	h.m.framesOut.WithLabelValues("chat").Add(float64(sent))
}

// Channels implements dashboard.Backend: every admitted viewer is the
// operator today (the shared token, or an open hub), who sees every
// channel's roster but no message. Once viewers are agents (per-agent
// credentials), pass the viewer's name to channelsFor here: it lists only
// that agent's channels.
func (d dashHost) Channels(_ *http.Request) []dashboard.APIChannel {
	list := d.h.chans.channelsFor("")
	out := make([]dashboard.APIChannel, 0, len(list))
	for _, c := range list {
		out = append(out, dashboard.APIChannel{Channel: c.Channel, Label: c.Label, Owner: c.Owner, Members: c.Members,
			Invited: c.Invited, Created: c.Created, Retained: c.Retained})
	}
	return out
}
