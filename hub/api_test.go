package hub

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/dashboard"
	"github.com/synapse-hub/synapse/federation"
)

// The dashboard's JSON API (package dashboard, docs/api.md), over the hub's real port.

// apiGet fetches path from the hub with the given headers.
func (th *testHub) apiGet(path string, header map[string]string) *http.Response {
	th.t.Helper()
	req, err := http.NewRequest("GET", th.srv.URL+path, nil)
	if err != nil {
		th.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: testDeadline, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		th.t.Fatal(err)
	}
	return resp
}

// state reads /api/state.
func (th *testHub) state(header map[string]string) dashboard.APIState {
	th.t.Helper()
	resp := th.apiGet("/api/state", header)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		th.t.Fatalf("/api/state = %d %s", resp.StatusCode, b)
	}
	var st dashboard.APIState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		th.t.Fatal(err)
	}
	return st
}

// sseEvent is one server-sent event as a test reads it.
type sseEvent struct {
	id, typ string
	data    map[string]any
}

// events opens /api/events and delivers its events on a channel until the
// test ends.
func (th *testHub) events(header map[string]string) <-chan sseEvent {
	th.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	th.t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", th.srv.URL+"/api/events", nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		th.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		th.t.Fatalf("/api/events = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 1024)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.typ != "" {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.typ = line[7:]
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(line[6:]), &ev.data)
			}
		}
	}()
	return out
}

// expectEvent waits for an event of type typ ("" = any) that ok accepts.
func expectEvent(t *testing.T, ch <-chan sseEvent, typ string, ok func(map[string]any) bool) sseEvent {
	t.Helper()
	deadline := time.After(testDeadline)
	for {
		select {
		case ev, open := <-ch:
			if !open {
				t.Fatalf("event stream ended while waiting for %s", typ)
			}
			if (typ == "" || ev.typ == typ) && (ok == nil || ok(ev.data)) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event within %v", typ, testDeadline)
		}
	}
}

func claimFrame(agent, task, worktree string, paths ...string) map[string]any {
	return map[string]any{"sender": agent, "target": "System", "type": "claim", "task_id": task,
		"worktree": worktree, "paths": paths, "timestamp": nowTS()}
}

func TestDashboard_StateShowsAgentsClaimsBoardAndRefusalsWithBothParties(t *testing.T) {
	th := startHub(t, Config{})
	alpha, bravo := th.join("proj/alpha"), th.join("proj/bravo")
	alpha.send(claimFrame("proj/alpha", "T1", "/repo", "src/core"))
	alpha.expect("claim_granted")
	bravo.send(claimFrame("proj/bravo", "T2", "/repo", "src/core/x.go"))
	bravo.expect("claim_denied")
	alpha.send(map[string]any{"sender": "proj/alpha", "type": "ledger_task", "task_id": "A", "title": "first"})
	alpha.expect("ledger_task_posted")
	alpha.send(map[string]any{"sender": "proj/alpha", "type": "ledger_task", "task_id": "B", "title": "second", "depends_on": []string{"A"}})
	alpha.expect("ledger_task_posted")

	st := th.state(nil)
	if st.HubID != th.h.HubID() || st.Health.Status != "ok" || st.Health.Journal != "memory" || st.Health.OnlineAgents != 2 {
		t.Fatalf("header/health = %+v %+v", st.HubID, st.Health)
	}
	if len(st.Agents) != 2 || st.Agents[0].Name != "proj/alpha" || !st.Agents[0].Online || !st.Agents[0].ProvenLive ||
		st.Agents[0].Claims != 1 || st.Agents[1].Name != "proj/bravo" || st.Agents[1].Claims != 0 {
		t.Fatalf("agents = %+v", st.Agents)
	}
	if len(st.Claims) != 1 {
		t.Fatalf("claims = %+v", st.Claims)
	}
	c := st.Claims[0]
	if c.TaskID != "T1" || c.Owner != "proj/alpha" || c.Worktree != "/repo" || !slices.Equal(c.Paths, []string{"src/core"}) ||
		c.Epoch < 1 || c.Status != "claimed" || c.ExpiresAt <= st.GeneratedAt {
		t.Fatalf("claim = %+v", c)
	}
	if len(st.Board.Tasks) != 2 || st.Board.Tasks[1].TaskID != "B" || !slices.Equal(st.Board.Tasks[1].DependsOn, []string{"A"}) ||
		!slices.Equal(st.Board.Ready, []string{"A"}) {
		t.Fatalf("board = %+v", st.Board)
	}
	if len(st.Refusals) != 1 {
		t.Fatalf("refusals = %+v", st.Refusals)
	}
	r := st.Refusals[0]
	if r.Agent != "proj/bravo" || r.Holder != "proj/alpha" || r.Code != "SCOPE_CONFLICT" || r.TaskID != "T2" ||
		r.ConflictTask != "T1" || r.Verb != "claim_denied" || r.Message == "" {
		t.Fatalf("refusal = %+v", r)
	}
	if st.Mailbox != nil || st.Federation != nil || st.DeadLetters == nil {
		t.Fatalf("mailbox %v federation %v dead letters %v: want null, absent, []", st.Mailbox, st.Federation, st.DeadLetters)
	}

	b := th.apiGet("/api/board", nil)
	defer b.Body.Close()
	var board dashboard.APIBoard
	if err := json.NewDecoder(b.Body).Decode(&board); err != nil || len(board.Tasks) != 2 || !slices.Equal(board.Ready, []string{"A"}) {
		t.Fatalf("/api/board = %+v, %v", board, err)
	}
}

