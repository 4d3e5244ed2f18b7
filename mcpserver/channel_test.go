package mcpserver

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/journal"
)

// tap records the channel notifications a client connection reads (the Go
// SDK's client drops methods it does not know, so the test reads them off
// the wire).
type tap struct {
	mcp.Transport
	ch chan channelNote
}

type channelNote struct {
	Content string            `json:"content"`
	Meta    map[string]string `json:"meta"`
}

func newTap(t mcp.Transport) *tap { return &tap{Transport: t, ch: make(chan channelNote, 1000)} }

func (t *tap) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &tapConn{Connection: c, t: t}, nil
}

type tapConn struct {
	mcp.Connection
	t *tap
}

func (c *tapConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if r, ok := msg.(*jsonrpc.Request); ok && err == nil && r.Method == ChannelMethod {
		var n channelNote
		if json.Unmarshal(r.Params, &n) == nil {
			c.t.ch <- n
		}
	}
	return msg, err
}

// next waits for the next channel event of kind, skipping others.
func (t *tap) next(tb testing.TB, kind string) channelNote {
	tb.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case n := <-t.ch:
			if n.Meta["kind"] == kind {
				return n
			}
		case <-timeout:
			tb.Fatalf("no channel event of kind %s", kind)
		}
	}
}

// none checks no event is queued now (after a round trip that would have
// carried one: events go out before the reply that follows them).
func (t *tap) none(tb testing.TB) {
	tb.Helper()
	select {
	case n := <-t.ch:
		tb.Fatalf("unexpected channel event %+v", n)
	default:
	}
}

func connectTapped(t *testing.T, s *Server) (*mcp.ClientSession, *tap) {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	go s.Run(ctx, st)
	tp := newTap(ct)
	// Claude Code takes channel events on the initialize handshake's
	// protocols only, not on 2026-07-28 (the Go SDK client's default).
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), tp, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); cancel(); s.Close() })
	return cs, tp
}

func TestChannel_DeclaresTheClaudeChannelCapability_Issue21_1(t *testing.T) {
	uri := startHub(t)
	cs, _ := connectTapped(t, New(Options{Client: serverClient(t, uri, "proj/me")}))
	caps := cs.InitializeResult().Capabilities
	if _, ok := caps.Experimental[ChannelCapability]; !ok {
		t.Fatalf("experimental capabilities %v lack %s", caps.Experimental, ChannelCapability)
	}
	if caps.Logging == nil {
		t.Fatal("declaring the channel dropped the logging capability")
	}
	if ins := cs.InitializeResult().Instructions; !strings.Contains(ins, `kind="message"`) || !strings.Contains(ins, "urgent") {
		t.Fatalf("instructions do not say what the events mean: %q", ins)
	}
	off, _ := connectTapped(t, New(Options{Client: serverClient(t, uri, "proj/off"), Channel: ChannelOptions{Off: true}}))
	if _, ok := off.InitializeResult().Capabilities.Experimental[ChannelCapability]; ok {
		t.Fatal("Channel.Off still declares the capability")
	}
}

