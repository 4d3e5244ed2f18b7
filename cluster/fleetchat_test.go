package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster/clustertest"
)

// Chats on a fleet (issue 22 item 2): broadcasts, globs and roles reach
// every hub's matching agents in each sender's order, with the etcd
// revision as msg_id; history is the fleet's and outlives the hub a chat
// was sent through; a chat nobody in the fleet can take dead-letters once.

// fleetOf starts an embedded etcd and one hub per id on it.
func fleetOf(t *testing.T, ids ...string) (*clustertest.Etcd, []*fleetHub) {
	t.Helper()
	x := clustertest.Start(t, true)
	var hubs []*fleetHub
	for _, id := range ids {
		hubs = append(hubs, startFleetHub(t, x.Endpoint, id, 3*time.Second))
	}
	return x, hubs
}

// dialWith is dial with options (roles).
func dialWith(t *testing.T, o client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o.NoReconnect = true
	c, err := client.Dial(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// seesAgents waits until c's who lists every name (the other hubs'
// rosters reached its hub).
func seesAgents(t *testing.T, c *client.Client, names ...string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		w, err := c.Who(ctx)
		cancel()
		if err == nil && !slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(w.OnlineAgents, n) }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never saw %v in who: %+v %v", c.Name(), names, w, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// collect gathers the chats c receives from sender until n came or the
// deadline passed.
func collect(ctx context.Context, ch <-chan client.Frame, n int) []client.Frame {
	var got []client.Frame
	for len(got) < n {
		select {
		case f := <-ch:
			got = append(got, f)
		case <-ctx.Done():
			return got
		}
	}
	return got
}

// rawSender is a socket bound to name that writes chat frames without
// waiting for their echoes: the hub sees them back to back.
func rawSender(t *testing.T, uri, name string) func(target, payload string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, uri, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	go func() { // drain what the hub sends
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	write := func(m map[string]any) {
		b, _ := json.Marshal(m)
		wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ws.Write(wctx, websocket.MessageText, b); err != nil {
			t.Errorf("raw write: %v", err)
		}
	}
	write(map[string]any{"sender": name, "target": "System", "type": "heartbeat", "payload": "online", "fanout": "full", "presence": "none"})
	return func(target, payload string) {
		write(map[string]any{"sender": name, "target": target, "type": "chat", "payload": payload})
	}
}

// A broadcast sent through one hub reaches the agents of every other hub,
// each sender's chats in the order it sent them, with msg_ids increasing
// in the order every agent receives them (one total order, fleet-wide):
// two senders on two hubs write back to back, without waiting for echoes.
func TestFleet_BroadcastReachesEveryHubInSendersOrder_Issue22(t *testing.T) {
	_, hubs := fleetOf(t, "syn-a", "syn-b", "syn-c")
	a, b, c := hubs[0], hubs[1], hubs[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bob := dialWith(t, client.Options{URI: b.uri, Name: "proj/bob", SubscriberBuffer: 1024})
	carol := dialWith(t, client.Options{URI: c.uri, Name: "proj/carol", SubscriberBuffer: 1024})
	fromSenders := func(f client.Frame) bool {
		return f.Type == "chat" && (f.Sender == "proj/alice" || f.Sender == "proj/dave")
	}
	atBob, atCarol := bob.Subscribe(ctx, fromSenders), carol.Subscribe(ctx, fromSenders)
	alice, dave := rawSender(t, a.uri, "proj/alice"), rawSender(t, c.uri, "proj/dave")
	const n = 150
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			dave("all", "dave "+strconv.Itoa(i))
		}
	}()
	for i := range n {
		alice("all", "alice "+strconv.Itoa(i))
	}
	<-done
	for _, r := range []struct {
		who string
		ch  <-chan client.Frame
	}{{"proj/bob on syn-b", atBob}, {"proj/carol on syn-c", atCarol}} {
		got := collect(ctx, r.ch, 2*n)
		if len(got) != 2*n {
			t.Fatalf("%s got %d of %d broadcasts", r.who, len(got), 2*n)
		}
		next := map[string]int{}
		var last int64
		for _, f := range got {
			id := f.Int("msg_id")
			if id <= last {
				t.Fatalf("%s: msg_id %d after %d: not one increasing order", r.who, id, last)
			}
			last = id
			who, num, _ := strings.Cut(f.Payload, " ")
			if want := strconv.Itoa(next[who]); num != want {
				t.Fatalf("%s: %q from %s where %s's chat %s was next: the sender's order was lost", r.who, f.Payload, f.Sender, who, want)
			}
			next[who]++
		}
	}
}

// A glob or a role chat sent through one hub reaches the matching agents
// of the other hubs, and only them; its receipt says delivered.
func TestFleet_GlobAndRoleChatsReachOnlyMatchingAgentsOnOtherHubs_Issue22(t *testing.T) {
	_, hubs := fleetOf(t, "syn-a", "syn-b", "syn-c")
	a, b, c := hubs[0], hubs[1], hubs[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := dial(t, a.uri, "proj/alice")
	x := dial(t, b.uri, "team/x")
	y := dialWith(t, client.Options{URI: c.uri, Name: "team/y", Roles: []string{"team/reviewer"}})
	z := dial(t, b.uri, "other/z")
	seesAgents(t, alice, "team/x", "team/y", "other/z")
	fromAlice := func(f client.Frame) bool { return f.Type == "chat" && f.Sender == "proj/alice" }
	atX, atY, atZ := x.Subscribe(ctx, fromAlice), y.Subscribe(ctx, fromAlice), z.Subscribe(ctx, fromAlice)

	glob, err := alice.Send(ctx, "team/*", "to the team", client.SendOptions{ReceiptRequested: true})
	if err != nil || glob.Receipt == nil || !glob.Receipt.Delivered {
		t.Fatalf("glob send: %+v %v; want delivered", glob, err)
	}
	role, err := alice.Send(ctx, "team/reviewer", "please review", client.SendOptions{ReceiptRequested: true})
	if err != nil || role.Receipt == nil || !role.Receipt.Delivered {
		t.Fatalf("role send: %+v %v; want delivered", role, err)
	}
	wait, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	defer cancelWait()
	if got := collect(wait, atX, 1); len(got) != 1 || got[0].Payload != "to the team" || got[0].Int("msg_id") != glob.MsgID {
		t.Fatalf("team/x on syn-b got %v; want the glob chat (msg_id %d)", payloads(got), glob.MsgID)
	}
	if got := collect(wait, atY, 2); !slices.Equal(payloads(got), []string{"to the team", "please review"}) {
		t.Fatalf("team/y on syn-c got %v; want the glob and the role chat", payloads(got))
	}
	// Anything else for x or z would have come by now: the role chat was
	// relayed after the glob chat on every hub (one revision order).
	settle, cancelSettle := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelSettle()
	if got := collect(settle, atX, 1); len(got) != 0 {
		t.Fatalf("team/x (no role) got %v", payloads(got))
	}
	if got := collect(settle, atZ, 1); len(got) != 0 {
		t.Fatalf("other/z (not team) got %v", payloads(got))
	}
}

func payloads(fs []client.Frame) []string {
	out := []string{}
	for _, f := range fs {
		out = append(out, f.Payload)
	}
	return out
}

// history_request on any hub shows the chats sent through another, and
// still does after that hub is killed; a hub that starts afterwards
// rebuilds the same history from etcd; resume since a msg_id gives what
// came after it.
func TestFleet_HistoryIsTheFleetsAndSurvivesTheSendersHub_Issue22(t *testing.T) {
	x, hubs := fleetOf(t, "syn-a", "syn-b")
	a, b := hubs[0], hubs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := dial(t, a.uri, "proj/alice")
	var ids []int64
	for i := range 3 {
		s, err := alice.Send(ctx, "all", "news "+strconv.Itoa(i), client.SendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.MsgID)
	}
	want := []string{"news 0", "news 1", "news 2"}
	history := func(uri, name string) []string {
		c := dial(t, uri, name)
		defer c.Close()
		f, err := c.Admin(ctx, "history_request", map[string]any{"limit": 50}, "history_snapshot")
		if err != nil {
			t.Fatalf("history on %s: %v", uri, err)
		}
		var snap struct {
			History []struct {
				Sender  string `json:"sender"`
				Payload string `json:"payload"`
				MsgID   int64  `json:"msg_id"`
			} `json:"history"`
		}
		if err := json.Unmarshal(f.Raw, &snap); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range snap.History {
			if e.Sender == "proj/alice" {
				got = append(got, e.Payload)
			}
		}
		return got
	}
	eventually := func(what string, uri, name string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := history(uri, name)
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("history %s: %v; want %v", what, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	eventually("on syn-b", b.uri, "proj/bob")
	a.crash()
	eventually("on syn-b after syn-a died", b.uri, "proj/bob")
	c := startFleetHub(t, x.Endpoint, "syn-c", 3*time.Second)
	eventually("on syn-c, started after syn-a died", c.uri, "proj/carol")

	carol := dial(t, c.uri, "proj/carol2")
	f, err := carol.Admin(ctx, "resume_request", map[string]any{"since": ids[0]}, "resume_snapshot")
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Messages []struct {
			Payload string `json:"payload"`
			MsgID   int64  `json:"msg_id"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(f.Raw, &snap); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range snap.Messages {
		got = append(got, fmt.Sprint(m.Payload, "@", m.MsgID))
	}
	if wantResume := []string{fmt.Sprint("news 1@", ids[1]), fmt.Sprint("news 2@", ids[2])}; !slices.Equal(got, wantResume) {
		t.Fatalf("resume since %d on syn-c: %v; want %v (msg_ids are the fleet's)", ids[0], got, wantResume)
	}
}

// A chat to a role nobody holds anywhere in the fleet is reported not
// delivered and dead-letters once, at the sender's hub; one to a role
// held on another hub is delivered and dead-letters nowhere.
func TestFleet_ChatToARoleNobodyHoldsDeadLettersOnce_Issue22(t *testing.T) {
	_, hubs := fleetOf(t, "syn-a", "syn-b", "syn-c")
	a, b, c := hubs[0], hubs[1], hubs[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := dial(t, a.uri, "proj/alice")
	dialWith(t, client.Options{URI: b.uri, Name: "proj/bob", Roles: []string{"proj/builder", "builder"}})
	seesAgents(t, alice, "proj/bob")
	for _, to := range []string{"reviewers", "proj/ghost1, proj/ghost2", "proj/nobody-role"} {
		s, err := alice.Send(ctx, to, "anyone?", client.SendOptions{ReceiptRequested: true})
		if err != nil || s.Receipt == nil || s.Receipt.Delivered {
			t.Fatalf("send to %q, which nobody in the fleet is or holds: %+v %v; want not delivered", to, s, err)
		}
	}
	for _, to := range []string{"proj/builder", "builder"} {
		s, err := alice.Send(ctx, to, "build it", client.SendOptions{ReceiptRequested: true})
		if err != nil || s.Receipt == nil || !s.Receipt.Delivered {
			t.Fatalf("send to the role %q held on syn-b: %+v %v; want delivered", to, s, err)
		}
	}
	time.Sleep(300 * time.Millisecond) // every hub relayed both (a dead letter would be counted by now)
	counts := map[string]int64{}
	for _, h := range []*fleetHub{a, b, c} {
		st, err := dial(t, h.uri, "proj/reader-"+h.id).State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range st.DeadLetters {
			counts[d.Target] += d.Count
		}
	}
	want := map[string]int64{"reviewers": 1, "proj/ghost1, proj/ghost2": 1, "proj/nobody-role": 1}
	if !maps.Equal(counts, want) {
		t.Fatalf("dead letters across the fleet: %v; want %v (each once, the held roles never)", counts, want)
	}
}
