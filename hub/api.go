package hub

// The dashboard at / and its read-only JSON API under /api/ (docs/api.md,
// docs/dashboard.md). Every route is reached through Handler, so the Host
// and Origin policy (gate.RequestPolicy) has already admitted the request.
//
// On a hub with a token, the page and every /api route need it: as
// "Authorization: Bearer TOKEN" (scripts), or as the session cookie the
// login form (POST /login) or a one-time "/?token=TOKEN" sets (browsers).
// The cookie holds an HMAC of the token, never the token; it is HttpOnly
// and SameSite=Strict. Nothing but the login page is served before that.
// Wrong tokens spend the remote host's --auth-fail-limit allowance, as a
// socket's wrong first frame does, and a locked-out host is refused even
// the right one. The static files under /ui/ (script, style) hold no data
// and are served to anyone the Host and Origin policy admits.

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/dashboard"
)

// DashboardCookie is the name of the dashboard's session cookie.
const DashboardCookie = "synapse_dashboard"

// eventKeepalive is how often an idle event stream gets a comment line, so
// proxies and browsers keep it open; eventWriteTimeout bounds one write to
// a stream whose reader stopped reading.
const (
	eventKeepalive    = 15 * time.Second
	eventWriteTimeout = 10 * time.Second
)

// dashboardHeaders are sent with every dashboard response: no script,
// style or connection but the hub's own, never framed (clickjacking),
// never sniffed, no Referer carrying a ?token= elsewhere.
func dashboardHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
}

// serveDashboard serves the dashboard's routes and reports whether the path
// was one of them.
func (h *Hub) serveDashboard(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/" || p == "/index.html":
		dashboardHeaders(w)
		h.servePage(w, r)
	case p == "/login" || p == "/logout":
		dashboardHeaders(w)
		h.serveLogin(w, r)
	case p == "/ui/app.js" || p == "/ui/style.css": // the page's code and style: no data, no token
		dashboardHeaders(w)
		if !getOnly(w, r) {
			return true
		}
		http.StripPrefix("/ui/", http.FileServerFS(dashboard.Static())).ServeHTTP(w, r)
	case p == "/api" || strings.HasPrefix(p, "/api/"):
		dashboardHeaders(w)
		w.Header().Set("Cache-Control", "no-store")
		if !getOnly(w, r) || !h.apiAuthed(w, r) {
			return true
		}
		h.serveAPI(w, r)
	default:
		return false
	}
	return true
}

func getOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "synapse: the dashboard is read-only: GET only", http.StatusMethodNotAllowed)
	return false
}

