package hub

// presence_update over real sockets: the reference's frame for a quiet
// join (PROTOCOL.md §1.4 step 11, §2.14), and our coalescing and compact
// form (docs/protocol.md "Presence", feature presence_delta). Tests that
// count frames set a window longer than the test and flush by hand
// (flushPresence), so no count depends on how fast the machine is.

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/wire"
)

// flushPresence ends every presence window now, as its timer would.
func flushPresence(h *Hub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for f := range h.reg.presence {
		h.flushPresenceLocked(&h.reg.presence[f])
	}
}

// presenceView is one client's idea of who is online, built the way a
// client reads presence_update in either form.
type presenceView map[string]bool

func (v presenceView) apply(t *testing.T, m map[string]any) {
	t.Helper()
	if list, ok := m["online_agents"]; ok {
		clear(v)
		for _, n := range list.([]any) {
			v[n.(string)] = true
		}
		return
	}
	if _, ok := m["joined"]; !ok {
		t.Fatalf("a compact presence_update without joined: %v", m)
	}
	for _, n := range m["left"].([]any) {
		delete(v, n.(string))
	}
	for _, n := range m["joined"].([]any) {
		v[n.(string)] = true
	}
}

func (v presenceView) names() []string {
	out := make([]string, 0, len(v))
	for n := range v {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// stormAgent is one socket of a storm, with the view and frame count its
// presence_update frames gave it.
type stormAgent struct {
	tc     *tconn
	name   string
	form   presenceForm
	view   presenceView
	frames int      // presence_update frames read
	self   bool     // one of them named its own join in event/agent
	events []string // "joined NAME" / "left NAME": what a reader of event and agent alone learns

	onlineAtJoin int // how many were online after its own join, by its frame
}

// read folds the frames that arrived up to the reply to a who_request sent
// now: everything the hub queued before it.
func (a *stormAgent) read(t *testing.T) {
	t.Helper()
	a.tc.send(map[string]any{"sender": a.name, "type": "who_request", "target": "System"})
	for {
		m := a.tc.next()
		switch m["type"] {
		case "who_snapshot":
			return
		case "presence_update":
			a.frames++
			compact := a.form == presenceCompact
			if compact && !hasKey(m, "joined") || !compact && !hasKey(m, "online_agents") {
				t.Fatalf("%s (form %d) got %v", a.name, a.form, m)
			}
			if a.form == presenceReference && (hasKey(m, "joined") || hasKey(m, "left")) {
				t.Fatalf("%s, a reference client, got a merged frame %v", a.name, m)
			}
			if m["agent"] == a.name && m["event"] == "joined" {
				a.self = true
				if list, ok := m["online_agents"].([]any); ok {
					a.onlineAtJoin = len(list)
				}
			}
			a.events = append(a.events, fmt.Sprintf("%v %v", m["event"], m["agent"]))
			a.view.apply(t, m)
		}
	}
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

// storm connects n agents one after the other without waiting for any
// presence, a third of each form (the reference's, which asks for nothing;
// scoped fan-out, so compact; presence:"full"), and reads each one's
// welcome into its view.
func storm(t *testing.T, th *testHub, n int) []*stormAgent {
	t.Helper()
	agents := make([]*stormAgent, n)
	for i := range agents {
		a := &stormAgent{tc: th.dial(), name: fmt.Sprintf("storm%d/agent", i), form: []presenceForm{presenceReference, presenceCompact, presenceFull}[i%3], view: presenceView{}}
		w := a.tc.next()
		if w["type"] != "welcome" {
			t.Fatalf("first frame %v, want welcome", w)
		}
		a.view.apply(t, w)
		reg := map[string]any{"sender": a.name, "type": "heartbeat", "target": "System", "payload": "online"}
		switch a.form {
		case presenceCompact:
			reg["fanout"] = "scoped"
		case presenceFull:
			reg["presence"] = "full"
		}
		a.tc.send(reg)
		agents[i] = a
	}
	return agents
}

func namesOf(agents []*stormAgent) []string {
	out := make([]string, len(agents))
	for i, a := range agents {
		out[i] = a.name
	}
	slices.Sort(out)
	return out
}

// A join in a quiet hub is exactly the reference's frame, fields in its
// order, to the newcomer and to the others (PROTOCOL.md §1.4 step 11).
func TestPresence_QuietJoinIsTheReferenceFrame_PROTOCOL_1_4(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	url := th.url
	register := func(name string) *tcConn {
		c := tcDial(t, url, name)
		c.NextFrame() // welcome
		c.SendJSON(map[string]any{"sender": name, "target": "System", "type": "heartbeat", "payload": "online"})
		return c
	}
	check := func(c *tcConn, online []string, agent string) {
		t.Helper()
		ev, _ := c.Until("presence_update")
		v, err := traceDecodeOrdered(ev.Raw)
		if err != nil {
			t.Fatal(err)
		}
		o := v.(*traceObject)
		want := []string{"sender", "target", "type", "payload", "timestamp", "hub_id", "online_agents", "event", "agent"}
		if !slices.Equal(o.keys, want) {
			t.Errorf("%s: keys %v, want the reference's %v", c.Label, o.keys, want)
		}
		got := fmt.Sprintf("%v %v %v %v", o.vals["online_agents"], o.vals["event"], o.vals["agent"], o.vals["target"])
		if w := fmt.Sprintf("%v joined %s all", online, agent); got != w {
			t.Errorf("%s: %s, want %s", c.Label, got, w)
		}
	}
	a := register("p/a")
	check(a, []string{"p/a"}, "p/a")
	b := register("p/b")
	check(b, []string{"p/a", "p/b"}, "p/b")
	check(a, []string{"p/a", "p/b"}, "p/b")
}

// A connect storm of N agents costs O(N) presence frames to the sockets
// that asked for presence_delta, not O(N²): the joins of one window go out
// as one frame, and each agent's last view is every agent. Each newcomer
// still gets a frame naming its own join. A reference client gets one
// frame per join after its own, in order.
func TestPresence_ConnectStormIsCoalesced_PROTOCOL_2_14(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{MaxClients: 1000, PresenceWindow: time.Hour})
	const n = 300
	agents := storm(t, th, n)
	for _, a := range agents {
		a.read(t) // every registration has been handled
	}
	flushPresence(th.h)
	all, total := namesOf(agents), 0
	for _, a := range agents {
		a.read(t)
		total += a.frames
		if a.form == presenceReference {
			// The storm's joins are handled in no set order; a reference
			// client is told its own, then each later one once.
			if len(a.events) == 0 || a.events[0] != "joined "+a.name {
				t.Fatalf("%s, a reference client, first read %v, want its own join", a.name, a.events)
			}
			distinct := map[string]bool{}
			for _, e := range a.events {
				if !strings.HasPrefix(e, "joined ") || distinct[e] {
					t.Fatalf("%s, a reference client, read %q twice or not a join", a.name, e)
				}
				distinct[e] = true
			}
			if len(a.events) != len(agents)-a.onlineAtJoin+1 {
				t.Errorf("%s, a reference client, read %d joins, want its own and each of the %d after it", a.name, len(a.events), len(agents)-a.onlineAtJoin)
			}
		} else if a.frames > 2 {
			t.Errorf("%s got %d presence frames, want at most 2 (the first join, then the window's end)", a.name, a.frames)
		}
		if !a.self {
			t.Errorf("%s never saw a presence_update naming its own join", a.name)
		}
		if got := a.view.names(); !slices.Equal(got, all) {
			t.Fatalf("%s (form %d) sees %d agents online, want all %d", a.name, a.form, len(got), n)
		}
	}
	t.Logf("%d agents: %d presence frames in all (one per change to all would be %d)", n, total, n*(n+1)/2)
}

// A storm of leaves is coalesced the same way: one frame to each agent
// that asked for presence_delta and stays, listing everyone who left
// (PROTOCOL.md §1.4 "On disconnect"); a reference client gets one per leave.
func TestPresence_LeaveStormIsCoalesced_PROTOCOL_2_14(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{MaxClients: 1000, PresenceWindow: time.Hour})
	agents := storm(t, th, 150)
	for _, a := range agents {
		a.read(t)
	}
	flushPresence(th.h)
	for _, a := range agents {
		a.read(t)
		a.frames = 0
	}
	stay, leave := agents[:75], agents[75:]
	for _, a := range leave {
		a.tc.send(map[string]any{"sender": a.name, "type": "leave", "target": "System"})
		a.tc.expect("left") // the name is free: the leaves happen in this order
	}
	flushPresence(th.h)
	want := namesOf(stay)
	var leaves []string
	for _, a := range leave {
		leaves = append(leaves, "left "+a.name)
	}
	for _, a := range stay {
		a.events = nil
		a.read(t)
		switch {
		case a.form == presenceReference && !slices.Equal(a.events, leaves):
			t.Errorf("%s, a reference client, read %v, want each of the 75 leaves in order", a.name, a.events)
		case a.form != presenceReference && a.frames != 1:
			t.Errorf("%s got %d presence frames for 75 leaves, want 1", a.name, a.frames)
		}
		if got := a.view.names(); !slices.Equal(got, want) {
			t.Fatalf("%s sees %v online, want %v", a.name, got, want)
		}
	}
}

// With the window's own timer (the default window), every client's view
// converges on the truth after a storm of joins and one of closed sockets.
func TestPresence_WindowTimerConverges_PROTOCOL_2_14(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{MaxClients: 1000})
	agents := storm(t, th, 120)
	converge := func(agents []*stormAgent) {
		t.Helper()
		want := namesOf(agents)
		for _, a := range agents {
			for !slices.Equal(a.view.names(), want) {
				m := a.tc.expect("presence_update")
				a.view.apply(t, m)
			}
		}
	}
	converge(agents)
	stay, gone := agents[:60], agents[60:]
	for _, a := range gone {
		_ = a.tc.c.CloseNow()
	}
	converge(stay)
}

