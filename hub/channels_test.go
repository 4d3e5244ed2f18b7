package hub

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/access"
)

func (tc *tconn) channelOp(name, typ string, fields map[string]any) map[string]any {
	tc.t.Helper()
	f := map[string]any{"sender": name, "type": typ, "target": "System"}
	for k, v := range fields {
		f[k] = v
	}
	tc.send(f)
	return tc.expect("channel_result")
}

// Issue23 (items 5, 8): only members receive a channel's chats and read
// its history; a non-member's chat and history request are refused with
// a typed error, and neither changes anything nor reveals the roster.
func TestChannels_NonMemberNeitherReceivesNorReads_Issue23(t *testing.T) {
	th := startHub(t, Config{})
	owner := th.join("p/owner")
	guest := th.join("p/guest")
	out := th.join("p/outsider")

	if r := owner.channelOp("p/owner", "channel_create", map[string]any{"channel": "ops", "label": "Ops"}); r["ok"] != true {
		t.Fatalf("create: %v", r)
	}
	// Joining uninvited is refused; an invite lets the guest in once.
	if r := guest.channelOp("p/guest", "channel_join", map[string]any{"channel": "ops"}); r["ok"] != false || r["error_code"] != "not_invited" {
		t.Fatalf("uninvited join: %v", r)
	}
	if r := out.channelOp("p/outsider", "channel_invite", map[string]any{"channel": "ops", "invitee": "p/outsider"}); r["ok"] != false {
		t.Fatalf("a non-owner invited: %v", r)
	}
	owner.channelOp("p/owner", "channel_invite", map[string]any{"channel": "ops", "invitee": "p/guest"})
	if r := guest.channelOp("p/guest", "channel_join", map[string]any{"channel": "ops"}); r["ok"] != true || len(r["members"].([]any)) != 2 {
		t.Fatalf("join: %v", r)
	}

	// The reference's form (channel field) and ours (target channel:NAME).
	owner.send(map[string]any{"sender": "p/owner", "type": "chat", "target": "all", "channel": "ops", "payload": "secret plan"})
	for _, c := range []*tconn{owner, guest} {
		m := c.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "secret plan" })
		if m["channel"] != "ops" || m["channel_seq"] == nil {
			t.Fatalf("channel chat frame %v", m)
		}
		if _, hasSeq := m["seq"]; hasSeq {
			t.Fatalf("a channel chat carries a mailbox seq: %v", m)
		}
	}
	guest.send(map[string]any{"sender": "p/guest", "type": "chat", "target": "channel:ops", "payload": "ack"})
	for _, c := range []*tconn{owner, guest} {
		c.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "ack" && m["channel"] == "ops" })
	}

	out.send(map[string]any{"sender": "p/outsider", "type": "chat", "channel": "ops", "payload": "let me in"})
	if e := out.expect("error"); e["error_code"] != "not_channel_member" {
		t.Fatalf("non-member chat: %v", e)
	}
	out.send(map[string]any{"sender": "p/outsider", "type": "channel_history_request", "channel": "ops"})
	r := out.expect("channel_result")
	if r["ok"] != false || r["error_code"] != "not_channel_member" || len(r["members"].([]any)) != 0 {
		t.Fatalf("non-member history: %v", r)
	}
	// Nor does the public history, or a resume, show a channel's chat.
	out.send(map[string]any{"sender": "p/outsider", "type": "history_request", "target": "System"})
	if h := out.expect("history_snapshot"); len(h["history"].([]any)) != 0 {
		t.Fatalf("public history shows channel chats: %v", h["history"])
	}
	out.sync("p/outsider")
	out.quiet(100 * time.Millisecond) // nothing of the channel reached it
	guest.send(map[string]any{"sender": "p/guest", "type": "channel_history_request", "channel": "ops"})
	h := guest.expect("channel_history")
	if msgs := h["messages"].([]any); len(msgs) != 3-1 || msgs[0].(map[string]any)["payload"] != "secret plan" {
		t.Fatalf("member history %v", h["messages"])
	}
	owner.send(map[string]any{"sender": "p/owner", "type": "channel_list_request"})
	if l := owner.expect("channel_list"); len(l["channels"].([]any)) != 1 {
		t.Fatalf("list %v", l)
	}
	out.send(map[string]any{"sender": "p/outsider", "type": "channel_list_request"})
	if l := out.expect("channel_list"); len(l["channels"].([]any)) != 0 {
		t.Fatalf("a non-member lists the channel: %v", l)
	}
	// Leaving stops delivery.
	guest.channelOp("p/guest", "channel_leave", map[string]any{"channel": "ops"})
	owner.send(map[string]any{"sender": "p/owner", "type": "chat", "channel": "ops", "payload": "after"})
	owner.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "after" })
	guest.sync("p/guest")
	for len(guest.frames) > 0 {
		if m := <-guest.frames; m["payload"] == "after" {
			t.Fatal("a member who left received the channel's chat")
		}
	}
}

