package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/delivery"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/transport"
)

// nullSocket accepts every frame and reads none: the socket of a session
// bound in-process, so a test or a benchmark can hold a thousand bound
// names without a thousand connections.
type nullSocket struct {
	sent          atomic.Int64
	once          sync.Once
	closing, done chan struct{}
}

func newNullSocket() *nullSocket {
	return &nullSocket{closing: make(chan struct{}), done: make(chan struct{})}
}

func (n *nullSocket) Read() ([]byte, error) { return nil, io.EOF }
func (n *nullSocket) Send([]byte) error {
	select {
	case <-n.closing:
		return transport.ErrClosed
	default:
	}
	n.sent.Add(1)
	return nil
}
func (n *nullSocket) Hold()                    {}
func (n *nullSocket) Release()                 {}
func (n *nullSocket) Queued() int              { return 0 }
func (n *nullSocket) QueuedBytes() int         { return 0 }
func (n *nullSocket) QueueLen() int            { return 1024 }
func (n *nullSocket) Pending() bool            { return false }
func (n *nullSocket) LimitReceiveBuffer(int)   {}
func (n *nullSocket) Close(int, string)        { n.once.Do(func() { close(n.closing); close(n.done) }) }
func (n *nullSocket) Kill()                    { n.Close(0, "") }
func (n *nullSocket) Ping(time.Duration) error { return nil }
func (n *nullSocket) Closing() <-chan struct{} { return n.closing }
func (n *nullSocket) Done() <-chan struct{}    { return n.done }

// newLocalHub is a hub with no listener, for sessions bound in-process.
func newLocalHub(tb testing.TB, cfg Config) *Hub {
	tb.Helper()
	cfg.Logger = quietLogger()
	cfg.MaxClients = 1 << 16
	h, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Close(ctx)
	})
	return h
}

// local admits an in-process session and has it send frame (its first
// frame binds its sender, as a socket's would).
func (h *Hub) local(tb testing.TB, frame map[string]any) (*session, *nullSocket) {
	tb.Helper()
	ns := newNullSocket()
	s := &session{h: h, id: h.nextID.Add(1), conn: ns, host: "local", authed: h.cfg.Token == ""}
	if code, reason, ok := h.admit(s); !ok {
		tb.Fatalf("admit: %d %s", code, reason)
	}
	s.handleJSON(tb, frame)
	return s, ns
}

func (s *session) handleJSON(tb testing.TB, frame map[string]any) {
	tb.Helper()
	b, err := json.Marshal(frame)
	if err != nil {
		tb.Fatal(err)
	}
	s.handle(b)
}