// Scoped fan-out gets the compact form: joined, left and online_count, no
// list; presence:"full" keeps the reference's frame and presence:"compact"
// asks for the compact one without scoping. welcome announces it.
func TestPresence_CompactForm_PROTOCOL_2_14(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	scoped := th.dial()
	if w := scoped.next(); !slices.Contains(w["features"].([]any), any("presence_delta")) {
		t.Fatalf("welcome.features %v lack presence_delta", w["features"])
	}
	scoped.send(heartbeat("s/a", map[string]any{"fanout": "scoped"}))
	m := scoped.expect("presence_update")
	if hasKey(m, "online_agents") || fmt.Sprintf("%v %v %v %v", m["joined"], m["left"], m["event"], m["agent"]) != "[s/a] [] joined s/a" || num(t, m["online_count"]) != 1 {
		t.Fatalf("scoped join: %v, want the compact form", m)
	}
	full := th.join("f/b", map[string]any{"fanout": "scoped", "presence": "full"})
	opted := th.join("c/c", map[string]any{"presence": "compact"})
	m = scoped.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "c/c" })
	if hasKey(m, "online_agents") || num(t, m["online_count"]) != 3 {
		t.Fatalf("compact frame %v", m)
	}
	if m = full.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "c/c" }); !hasKey(m, "online_agents") {
		t.Fatalf("presence:full got %v, want online_agents", m)
	}
	opted.send(map[string]any{"sender": "c/c", "type": "leave", "target": "System"})
	m = scoped.expectWhere("presence_update", func(m map[string]any) bool { return m["event"] == "left" })
	if fmt.Sprintf("%v %v %v", m["left"], m["joined"], m["agent"]) != "[c/c] [] c/c" || num(t, m["online_count"]) != 2 {
		t.Fatalf("compact leave %v", m)
	}
}