func TestDashboard_EventsStreamGrantsReleasesBoardPresenceAndRefusals(t *testing.T) {
	th := startHub(t, Config{})
	alpha := th.join("proj/alpha")
	evs := th.events(nil)
	hello := expectEvent(t, evs, "hello", nil)
	if hello.data["hub_id"] != th.h.HubID() {
		t.Fatalf("hello = %+v", hello)
	}

	alpha.send(claimFrame("proj/alpha", "T1", "/repo", "src/a.go"))
	alpha.expect("claim_granted")
	g := expectEvent(t, evs, "claim", nil)
	claim, _ := g.data["claim"].(map[string]any)
	if g.data["kind"] != "granted" || claim["task_id"] != "T1" || claim["owner"] != "proj/alpha" || claim["worktree"] != "/repo" {
		t.Fatalf("grant event = %+v", g.data)
	}
	// A state read now reflects the grant: its event_id is at least the grant's.
	if st := th.state(nil); g.id == "" || st.EventID < parseID(t, g.id) {
		t.Fatalf("state event_id %d is before the grant's %s", st.EventID, g.id)
	}

	bravo := th.join("proj/bravo")
	expectEvent(t, evs, "presence", func(m map[string]any) bool { return m["agent"] == "proj/bravo" && m["online"] == true })
	bravo.send(claimFrame("proj/bravo", "T2", "/repo", "src"))
	bravo.expect("claim_denied")
	expectEvent(t, evs, "refusal", func(m map[string]any) bool { return m["agent"] == "proj/bravo" && m["holder"] == "proj/alpha" })

	alpha.send(map[string]any{"sender": "proj/alpha", "type": "release", "task_id": "T1"})
	alpha.expect("release_granted")
	expectEvent(t, evs, "release", func(m map[string]any) bool { return m["task_id"] == "T1" && m["reason"] == "release" })

	alpha.send(map[string]any{"sender": "proj/alpha", "type": "ledger_task", "task_id": "A", "title": "first"})
	expectEvent(t, evs, "task", func(m map[string]any) bool {
		task, _ := m["task"].(map[string]any)
		return m["kind"] == "posted" && task["task_id"] == "A" && task["status"] == "open"
	})
	bravo.close()
	expectEvent(t, evs, "presence", func(m map[string]any) bool { return m["agent"] == "proj/bravo" && m["online"] == false })
}

func TestDashboard_EventsStreamExpiries(t *testing.T) {
	th := startHub(t, Config{Limits: defaultLimitsWith(func(l *limitsT) { l.MinTTL = 0.2 })})
	alpha := th.join("proj/alpha")
	evs := th.events(nil)
	expectEvent(t, evs, "hello", nil)
	f := claimFrame("proj/alpha", "T1", "/repo")
	f["ttl_seconds"] = 0.2
	alpha.send(f)
	alpha.expect("claim_granted")
	expectEvent(t, evs, "release", func(m map[string]any) bool { return m["task_id"] == "T1" && m["reason"] == "expiry" })
}

