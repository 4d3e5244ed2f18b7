package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/mcpserver/mcptest"
)

// startHub serves an in-process hub and returns its ws:// URI.
func startHub(t *testing.T) string { return startHubWith(t, hub.Config{}) }

func startHubWith(t *testing.T, cfg hub.Config) string { return hubtest.Start(t, cfg) }

// dial connects an agent for the test's length.
func dial(t *testing.T, uri, name string) *client.Client { return hubtest.Agent(t, uri, name) }

// serverClient is the client a Server is given, dialled as synapse mcp
// dials it.
func serverClient(t *testing.T, uri, name string) *client.Client {
	return hubtest.Watcher(t, uri, name, Fanout)
}

// updates records the resources/updated notifications a client receives.
type updates = mcptest.Updates

func newUpdates() *updates { return mcptest.NewUpdates() }

func connectInMemory(t *testing.T, s *Server) (*mcp.ClientSession, *updates) {
	return connectInMemoryAt(t, s, "")
}

// connectInMemoryAt is connectInMemory at a protocol version.
func connectInMemoryAt(t *testing.T, s *Server, version string) (*mcp.ClientSession, *updates) {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	go s.Run(ctx, st)
	u := newUpdates()
	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{ResourceUpdatedHandler: u.Handler})
	cs, err := cl.Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); cancel(); s.Close() })
	return cs, u
}

// call calls a tool and decodes its structured content into out.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	return mcptest.Call(t, cs, tool, args, out)
}

func text(res *mcp.CallToolResult) string { return mcptest.Text(res) }

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	tools := mcptest.Tools(t, cs)
	for _, tl := range tools {
		if tl.Description == "" || len(tl.Description) > 100 || strings.Contains(tl.Description, "\n") {
			t.Errorf("tool %s: description should be one short line: %q", tl.Name, tl.Description)
		}
	}
	return mcptest.Names(tools)
}

// FullTools and MinimalTools are the two profiles' tool lists.
var (
	fullTools = []string{"board", "checkpoint", "claim", "claim_update", "handoff", "inbox", "release", "renew", "send", "status",
		"task_declare", "task_progress", "task_update", "wait", "who"}
	minimalToolList = []string{"claim", "inbox", "release", "send", "status", "wait"}
)

func TestTools_ProfilesListTheirTools(t *testing.T) {
	uri := startHub(t)
	for _, tc := range []struct {
		profile Profile
		want    []string
	}{{"", fullTools}, {ProfileFull, fullTools}, {ProfileMinimal, minimalToolList}} {
		s := New(Options{Client: serverClient(t, uri, "proj/p-"+string(tc.profile)+"x"), Profile: tc.profile})
		cs, _ := connectInMemory(t, s)
		if got := toolNames(t, cs); !slices.Equal(got, tc.want) {
			t.Errorf("profile %q: tools %v, want %v", tc.profile, got, tc.want)
		}
	}
	if _, err := ParseProfile("huge"); err == nil {
		t.Fatal("ParseProfile accepted an unknown profile")
	}
}

