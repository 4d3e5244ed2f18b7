package bench

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

// refHub is a protocol-v2 hub that speaks only what the reference speaks,
// as it writes it (hub/testdata/traces/handshake and claims, and frames
// read off a running reference): welcome on connect without features, no
// reply to a heartbeat but the joiner's presence_update broadcast to every
// socket, claim_granted and release_granted broadcast, claim_denied to the
// claimant, chat to every socket, an error for a type it does not know
// (leave, for one), and every frame in Python's json.dumps default form
// ({"type": "welcome", …}: a space after each colon and comma). It keeps
// every frame it was sent, to check what the load client asked for.
type refHub struct {
	t   *testing.T
	ln  net.Listener
	uri string

	mu     sync.Mutex
	conns  map[*refConn]struct{}
	names  map[string]*refConn
	claims map[string]string // task → owner
	paths  map[string]string // path → task
	got    []map[string]any  // every frame received, decoded
}

type refConn struct {
	nc   net.Conn
	wmu  sync.Mutex
	name string
}

func startRefHub(t *testing.T) *refHub {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &refHub{t: t, ln: ln, uri: "ws://" + ln.Addr().String(), conns: map[*refConn]struct{}{},
		names: map[string]*refConn{}, claims: map[string]string{}, paths: map[string]string{}}
	go h.accept()
	t.Cleanup(func() {
		ln.Close()
		h.mu.Lock()
		defer h.mu.Unlock()
		for c := range h.conns {
			c.nc.Close()
		}
	})
	return h
}

func (h *refHub) accept() {
	for {
		nc, err := h.ln.Accept()
		if err != nil {
			return
		}
		go h.serve(nc)
	}
}

// pyDumps writes key, value, key, value… as Python's json.dumps(dict) does
// by default: ", " between members, ": " after keys.
func pyDumps(kv ...any) []byte {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(kv[i])
		b.Write(k)
		b.WriteString(": ")
		b.WriteString(pyValue(kv[i+1]))
	}
	b.WriteByte('}')
	return []byte(b.String())
}