func parseID(t *testing.T, s string) uint64 {
	t.Helper()
	var n uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("event id %q is not a number", s)
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}

// A stream that does not read is dropped once its buffer is full; the hub
// goes on granting and never waits for it (--dashboard-event-buffer).
func TestDashboard_SlowEventStreamIsDroppedNeverBlocksTheHub(t *testing.T) {
	th := startHub(t, Config{EventBuffer: 4})
	stuck, _ := th.h.feed.Subscribe() // a stream whose writer never takes anything
	alpha := th.join("proj/alpha")
	for i := range 20 {
		task := "T" + itoa(int64(i))
		alpha.send(claimFrame("proj/alpha", task, "/repo", "f"+itoa(int64(i))))
		alpha.expect("claim_granted")
	}
	// Its channel was closed after 4 events: drain them, then it ends.
	n := 0
	for range stuck.Events() {
		n++
	}
	if n != 4 {
		t.Fatalf("the stuck stream got %d events before it was dropped, want its buffer's 4", n)
	}
	if got := counterValue(t, th.h.m.eventStreamsDropped); got != 1 {
		t.Fatalf("synapse_event_streams_dropped_total = %v, want 1", got)
	}
	if th.h.feed.Streams() != 0 {
		t.Fatal("the dropped stream is still subscribed")
	}
	th.h.feed.Unsubscribe(stuck) // what its handler does on the way out: a no-op now
}

func TestDashboard_EventStreamsAreLimited(t *testing.T) {
	th := startHub(t, Config{EventStreams: 1})
	evs := th.events(nil)
	expectEvent(t, evs, "hello", nil)
	resp := th.apiGet("/api/events", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a second stream over --dashboard-streams 1 = %d, want 503 with Retry-After", resp.StatusCode)
	}
}

func TestDashboard_RecentRefusalsAreBounded(t *testing.T) {
	th := startHub(t, Config{RecentRefusals: Set(3)})
	alpha := th.join("proj/alpha")
	for i := range 5 {
		alpha.send(map[string]any{"sender": "proj/alpha", "type": "release", "task_id": "nope" + itoa(int64(i))})
		alpha.expect("release_denied")
	}
	st := th.state(nil)
	if len(st.Refusals) != 3 || st.Refusals[0].TaskID != "nope4" || st.Refusals[2].TaskID != "nope2" || st.Refusals[0].Code != "NOT_CLAIMED" {
		t.Fatalf("refusals = %+v, want the newest 3, newest first", st.Refusals)
	}
}

