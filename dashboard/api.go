package dashboard

// The read-only JSON API under /api/ and the event stream /api/events
// (docs/api.md), served once signin.go has admitted the request.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"
)

// eventKeepalive is how often an idle event stream gets a comment line, so
// proxies and browsers keep it open; eventWriteTimeout bounds one write to
// a stream whose reader stopped reading.
const (
	eventKeepalive    = 15 * time.Second
	eventWriteTimeout = 10 * time.Second
)

// serveAPI serves an authenticated /api request.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/api/state":
		st, err := s.b.State(r.Context())
		if err != nil {
			apiUnavailable(w, err)
			return
		}
		writeJSON(w, st)
	case "/api/board":
		b, err := s.b.Board(r.Context())
		if err != nil {
			apiUnavailable(w, err)
			return
		}
		writeJSON(w, b)
	case "/api/mailbox":
		m, dead := s.b.Mailbox()
		writeJSON(w, struct {
			Mailbox     map[string]int64 `json:"mailbox_pending"`
			DeadLetters []APIDeadLetter  `json:"dead_letters"`
		}{m, dead})
	case "/api/channels":
		ch := s.b.Channels(r)
		if ch == nil {
			ch = []APIChannel{}
		}
		writeJSON(w, struct {
			Channels []APIChannel `json:"channels"`
		}{ch})
	case "/api/events":
		s.serveEvents(w, r)
	default:
		apiError(w, http.StatusNotFound, "no such route: see docs/api.md (/api/state, /api/board, /api/mailbox, /api/channels, /api/events)")
	}
}

func apiError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
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

// serveEvents streams dashboard events as server-sent events. The first is
// "hello" with the id of the last event published before this stream
// began; then every event from the feed, until the client goes, the hub
// closes, or the stream falls a buffer behind and is dropped (the browser's
// EventSource then reconnects and reads /api/state again).
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "text/event-stream")
		return
	}
	sub, last := s.feed.Subscribe()
	if sub == nil {
		w.Header().Set("Retry-After", "5")
		apiError(w, http.StatusServiceUnavailable, "too many event streams are open (--dashboard-streams)")
		return
	}
	defer s.feed.Unsubscribe(sub)
	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{}) // the connection may serve another request after this one
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("X-Accel-Buffering", "no") // a proxy in front must not hold events back
	hello, _ := json.Marshal(map[string]any{"event_id": last, "hub_id": s.cfg.HubID})
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
