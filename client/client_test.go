package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/hub"
)

func wantRefused(t *testing.T, err error, code string) *Refused {
	t.Helper()
	var ref *Refused
	if !errors.As(err, &ref) {
		t.Fatalf("err = %v, want a *Refused %s", err, code)
	}
	if ref.Code != code {
		t.Fatalf("refusal code %q (%s), want %s", ref.Code, ref.Message, code)
	}
	return ref
}

func TestDial_ExposesWelcomeAndFeatures(t *testing.T) {
	th := startHub(t, hub.Config{HubID: "syn-test0001"}, false)
	c := th.dial(t, "p/alpha")
	w := c.Welcome()
	if w.HubID != "syn-test0001" || w.ProtocolVersion != 2 || !w.HasFeature("wait_ready") || !c.HasFeature("scoped_fanout") {
		t.Fatalf("welcome %+v", w)
	}
	who, err := c.Who(testCtx(t))
	if err != nil || !slices.Contains(who.OnlineAgents, "p/alpha") {
		t.Fatalf("who %+v %v: the name must be bound when Dial returns", who, err)
	}
}

func TestDial_NameAlreadyOnlineIsRejected(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	th.dial(t, "p/alpha")
	_, err := Dial(testCtx(t), Options{URI: th.uri, Name: "p/alpha"})
	var rej *RejectedError
	if !errors.As(err, &rej) || rej.Code != 4009 || !strings.Contains(rej.Message, "already online") {
		t.Fatalf("err = %v, want a 4009 name conflict", err)
	}
}

// A hub that refuses the handshake (its Host and Origin policy answers 403)
// says why; Dial passes that on, so the user sees which flag to set.
func TestDial_RefusedHandshakeSaysWhy(t *testing.T) {
	const why = "synapse hub: Host 'hub.lan' is not allowed: …; restart it with --allow-host hub.lan"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, why, http.StatusForbidden)
	}))
	defer srv.Close()
	_, err := Dial(testCtx(t), Options{URI: "ws" + strings.TrimPrefix(srv.URL, "http"), Name: "p/a", NoReconnect: true})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "403: "+why) {
		t.Fatalf("err = %v, want ErrUnreachable carrying the hub's reason", err)
	}
}

func TestDial_NoHubIsUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := Dial(testCtx(t), Options{URI: "ws://" + addr, Name: "p/a"}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
}

func TestDial_SecuredHubChecksTheToken(t *testing.T) {
	th := startHub(t, hub.Config{Token: "s3cret"}, false)
	_, err := Dial(testCtx(t), Options{URI: th.uri, Name: "p/a", Token: "wrong"})
	var rej *RejectedError
	if !errors.As(err, &rej) || !rej.AuthFailed() || rej.Message != "Invalid authentication token." {
		t.Fatalf("err = %v, want auth denied", err)
	}
	c := th.dial(t, "p/a", func(o *Options) { o.Token = "s3cret" })
	if c.Welcome().ProtocolVersion != 2 {
		t.Fatalf("welcome %+v", c.Welcome())
	}
}

// Both hub flavours: memory only and journalled.
func eachHub(t *testing.T, cfg hub.Config, f func(t *testing.T, th *testHub)) {
	for _, j := range []bool{false, true} {
		name := "memory"
		if j {
			name = "journal"
		}
		t.Run(name, func(t *testing.T) { f(t, startHub(t, cfg, j)) })
	}
}

