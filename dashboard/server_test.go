package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// fakeBackend is a hub with one claim, whose failed-auth allowance is a
// count per test.
type fakeBackend struct {
	mu                  sync.Mutex
	states, lockouts    int
	wrongs, unpresented int
	lockedOut           bool
}

func (b *fakeBackend) State(context.Context) (APIState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.states++
	return APIState{HubID: "syn-test", Claims: []APIClaim{{TaskID: "T1", Owner: "proj/alpha"}}}, nil
}

func (b *fakeBackend) Board(context.Context) (APIBoard, error) {
	return APIBoard{Tasks: []APITask{}, Ready: []string{}}, nil
}

func (b *fakeBackend) Mailbox() (map[string]int64, []APIDeadLetter) { return nil, []APIDeadLetter{} }

func (b *fakeBackend) Channels(*http.Request) []APIChannel { return nil }

func (b *fakeBackend) LockedOut(*http.Request) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lockedOut {
		b.lockouts++
	}
	return b.lockedOut
}

func (b *fakeBackend) AuthFailed(_ *http.Request, wrong bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if wrong {
		b.wrongs++
	} else {
		b.unpresented++
	}
}

func serve(s *Server, method, target string, header map[string]string, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	if !s.Serve(w, r) {
		w.Code = -1 // not a dashboard route
	}
	return w
}

// Without the token a secured dashboard serves the login form and 401s,
// never the hub's data; a wrong token spends the host's allowance, a
// missing one only counts.
func TestSignIn_TokenRequiredAndWrongTokensSpendTheAllowance(t *testing.T) {
	const token = "s3cret-token"
	b := &fakeBackend{}
	s := NewServer(b, NewFeed(FeedConfig{}), Config{HubID: "syn-test", Token: token})

	for _, hd := range []map[string]string{nil, {"Authorization": "Bearer wrong"}, {"Cookie": CookieName + "=forged"}} {
		w := serve(s, "GET", "/api/state", hd, "")
		if w.Code != http.StatusUnauthorized || strings.Contains(w.Body.String(), "proj/alpha") {
			t.Fatalf("GET /api/state with %v = %d %s, want 401 without data", hd, w.Code, w.Body)
		}
	}
	if b.states != 0 || b.wrongs != 2 || b.unpresented != 1 {
		t.Fatalf("states read %d, wrong tokens %d, none presented %d; want 0, 2, 1", b.states, b.wrongs, b.unpresented)
	}
	if w := serve(s, "GET", "/", nil, ""); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), `name="token"`) {
		t.Fatalf("GET / without the token = %d, want the login form", w.Code)
	}

	w := serve(s, "POST", "/login", map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
		url.Values{"token": {token}}.Encode())
	cookies := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || len(cookies) != 1 || cookies[0].Name != CookieName ||
		strings.Contains(cookies[0].Value, token) || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("POST /login = %d %+v", w.Code, cookies)
	}
	withCookie := map[string]string{"Cookie": CookieName + "=" + cookies[0].Value}
	if w := serve(s, "GET", "/api/state", withCookie, ""); w.Code != 200 || !strings.Contains(w.Body.String(), "proj/alpha") {
		t.Fatalf("GET /api/state with the cookie = %d %s", w.Code, w.Body)
	}
	if w := serve(s, "GET", "/api/state", map[string]string{"Authorization": "Bearer " + token}, ""); w.Code != 200 {
		t.Fatalf("GET /api/state with the bearer token = %d", w.Code)
	}

	// A locked-out host is refused even the right token, and nothing is read.
	b.lockedOut = true
	states := b.states
	if w := serve(s, "GET", "/api/state", map[string]string{"Authorization": "Bearer " + token}, ""); w.Code != http.StatusTooManyRequests {
		t.Fatalf("the right token from a locked-out host = %d, want 429", w.Code)
	}
	if w := serve(s, "GET", "/?token="+token, nil, ""); w.Code != http.StatusTooManyRequests {
		t.Fatalf("/?token= from a locked-out host = %d, want 429", w.Code)
	}
	if b.states != states || b.lockouts != 2 {
		t.Fatalf("a locked-out host read the state (%d -> %d) or was not counted (%d)", states, b.states, b.lockouts)
	}
}

// The dashboard answers its own routes, read-only, with its security
// headers, and leaves every other path to the hub.
func TestServer_RoutesAreReadOnlyAndLeaveTheRestToTheHub(t *testing.T) {
	s := NewServer(&fakeBackend{}, NewFeed(FeedConfig{}), Config{})
	for path, want := range map[string]int{"/": 200, "/ui/app.js": 200, "/ui/style.css": 200, "/api/board": 200,
		"/api/mailbox": 200, "/api/nope": 404, "/ui/": -1, "/health": -1, "/ws": -1} {
		w := serve(s, "GET", path, nil, "")
		if w.Code != want {
			t.Fatalf("GET %s = %d, want %d (-1: not the dashboard's)", path, w.Code, want)
		}
		if want > 0 && w.Header().Get("Content-Security-Policy") == "" {
			t.Fatalf("GET %s has no Content-Security-Policy", path)
		}
	}
	if w := serve(s, "POST", "/api/state", nil, "{}"); w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /api/state = %d, want 405", w.Code)
	}
}