// A compact socket that missed a compact frame between its welcome and its
// bind gets the whole list once, so deltas never leave it wrong.
func TestPresence_CompactSocketThatMissedAFrameGetsTheList_PROTOCOL_2_14(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	late := th.dial()
	late.expect("welcome") // lists nobody
	th.join("p/early", map[string]any{"presence": "compact"})
	late.send(heartbeat("p/late", map[string]any{"fanout": "scoped"}))
	m := late.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "p/late" })
	if fmt.Sprint(m["online_agents"]) != "[p/early p/late]" {
		t.Fatalf("late compact socket got %v, want online_agents", m)
	}
}

// A newcomer whose join the window holds back is told at once, alone, with
// the reference's frame: its own join stays the first frame after its
// welcome (PROTOCOL.md §1.4 step 11). The others hear of it when the
// window ends; the newcomer, who knows already, gets nothing more.
func TestPresence_HeldJoinIsStillTheNewcomersFirstFrame_PROTOCOL_1_4(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{PresenceWindow: time.Hour})
	full := map[string]any{"presence": "full"}
	a := th.join("p/a", full)
	b := th.connect()
	b.send(heartbeat("p/b", full))
	m := b.next()
	if m["type"] != "presence_update" || fmt.Sprintf("%v %v %v", m["online_agents"], m["event"], m["agent"]) != "[p/a p/b] joined p/b" || hasKey(m, "joined") {
		t.Fatalf("B's first frame after its welcome: %v, want its own join as the reference sends it", m)
	}
	flushPresence(th.h)
	if m := a.next(); m["type"] != "presence_update" || m["agent"] != "p/b" || hasKey(m, "joined") {
		t.Fatalf("A got %v, want B's join", m)
	}
	b.send(map[string]any{"sender": "p/b", "type": "who_request", "target": "System"})
	if m := b.next(); m["type"] != "who_snapshot" {
		t.Fatalf("B got %v, want nothing before its who_snapshot", m)
	}
}

