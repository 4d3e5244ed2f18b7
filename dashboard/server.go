package dashboard

// The dashboard's routes. Every one is reached through the hub's Handler,
// so the hub's Host and Origin policy has already admitted the request.

import (
	"context"
	"net/http"
	"strings"
)

// Backend is the slice of the hub the dashboard reads. The hub implements
// it. Its methods are safe for concurrent use; the dashboard calls them on
// the request's goroutine, never with the Feed's lock held.
type Backend interface {
	// State gathers GET /api/state at one instant. It waits for the hub's
	// sequencer (until ctx ends) and, on it, takes the hub's registry lock
	// and then the Feed's (Feed.Mark). Its EventID and Refusals come from
	// the Feed.
	State(ctx context.Context) (APIState, error)
	// Board returns the task board and its ready set (GET /api/board). It
	// waits for the sequencer (until ctx ends) and takes no other lock.
	Board(ctx context.Context) (APIBoard, error)
	// Mailbox returns the mailbox backlog per identity, nil when the hub
	// keeps no mailbox, and the dead letters, worst first (GET
	// /api/mailbox). It takes the hub's registry lock briefly and may read
	// the journal; it never waits for the sequencer.
	Mailbox() (pending map[string]int64, dead []APIDeadLetter)
	// LockedOut reports whether r's remote host has spent its allowance
	// of failed tokens (the hub's --auth-fail-limit, shared with its
	// sockets); a true answer is counted as a lockout. It never blocks.
	LockedOut(r *http.Request) bool
	// AuthFailed counts a request refused for want of the token. wrong
	// says it presented one (a wrong token, a cookie of an earlier
	// token), which spends one of its remote host's allowance. It never
	// blocks.
	AuthFailed(r *http.Request, wrong bool)
	// Channels lists the private channels the viewer of r may see (GET
	// /api/channels): names, owners and members, never a message. The
	// hub decides who the viewer is; today every admitted viewer is the
	// operator and sees them all. It takes the hub's channel lock only.
	Channels(r *http.Request) []APIChannel
}

// Config configures a Server.
type Config struct {
	HubID string // sent in each event stream's hello
	// Token is the hub's token: "" serves an open dashboard; otherwise
	// the page and every /api route need it (signin.go).
	Token string
}

// Server serves the dashboard's routes. Make it with NewServer.
type Server struct {
	b    Backend
	feed *Feed
	cfg  Config
}

// NewServer returns the dashboard of b, whose event streams follow feed.
func NewServer(b Backend, feed *Feed, cfg Config) *Server {
	return &Server{b: b, feed: feed, cfg: cfg}
}

// Serve serves the dashboard's routes and reports whether r's path was
// one of them; the caller answers the others.
func (s *Server) Serve(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/" || p == "/index.html":
		securityHeaders(w)
		s.servePage(w, r)
	case p == "/login" || p == "/logout":
		securityHeaders(w)
		s.serveLogin(w, r)
	case p == "/ui/app.js" || p == "/ui/style.css": // the page's code and style: no data, no token
		securityHeaders(w)
		if !getOnly(w, r) {
			return true
		}
		http.StripPrefix("/ui/", http.FileServerFS(Static())).ServeHTTP(w, r)
	case p == "/api" || strings.HasPrefix(p, "/api/"):
		securityHeaders(w)
		w.Header().Set("Cache-Control", "no-store")
		if !getOnly(w, r) || !s.apiAuthed(w, r) {
			return true
		}
		s.serveAPI(w, r)
	default:
		return false
	}
	return true
}

// securityHeaders are sent with every dashboard response: no script,
// style or connection but the hub's own, never framed (clickjacking),
// never sniffed, no Referer carrying a ?token= elsewhere.
func securityHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
}

func getOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "synapse: the dashboard is read-only: GET only", http.StatusMethodNotAllowed)
	return false
}
