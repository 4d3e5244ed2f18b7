package dashboard

// Sign-in. On a hub with a token, the page and every /api route need it:
// as "Authorization: Bearer TOKEN" (scripts), or as the session cookie the
// login form (POST /login) or a one-time "/?token=TOKEN" sets (browsers).
// The cookie holds an HMAC of the token, never the token; it is HttpOnly
// and SameSite=Strict. Nothing but the login page is served before that.
// Wrong tokens spend the remote host's --auth-fail-limit allowance, as a
// socket's wrong first frame does (Backend.AuthFailed), and a locked-out
// host is refused even the right one (Backend.LockedOut). The static files
// under /ui/ (script, style) hold no data and are served to anyone the
// Host and Origin policy admits.

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"io/fs"
	"net/http"
	"strings"
)

// CookieName is the name of the dashboard's session cookie.
const CookieName = "synapse_dashboard"

// cookieValue is what the session cookie holds: an HMAC of the token, so
// the cookie does not reveal the token and a new token ends every session.
func (s *Server) cookieValue() string {
	m := hmac.New(sha256.New, []byte(s.cfg.Token))
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
func (s *Server) credentialOf(r *http.Request) credential {
	if s.cfg.Token == "" {
		return credGood
	}
	if a := r.Header.Get("Authorization"); a != "" {
		tok, ok := strings.CutPrefix(a, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.cfg.Token)) == 1 {
			return credGood
		}
		return credBad
	}
	if c, err := r.Cookie(CookieName); err == nil {
		if subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.cookieValue())) == 1 {
			return credGood
		}
		return credBad // a cookie of an earlier token
	}
	return credNone
}

// tokenGood checks a token typed into the login form or given as ?token=.
func (s *Server) tokenGood(tok string) bool {
	return subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1
}

// apiAuthed admits an /api request or answers it 401 (429 when the host is
// locked out).
func (s *Server) apiAuthed(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Token == "" {
		return true
	}
	if s.b.LockedOut(r) {
		apiError(w, http.StatusTooManyRequests, "too many failed authentication attempts from this host; try again later")
		return false
	}
	switch s.credentialOf(r) {
	case credGood:
		return true
	case credBad:
		s.b.AuthFailed(r, true)
	default:
		s.b.AuthFailed(r, false)
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="synapse"`)
	apiError(w, http.StatusUnauthorized, "authentication required: send 'Authorization: Bearer TOKEN' (the hub's --token)")
	return false
}

// servePage serves the dashboard, or the login form when the hub has a
// token and the request does not carry it. "/?token=TOKEN" logs in and
// redirects to "/", so the token leaves the address bar.
func (s *Server) servePage(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if s.cfg.Token != "" {
		if s.b.LockedOut(r) {
			serveLoginPage(w, http.StatusTooManyRequests, "Too many failed attempts from this host; try again later.")
			return
		}
		if tok := r.URL.Query().Get("token"); tok != "" {
			s.login(w, r, tok)
			return
		}
		switch s.credentialOf(r) {
		case credNone:
			serveLoginPage(w, http.StatusUnauthorized, "")
			return
		case credBad:
			s.b.AuthFailed(r, true)
			serveLoginPage(w, http.StatusUnauthorized, "This session has ended (the hub's token changed). Enter the token.")
			return
		}
	}
	serveAsset(w, "index.html", http.StatusOK)
}

// serveLogin takes the login form (POST /login, field "token") and ends a
// session (POST /logout).
func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "synapse: POST only", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == "/logout" {
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if s.cfg.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if s.b.LockedOut(r) {
		serveLoginPage(w, http.StatusTooManyRequests, "Too many failed attempts from this host; try again later.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		serveLoginPage(w, http.StatusBadRequest, "The form could not be read.")
		return
	}
	s.login(w, r, r.PostForm.Get("token"))
}

// login checks a token and, if it is the hub's, sets the session cookie
// and sends the browser to the dashboard.
func (s *Server) login(w http.ResponseWriter, r *http.Request, tok string) {
	if !s.tokenGood(strings.TrimSpace(tok)) {
		s.b.AuthFailed(r, true)
		serveLoginPage(w, http.StatusUnauthorized, "That is not this hub's token.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: s.cookieValue(), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// serveLoginPage serves the login form, with a message if not "". It holds
// no data of the hub's.
func serveLoginPage(w http.ResponseWriter, code int, msg string) {
	b, err := fs.ReadFile(Static(), "login.html")
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
	b, err := fs.ReadFile(Static(), name)
	if err != nil {
		http.Error(w, "synapse: dashboard assets missing", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