func TestTools_ClaimRefusalNamesTheHolderAndWhatToDo(t *testing.T) {
	uri := startHub(t)
	other := dial(t, uri, "proj/alpha")
	if _, err := other.Claim(context.Background(), client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil {
		t.Fatal(err)
	}
	cs, _ := connectInMemory(t, New(Options{Client: serverClient(t, uri, "proj/bravo")}))

	var out ClaimResult
	res := call(t, cs, "claim", map[string]any{"task_id": "T1"}, &out)
	if !res.IsError || out.Granted || out.Code != "LEASE_LIVE" || out.Holder != "proj/alpha" {
		t.Fatalf("refusal: isError %v %+v", res.IsError, out)
	}
	if msg := text(res); !strings.Contains(msg, "proj/alpha") || !strings.Contains(msg, "wait") {
		t.Fatalf("refusal text does not say who holds it and what to do: %q", msg)
	}
	out = ClaimResult{}
	res = call(t, cs, "claim", map[string]any{"task_id": "T2", "paths": []string{"src/x.go"}}, &out)
	if !res.IsError || out.Code != "SCOPE_CONFLICT" || out.ConflictTask != "T1" || !strings.Contains(text(res), `task_id "T1"`) {
		t.Fatalf("scope refusal: %+v %q", out, text(res))
	}
}

func TestTools_EveryToolSucceeds(t *testing.T) {
	uri := startHub(t)
	peer := dial(t, uri, "proj/peer")
	s := New(Options{Client: serverClient(t, uri, "proj/me")})
	cs, _ := connectInMemory(t, s)

	var cl ClaimResult
	if res := call(t, cs, "claim", map[string]any{"task_id": "T1", "paths": []string{"src/a.go"}, "note": "n"}, &cl); res.IsError || !cl.Granted || !cl.Claim.KeptAlive {
		t.Fatalf("claim: %q %+v", text(res), cl)
	}
	if got := s.Kept(); !slices.Equal(got, []string{"T1"}) {
		t.Fatalf("kept %v", got)
	}
	var rn ClaimResult
	if res := call(t, cs, "renew", map[string]any{"task_id": "T1"}, &rn); res.IsError || rn.Claim.Epoch <= cl.Claim.Epoch {
		t.Fatalf("renew: %q %+v", text(res), rn)
	}
	var up UpdateResult
	if res := call(t, cs, "claim_update", map[string]any{"task_id": "T1", "status": "working"}, &up); res.IsError || up.Status != "working" {
		t.Fatalf("claim_update: %q %+v", text(res), up)
	}
	var ck CheckpointResult
	if res := call(t, cs, "checkpoint", map[string]any{"task_id": "T1", "checkpoint": "half done"}, &ck); res.IsError || !ck.Saved {
		t.Fatalf("checkpoint: %q %+v", text(res), ck)
	}
	var st StatusResult
	if res := call(t, cs, "status", nil, &st); res.IsError || st.Name != "proj/me" || len(st.MyClaims) != 1 || st.MyClaims[0].Checkpoint != "half done" {
		t.Fatalf("status: %q %+v", text(res), st)
	}
	var w WhoResult
	if res := call(t, cs, "who", nil, &w); res.IsError || !slices.Contains(w.Online, "proj/peer") {
		t.Fatalf("who: %q %+v", text(res), w)
	}
	var sent SendResult
	if res := call(t, cs, "send", map[string]any{"to": "proj/peer", "text": "hello"}, &sent); res.IsError || !sent.Delivered {
		t.Fatalf("send: %q %+v", text(res), sent)
	}
	var td TaskResult
	if res := call(t, cs, "task_declare", map[string]any{"task_id": "B1", "title": "build it"}, &td); res.IsError || td.TaskID != "B1" {
		t.Fatalf("task_declare: %q %+v", text(res), td)
	}
	if res := call(t, cs, "task_update", map[string]any{"task_id": "B1", "status": "in_progress"}, &td); res.IsError || td.Status != "in_progress" {
		t.Fatalf("task_update: %q %+v", text(res), td)
	}
	var pr ProgressResult
	if res := call(t, cs, "task_progress", map[string]any{"task_id": "B1", "text": "started"}, &pr); res.IsError || !pr.Posted {
		t.Fatalf("task_progress: %q %+v", text(res), pr)
	}
	var b BoardResult
	if res := call(t, cs, "board", nil, &b); res.IsError || len(b.Tasks) != 1 || !strings.Contains(text(res), "B1") {
		t.Fatalf("board: %q %+v", text(res), b)
	}
	// Mail from the peer lands in the inbox; ack clears it.
	if _, err := peer.Send(context.Background(), "proj/me", "please review", client.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	var in InboxResult
	deadline := time.Now().Add(20 * time.Second)
	for len(in.Messages) == 0 && time.Now().Before(deadline) {
		call(t, cs, "inbox", nil, &in)
		time.Sleep(10 * time.Millisecond)
	}
	if len(in.Messages) != 1 || in.Messages[0].From != "proj/peer" || in.Messages[0].Text != "please review" || !in.Messages[0].Directed {
		t.Fatalf("inbox: %+v", in)
	}
	in = InboxResult{}
	if res := call(t, cs, "inbox", map[string]any{"ack_through": 1}, &in); res.IsError || in.Acked != 1 || in.Unread != 0 || len(in.Messages) != 0 {
		t.Fatalf("inbox ack: %q %+v", text(res), in)
	}
	// A wait on a free task returns at once.
	var wr WaitResult
	if res := call(t, cs, "wait", map[string]any{"task_id": "FREE", "timeout_seconds": 5}, &wr); res.IsError || !wr.Free || wr.Reason != "free" {
		t.Fatalf("wait: %q %+v", text(res), wr)
	}
	var rl ReleaseResult
	if res := call(t, cs, "release", map[string]any{"task_id": "T1", "evidence": []string{"go test ok"}}, &rl); res.IsError || !rl.Released {
		t.Fatalf("release: %q %+v", text(res), rl)
	}
	if got := s.Kept(); len(got) != 0 {
		t.Fatalf("still kept after release: %v", got)
	}
	// handoff: claim again and pass it to the peer.
	call(t, cs, "claim", map[string]any{"task_id": "T3"}, nil)
	var ho ClaimResult
	if res := call(t, cs, "handoff", map[string]any{"task_id": "T3", "to": "proj/peer"}, &ho); res.IsError || ho.Claim.Owner != "proj/peer" {
		t.Fatalf("handoff: %q %+v", text(res), ho)
	}
}

func TestTools_RefusalsAreToolErrors(t *testing.T) {
	uri := startHub(t)
	other := dial(t, uri, "proj/alpha")
	if _, err := other.Claim(context.Background(), client.ClaimRequest{TaskID: "T1"}); err != nil {
		t.Fatal(err)
	}
	cs, _ := connectInMemory(t, New(Options{Client: serverClient(t, uri, "proj/bravo")}))
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"renew", map[string]any{"task_id": "T1"}, "proj/alpha"},
		{"release", map[string]any{"task_id": "T1"}, "T1"},
		{"handoff", map[string]any{"task_id": "T1", "to": "proj/alpha"}, "T1"},
		{"claim_update", map[string]any{"task_id": "T1", "status": "working"}, "T1"},
		{"checkpoint", map[string]any{"task_id": "T1", "checkpoint": "x"}, "T1"},
		{"send", map[string]any{"to": "proj/nobody", "text": "hi"}, "who"},
		{"task_update", map[string]any{"task_id": "NOPE", "status": "done"}, "NOPE"},
		{"task_declare", map[string]any{"task_id": "", "title": "x"}, ""},
	} {
		res := call(t, cs, tc.tool, tc.args, nil)
		if !res.IsError || !strings.Contains(text(res), tc.want) {
			t.Errorf("%s: isError %v, text %q (want it to mention %q)", tc.tool, res.IsError, text(res), tc.want)
		}
	}
	// wait times out while proj/alpha holds T1: not an error, free=false.
	var wr WaitResult
	if res := call(t, cs, "wait", map[string]any{"task_id": "T1", "timeout_seconds": 0.2}, &wr); res.IsError || wr.Free || wr.Reason != "timeout" || wr.Holder != "proj/alpha" {
		t.Fatalf("wait timeout: %q %+v", text(res), wr)
	}
}