func pyValue(v any) string {
	switch x := v.(type) {
	case []string:
		parts := make([]string, len(x))
		for i, s := range x {
			parts[i] = pyValue(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case json.RawMessage:
		return string(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (h *refHub) now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// system starts a hub frame's members, as the reference orders them.
func (h *refHub) system(target, typ, payload string) []any {
	return []any{"sender", "SynapseHub", "target", target, "type", typ, "payload", payload, "timestamp", h.now(), "hub_id", "syn-0ef0ef00"}
}

func (c *refConn) write(b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = wsutil.WriteServerText(c.nc, b)
}

// broadcastLocked sends b to every socket, as the reference's broadcast.
func (h *refHub) broadcastLocked(b []byte) {
	for c := range h.conns {
		go c.write(b)
	}
}

func (h *refHub) onlineLocked() []string {
	names := make([]string, 0, len(h.names))
	for n := range h.names {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (h *refHub) serve(nc net.Conn) {
	if _, err := ws.Upgrade(nc); err != nil {
		nc.Close()
		return
	}
	c := &refConn{nc: nc}
	h.mu.Lock()
	h.conns[c] = struct{}{}
	c.write(pyDumps(append(h.system("self", "welcome", "Welcome to Synapse"),
		"connected_clients", len(h.conns), "online_agents", h.onlineLocked(), "protocol_version", 2)...))
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.conns, c)
		if c.name != "" && h.names[c.name] == c {
			delete(h.names, c.name)
			h.broadcastLocked(pyDumps(append(h.system("all", "presence_update", "Presence update"),
				"online_agents", h.onlineLocked(), "event", "left", "agent", c.name)...))
		}
		nc.Close()
	}()
	for {
		msg, op, err := wsutil.ReadClientData(nc)
		if err != nil {
			return
		}
		if op != ws.OpText {
			continue
		}
		var f map[string]any
		if json.Unmarshal(msg, &f) != nil {
			continue
		}
		h.handle(c, f)
	}
}

func (h *refHub) handle(c *refConn, f map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, f)
	sender, _ := f["sender"].(string)
	typ, _ := f["type"].(string)
	task, _ := f["task_id"].(string)
	if c.name == "" {
		c.name = sender
		h.names[sender] = c
		h.broadcastLocked(pyDumps(append(h.system("all", "presence_update", "Presence update"),
			"online_agents", h.onlineLocked(), "event", "joined", "agent", sender)...))
	}
	reply := func(kv ...any) { go c.write(pyDumps(kv...)) }
	switch typ {
	case "heartbeat":
	case "who_request":
		reply(append(h.system(sender, "who_snapshot", "Who snapshot"), "online_agents", h.onlineLocked(),
			"agent_roles", json.RawMessage("{}"), "connected_clients", len(h.conns))...)
	case "claim":
		var paths []string
		list, _ := f["paths"].([]any)
		for _, p := range list {
			s, _ := p.(string)
			paths = append(paths, s)
		}
		for _, p := range paths {
			if other, ok := h.paths[p]; ok && other != task {
				reply(append(h.system(sender, "claim_denied", fmt.Sprintf("Task '%s' file scope conflicts with '%s' held by %s.", task, other, h.claims[other])),
					"task_id", task, "reason_code", "SCOPE_CONFLICT")...)
				return
			}
		}
		h.claims[task] = sender
		for _, p := range paths {
			h.paths[p] = task
		}
		h.broadcastLocked(pyDumps(append(h.system("all", "claim_granted", fmt.Sprintf("Task '%s' claimed by %s.", task, sender)),
			"task_id", task, "owner", sender, "note", "", "lease_expires_at", h.now()+3600, "status", "claimed",
			"worktree", "", "paths", paths, "epoch", 1, "version", 0, "checkpoint", "", "git", nil)...))
	case "release":
		delete(h.claims, task)
		for p, t := range h.paths {
			if t == task {
				delete(h.paths, p)
			}
		}
		h.broadcastLocked(pyDumps(append(h.system("all", "release_granted", fmt.Sprintf("Task '%s' released by %s.", task, sender)),
			"task_id", task, "owner", sender, "receipt", json.RawMessage(`{"task_id": `+pyValue(task)+`, "owner": `+pyValue(sender)+`, "released": true}`))...))
	case "chat":
		target, _ := f["target"].(string)
		payload, _ := f["payload"].(string)
		id, _ := f["client_msg_id"].(string)
		h.broadcastLocked(pyDumps("sender", sender, "target", target, "type", "chat", "payload", payload,
			"client_msg_id", id, "timestamp", h.now(), "hub_id", "syn-0ef0ef00", "msg_id", len(h.got)))
	default:
		reply(h.system(sender, "error", "Unknown message type '"+typ+"'.")...)
	}
}

// frames returns what the hub was sent so far.
func (h *refHub) frames() []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// The load client drives a hub that speaks only the reference's protocol v2
// (its registration acknowledged by the joiner's own presence_update, its
// frames spaced as Python writes them), and asks it for none of our
// features: scoped fan-out asked for runs as full, and nothing is sent
// that the reference does not know.
func TestRunLoad_DrivesAHubThatSpeaksOnlyTheReferenceProtocol(t *testing.T) {
	ref := startRefHub(t)
	res, err := RunLoad(t.Context(), LoadConfig{URI: ref.uri, Agents: 2, Idle: 1, Fanout: "scoped", Duration: 200 * time.Millisecond, Conflict: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cycles == 0 || res.Claim.Count == 0 || res.Chat.Count == 0 {
		t.Fatalf("cycles %d, claims %d, chats %d: want each", res.Cycles, res.Claim.Count, res.Chat.Count)
	}
	if res.Fanout != "full" || res.FanoutAsked != "scoped" || len(res.Hub.Features) != 0 || res.Hub.ProtocolVersion != 2 {
		t.Fatalf("fan-out %q (asked %q), hub %+v: want full run for scoped asked, no features, protocol 2", res.Fanout, res.FanoutAsked, res.Hub)
	}
	for _, f := range ref.frames() {
		typ, _ := f["type"].(string)
		if _, ok := f["fanout"]; ok || !slices.Contains([]string{"heartbeat", "claim", "release", "chat"}, typ) {
			t.Fatalf("the client sent %v: want only the reference's verbs, without our fields", f)
		}
	}
}

// A hub that announces scoped_fanout gets asked for it, and the report
// says it ran.
func TestRunLoad_AsksForScopedFanoutWhereAnnounced(t *testing.T) {
	uri := hubtest.Start(t, hub.Config{})
	res, err := RunLoad(t.Context(), LoadConfig{URI: uri, Agents: 2, Fanout: "scoped", Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fanout != "scoped" || !res.Hub.Has("scoped_fanout") || !res.Hub.Has("leave") {
		t.Fatalf("fan-out %q, features %v: want scoped, announced", res.Fanout, res.Hub.Features)
	}
}

// --fanout own registers as the Go SDK does where the hub announces it:
// fanout own and presence none (so no presence_update comes), the
// registration acked by the pong of a ping behind it; the run completes.
// On the reference-shaped hub, which announces nothing, it runs full.
func TestRunLoad_OwnFanoutRegistersAsTheSDKDoes(t *testing.T) {
	uri := hubtest.Start(t, hub.Config{})
	res, err := RunLoad(t.Context(), LoadConfig{URI: uri, Agents: 2, Idle: 3, Fanout: "own", Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fanout != "own" || res.Cycles == 0 {
		t.Fatalf("fan-out %q, %d cycles: want own, cycles run", res.Fanout, res.Cycles)
	}
	ref := startRefHub(t)
	res, err = RunLoad(t.Context(), LoadConfig{URI: ref.uri, Agents: 1, Fanout: "own", Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fanout != "full" || res.FanoutAsked != "own" {
		t.Fatalf("on a hub without our features: fan-out %q (asked %q), want full", res.Fanout, res.FanoutAsked)
	}
}

// An agent's registration is acknowledged by its own join, not by another
// agent's: the names load/a1 and load/a10 differ.
func TestRegister_WaitsForItsOwnPresence(t *testing.T) {
	ref := startRefHub(t)
	c, err := dialWS(t.Context(), ws.Dialer{}, ref.uri)
	if err != nil {
		t.Fatal(err)
	}
	a := &loadAgent{name: "load/a1", c: c}
	t.Cleanup(a.close)
	w := newWaiter(fields("type", "presence_update", "event", "joined", "agent", "load/a1").in)
	for _, f := range []string{
		`{"sender": "SynapseHub", "type": "presence_update", "event": "joined", "agent": "load/a10"}`,
		`{"sender": "SynapseHub", "type": "presence_update", "event": "left", "agent": "load/a1"}`,
	} {
		if w.match([]byte(f)) {
			t.Fatalf("%s acknowledged load/a1's registration", f)
		}
	}
	if err := a.register(t.Context(), registration{}, false); err != nil {
		t.Fatal(err)
	}
	if n := len(ref.frames()); n != 1 {
		t.Fatalf("the hub got %d frames for one registration", n)
	}
}

// --sdk cycles Go SDK agents, registered with the SDK's defaults, through
// Claim and Release.
func TestRunLoad_SDKAgentsCycle(t *testing.T) {
	uri := hubtest.Start(t, hub.Config{})
	res, err := RunLoad(t.Context(), LoadConfig{URI: uri, Agents: 2, Idle: 2, SDK: true, Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fanout != "sdk" || res.Cycles == 0 || res.Conflicts != 0 {
		t.Fatalf("fan-out %q, %d cycles, %d refused: want SDK agents cycling", res.Fanout, res.Cycles, res.Conflicts)
	}
}