// A broadcast never overtakes a presence change held back by the window:
// the reference's order, with consecutive changes merged.
func TestPresence_BroadcastFlushesHeldPresenceFirst_PROTOCOL_2_14(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{PresenceWindow: time.Hour})
	full := map[string]any{"presence": "full"}
	a := th.join("p/a", full) // the first change goes out at once
	b := th.connect()
	b.send(heartbeat("p/b", full)) // held until the window ends
	b.send(map[string]any{"sender": "p/b", "type": "chat", "target": "all", "payload": "hi"})
	if m := a.next(); m["type"] != "presence_update" || m["agent"] != "p/b" {
		t.Fatalf("A got %v first, want B's presence_update", m)
	}
	if m := a.next(); m["type"] != "chat" {
		t.Fatalf("then %v, want the chat", m)
	}
}

// A client that asked for nothing is the reference's, and reads only event
// and agent (the reference's TypeScript client does): joins and leaves 1 ms
// apart, well inside the default window, each reach it as the reference's
// own frame, in order, with the online list as it was after that change.
func TestPresence_ReferenceClientSeesEveryChangeInOrder_PROTOCOL_1_4(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})   // the default window
	watcher := th.join("p/watch") // and read its own join
	names := []string{"p/b", "p/c", "p/d", "q/e"}
	conns := map[string]*tconn{}
	for _, n := range names {
		c := th.connect()
		c.send(heartbeat(n, nil))
		conns[n] = c
		time.Sleep(time.Millisecond)
	}
	for _, n := range names[:3] {
		conns[n].send(map[string]any{"sender": n, "type": "leave", "target": "System"})
		conns[n].expect("left")
		time.Sleep(time.Millisecond)
	}
	online := []string{"p/watch"}
	var want, got []string
	for _, n := range names {
		online = append(online, n)
		slices.Sort(online)
		want = append(want, fmt.Sprintf("joined %s %v", n, online))
	}
	for _, n := range names[:3] {
		online = slices.DeleteFunc(online, func(o string) bool { return o == n })
		want = append(want, fmt.Sprintf("left %s %v", n, online))
	}
	for len(got) < len(want) {
		m := watcher.expect("presence_update")
		if hasKey(m, "joined") || hasKey(m, "left") || hasKey(m, "online_count") {
			t.Fatalf("a reference client got a field of ours: %v", m)
		}
		got = append(got, fmt.Sprintf("%v %v %v", m["event"], m["agent"], m["online_agents"]))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the reference client read\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// netPresence reduces a batch to what changed between two frames.
func TestPresence_NetEffectOfABatch(t *testing.T) {
	j := func(n string) presenceChange { return presenceChange{n, true} }
	l := func(n string) presenceChange { return presenceChange{n, false} }
	for _, tc := range []struct {
		name    string
		changes []presenceChange
		want    string // joined left last, or "none"
	}{
		{"one join", []presenceChange{j("a")}, "[a] [] a"},
		{"one leave", []presenceChange{l("a")}, "[] [a] a"},
		{"joins sorted, last named", []presenceChange{j("c"), j("a"), j("b")}, "[a b c] [] b"},
		{"left and back is in both lists", []presenceChange{l("a"), j("a")}, "[a] [a] a"},
		{"came and went is in neither", []presenceChange{j("b"), j("a"), l("a")}, "[b] [] b"},
		{"nothing left to tell", []presenceChange{j("a"), l("a")}, "none"},
	} {
		news, ok := netPresence(tc.changes)
		got := "none"
		if ok {
			got = fmt.Sprintf("%v %v %s", news.joined, news.left, news.last.name)
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A socket that asks for presence "none" — in its upgrade's
// Synapse-Presence header on an open hub, whose welcome goes out at
// connect, or in its registration on a secured one — gets a welcome with
// online_count instead of the list, and no presence_update at all: a storm
// of such agents costs the hub nothing per join. Asking for the compact
// form later brings the list in its next frame, so a view is never wrong.
func TestPresence_NoneIsSparedTheListAndEveryFrame_PROTOCOL_2_14(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	th.join("p/a")
	quiet := th.dialWith(http.Header{wire.PresenceHeader: {"none"}})
	w := quiet.expect("welcome")
	if hasKey(w, "online_agents") || num(t, w["online_count"]) != 1 {
		t.Fatalf("welcome %v, want online_count and no list", w)
	}
	quiet.send(heartbeat("q/quiet", nil))
	th.join("p/b")
	th.join("p/c").send(map[string]any{"sender": "p/c", "type": "leave", "target": "System"})
	quiet.send(map[string]any{"sender": "q/quiet", "type": "ping", "target": "System"})
	if m := quiet.next(); m["type"] != "pong" {
		t.Fatalf("a presence:none socket got %v before its pong, want nothing", m)
	}
	// Asking for the compact form: the next change brings the whole list.
	quiet.send(heartbeat("q/quiet", map[string]any{"presence": "compact"}))
	th.join("p/d")
	m := quiet.expect("presence_update")
	if fmt.Sprint(m["online_agents"]) != "[p/a p/b p/d q/quiet]" {
		t.Fatalf("the first compact frame %v, want the whole list", m)
	}

	sec := startHub(t, Config{Token: "secret"})
	c := sec.dial()
	c.send(heartbeat("p/s", map[string]any{"token": "secret", "presence": "none"}))
	if w := c.expect("welcome"); hasKey(w, "online_agents") || num(t, w["online_count"]) != 0 {
		t.Fatalf("a secured hub's welcome %v, want online_count and no list", w)
	}
}