// dashboardCookieValue is what the session cookie holds: an HMAC of the
// token, so the cookie does not reveal the token and a new token ends
// every session.
func (h *Hub) dashboardCookieValue() string {
	m := hmac.New(sha256.New, []byte(h.cfg.Token))
	m.Write([]byte("synapse dashboard session v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// credential is what a request presents: a bearer token, a session cookie,
// or nothing.
type credential int

const (
	credNone credential = iota
	credGood
	credBad
)

// credentialOf checks a request's bearer token or session cookie.
func (h *Hub) credentialOf(r *http.Request) credential {
	if h.cfg.Token == "" {
		return credGood
	}
	if a := r.Header.Get("Authorization"); a != "" {
		tok, ok := strings.CutPrefix(a, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(h.cfg.Token)) == 1 {
			return credGood
		}
		return credBad
	}
	if c, err := r.Cookie(DashboardCookie); err == nil {
		if subtle.ConstantTimeCompare([]byte(c.Value), []byte(h.dashboardCookieValue())) == 1 {
			return credGood
		}
		return credBad // a cookie of an earlier token
	}
	return credNone
}

// tokenGood checks a token typed into the login form or given as ?token=.
func (h *Hub) tokenGood(tok string) bool {
	return subtle.ConstantTimeCompare([]byte(tok), []byte(h.cfg.Token)) == 1
}

// lockedOut reports whether the request's host has spent its failed-token
// allowance; failed spends one.
func (h *Hub) lockedOut(r *http.Request) bool {
	return h.authFails.Empty(remoteHost(r), h.now())
}

func (h *Hub) failedAuth(r *http.Request) {
	h.m.dashboardAuthFailed.Inc()
	h.authFails.Allow(remoteHost(r), h.now())
}

// apiAuthed admits an /api request or answers it 401 (429 when the host is
// locked out).
func (h *Hub) apiAuthed(w http.ResponseWriter, r *http.Request) bool {
	if h.cfg.Token == "" {
		return true
	}
	if h.lockedOut(r) {
		h.m.authLockouts.Inc()
		apiError(w, http.StatusTooManyRequests, "too many failed authentication attempts from this host; try again later")
		return false
	}
	switch h.credentialOf(r) {
	case credGood:
		return true
	case credBad:
		h.failedAuth(r)
	default:
		h.m.dashboardAuthFailed.Inc()
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="synapse"`)
	apiError(w, http.StatusUnauthorized, "authentication required: send 'Authorization: Bearer TOKEN' (the hub's --token)")
	return false
}

func apiError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// servePage serves the dashboard, or the login form when the hub has a
// token and the request does not carry it. "/?token=TOKEN" logs in and
// redirects to "/", so the token leaves the address bar.
func (h *Hub) servePage(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if h.cfg.Token != "" {
		if h.lockedOut(r) {
			h.m.authLockouts.Inc()
			h.serveLoginPage(w, http.StatusTooManyRequests, "Too many failed attempts from this host; try again later.")
			return
		}
		if tok := r.URL.Query().Get("token"); tok != "" {
			h.login(w, r, tok)
			return
		}
		switch h.credentialOf(r) {
		case credNone:
			h.serveLoginPage(w, http.StatusUnauthorized, "")
			return
		case credBad:
			h.failedAuth(r)
			h.serveLoginPage(w, http.StatusUnauthorized, "This session has ended (the hub's token changed). Enter the token.")
			return
		}
	}
	serveAsset(w, "index.html", http.StatusOK)
}

// serveLogin takes the login form (POST /login, field "token") and ends a
// session (POST /logout).
func (h *Hub) serveLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "synapse: POST only", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == "/logout" {
		http.SetCookie(w, &http.Cookie{Name: DashboardCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if h.cfg.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if h.lockedOut(r) {
		h.m.authLockouts.Inc()
		h.serveLoginPage(w, http.StatusTooManyRequests, "Too many failed attempts from this host; try again later.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		h.serveLoginPage(w, http.StatusBadRequest, "The form could not be read.")
		return
	}
	h.login(w, r, r.PostForm.Get("token"))
}

// login checks a token and, if it is the hub's, sets the session cookie
// and sends the browser to the dashboard.
func (h *Hub) login(w http.ResponseWriter, r *http.Request, tok string) {
	if !h.tokenGood(strings.TrimSpace(tok)) {
		h.failedAuth(r)
		h.serveLoginPage(w, http.StatusUnauthorized, "That is not this hub's token.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: DashboardCookie, Value: h.dashboardCookieValue(), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// serveLoginPage serves the login form, with a message if not "". It holds
// no data of the hub's.
func (h *Hub) serveLoginPage(w http.ResponseWriter, code int, msg string) {
	b, err := fs.ReadFile(dashboard.Static(), "login.html")
	if err != nil {
		http.Error(w, "synapse: dashboard assets missing", http.StatusInternalServerError)
		return
	}
	page := strings.Replace(string(b), "<!--message-->", htmlEscape(msg), 1)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(page))
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;").Replace(s)
}

func serveAsset(w http.ResponseWriter, name string, code int) {
	b, err := fs.ReadFile(dashboard.Static(), name)
	if err != nil {
		http.Error(w, "synapse: dashboard assets missing", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// serveAPI serves an authenticated /api request.
func (h *Hub) serveAPI(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/api/state":
		st, err := h.State(r.Context())
		if err != nil {
			apiUnavailable(w, err)
			return
		}
		writeJSON(w, st)
	case "/api/board":
		b, err := h.Board(r.Context())
		if err != nil {
			apiUnavailable(w, err)
			return
		}
		writeJSON(w, b)
	case "/api/mailbox":
		m := map[string]int64(nil)
		if h.cfg.Journal != nil {
			m = h.mailboxCounts()
		}
		writeJSON(w, struct {
			Mailbox     map[string]int64 `json:"mailbox_pending"`
			DeadLetters []APIDeadLetter  `json:"dead_letters"`
		}{m, h.deadLetters()})
	case "/api/events":
		h.serveEvents(w, r)
	default:
		apiError(w, http.StatusNotFound, "no such route: see docs/api.md (/api/state, /api/board, /api/mailbox, /api/events)")
	}
}

func apiUnavailable(w http.ResponseWriter, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	apiError(w, http.StatusServiceUnavailable, "hub is shutting down")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Board returns the task board and its ready set (GET /api/board).
func (h *Hub) Board(ctx context.Context) (APIBoard, error) {
	v, err := h.seq.Query(ctx, func(st *coord.State) any { return st.BoardTaskPointers() })
	if err != nil {
		return APIBoard{}, err
	}
	tasks := v.([]*coord.BoardTask)
	slices.SortFunc(tasks, func(a, b *coord.BoardTask) int { return strings.Compare(a.TaskID, b.TaskID) })
	b := APIBoard{Tasks: make([]APITask, 0, len(tasks)), Ready: coord.ReadyOf(tasks)}
	for _, t := range tasks {
		b.Tasks = append(b.Tasks, apiTask(t))
	}
	if b.Ready == nil {
		b.Ready = []string{}
	}
	return b, nil
}

// deadLetters lists the dead-letter ledger, worst first.
func (h *Hub) deadLetters() []APIDeadLetter {
	h.mu.Lock()
	out := h.deadLettersLocked()
	h.mu.Unlock()
	sortDeadLetters(out)
	return out
}

// deadLettersLocked copies the dead-letter ledger (at most maxDeadLetters
// entries), unsorted.
func (h *Hub) deadLettersLocked() []APIDeadLetter {
	dls := h.dead.ListLocked()
	out := make([]APIDeadLetter, 0, len(dls))
	for _, d := range dls {
		out = append(out, APIDeadLetter{Target: d.Target, Count: d.Count, LastTS: d.LastTS, LastSender: d.LastSender})
	}
	return out
}

func sortDeadLetters(d []APIDeadLetter) {
	slices.SortFunc(d, func(a, b APIDeadLetter) int {
		if a.Count != b.Count {
			return cmp.Compare(b.Count, a.Count)
		}
		return strings.Compare(a.Target, b.Target)
	})
}

// serveEvents streams dashboard events as server-sent events. The first is
// "hello" with the id of the last event published before this stream
// began; then every event from the feed, until the client goes, the hub
// closes, or the stream falls a buffer behind and is dropped (the browser's
// EventSource then reconnects and reads /api/state again).
func (h *Hub) serveEvents(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "text/event-stream")
		return
	}
	sub, last := h.feed.subscribe()
	if sub == nil {
		w.Header().Set("Retry-After", "5")
		apiError(w, http.StatusServiceUnavailable, "too many event streams are open (--dashboard-streams)")
		return
	}
	defer h.feed.unsubscribe(sub)
	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{}) // the connection may serve another request after this one
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("X-Accel-Buffering", "no") // a proxy in front must not hold events back
	hello, _ := json.Marshal(map[string]any{"event_id": last, "hub_id": h.cfg.HubID})
	msg := append([]byte("retry: 1000\n"), sseMessage(last, "hello", hello)...)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(msg) {
		return
	}
	keep := time.NewTicker(eventKeepalive)
	defer keep.Stop()
	for {
		select {
		case msg, ok := <-sub.ch:
			if !ok {
				return // dropped as too slow, or the hub is closing
			}
			// Take whatever else is queued, and write it with one flush
			// (msg is shared with every stream: clipped, appending copies).
			msg = slices.Clip(msg)
			for more := true; more; {
				select {
				case m, ok := <-sub.ch:
					if !ok {
						more = false
						break
					}
					msg = append(msg, m...)
				default:
					more = false
				}
			}
			if !write(msg) {
				return
			}
		case <-keep.C:
			if !write([]byte(": keepalive\n\n")) {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