// Issue23 (item 5): membership, invites and history are kept in the
// journal: a hub restarted on it still knows them and still refuses a
// non-member.
func TestChannels_MembershipAndHistorySurviveRestart_Issue23(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hub.db")
	{
		th, st := journalHub(t, path, Config{})
		o := th.join("p/owner")
		o.channelOp("p/owner", "channel_create", map[string]any{"channel": "ops"})
		o.channelOp("p/owner", "channel_invite", map[string]any{"channel": "ops", "invitee": "p/later"})
		o.channelOp("p/owner", "channel_invite", map[string]any{"channel": "ops", "invitee": "p/guest"})
		g := th.join("p/guest")
		g.channelOp("p/guest", "channel_join", map[string]any{"channel": "ops"})
		o.send(map[string]any{"sender": "p/owner", "type": "chat", "channel": "ops", "payload": "kept"})
		o.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "kept" })
		th.h.Close(t.Context())
		st.Close() // the restart: the next hub opens the file anew
	}
	th, _ := journalHub(t, path, Config{})
	g := th.join("p/guest")
	g.send(map[string]any{"sender": "p/guest", "type": "channel_history_request", "channel": "ops"})
	h := g.expect("channel_history")
	if msgs := h["messages"].([]any); len(msgs) != 1 || msgs[0].(map[string]any)["payload"] != "kept" || msgs[0].(map[string]any)["channel_seq"] == nil {
		t.Fatalf("history after restart %v", h)
	}
	l := th.join("p/later")
	if r := l.channelOp("p/later", "channel_join", map[string]any{"channel": "ops"}); r["ok"] != true {
		t.Fatalf("the invite did not survive the restart: %v", r)
	}
	x := th.join("p/x")
	x.send(map[string]any{"sender": "p/x", "type": "channel_history_request", "channel": "ops"})
	if r := x.expect("channel_result"); r["ok"] != false {
		t.Fatalf("a non-member read after restart: %v", r)
	}
}

// Issue23 (item 5): a channel chat takes a msg_id from the public
// counter; public msg_ids keep growing past it, in one process and after a
// restart (whose public history holds none of the channel's), so a
// member's cursor past a channel chat skips no public chat.
func TestChannels_PublicMsgIDsStayAheadOfChannelChatsAcrossRestart_Issue23(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hub.db")
	msgID := func(m map[string]any) int64 { n, _ := m["msg_id"].(json.Number).Int64(); return n }
	var channelID int64
	{
		th, st := journalHub(t, path, Config{})
		o := th.join("p/owner")
		o.channelOp("p/owner", "channel_create", map[string]any{"channel": "ops"})
		o.send(map[string]any{"sender": "p/owner", "type": "chat", "target": "all", "payload": "public one"})
		first := msgID(o.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "public one" }))
		o.send(map[string]any{"sender": "p/owner", "type": "chat", "channel": "ops", "payload": "private"})
		channelID = msgID(o.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "private" }))
		if channelID <= first {
			t.Fatalf("channel chat msg_id %d after public %d", channelID, first)
		}
		th.h.Close(t.Context())
		st.Close()
	}
	th, _ := journalHub(t, path, Config{})
	o := th.join("p/owner")
	o.send(map[string]any{"sender": "p/owner", "type": "chat", "target": "all", "payload": "after restart"})
	if id := msgID(o.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "after restart" })); id <= channelID {
		t.Fatalf("public msg_id %d after a restart is not past the channel chat's %d", id, channelID)
	}
}

// channelACL lets p/* use channel ops (the reference's `message
// channel:<name>` covers create, invite, join, leave and chat), lets
// x/out only be invited, and reads history by `recall` for p/* but for
// p/guest, whom a deny rule stops.
const channelACL = `{"rules":[
 {"id":"ops-members","principal":"p/*","permission":"message","target_kind":"channel","target_pattern":"ops"},
 {"id":"ops-history","principal":"p/*","permission":"recall","target_kind":"channel","target_pattern":"ops"},
 {"id":"guest-reads-nothing","effect":"deny","principal":"p/guest","permission":"recall","target_kind":"channel","target_pattern":"*","reason":"guests do not read back"}
]}`

// expectACLDenied reads an ACL refusal and checks the rule it names.
func (tc *tconn) expectACLDenied(rule, access string) map[string]any {
	tc.t.Helper()
	e := tc.expect("error")
	if e["error_code"] != "acl_denied" || e["acl_rule"] != rule || !strings.HasPrefix(e["payload"].(string), "access denied: "+access) {
		tc.t.Fatalf("refusal %v, want acl_denied by %s on %s", e, rule, access)
	}
	return e
}