// scanRecipients is who a target reaches by definition: every bound name
// but the sender's that addressedLocked accepts.
func (h *Hub) scanRecipients(t, sender string) []string {
	var out []string
	for n, rs := range h.reg.byName {
		if n != sender && h.addressedLocked(t, rs) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func (h *Hub) resolvedRecipients(t, sender string) []string {
	var out []string
	h.recipientsLocked(t, sender, func(rs *session) { out = append(out, rs.name) })
	slices.Sort(out)
	return out
}

// trickyRegistry binds names whose sidecar, project and role matches are
// easy to get wrong, then changes roles and takes names over, so the
// indexes have been updated every way the registry updates them.
func trickyRegistry(t *testing.T, h *Hub) {
	t.Helper()
	roles := func(rs ...string) map[string]any {
		l := make([]any, len(rs))
		for i, r := range rs {
			l[i] = r
		}
		return map[string]any{"roles": l}
	}
	seats := []struct {
		name  string
		extra map[string]any
	}{
		{"p/a", nil}, {"p/a-rx", nil}, {"p/a-pane-rx", roles("p/pane-side")}, {"p/a-rx-rx", nil},
		{"p/b", roles("p/reviewer", " q ")}, {"p/b-rx", roles("p/rx-only")},
		{"q/c", roles("p/reviewer")}, {"q/c-pane", roles("p/pane")}, {"q/c-pane-rx", nil}, // q/c-pane-rx serves q/c
		{"solo", roles("solo-role")}, {"solo-rx", nil}, {"r/x/y", nil}, {"-rx", nil}, {"all", nil},
		{"t/old", roles("t/gone")}, {"t/kept", roles("t/r1")},
	}
	for _, s := range seats {
		frame := hb(s.name)
		for k, v := range s.extra {
			frame[k] = v
		}
		h.local(t, frame)
	}
	h.mu.Lock()
	kept := h.reg.byName["t/kept"]
	h.mu.Unlock()
	kept.handleJSON(t, mergeFrame(hb("t/kept"), roles("t/r2"))) // a later heartbeat replaces the roles
	old := h.reg.byName["t/old"]
	h.local(t, mergeFrame(hb("t/old"), map[string]any{"takeover": true})) // the newcomer holds no role yet
	old.handleJSON(t, mergeFrame(hb("t/old"), roles("t/late")))           // ignored: the socket is closing
	gone, _ := h.local(t, mergeFrame(hb("t/left"), roles("t/left-role")))
	gone.handleJSON(t, map[string]any{"type": "leave", "sender": "t/left"})
}

// checkIndexes reports whether the project and role indexes hold exactly
// the bound names' projects and roles.
func (r *registry) checkIndexes() error {
	wantProject, wantRole := map[string]map[string]struct{}{}, map[string]map[string]struct{}{}
	for n, rs := range r.byName {
		if p := coord.NamespaceOf(n); p != "" {
			addName(wantProject, p, n)
		}
		for _, role := range rs.roles {
			addName(wantRole, role, n)
		}
	}
	if fmt.Sprint(r.byProject) != fmt.Sprint(wantProject) || fmt.Sprint(r.byRole) != fmt.Sprint(wantRole) {
		return fmt.Errorf("indexes %v %v, the bound names say %v %v", r.byProject, r.byRole, wantProject, wantRole)
	}
	if names := slices.Sorted(maps.Keys(r.byName)); !slices.Equal(r.online, names) {
		return fmt.Errorf("online list %v, the bound names are %v", r.online, names)
	}
	if roles := slices.Sorted(maps.Keys(r.byRole)); !slices.Equal(r.roleKeys, roles) {
		return fmt.Errorf("sorted roles %v, the role index holds %v", r.roleKeys, roles)
	}
	return nil
}

func mergeFrame(f map[string]any, extra map[string]any) map[string]any {
	for k, v := range extra {
		f[k] = v
	}
	return f
}

// TestRecipients_LiteralTargetsReachWhatTheScanReaches_PROTOCOL_2_2 pins
// that resolving a literal target through the indexes reaches exactly the
// sockets the fnmatch scan reaches (PROTOCOL.md §2.2 step 7: names,
// sidecars X-rx/X-pane-rx, projects, roles of the name or its identity,
// comma lists), after role changes, a takeover and a leave.
func TestRecipients_LiteralTargetsReachWhatTheScanReaches_PROTOCOL_2_2(t *testing.T) {
	h := newLocalHub(t, Config{})
	trickyRegistry(t, h)
	targets := []string{
		"p/a", "p/a-rx", "p/a-pane", "p/a-pane-rx", "p/a-rx-rx", "p/b", "p/b-rx", "q/c", "q/c-pane", "q/c-pane-rx",
		"p", "q", "r", "r/x", "r/x/y", "solo", "solo-rx", "-rx", "all", "t", "t/old", "t/left",
		"p/reviewer", "p/rx-only", "p/pane", "p/pane-side", "solo-role", "t/gone", "t/late", "t/r1", "t/r2", "t/left-role",
		"p/zz", "zz", "p/a, q", " p/b ,p/reviewer", "p,q,r", ",p/a,,", "p/A", "P",
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reg.byName["t/left"] != nil {
		t.Fatal("t/left still bound after leave")
	}
	// The indexes hold exactly the bound names: nothing of a superseded,
	// left or re-registered socket lingers.
	if err := h.reg.checkIndexes(); err != nil {
		t.Error(err)
	}
	for _, target := range targets {
		if !delivery.LiteralTarget(target) {
			t.Fatalf("%q is not literal", target)
		}
		for _, sender := range []string{"", "p/a", "q/c", "p/b-rx"} {
			got, want := h.resolvedRecipients(target, sender), h.scanRecipients(target, sender)
			if !slices.Equal(got, want) {
				t.Errorf("target %q from %q reaches %v by index, %v by scan", target, sender, got, want)
			}
		}
	}
	// Spot checks that the definition itself is what the protocol says.
	for target, want := range map[string][]string{
		"p/a":        {"p/a", "p/a-pane-rx", "p/a-rx"},
		"q/c":        {"q/c", "q/c-pane-rx"},
		"p/reviewer": {"p/b", "p/b-rx", "q/c", "q/c-pane-rx"}, // a seat's role reaches its sidecars
		"p/rx-only":  {"p/b-rx"},                              // a sidecar's role, the sidecar only
		"q":          {"p/b", "p/b-rx", "q/c", "q/c-pane", "q/c-pane-rx"},
		"t/r2":       {"t/kept"},
		"t/r1":       nil,
		"t/gone":     nil,
		"t/late":     nil,
		"t/left":     nil,
	} {
		if got := h.resolvedRecipients(target, ""); !slices.Equal(got, want) {
			t.Errorf("target %q reaches %v, want %v", target, got, want)
		}
	}
	// Glob targets still match every bound name by fnmatch.
	for target, want := range map[string][]string{
		"p/a*":    {"p/a", "p/a-pane-rx", "p/a-rx", "p/a-rx-rx"},
		"p/[ab]":  {"p/a", "p/a-pane-rx", "p/a-rx", "p/b", "p/b-rx"}, // p/a-rx-rx serves p/a-rx
		"?/c":     {"q/c", "q/c-pane-rx"},
		"t/r?,zz": {"t/kept"},
	} {
		if got := h.resolvedRecipients(target, ""); !slices.Equal(got, want) {
			t.Errorf("glob %q reaches %v, want %v", target, got, want)
		}
	}
}

// TestChat_DirectedDeliveryThroughTheIndex_PROTOCOL_2_2 pins over real
// sockets what a directed chat does (PROTOCOL.md §2.2 steps 7–9, §1.7):
// the target's sidecars receive it and make it delivered, a role reaches
// its holder's sidecars, roles dropped by a later heartbeat or a leave
// stop reaching, a glob still reaches by fnmatch, and nobody left means a
// dead letter (INV-DG-3).
func TestChat_DirectedDeliveryThroughTheIndex_PROTOCOL_2_2(t *testing.T) {
	th := startHub(t, Config{})
	a := th.join("p/a")
	b := th.join("p/b", map[string]any{"roles": []any{"p/reviewer"}, "wake_capability": "direct"})
	brx := th.join("p/b-rx")
	c := th.join("q/c")
	receipt := func(target, payload string) map[string]any {
		t.Helper()
		a.send(f("chat", "target", target, "payload", payload, "receipt_requested", true))
		a.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == payload }) // the echo
		return a.expect("delivery_receipt")
	}
	got := func(tc *tconn, payload string) {
		t.Helper()
		tc.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == payload })
	}
	check := func(r map[string]any, field, want string) {
		t.Helper()
		if g := fmt.Sprint(r[field]); g != want {
			t.Errorf("receipt %s = %s, want %s (%v)", field, g, want, r)
		}
	}

	r := receipt("p/b", "to b")
	got(b, "to b")
	got(brx, "to b")
	check(r, "recipients", "[p/b]")
	check(r, "matched_recipients", "[p/b]")
	check(r, "recipient_wake_capabilities", "map[p/b:direct]")

	r = receipt("p/reviewer", "to the role")
	got(b, "to the role")
	got(brx, "to the role")
	check(r, "recipients", "[p/b]")

	r = receipt("p/*", "to the glob")
	got(b, "to the glob")
	got(brx, "to the glob")
	check(r, "recipients", "[p/b]")
	check(r, "dead_lettered", "false")

	b.send(f("heartbeat", "sender", "p/b", "roles", []any{}))
	b.sync("p/b")
	r = receipt("p/reviewer", "role dropped")
	check(r, "reason", "no_online_recipient")
	check(r, "dead_lettered", "true")

	c.send(f("heartbeat", "sender", "q/c", "roles", []any{"p/reviewer"}))
	c.sync("q/c")
	r = receipt("p/reviewer", "role taken")
	got(c, "role taken")
	check(r, "recipients", "[q/c]")
	c.close()
	r = receipt("q/c", "after leave")
	check(r, "reason", "no_online_recipient")
	r = receipt("p/reviewer", "role left")
	check(r, "reason", "no_online_recipient")

	a.send(f("state_request"))
	dl := map[string]string{}
	for _, e := range a.expect("state_snapshot")["snapshot"].(map[string]any)["dead_letters"].([]any) {
		e := e.(map[string]any)
		dl[e["target"].(string)] = fmt.Sprint(e["count"])
	}
	if want := map[string]string{"p/reviewer": "2", "q/c": "1"}; fmt.Sprint(dl) != fmt.Sprint(want) {
		t.Errorf("dead letters %v, want %v", dl, want)
	}
	// B's first frames after the role test are the chats it was sent: none
	// of the chats addressed elsewhere leaked to it.
	b.send(f("chat", "sender", "p/b", "target", "p/a", "payload", "end"))
	if m := b.expect("chat"); m["payload"] != "end" {
		t.Errorf("B got %v, want only its own echo", m["payload"])
	}
}