func TestClaim_GrantedThenRefusedWithHolder(t *testing.T) {
	eachHub(t, hub.Config{}, func(t *testing.T, th *testHub) {
		ctx := testCtx(t)
		a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
		cl, err := a.Claim(ctx, ClaimRequest{TaskID: "T1", Paths: []string{"src/core"}, Note: "first", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if cl.TaskID != "T1" || cl.Owner != "p/alpha" || cl.Epoch < 1 || cl.Status != "claimed" || cl.TTL() != time.Hour ||
			!slices.Equal(cl.Paths, []string{"src/core"}) || cl.Expires().Before(time.Now().Add(59*time.Minute)) {
			t.Fatalf("claim %+v", cl)
		}
		_, err = b.Claim(ctx, ClaimRequest{TaskID: "T1"})
		ref := wantRefused(t, err, "LEASE_LIVE")
		if ref.Holder != "p/alpha" || ref.TaskID != "T1" || ref.Message != "Task 'T1' is already claimed by p/alpha." {
			t.Fatalf("refusal %+v", ref)
		}
		_, err = b.Claim(ctx, ClaimRequest{TaskID: "T2", Paths: []string{"src/core/x.go"}})
		ref = wantRefused(t, err, "SCOPE_CONFLICT")
		if ref.Holder != "p/alpha" || ref.ConflictTask != "T1" {
			t.Fatalf("refusal %+v", ref)
		}
		// A renewal is a new grant with a fresh epoch.
		re, err := a.Renew(ctx, cl)
		if err != nil || re.Epoch <= cl.Epoch || re.TTL() != time.Hour {
			t.Fatalf("renew %+v %v", re, err)
		}
	})
}

func TestClaim_IdemKeyRetryGetsTheFirstAnswer(t *testing.T) {
	eachHub(t, hub.Config{}, func(t *testing.T, th *testHub) {
		ctx := testCtx(t)
		a := th.dial(t, "p/alpha")
		first, err := a.Claim(ctx, ClaimRequest{TaskID: "T1", IdemKey: "k1"})
		if err != nil {
			t.Fatal(err)
		}
		again, err := a.Claim(ctx, ClaimRequest{TaskID: "T1", IdemKey: "k1"})
		if err != nil || again.Epoch != first.Epoch {
			t.Fatalf("retry %+v %v: want the first grant (epoch %d)", again, err, first.Epoch)
		}
		_, err = a.Claim(ctx, ClaimRequest{TaskID: "T1", IdemKey: "k1", Note: "different"})
		wantRefused(t, err, "idempotency_conflict")
	})
}

func TestRelease_ReceiptAndRefusals(t *testing.T) {
	eachHub(t, hub.Config{}, func(t *testing.T, th *testHub) {
		ctx := testCtx(t)
		a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
		cl, err := a.Claim(ctx, ClaimRequest{TaskID: "T1"})
		if err != nil {
			t.Fatal(err)
		}
		wantRefused(t, errOnly(b.Release(ctx, "T1", ReleaseOptions{})), "NOT_OWNER")
		wantRefused(t, errOnly(a.Release(ctx, "T1", ReleaseOptions{Epoch: cl.Epoch + 100})), "EPOCH_STALE")
		r, err := a.Release(ctx, "T1", ReleaseOptions{Epoch: cl.Epoch, Evidence: []string{"go test ./... ok"}, KnownFailures: []string{"flaky"}})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Released || r.EpistemicStatus != "degraded" || !slices.Equal(r.Evidence, []string{"go test ./... ok"}) {
			t.Fatalf("receipt %+v", r)
		}
		wantRefused(t, errOnly(a.Release(ctx, "T1", ReleaseOptions{})), "NOT_CLAIMED")
	})
}

func errOnly[T any](_ T, err error) error { return err }

func TestUpdateAndCheckpoint(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
	cl, err := a.Claim(ctx, ClaimRequest{TaskID: "T1"})
	if err != nil {
		t.Fatal(err)
	}
	u, err := a.Update(ctx, UpdateRequest{TaskID: "T1", Status: "working", DataRef: "pr/7", Epoch: cl.Epoch})
	if err != nil || u.Status != "working" || u.Version != 1 || u.DataRef != "pr/7" {
		t.Fatalf("update %+v %v", u, err)
	}
	zero := int64(0)
	wantRefused(t, errOnly(a.Update(ctx, UpdateRequest{TaskID: "T1", Status: "done", ExpectedVersion: &zero})), "VERSION_CONFLICT")
	wantRefused(t, errOnly(a.Update(ctx, UpdateRequest{TaskID: "T1", Status: "claimed"})), "ILLEGAL_TRANSITION")
	wantRefused(t, errOnly(b.Update(ctx, UpdateRequest{TaskID: "T1", Status: "done"})), "NOT_OWNER")
	v, err := a.Checkpoint(ctx, "T1", "step 3 of 5", cl.Epoch)
	if err != nil || v != 2 {
		t.Fatalf("checkpoint version %d %v", v, err)
	}
	wantRefused(t, errOnly(b.Checkpoint(ctx, "T1", "x", 0)), "NOT_OWNER")
	wantRefused(t, errOnly(a.Checkpoint(ctx, "nope", "x", 0)), "TASK_NOT_FOUND")
}

func TestHandoff_ToOnlineAgentAndRefusedToOffline(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
	cl, err := a.Claim(ctx, ClaimRequest{TaskID: "T1", Paths: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, errOnly(a.Handoff(ctx, HandoffRequest{TaskID: "T1", To: "p/delta"})), "TARGET_OFFLINE")
	got, err := a.Handoff(ctx, HandoffRequest{TaskID: "T1", To: "p/bravo", Note: "yours", Epoch: cl.Epoch})
	if err != nil || got.Owner != "p/bravo" || got.PreviousOwner != "p/alpha" || got.Epoch <= cl.Epoch || got.Note != "yours" {
		t.Fatalf("handoff %+v %v", got, err)
	}
	if _, err := b.Release(ctx, "T1", ReleaseOptions{Epoch: got.Epoch}); err != nil {
		t.Fatalf("the new owner releases: %v", err)
	}
}

func TestSend_DirectedWithReceiptAndDeadLetter(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
	inbox := b.Subscribe(ctx, func(f Frame) bool { return f.Type == "chat" })
	s, err := a.Send(ctx, "p/bravo", "hello", SendOptions{ReceiptRequested: true, ClientMsgID: "a-1"})
	if err != nil {
		t.Fatal(err)
	}
	if s.MsgID < 1 || s.Receipt == nil || !s.Receipt.Delivered || !slices.Equal(s.Receipt.Recipients, []string{"p/bravo"}) {
		t.Fatalf("sent %+v receipt %+v", s, s.Receipt)
	}
	f := recv(t, inbox, "the chat at bravo")
	if f.Sender != "p/alpha" || f.Payload != "hello" || f.String("client_msg_id") != "a-1" {
		t.Fatalf("bravo got %s", f.Raw)
	}
	s, err = a.Send(ctx, "p/delta", "anyone?", SendOptions{ReceiptRequested: true})
	if err != nil || s.Receipt.Delivered || !s.Receipt.DeadLettered || s.Receipt.Reason != "no_online_recipient" {
		t.Fatalf("send to offline: %+v %v", s.Receipt, err)
	}
	if s, err := a.Send(ctx, "", "to all", SendOptions{}); err != nil || s.Receipt != nil {
		t.Fatalf("broadcast: %+v %v", s, err)
	}
	wantRefused(t, errOnly(a.Send(ctx, "p/bravo", "x", SendOptions{Channel: "secret"})), "not_channel_member")
}

func TestQueries_WhoStateBoard(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a := th.dial(t, "p/alpha", func(o *Options) { o.Roles = []string{"p/reviewer"} })
	th.dial(t, "p/bravo")
	who, err := a.Who(ctx)
	if err != nil || !slices.Equal(who.OnlineAgents, []string{"p/alpha", "p/bravo"}) || !slices.Equal(who.AgentRoles["p/alpha"], []string{"p/reviewer"}) {
		t.Fatalf("who %+v %v", who, err)
	}
	if _, err := a.Claim(ctx, ClaimRequest{TaskID: "T1", Paths: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	st, err := a.State(ctx)
	if err != nil || len(st.ActiveClaims) != 1 || st.Claim("T1") == nil || st.Claim("T1").Owner != "p/alpha" || st.Claim("T1").TTL() != time.Hour {
		t.Fatalf("state %+v %v", st, err)
	}

	task, err := a.TaskDeclare(ctx, TaskDeclaration{TaskID: "B1", Title: "plan", DependsOn: []string{"B0", "B0", "B1"}})
	if err != nil || task.Version != 1 || !slices.Equal(task.DependsOn, []string{"B0"}) || task.CreatedBy != "p/alpha" {
		t.Fatalf("declare %+v %v", task, err)
	}
	if _, err := a.TaskDeclare(ctx, TaskDeclaration{TaskID: "B0", Title: "base", DependsOn: []string{"B1"}}); err == nil {
		t.Fatal("a cycle must be refused")
	} else {
		wantRefused(t, err, "DEPENDENCY_CYCLE")
	}
	wantRefused(t, errOnly(a.TaskDeclare(ctx, TaskDeclaration{TaskID: "B2"})), "TITLE_REQUIRED")
	done := "done"
	one := int64(1)
	up, err := a.TaskUpdate(ctx, BoardTaskUpdate{TaskID: "B1", Status: &done, ExpectedVersion: &one})
	if err != nil || up.Status != "done" || up.Version != 2 {
		t.Fatalf("task update %+v %v", up, err)
	}
	wantRefused(t, errOnly(a.TaskUpdate(ctx, BoardTaskUpdate{TaskID: "B1", Status: &done, ExpectedVersion: &one})), "VERSION_CONFLICT")
	wantRefused(t, errOnly(a.TaskUpdate(ctx, BoardTaskUpdate{TaskID: "nope", Status: &done})), "BOARD_TASK_NOT_FOUND")
	n, err := a.TaskProgress(ctx, "B1", "half way", "")
	if err != nil || n.Kind != "note" || n.Author != "p/alpha" || n.Text != "half way" {
		t.Fatalf("progress %+v %v", n, err)
	}
	wantRefused(t, errOnly(a.TaskProgress(ctx, "B1", "x", "gossip")), "UNKNOWN_PROGRESS_KIND")
	board, err := a.Board(ctx)
	if err != nil || len(board.Tasks) != 1 || len(board.Progress) != 1 || len(board.Ready) != 0 {
		t.Fatalf("board %+v %v", board, err)
	}
}

// Wait returns because of the hub's wait_ready, not by polling: polling is
// set far beyond the test's deadline, and the wakeup's reason is the one
// the wait_ready frame carries.
func TestWait_WokenByWaitReadyOnRelease(t *testing.T) {
	defer setPoll(time.Hour)()
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
	if _, err := a.Claim(ctx, ClaimRequest{TaskID: "T1"}); err != nil {
		t.Fatal(err)
	}
	registered := make(chan string, 1)
	woke := make(chan *Wakeup, 1)
	go func() {
		w, err := b.WaitWithNotice(ctx, "T1", func(holder string) { registered <- holder })
		if err != nil {
			t.Error(err)
		}
		woke <- w
	}()
	if h := <-registered; h != "p/alpha" {
		t.Fatalf("waiting on holder %q", h)
	}
	if _, err := a.Release(ctx, "T1", ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-woke:
		if w == nil || w.Reason != "release" || w.Holder != "p/alpha" {
			t.Fatalf("wakeup %+v", w)
		}
	case <-ctx.Done():
		t.Fatal("Wait did not return after the release")
	}
	if _, err := b.Claim(ctx, ClaimRequest{TaskID: "T1"}); err != nil {
		t.Fatalf("the woken waiter claims: %v", err)
	}
}

func setPoll(d time.Duration) func() {
	old := pollInterval
	pollInterval = d
	return func() { pollInterval = old }
}

func TestWait_FreeTaskAndRefusals(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
	if w, err := a.Wait(ctx, "T9"); err != nil || w.Reason != "free" {
		t.Fatalf("wait on a free task: %+v %v", w, err)
	}
	if _, err := a.Claim(ctx, ClaimRequest{TaskID: "T1", Paths: []string{"one"}}); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, errOnly(a.Wait(ctx, "T1")), "ALREADY_HOLDER")
	// b holds T2 and waits on T1 (held by a); a waiting on T2 would deadlock.
	if _, err := b.Claim(ctx, ClaimRequest{TaskID: "T2", Paths: []string{"two"}}); err != nil {
		t.Fatal(err)
	}
	registered := make(chan string, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go b.WaitWithNotice(wctx, "T1", func(h string) { registered <- h })
	<-registered
	ref := wantRefused(t, errOnly(a.Wait(ctx, "T2")), "DEADLOCK")
	if ref.Holder != "p/bravo" {
		t.Fatalf("deadlock refusal %+v", ref)
	}
}

// On a hub that does not announce wait_ready, Wait polls the claim.
func TestWait_PollsAHubWithoutWaitReady(t *testing.T) {
	defer setPoll(10 * time.Millisecond)()
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
	b.mu.Lock()
	b.welcome.Features = nil
	b.mu.Unlock()
	if _, err := a.Claim(ctx, ClaimRequest{TaskID: "T1"}); err != nil {
		t.Fatal(err)
	}
	registered := make(chan string, 1)
	woke := make(chan *Wakeup, 1)
	go func() {
		w, _ := b.WaitWithNotice(ctx, "T1", func(h string) { registered <- h })
		woke <- w
	}()
	<-registered
	if _, err := a.Release(ctx, "T1", ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := <-woke; w == nil || w.Reason != "poll" {
		t.Fatalf("wakeup %+v", w)
	}
}

// The keeper renews a 1 s lease: a waiter is never woken by its expiry,
// only by the final release.
func TestKeepLease_RenewsUntilReleased(t *testing.T) {
	th := startHub(t, hub.Config{Limits: coord.Limits{MinTTL: 1}}, false)
	ctx := testCtx(t)
	a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
	grants := a.Subscribe(ctx, func(f Frame) bool { return f.Type == "claim_granted" && f.String("task_id") == "T1" })
	cl, err := a.Claim(ctx, ClaimRequest{TaskID: "T1", TTL: time.Second})
	if err != nil || cl.TTL() != time.Second {
		t.Fatalf("claim %+v %v", cl, err)
	}
	recv(t, grants, "the first grant")
	registered := make(chan string, 1)
	woke := make(chan *Wakeup, 1)
	go func() {
		w, _ := b.WaitWithNotice(ctx, "T1", func(h string) { registered <- h })
		woke <- w
	}()
	<-registered
	k := a.KeepLease(ctx, cl)
	start := time.Now()
	epoch := cl.Epoch
	for i := 0; i < 4; i++ { // four renewals span more than the 1 s lease
		f := recv(t, grants, "a renewal")
		if f.Int("epoch") <= epoch {
			t.Fatalf("renewal epoch %d after %d", f.Int("epoch"), epoch)
		}
		epoch = f.Int("epoch")
	}
	if time.Since(start) < time.Second {
		t.Fatalf("four renewals in %v: the keeper renews too often", time.Since(start))
	}
	if _, err := k.Release(ctx, ReleaseOptions{Evidence: []string{"done"}}); err != nil {
		t.Fatal(err)
	}
	if w := <-woke; w == nil || w.Reason != "release" {
		t.Fatalf("the waiter woke with %+v: the lease lapsed while kept", w)
	}
	if _, ok := <-k.Lost(); ok {
		t.Fatal("a released lease was reported lost")
	}
}

// A lease that lapsed and was taken by another agent is reported lost at
// the keeper's next renewal.
func TestKeepLease_ReportsLossToAnotherAgent(t *testing.T) {
	th := startHub(t, hub.Config{Limits: coord.Limits{MinTTL: 1}}, false)
	ctx := testCtx(t)
	a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
	cl, err := a.Claim(ctx, ClaimRequest{TaskID: "T1", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Wait(ctx, "T1")
	if err != nil || w.Reason != "expiry" {
		t.Fatalf("wait for the expiry: %+v %v", w, err)
	}
	if _, err := b.Claim(ctx, ClaimRequest{TaskID: "T1"}); err != nil {
		t.Fatal(err)
	}
	k := a.KeepLease(ctx, cl)
	select {
	case err := <-k.Lost():
		ref := wantRefused(t, err, "LEASE_LIVE")
		if ref.Holder != "p/bravo" {
			t.Fatalf("loss %+v", ref)
		}
	case <-ctx.Done():
		t.Fatal("the keeper did not report the loss")
	}
	<-k.Done()
}

func TestSubscribe_BroadcastsAndSlowSubscriberDrops(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a := th.dial(t, "p/alpha")
	b := th.dial(t, "p/bravo", func(o *Options) { o.SubscriberBuffer, o.Fanout = 1, FanoutFull })
	grants := b.Subscribe(ctx, func(f Frame) bool { return f.Type == "claim_granted" })
	for _, task := range []string{"T1", "T2", "T3"} {
		if _, err := a.Claim(ctx, ClaimRequest{TaskID: task, Paths: []string{task}}); err != nil {
			t.Fatal(err)
		}
	}
	// b's reader handles frames in order: once b's own query is answered,
	// the three grants before it were dispatched.
	if _, err := b.Who(ctx); err != nil {
		t.Fatal(err)
	}
	if f := recv(t, grants, "a grant"); f.String("owner") != "p/alpha" || f.String("task_id") != "T1" {
		t.Fatalf("got %s", f.Raw)
	}
	if d := b.Stats().Dropped; d != 2 {
		t.Fatalf("dropped %d, want 2 (buffer of 1, three grants)", d)
	}
	cctx, cancel := context.WithCancel(ctx)
	ch := a.Subscribe(cctx, nil)
	cancel()
	for range ch { // closed once the context ends
	}
}

func TestReconnect_AfterTheServerDropsTheSocket(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a := th.dial(t, "p/alpha", func(o *Options) { o.ReconnectMin = 10 * time.Millisecond })
	b := th.dial(t, "p/bravo")
	// A call in flight when the socket drops fails with ErrDisconnected: a
	// keepalive heartbeat gets no reply, so this one stays in flight.
	inflight := make(chan error, 1)
	go func() {
		_, err := a.do(ctx, a.envelope("heartbeat", "alive"), func(Frame) (bool, bool) { return false, false })
		inflight <- err
	}()
	waitUntil(t, "the call is in flight", func() bool { a.mu.Lock(); defer a.mu.Unlock(); return len(a.pending) == 1 })
	th.ln.dropAll()
	if err := <-inflight; !errors.Is(err, ErrDisconnected) {
		t.Fatalf("in-flight call: %v, want ErrDisconnected", err)
	}
	waitUntil(t, "both clients reconnected", func() bool { return a.Stats().Reconnects >= 1 && b.Stats().Reconnects >= 1 })
	if err := a.awaitUp(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Claim(ctx, ClaimRequest{TaskID: "T1"}); err != nil {
		t.Fatalf("claim after reconnect: %v", err)
	}
	who, err := b.Who(ctx)
	if err != nil || !slices.Contains(who.OnlineAgents, "p/alpha") {
		t.Fatalf("who after reconnect: %+v %v", who, err)
	}
}

func TestClose_FailsCallsAndClosesSubscriptions(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	a := th.dial(t, "p/alpha")
	ch := a.Subscribe(context.Background(), nil)
	a.Close()
	for range ch {
	}
	if _, err := a.Who(testCtx(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// By default a client registers with its own fan-out and no presence:
// another agent's grants, even in its own namespace, are not written to its
// socket, nor presence, while everything its own calls act on still
// reaches it — its grants, a handoff to it, its wait's wake-up, chats to
// all and to it. A client with FanoutFull gets every broadcast, as the
// reference sends; one with PresenceCompact, the presence changes.
func TestFanout_OwnByDefaultStillGetsWhatItActsOn(t *testing.T) {
	th := startHub(t, hub.Config{}, false)
	ctx := testCtx(t)
	a, b := th.dial(t, "p/alpha"), th.dial(t, "p/bravo")
	w := th.dial(t, "p/watch", func(o *Options) { o.Fanout = FanoutFull })
	if !a.Welcome().HasFeature("own_fanout") {
		t.Fatalf("welcome features %v lack own_fanout", a.Welcome().Features)
	}
	isBroadcast := func(f Frame) bool {
		switch f.Type {
		case "claim_granted", "release_granted", "handoff_granted", "ledger_task_posted", "chat", "presence_update":
			return true
		}
		return false
	}
	bSees, wSees := b.Subscribe(ctx, isBroadcast), w.Subscribe(ctx, isBroadcast)
	// drain reads what a subscription got up to a query answered now: the
	// hub writes a socket's frames in order.
	drain := func(c *Client, ch <-chan Frame) []string {
		t.Helper()
		if _, err := c.Who(ctx); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			select {
			case f := <-ch:
				what := f.String("task_id")
				switch f.Type {
				case "chat":
					what = f.Payload
				case "presence_update":
					what = f.String("agent")
				case "ledger_task_posted":
					var task struct {
						TaskID string `json:"task_id"`
					}
					_ = f.DecodeField("task", &task)
					what = task.TaskID
				}
				got = append(got, f.Type+" "+what)
			default:
				return got
			}
		}
	}
	drain(b, bSees)
	drain(w, wSees)

	cl, err := a.Claim(ctx, ClaimRequest{TaskID: "T1", Paths: []string{"src"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Claim(ctx, ClaimRequest{TaskID: "T2", Paths: []string{"docs"}}); err != nil {
		t.Fatal(err)
	}
	if got := drain(b, bSees); len(got) != 0 {
		t.Fatalf("bravo, with its own fan-out, was sent alpha's grants: %v", got)
	}
	if got := drain(w, wSees); !slices.Equal(got, []string{"claim_granted T1", "claim_granted T2"}) {
		t.Fatalf("the full fan-out watcher got %v, want both grants", got)
	}

	// A handoff names bravo: it is told.
	if _, err := a.Handoff(ctx, HandoffRequest{TaskID: "T1", To: "p/bravo", Epoch: cl.Epoch}); err != nil {
		t.Fatal(err)
	}
	if got := drain(b, bSees); !slices.Equal(got, []string{"handoff_granted T1"}) {
		t.Fatalf("bravo got %v, want the handoff to it", got)
	}
	// Its wait is woken when alpha releases T2.
	woke := make(chan error, 1)
	registered := make(chan string, 1)
	go func() {
		_, err := b.WaitWithNotice(ctx, "T2", func(h string) { registered <- h })
		woke <- err
	}()
	<-registered
	if _, err := a.Release(ctx, "T2", ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-woke; err != nil {
		t.Fatalf("bravo's wait: %v", err)
	}
	// Chats to all and to bravo reach it; a board task it declares is its own.
	if _, err := a.Send(ctx, "", "to all", SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Send(ctx, "p/bravo", "to you", SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TaskDeclare(ctx, TaskDeclaration{TaskID: "B1", Title: "bravo's"}); err != nil {
		t.Fatal(err)
	}
	got := drain(b, bSees)
	want := []string{"chat to all", "chat to you", "ledger_task_posted B1"}
	if !slices.Equal(got, want) {
		t.Fatalf("bravo got %v, want %v", got, want)
	}
	// Presence reaches those that ask (the window may hold it back), and
	// only those.
	d := th.dial(t, "q/delta", func(o *Options) { o.Presence = PresenceCompact })
	dSees := d.Subscribe(ctx, isBroadcast)
	th.dial(t, "q/charlie")
	for f := recv(t, dSees, "charlie's join"); f.Type != "presence_update" || f.String("agent") != "q/charlie"; f = recv(t, dSees, "charlie's join") {
	}
	if got := drain(b, bSees); len(got) != 0 {
		t.Fatalf("bravo, asking for no presence, got %v", got)
	}
}

// referenceHandshake serves one socket as the reference hub does at
// registration (the handshake trace, PROTOCOL.md §1.4, §1.4 step 18): a
// welcome without features, the joiner's presence_update, and "Unknown
// message type" for a verb it lacks, such as ping. It records what it read.
func referenceHandshake(t *testing.T, got chan<- string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := r.Context()
		send := func(s string) { _ = ws.Write(ctx, websocket.MessageText, []byte(s)) }
		send(`{"sender":"SynapseHub","target":"self","type":"welcome","payload":"Welcome to Synapse","timestamp":1,"hub_id":"ref","connected_clients":1,"online_agents":[],"protocol_version":2}`)
		for {
			_, data, err := ws.Read(ctx)
			if err != nil {
				return
			}
			f, err := parseFrame(data)
			if err != nil {
				continue
			}
			got <- f.Type
			switch f.Type {
			case "heartbeat":
				if f.Payload == "online" {
					send(`{"sender":"SynapseHub","target":"all","type":"presence_update","payload":"Presence update","timestamp":1,"hub_id":"ref","online_agents":["` + f.Sender + `"],"event":"joined","agent":"` + f.Sender + `"}`)
				}
			case "who_request":
				send(`{"sender":"SynapseHub","target":"` + f.Sender + `","type":"who_snapshot","payload":"Who snapshot","timestamp":1,"online_agents":["` + f.Sender + `"]}`)
			default:
				send(`{"sender":"SynapseHub","target":"` + f.Sender + `","type":"error","payload":"Unknown message type '` + f.Type + `'.","timestamp":1}`)
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Dial's registration ack is a ping, answered by a pong or, on a hub
// without the verb (the reference), by its "Unknown message type" error:
// either way Dial returns once the registration was handled, and never
// asks for the roster to find out.
func TestDial_RegistersWithAHubWithoutPing(t *testing.T) {
	got := make(chan string, 16)
	srv := referenceHandshake(t, got)
	ctx := testCtx(t)
	c, err := Dial(ctx, Options{URI: "ws" + strings.TrimPrefix(srv.URL, "http"), Name: "p/alpha", NoReconnect: true})
	if err != nil {
		t.Fatalf("dial a reference-shaped hub: %v", err)
	}
	defer c.Close()
	if c.Welcome().HubID != "ref" || c.HasFeature("ping") {
		t.Fatalf("welcome %+v", c.Welcome())
	}
	if a, b := <-got, <-got; a != "heartbeat" || b != "ping" {
		t.Fatalf("the client sent %s then %s, want its registration then a ping", a, b)
	}
	select {
	case typ := <-got:
		t.Fatalf("Dial sent a %s after the ping", typ)
	default:
	}
}