// Issue23 (items 4, 5): with access rules in force every channel verb
// must pass them — create, invite, join, leave, chat in either form, and
// history — and a refusal names the rule and changes nothing; what a rule
// allows still meets the invite-only rules, so the ACL never widens a
// channel's membership.
func TestChannels_ACLGovernsEveryChannelVerb_Issue23(t *testing.T) {
	th := aclHub(t, channelACL, false)
	owner := th.join("p/owner")
	guest := th.join("p/guest")
	out := th.join("x/out")
	stranger := th.join("p/stranger")

	if r := owner.channelOp("p/owner", "channel_create", map[string]any{"channel": "ops"}); r["ok"] != true {
		t.Fatalf("create: %v", r)
	}
	owner.send(map[string]any{"sender": "p/owner", "type": "channel_create", "target": "System", "channel": "secret"})
	owner.expectACLDenied(access.DefaultDenyRule, "message on channel:secret")
	th.h.chans.mu.Lock()
	made := th.h.chans.byName["secret"] != nil
	th.h.chans.mu.Unlock()
	if made {
		t.Fatal("a create the rules refused made the channel")
	}

	// Allowed by a rule but not invited: the invite-only rule refuses.
	if r := stranger.channelOp("p/stranger", "channel_join", map[string]any{"channel": "ops"}); r["ok"] != false || r["error_code"] != "not_invited" {
		t.Fatalf("an uninvited agent the rules allow joined: %v", r)
	}
	// Invited but not allowed: the rules refuse, and it stays out.
	owner.channelOp("p/owner", "channel_invite", map[string]any{"channel": "ops", "invitee": "x/out"})
	out.send(map[string]any{"sender": "x/out", "type": "channel_join", "target": "System", "channel": "ops"})
	out.expectACLDenied(access.DefaultDenyRule, "message on channel:ops")
	owner.channelOp("p/owner", "channel_invite", map[string]any{"channel": "ops", "invitee": "p/guest"})
	if r := guest.channelOp("p/guest", "channel_join", map[string]any{"channel": "ops"}); r["ok"] != true {
		t.Fatalf("join: %v", r)
	}
	if got := th.h.chans.channelsFor("")[0].Members; !slices.Equal(got, []string{"p/guest", "p/owner"}) {
		t.Fatalf("members %v", got)
	}

	// The reference's chat form (a "channel" field, target all) is
	// `message channel:ops`, not `message agent:all`, which no rule allows.
	guest.send(map[string]any{"sender": "p/guest", "type": "chat", "target": "all", "channel": "ops", "payload": "inside"})
	owner.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "inside" && m["channel"] == "ops" })
	owner.send(map[string]any{"sender": "p/owner", "type": "chat", "target": "channel:secret", "payload": "nowhere"})
	owner.expectACLDenied(access.DefaultDenyRule, "message on channel:secret")

	// History: recall on the channel; the deny rule stops the guest, a
	// member, and is the rule named.
	guest.send(map[string]any{"sender": "p/guest", "type": "channel_history_request", "target": "System", "channel": "ops"})
	if e := guest.expectACLDenied("guest-reads-nothing", "recall on channel:ops"); e["acl_reason"] != "guests do not read back" {
		t.Fatalf("reason %v", e["acl_reason"])
	}
	owner.send(map[string]any{"sender": "p/owner", "type": "channel_history_request", "target": "System", "channel": "ops"})
	if msgs := owner.expect("channel_history")["messages"].([]any); len(msgs) != 1 {
		t.Fatalf("owner's history %v", msgs)
	}
	wantMetric(t, th, `synapse_acl_denied_total{mode="enforce"} 4`)
}

// Issue23 (item 4): in shadow mode the channel verbs the rules would
// refuse are counted and go on under the invite-only rules alone.
func TestChannels_ACLShadowModeRefusesNoChannelVerb_Issue23(t *testing.T) {
	th := aclHub(t, channelACL, true)
	o := th.join("p/owner")
	if r := o.channelOp("p/owner", "channel_create", map[string]any{"channel": "secret"}); r["ok"] != true {
		t.Fatalf("shadow create: %v", r)
	}
	wantMetric(t, th, `synapse_acl_denied_total{mode="shadow"} 1`)
}

// Issue23 (item 5): the dashboard's /api/channels lists the channels its
// viewer may see — the operator, every one — with rosters and no message.
func TestChannels_DashboardListsChannelsWithoutMessages_Issue23(t *testing.T) {
	th := startHub(t, Config{})
	o := th.join("p/owner")
	o.channelOp("p/owner", "channel_create", map[string]any{"channel": "ops"})
	o.send(map[string]any{"sender": "p/owner", "type": "chat", "channel": "ops", "payload": "do not show"})
	o.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "do not show" })
	resp, err := http.Get(th.srv.URL + "/api/channels")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"channel":"ops"`) || !strings.Contains(string(body), `"p/owner"`) ||
		strings.Contains(string(body), "do not show") {
		t.Fatalf("/api/channels: %d %s", resp.StatusCode, body)
	}
}