// BenchmarkDirectedChat measures the hub's cost of one directed chat A→B
// (decode, gates, liveness partition, fan-out to B and the echo to A) with
// 10 and 1,000 names bound, on sessions bound in-process (nullSocket), so
// the figure is the hub's own CPU: it should not grow with the bound
// names. A literal target resolves by lookup; a glob target is matched
// against every bound name (shown for contrast). With a journal every chat
// is also committed (group commit, synchronous=NORMAL) and counted by the
// mailbox projection, which holds one identity per bound name.
func BenchmarkDirectedChat(b *testing.B) {
	for _, journaled := range []bool{false, true} {
		for _, target := range []string{"name", "role", "glob"} {
			for _, bound := range []int{10, 1000} {
				name := fmt.Sprintf("target=%s/bound=%d/memory", target, bound)
				if journaled {
					name = fmt.Sprintf("target=%s/bound=%d/journal", target, bound)
				}
				b.Run(name, func(b *testing.B) { benchDirectedChat(b, bound, target, journaled) })
			}
		}
	}
}

func benchDirectedChat(b *testing.B, bound int, target string, journaled bool) {
	cfg := Config{}
	if journaled {
		st, err := journal.Open(filepath.Join(b.TempDir(), "bench.db"), journal.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		cfg.Journal = st
	}
	h := newLocalHub(b, cfg)
	sender, _ := h.local(b, hb("bench/a"))
	_, rx := h.local(b, mergeFrame(hb("bench/b"), map[string]any{"roles": []any{"bench/reviewer"}}))
	for i := 2; i < bound; i++ {
		h.local(b, hb(fmt.Sprintf("bench%d/idle", i)))
	}
	t := map[string]string{"name": "bench/b", "role": "bench/reviewer", "glob": "bench/[b]"}[target]
	chat, _ := json.Marshal(map[string]any{"sender": "bench/a", "type": "chat", "target": t, "payload": "hello"})
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		sender.handle(chat)
	}
	b.StopTimer()
	if n := rx.sent.Load(); n < int64(b.N) {
		b.Fatalf("B received %d of %d chats", n, b.N)
	}
}