// On a hub with a token nothing but the login page is served without it:
// not the page, not the API, not the event stream.
func TestDashboard_TokenRequiredForPageAndAPI(t *testing.T) {
	const token = "s3cret-token"
	th := startHub(t, Config{Token: token, AuthFailuresPerMinute: Off[int]()}) // this test fails on purpose many times
	a := th.dial()
	a.send(map[string]any{"sender": "proj/alpha", "type": "heartbeat", "token": token})
	a.expect("welcome")
	a.send(claimFrame("proj/alpha", "T1", "/repo", "src"))
	a.expect("claim_granted")

	for _, path := range []string{"/api/state", "/api/events", "/api/board", "/api/mailbox", "/api/nope"} {
		for _, hd := range []map[string]string{nil, {"Authorization": "Bearer wrong"}, {"Cookie": dashboard.CookieName + "=forged"}} {
			resp := th.apiGet(path, hd)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), "proj/alpha") || strings.Contains(string(body), "T1") {
				t.Fatalf("GET %s with %v = %d %s, want 401 without data", path, hd, resp.StatusCode, body)
			}
		}
	}
	resp := th.apiGet("/", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `name="token"`) || strings.Contains(string(body), "app.js") {
		t.Fatalf("GET / without the token = %d, want the login form and not the page:\n%s", resp.StatusCode, body)
	}

	// Scripts: the bearer token.
	if st := th.state(map[string]string{"Authorization": "Bearer " + token}); len(st.Claims) != 1 {
		t.Fatalf("state with the bearer token = %+v", st)
	}
	evs := th.events(map[string]string{"Authorization": "Bearer " + token})
	expectEvent(t, evs, "hello", nil)

	// Browsers: /?token= sets an HttpOnly SameSite=Strict cookie, which is
	// not the token, and sends the browser to / without it.
	resp = th.apiGet("/?token="+url.QueryEscape(token), nil)
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == dashboard.CookieName {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || cookie == nil ||
		!cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || strings.Contains(cookie.Value, token) {
		t.Fatalf("GET /?token= = %d Location %q cookie %+v", resp.StatusCode, resp.Header.Get("Location"), cookie)
	}
	withCookie := map[string]string{"Cookie": dashboard.CookieName + "=" + cookie.Value}
	if st := th.state(withCookie); len(st.Claims) != 1 {
		t.Fatalf("state with the cookie = %+v", st)
	}
	resp = th.apiGet("/", withCookie)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "app.js") || resp.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("GET / with the cookie = %d:\n%s", resp.StatusCode, body)
	}

	// The login form posts the token.
	form := url.Values{"token": {token}}
	req, _ := http.NewRequest("POST", th.srv.URL+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || resp.Cookies()[0].Value != cookie.Value {
		t.Fatalf("POST /login = %d %+v", resp.StatusCode, resp.Cookies())
	}
}

// Wrong tokens spend the host's --auth-fail-limit allowance; a locked-out
// host is refused even the right one.
func TestDashboard_WrongTokensLockTheHostOut(t *testing.T) {
	const token = "s3cret-token"
	th := startHub(t, Config{Token: token, AuthFailuresPerMinute: Set(2)})
	for range 2 {
		resp := th.apiGet("/api/state", map[string]string{"Authorization": "Bearer wrong"})
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token = %d, want 401", resp.StatusCode)
		}
	}
	resp := th.apiGet("/api/state", map[string]string{"Authorization": "Bearer " + token})
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the right token from a locked-out host = %d, want 429", resp.StatusCode)
	}
}

// Every dashboard route is behind the one Host and Origin policy, and the
// dashboard is read-only.
func TestDashboard_HostOriginPolicyAndReadOnly(t *testing.T) {
	th := startHub(t, Config{})
	for _, c := range []struct {
		path   string
		header map[string]string
	}{
		{"/", map[string]string{"Host": "evil.example"}},
		{"/api/state", map[string]string{"Host": "evil.example"}},
		{"/api/events", map[string]string{"Origin": "http://evil.example"}},
		{"/ui/app.js", map[string]string{"Host": "evil.example"}},
	} {
		req, _ := http.NewRequest("GET", th.srv.URL+c.path, nil)
		for k, v := range c.header {
			req.Header.Set(k, v)
			if k == "Host" {
				req.Host = v
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("GET %s with %v = %d, want 403", c.path, c.header, resp.StatusCode)
		}
	}
	resp, err := http.Post(th.srv.URL+"/api/state", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /api/state = %d, want 405", resp.StatusCode)
	}
	// An open hub serves the page at once, with its assets, and still
	// upgrades WebSockets on /.
	resp = th.apiGet("/", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "app.js") {
		t.Fatalf("GET / on an open hub = %d", resp.StatusCode)
	}
	for asset, want := range map[string]int{"/ui/app.js": 200, "/ui/style.css": 200, "/ui/": 426, "/ui/index.html": 426, "/ui/login.html": 426} {
		resp = th.apiGet(asset, nil)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("GET %s = %d, want %d", asset, resp.StatusCode, want)
		}
	}
	th.join("proj/alpha")
}