func TestWait_WokenWhenTheHolderReleases(t *testing.T) {
	uri := startHub(t)
	other := dial(t, uri, "proj/alpha")
	if _, err := other.Claim(context.Background(), client.ClaimRequest{TaskID: "T1"}); err != nil {
		t.Fatal(err)
	}
	cs, _ := connectInMemory(t, New(Options{Client: serverClient(t, uri, "proj/bravo")}))
	done := make(chan WaitResult, 1)
	go func() {
		var wr WaitResult
		call(t, cs, "wait", map[string]any{"task_id": "T1", "timeout_seconds": 30}, &wr)
		done <- wr
	}()
	time.Sleep(100 * time.Millisecond) // let the wait register; a late one finds the task free anyway
	if _, err := other.Release(context.Background(), "T1", client.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case wr := <-done:
		if !wr.Free {
			t.Fatalf("%+v", wr)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("wait was not woken")
	}
}

func TestResources_ReadAndNotifiedWhenAnotherAgentClaims(t *testing.T) {
	// 2025-06-18 is what Claude Code speaks (resources/subscribe); "" is
	// the SDK's latest (subscriptions/listen).
	for _, version := range []string{"2025-06-18", ""} {
		t.Run("protocol-"+version, func(t *testing.T) { testResources(t, version) })
	}
}

func testResources(t *testing.T, version string) {
	uri := startHub(t)
	other := dial(t, uri, "proj/alpha")
	cs, u := connectInMemoryAt(t, New(Options{Client: serverClient(t, uri, "proj/bravo")}), version)
	ctx := context.Background()
	res, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range res.Resources {
		uris = append(uris, r.URI)
	}
	slices.Sort(uris)
	if want := []string{BoardURI, ClaimsURI, InboxURI}; !slices.Equal(uris, want) {
		t.Fatalf("resources %v, want %v", uris, want)
	}
	for _, uri := range []string{BoardURI, ClaimsURI, InboxURI} {
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	u.Until(t, ClaimsURI, func(i int) {
		if _, err := other.Claim(ctx, client.ClaimRequest{TaskID: "T9", Paths: []string{"docs"}}); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := other.TaskDeclare(ctx, client.TaskDeclaration{TaskID: "B", Title: "b"}); err != nil {
		t.Fatal(err)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: ClaimsURI})
	if err != nil {
		t.Fatal(err)
	}
	var claims ClaimsResource
	if err := json.Unmarshal([]byte(rr.Contents[0].Text), &claims); err != nil || len(claims.ActiveClaims) != 1 || claims.ActiveClaims[0].Owner != "proj/alpha" {
		t.Fatalf("%v: %s", err, rr.Contents[0].Text)
	}
	u.Until(t, InboxURI, func(i int) {
		if _, err := other.Send(ctx, "proj/bravo", "T9 is mine", client.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	rr, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: InboxURI})
	if err != nil || !strings.Contains(rr.Contents[0].Text, "T9 is mine") {
		t.Fatalf("%v: %v", err, rr)
	}
	u.Until(t, BoardURI, func(i int) {
		if _, err := other.TaskProgress(ctx, "B", fmt.Sprint("note ", i), "note"); err != nil {
			t.Fatal(err)
		}
	})
	rr, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: BoardURI})
	if err != nil || !strings.Contains(rr.Contents[0].Text, `"task_id": "B"`) || !strings.Contains(rr.Contents[0].Text, "note 0") {
		t.Fatalf("%v: %v", err, rr)
	}
}

func TestKeeper_RenewsAClaimMadeThroughTheServer(t *testing.T) {
	uri := startHubWith(t, hub.Config{Limits: coord.Limits{MinTTL: 0.5}})
	s := New(Options{Client: serverClient(t, uri, "proj/me")})
	cs, _ := connectInMemory(t, s)
	var cl ClaimResult
	call(t, cs, "claim", map[string]any{"task_id": "T1", "ttl_seconds": 1.5}, &cl)
	if !cl.Granted {
		t.Fatalf("%+v", cl)
	}
	// Three leases later the claim is still ours, renewed (a fresh epoch
	// each time), not lapsed.
	watcher := dial(t, uri, "proj/watcher")
	deadline := time.Now().Add(20 * time.Second)
	for {
		time.Sleep(500 * time.Millisecond)
		st, err := watcher.State(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		now := st.Claim("T1")
		if now == nil || now.Owner != "proj/me" {
			t.Fatalf("the claim lapsed: %+v", now)
		}
		if now.Epoch >= cl.Claim.Epoch+3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not renewed: epoch %d", now.Epoch)
		}
	}
	var rl ReleaseResult
	if res := call(t, cs, "release", map[string]any{"task_id": "T1"}, &rl); res.IsError {
		t.Fatalf("release after renewals (fenced on the keeper's epoch): %s", text(res))
	}
}

func TestAddressedTo_FollowsTheHubsRecipientRule(t *testing.T) {
	for _, tc := range []struct {
		target         string
		directed, mine bool
	}{
		{"", false, true}, {"all", false, true},
		{"proj/me", true, true}, {"proj", true, true}, {"proj/other", false, false},
		{"proj/other, proj/me", true, true}, {"proj/*", false, true}, {"*", false, true},
		{"pro?/me", true, true}, {"proj/[lm]e", true, true}, {"proj/[!m]e", false, false}, {"other", false, false},
	} {
		d, m := addressedTo(tc.target, "proj/me")
		if d != tc.directed || m != tc.mine {
			t.Errorf("%q: directed %v mine %v, want %v %v", tc.target, d, m, tc.directed, tc.mine)
		}
	}
}

func TestInbox_MailKeptWhileOfflineIsFetchedAndAcked(t *testing.T) {
	store, err := journal.Open(filepath.Join(t.TempDir(), "hub.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	uri := startHubWith(t, hub.Config{Journal: store})
	t.Cleanup(func() { store.Close() })
	peer := dial(t, uri, "proj/peer")
	ctx := context.Background()
	// proj/me has been online once, so the hub knows the name; it is
	// offline when the message is sent.
	dial(t, uri, "proj/me").Close()
	if _, err := peer.Send(ctx, "proj/me", "sent while you were away", client.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	me := dial(t, uri, "proj/me")
	cs, _ := connectInMemory(t, New(Options{Client: me}))
	var in InboxResult
	if res := call(t, cs, "inbox", nil, &in); res.IsError || len(in.Messages) != 1 || in.Messages[0].Seq == 0 || in.Messages[0].Text != "sent while you were away" {
		t.Fatalf("inbox: %q %+v", text(res), in)
	}
	seq := in.Messages[0].Seq
	if res := call(t, cs, "inbox", map[string]any{"ack_through": in.Messages[0].ID}, &in); res.IsError || in.Acked != 1 || len(in.Messages) != 0 {
		t.Fatalf("ack: %q %+v", text(res), in)
	}
	if me.Acked() != seq {
		t.Fatalf("the client's mailbox cursor is %d, want %d", me.Acked(), seq)
	}
}