// TestAudience_IndexReachesWhatTheScanReaches_PROTOCOL_2_15 pins that a
// broadcast found through the indexes (full fan-out set, projects, names
// and their sidecars) reaches exactly the sockets the scan reaches: every
// bound socket with the full fan-out, and the scoped ones the audience
// concerns (PROTOCOL.md scoped fan-out), after fan-out changes by a later
// heartbeat, a takeover and a leave.
func TestAudience_IndexReachesWhatTheScanReaches_PROTOCOL_2_15(t *testing.T) {
	h := newLocalHub(t, Config{})
	scoped := map[string]any{"fanout": "scoped"}
	for _, name := range []string{"p/a", "p/a-rx", "p/a-pane-rx", "q/c", "q/c-rx", "r/x/y", "solo", "solo-rx", "-rx", "t/flip", "t/unflip", "t/old"} {
		h.local(t, mergeFrame(hb(name), scoped))
	}
	for _, name := range []string{"p/full", "q/full", "nons"} {
		h.local(t, hb(name))
	}
	flip, unflip := h.reg.byName["t/flip"], h.reg.byName["t/unflip"]
	flip.handleJSON(t, mergeFrame(hb("t/flip"), map[string]any{"fanout": "full"}))
	unflip.handleJSON(t, hb("t/unflip"))                                  // no fanout field: stays scoped
	h.local(t, mergeFrame(hb("t/old"), map[string]any{"takeover": true})) // full fan-out now
	gone, _ := h.local(t, mergeFrame(hb("t/left"), scoped))
	gone.handleJSON(t, map[string]any{"type": "leave", "sender": "t/left"})
	h.local(t, map[string]any{"type": "heartbeat"}) // an unbound socket: never reached

	audiences := []audience{
		{everyone: true},
		{namespaces: []string{"p"}}, {namespaces: []string{"q", "p"}}, {namespaces: []string{"r"}}, {namespaces: []string{"zz"}},
		{namespaces: []string{""}}, {names: []string{"solo"}}, {names: []string{"p/a"}, namespaces: []string{"t"}},
		{names: []string{"q/c", "p/a"}, namespaces: []string{"q"}}, {names: []string{"t/left", "t/unflip"}},
		{names: []string{""}}, {},
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, aud := range audiences {
		var got, want []string
		h.reg.audienceLocked(aud, func(s *session) { got = append(got, s.name) })
		for s := range h.reg.sessions {
			// Bound: a socket that sent leave keeps its name field while it
			// closes, but no longer owns the name.
			bound := h.reg.byName[s.name] == s
			if bound && s.receivesBroadcasts() && (!s.scoped || aud.reaches(s)) {
				want = append(want, s.name)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("audience %+v reaches %v by index, %v by scan", aud, got, want)
		}
	}
	if _, ok := h.reg.fullFanout[flip]; !ok {
		t.Error("a socket that switched to the full fan-out is not in the full fan-out set")
	}
	if _, ok := h.reg.fullFanout[unflip]; ok {
		t.Error("a scoped socket is in the full fan-out set")
	}
}

// last_seen is bounded (maxLastSeen, offline names forgotten stalest
// first) but never forgets an online name, however many are online; each
// new name past the bound forgets one offline name, the one offline
// longest, so no frame rescans the table.
func TestLastSeen_BoundedForgettingTheStalestOffline(t *testing.T) {
	h := newLocalHub(t, Config{})
	n := maxLastSeen + 50
	sessions := make([]*session, n)
	for i := range n {
		sessions[i], _ = h.local(t, hb(fmt.Sprintf("p/a%d", i)))
	}
	h.mu.Lock()
	if len(h.reg.lastSeen) != n {
		t.Fatalf("last_seen holds %d names, want all %d online ones", len(h.reg.lastSeen), n)
	}
	h.mu.Unlock()
	// Half go offline, in order; a quarter of those come back.
	for _, s := range sessions[:n/2] {
		s.handleJSON(t, map[string]any{"type": "leave", "sender": s.name})
	}
	back := map[string]bool{}
	var stayedOffline []string
	for i, s := range sessions[:n/2] {
		if i%4 == 0 {
			h.local(t, hb(s.name))
			back[s.name] = true
		} else {
			stayedOffline = append(stayedOffline, s.name)
		}
	}
	// Every new name now forgets exactly one offline name, the stalest
	// still offline, until only online names are left.
	forgotten := 0
	for i := 0; ; i++ {
		h.local(t, hb(fmt.Sprintf("q/b%d", i)))
		h.mu.Lock()
		size, online := len(h.reg.lastSeen), len(h.reg.byName)
		var kept []string
		for _, s := range sessions[:n/2] {
			if _, ok := h.reg.lastSeen[s.name]; ok && !back[s.name] {
				kept = append(kept, s.name)
			}
		}
		queued := len(h.reg.offline)
		h.mu.Unlock()
		if size < online || size > max(maxLastSeen, online) {
			t.Fatalf("%d names held, %d online, bound %d", size, online, maxLastSeen)
		}
		if !slices.Equal(kept, stayedOffline[len(stayedOffline)-len(kept):]) {
			t.Fatalf("held %v of the offline names, want the last %d to go offline", kept, len(kept))
		}
		if queued > 2*size+64 {
			t.Fatalf("the offline queue holds %d entries for %d names", queued, size)
		}
		if len(kept) == 0 {
			return
		}
		if forgotten++; forgotten > n {
			t.Fatal("offline names were never forgotten")
		}
	}
}