func TestDashboard_NoDashboardTurnsItOff(t *testing.T) {
	th := startHub(t, Config{NoDashboard: true})
	for _, path := range []string{"/", "/api/state"} {
		resp := th.apiGet(path, nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUpgradeRequired {
			t.Fatalf("GET %s with NoDashboard = %d, want 426 as before the dashboard", path, resp.StatusCode)
		}
	}
}

// With an ownership map the state lists namespaces with their owner hub.
func TestDashboard_StateListsNamespacesWithTheirOwner(t *testing.T) {
	th := startHub(t, Config{HubID: "hub-a", Federation: federation.Config{Owners: []string{"proj=hub-a", "other=hub-b"}}})
	th.join("proj/alpha")
	st := th.state(nil)
	if st.Federation == nil || !st.Federation.Governed {
		t.Fatalf("federation = %+v, want the governed map", st.Federation)
	}
	owners := map[string]string{}
	for _, ns := range st.Federation.Namespaces {
		owners[ns.Namespace] = ns.Owner
	}
	if owners["proj"] != "hub-a" || owners["other"] != "hub-b" {
		t.Fatalf("namespaces = %+v", st.Federation.Namespaces)
	}
}

// Dead letters and the mailbox backlog, in the state and live.
func TestDashboard_DeadLettersAndBacklogInStateAndEvents(t *testing.T) {
	j := openJournalHub(t, filepath.Join(t.TempDir(), "hub.db"))
	a, b := j.join("p/a"), j.join("p/b")
	evs := j.events(nil)
	expectEvent(t, evs, "hello", nil)

	a.send(chatTo("p/a", "p/gone", "anyone?"))
	expectEvent(t, evs, "dead_letter", func(m map[string]any) bool { return m["target"] == "p/gone" && m["count"] == 1.0 })
	a.send(chatTo("p/a", "p/b", "please read"))
	chat := b.expect("chat")
	expectEvent(t, evs, "mailbox", func(m map[string]any) bool { return m["identity"] == "p/b" })

	st := j.state(nil)
	if len(st.DeadLetters) != 1 || st.DeadLetters[0].Target != "p/gone" || st.DeadLetters[0].LastSender != "p/a" {
		t.Fatalf("dead letters = %+v", st.DeadLetters)
	}
	if st.Mailbox == nil || st.Mailbox["p/b"] != 1 || st.Health.Journal != "sqlite" {
		t.Fatalf("mailbox = %v, journal %q; want p/b: 1 on sqlite", st.Mailbox, st.Health.Journal)
	}

	b.send(map[string]any{"sender": "p/b", "target": "System", "type": "ack", "seq": chat["seq"]})
	expectEvent(t, evs, "mailbox", func(m map[string]any) bool { return m["identity"] == "p/b" })
	resp := j.apiGet("/api/mailbox", nil)
	defer resp.Body.Close()
	var mb struct {
		Mailbox     map[string]int64          `json:"mailbox_pending"`
		DeadLetters []dashboard.APIDeadLetter `json:"dead_letters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&mb); err != nil || mb.Mailbox["p/b"] != 0 || len(mb.DeadLetters) != 1 {
		t.Fatalf("/api/mailbox after the ack = %+v, %v", mb, err)
	}

	// The target comes and acts: its dead letters are forgotten.
	g := j.join("p/gone")
	g.send(chatTo("p/gone", "p/a", "here"))
	expectEvent(t, evs, "dead_letter", func(m map[string]any) bool { return m["target"] == "p/gone" && m["count"] == 0.0 })
}

// A fenced verb's refusal names the claim's owner as the other party.
func TestDashboard_FencingRefusalsNameTheOwner(t *testing.T) {
	th := startHub(t, Config{})
	alpha, bravo := th.join("proj/alpha"), th.join("proj/bravo")
	alpha.send(claimFrame("proj/alpha", "T1", "/repo", "src"))
	g := alpha.expect("claim_granted")
	bravo.send(map[string]any{"sender": "proj/bravo", "type": "release", "task_id": "T1"})
	bravo.expect("release_denied")
	alpha.send(map[string]any{"sender": "proj/alpha", "type": "release", "task_id": "T1", "epoch": num(t, g["epoch"]) + 1})
	alpha.expect("release_denied")
	st := th.state(nil)
	if len(st.Refusals) != 2 {
		t.Fatalf("refusals = %+v", st.Refusals)
	}
	stale, notOwner := st.Refusals[0], st.Refusals[1]
	if stale.Code != "EPOCH_STALE" || stale.Agent != "proj/alpha" || stale.Holder != "proj/alpha" ||
		notOwner.Code != "NOT_OWNER" || notOwner.Agent != "proj/bravo" || notOwner.Holder != "proj/alpha" || notOwner.Verb != "release_denied" {
		t.Fatalf("refusals = %+v", st.Refusals)
	}
}

// Closing the hub ends every event stream (and refuses new ones).
func TestDashboard_CloseEndsEventStreams(t *testing.T) {
	th := startHub(t, Config{})
	evs := th.events(nil)
	expectEvent(t, evs, "hello", nil)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	if err := th.h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(testDeadline)
	for open := true; open; {
		select {
		case _, open = <-evs:
		case <-deadline:
			t.Fatal("the event stream outlived the hub")
		}
	}
	if s, _ := th.h.feed.Subscribe(); s != nil {
		t.Fatal("a closed hub opened an event stream")
	}
}

// BenchmarkDashboard_State measures GET /api/state's gathering at 10,000
// claims and 1,000 board tasks: State, the route (State and its body), and a query
// that copies what State copies on the sequencer (a round trip, so an
// upper bound of how long no command is decided).
func BenchmarkDashboard_State(b *testing.B) {
	now := nowTS()
	img := coord.Image{Epoch: 10000}
	for i := range 10000 {
		img.Claims = append(img.Claims, coord.Claim{TaskID: fmt.Sprintf("T%05d", i), Owner: fmt.Sprintf("p/a%03d", i%500),
			Worktree: "/wt", Paths: []string{fmt.Sprintf("src/f%05d.go", i)}, ClaimedAt: now, ExpiresAt: now + 3600, Epoch: int64(i + 1)})
	}
	for i := range 1000 {
		img.Tasks = append(img.Tasks, coord.BoardTask{TaskID: fmt.Sprintf("B%04d", i), Title: "t", Status: "open", Version: 1})
	}
	lim := coord.DefaultLimits()
	h, err := New(Config{State: coord.FromImage(lim, img), Limits: lim, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(context.Background())
	backend := dashHost{h}
	b.Run("state", func(b *testing.B) {
		for b.Loop() {
			if _, err := backend.State(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoded", func(b *testing.B) { // the route: State and the body (each claim's encoding cached)
		for b.Loop() {
			w := httptest.NewRecorder()
			h.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/api/state", nil))
			if w.Code != http.StatusOK || w.Body.Len() < 10000*100 {
				b.Fatalf("/api/state = %d, %d bytes", w.Code, w.Body.Len())
			}
		}
	})
	b.Run("sequencer-hold", func(b *testing.B) {
		for b.Loop() {
			_, _ = h.seq.Query(context.Background(), func(st *coord.State) any {
				return [2]any{st.ClaimPointers(), st.BoardTaskPointers()}
			})
		}
	})
}

// An agent's reactions reach the streams at most once per activityStep, so
// a page's live/idle verdict is at most that late.
func TestDashboard_ActivityEventsAreThrottledPerAgent(t *testing.T) {
	var mu sync.Mutex
	clock := nowTS()
	th := startHub(t, Config{Clock: func() float64 { mu.Lock(); defer mu.Unlock(); return clock }})
	advance := func(d float64) { mu.Lock(); clock += d; mu.Unlock() }
	evs := th.events(nil)
	expectEvent(t, evs, "hello", nil)
	alpha := th.join("proj/alpha")
	expectEvent(t, evs, "presence", func(m map[string]any) bool { return m["agent"] == "proj/alpha" })

	advance(activityStep + 1)
	alpha.sync("proj/alpha") // a who_request: a reaction
	at := expectEvent(t, evs, "activity", func(m map[string]any) bool { return m["agent"] == "proj/alpha" }).data["at"]
	alpha.sync("proj/alpha") // again, within the step: not told
	alpha.send(claimFrame("proj/alpha", "T1", "/repo"))
	alpha.expect("claim_granted")
	for {
		ev := expectEvent(t, evs, "", nil)
		if ev.typ == "activity" {
			t.Fatalf("a second activity event within the step: %+v (first at %v)", ev.data, at)
		}
		if ev.typ == "claim" {
			break
		}
	}
}