func TestChannel_DirectedMessageIsAnEventWithSenderIDAndPriority_Issue21_1(t *testing.T) {
	uri := startHub(t)
	peer := dial(t, uri, "proj/peer")
	cs, tp := connectTapped(t, New(Options{Client: serverClient(t, uri, "proj/me")}))
	ctx := context.Background()
	if _, err := peer.Send(ctx, "all", "a broadcast", client.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	sent, err := peer.Send(ctx, "proj/me", "please review src/auth", client.SendOptions{Priority: true})
	if err != nil {
		t.Fatal(err)
	}
	n := tp.next(t, EventMessage)
	if n.Meta["from"] != "proj/peer" || n.Meta["priority"] != "true" || n.Meta["urgency"] != "urgent" || n.Meta["msg_id"] == "" ||
		!strings.Contains(n.Content, "please review src/auth") || !strings.Contains(n.Content, "ack_through") {
		t.Fatalf("event %+v (sent msg %d)", n, sent.MsgID)
	}
	for k := range n.Meta {
		if !metaKey.MatchString(k) {
			t.Errorf("meta key %q would be dropped by Claude Code", k)
		}
	}
	if _, err := peer.Send(ctx, "proj/me", "when you have a minute", client.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := tp.next(t, EventMessage); n.Meta["urgency"] != "normal" || !strings.Contains(n.Content, "when you have a minute") {
		t.Fatalf("normal message: %+v", n)
	}
	call(t, cs, "status", nil, nil)
	tp.none(t) // the broadcast brought none
}

func TestChannel_MailboxIsReplayedUntilAcked_INV_DG_1(t *testing.T) {
	store, err := journal.Open(filepath.Join(t.TempDir(), "hub.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	uri := startHubWith(t, hub.Config{Journal: store})
	t.Cleanup(func() { store.Close() })
	peer := dial(t, uri, "proj/peer")
	dial(t, uri, "proj/me").Close()
	if _, err := peer.Send(context.Background(), "proj/me", "sent while you were away", client.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	// First server: the replayed message is an event, once, though it
	// came before the handshake could take it.
	me := serverClient(t, uri, "proj/me")
	s := New(Options{Client: me})
	cs, tp := connectTapped(t, s)
	first := tp.next(t, EventMessage)
	if first.Meta["seq"] == "" || !strings.Contains(first.Content, "sent while you were away") {
		t.Fatalf("replayed event %+v", first)
	}
	call(t, cs, "inbox", nil, nil) // fetches the mailbox again: same seq, no second event
	tp.none(t)
	cs.Close()
	s.Close()
	me.Close()
	// Not acked: a restarted server delivers it again (at-least-once).
	me2 := serverClient(t, uri, "proj/me")
	s2 := New(Options{Client: me2})
	cs2, tp2 := connectTapped(t, s2)
	again := tp2.next(t, EventMessage)
	if again.Meta["seq"] != first.Meta["seq"] {
		t.Fatalf("replay after restart: %+v, first %+v", again, first)
	}
	var in InboxResult
	call(t, cs2, "inbox", map[string]any{"ack_through": 1}, &in)
	cs2.Close()
	s2.Close()
	me2.Close()
	// Acked: the cursor moved past it; a third server has nothing to say.
	cs3, tp3 := connectTapped(t, New(Options{Client: serverClient(t, uri, "proj/me")}))
	call(t, cs3, "inbox", nil, nil)
	tp3.none(t)
}

func TestChannel_FreedTaskAfterATimedOutWait_Issue21_1(t *testing.T) {
	uri := startHub(t)
	holder := dial(t, uri, "proj/holder")
	ctx := context.Background()
	if _, err := holder.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil {
		t.Fatal(err)
	}
	cs, tp := connectTapped(t, New(Options{Client: serverClient(t, uri, "proj/me")}))
	var w WaitResult
	if res := call(t, cs, "wait", map[string]any{"task_id": "T1", "timeout_seconds": 0.2}, &w); res.IsError || w.Free || !strings.Contains(text(res), "task_free") {
		t.Fatalf("wait: %q %+v", text(res), w)
	}
	if _, err := holder.Release(ctx, "T1", client.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	// reason: release, or free when the watch asked after the release.
	if n := tp.next(t, EventTaskFree); n.Meta["task_id"] != "T1" || (n.Meta["reason"] != "release" && n.Meta["reason"] != "free") || n.Meta["urgency"] != "normal" {
		t.Fatalf("event %+v", n)
	}
}

func TestChannel_ConflictResolvedAfterARefusal_Issue21_1(t *testing.T) {
	uri := startHub(t)
	holder := dial(t, uri, "proj/holder")
	ctx := context.Background()
	if _, err := holder.Claim(ctx, client.ClaimRequest{TaskID: "theirs", Paths: []string{"src"}}); err != nil {
		t.Fatal(err)
	}
	cs, tp := connectTapped(t, New(Options{Client: serverClient(t, uri, "proj/me")}))
	var out ClaimResult
	if res := call(t, cs, "claim", map[string]any{"task_id": "mine", "paths": []string{"src/auth"}}, &out); !res.IsError || out.Code != "SCOPE_CONFLICT" {
		t.Fatalf("claim: %q %+v", text(res), out)
	}
	if _, err := holder.Release(ctx, "theirs", client.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	n := tp.next(t, EventConflictResolved)
	if n.Meta["task_id"] != "theirs" || n.Meta["holder"] != "proj/holder" {
		t.Fatalf("event %+v", n)
	}
	if res := call(t, cs, "claim", map[string]any{"task_id": "mine", "paths": []string{"src/auth"}}, nil); res.IsError {
		t.Fatalf("claim after the event: %q", text(res))
	}
}

func TestChannel_HandoffToTheAgent_Issue21_1(t *testing.T) {
	uri := startHub(t)
	from := dial(t, uri, "proj/from")
	cs, tp := connectTapped(t, New(Options{Client: serverClient(t, uri, "proj/me")}))
	call(t, cs, "status", nil, nil) // online before the handoff
	ctx := context.Background()
	if _, err := from.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := from.Handoff(ctx, client.HandoffRequest{TaskID: "T1", To: "proj/me", Note: "tests left"}); err != nil {
		t.Fatal(err)
	}
	n := tp.next(t, EventHandoff)
	if n.Meta["task_id"] != "T1" || n.Meta["from"] != "proj/from" || !strings.Contains(n.Content, "tests left") {
		t.Fatalf("event %+v", n)
	}
}

func TestChannel_LeaseNearingExpiryIsWarnedOnce_Issue21_1(t *testing.T) {
	uri := startHub(t)
	ctx := context.Background()
	// A claim made under the name before this server started (a CLI
	// claim, or a server that exited): nothing renews it.
	before := dial(t, uri, "proj/me")
	if _, err := before.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	before.Close()
	s := New(Options{Client: serverClient(t, uri, "proj/me"), Channel: ChannelOptions{LeaseLead: 2 * time.Hour}})
	cs, tp := connectTapped(t, s)
	n := tp.next(t, EventLeaseExpiring)
	if n.Meta["task_id"] != "T1" || n.Meta["urgency"] != "urgent" || !strings.Contains(n.Content, "renew") {
		t.Fatalf("event %+v", n)
	}
	s.ch.warnDue(time.Now()) // again: already warned of this epoch
	// A claim the server itself renews is never warned of.
	call(t, cs, "claim", map[string]any{"task_id": "T2", "paths": []string{"docs"}}, nil)
	s.ch.warnDue(time.Now())
	call(t, cs, "status", nil, nil)
	tp.none(t)
}

func TestChannel_BoardTaskBecomesReady_Issue21_1(t *testing.T) {
	uri := startHub(t)
	lead := dial(t, uri, "proj/lead")
	ctx := context.Background()
	for _, d := range []client.TaskDeclaration{
		{TaskID: "schema", Title: "the schema"},
		{TaskID: "api", Title: "the API", DependsOn: []string{"schema"}, SuggestedOwner: "proj/me"},
	} {
		if _, err := lead.TaskDeclare(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Options{Client: serverClient(t, uri, "proj/me")})
	_, tp := connectTapped(t, s)
	<-s.ch.started
	done := "done"
	if _, err := lead.TaskUpdate(ctx, client.BoardTaskUpdate{TaskID: "schema", Status: &done}); err != nil {
		t.Fatal(err)
	}
	if n := tp.next(t, EventTaskReady); n.Meta["task_id"] != "api" || n.Meta["depends_on"] != "schema" {
		t.Fatalf("event %+v", n)
	}
}

func TestChannel_AnEventIDIsDeliveredOnce(t *testing.T) {
	uri := startHub(t)
	s := New(Options{Client: serverClient(t, uri, "proj/me")})
	cs, tp := connectTapped(t, s)
	e := ChannelEvent{ID: "x:1", Kind: "test", Content: "once"}
	s.ch.emit(e)
	s.ch.emit(e)
	tp.next(t, "test")
	call(t, cs, "status", nil, nil)
	tp.none(t)
}

func TestChannel_EventsBeforeTheHandshakeWait_AtLeastOnce(t *testing.T) {
	uri := startHub(t)
	s := New(Options{Client: serverClient(t, uri, "proj/me")})
	for i := range channelPendingCap + 5 {
		s.ch.emit(ChannelEvent{ID: "early:" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), Kind: "early", Content: "before"})
	}
	if got := s.ch.pendingCount(); got != channelPendingCap {
		t.Fatalf("pending %d, want the bound %d", got, channelPendingCap)
	}
	_, tp := connectTapped(t, s)
	tp.next(t, "early")
}

func TestChannel_WatchesAreBounded(t *testing.T) {
	uri := startHub(t)
	holder := dial(t, uri, "proj/holder")
	ctx := context.Background()
	s := New(Options{Client: serverClient(t, uri, "proj/me"), Channel: ChannelOptions{Watches: 1}})
	connectTapped(t, s)
	for _, task := range []string{"A", "B"} {
		if _, err := holder.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{task}}); err != nil {
			t.Fatal(err)
		}
	}
	if !s.ch.watch("A", EventTaskFree, "") || s.ch.watch("A", EventTaskFree, "") || s.ch.watch("B", EventTaskFree, "") {
		t.Fatal("want one watch of A, no second of A, none of B past the bound of 1")
	}
}

func TestChannel_SDKConnection_Reachable(t *testing.T) {
	// notifySession reaches into the Go SDK's session; if an SDK upgrade
	// moves the connection, this fails instead of channel events going
	// silently missing.
	uri := startHub(t)
	s := New(Options{Client: serverClient(t, uri, "proj/me")})
	connectTapped(t, s)
	var wg sync.WaitGroup
	for ss := range s.MCP().Sessions() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := notifySession(context.Background(), ss, ChannelMethod, map[string]any{"content": "x"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}
