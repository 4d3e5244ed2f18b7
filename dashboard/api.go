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
		body, err := appendState(nil, st)
		writeBody(w, body, err)
	case "/api/board":
		b, err := s.b.Board(r.Context())
		if err != nil {
			apiUnavailable(w, err)
			return
		}
		body, err := appendBoard(nil, b)
		writeBody(w, body, err)
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

// writeBody writes a JSON body appendState or appendBoard made.
func writeBody(w http.ResponseWriter, body []byte, err error) {
	if err != nil {
		apiError(w, http.StatusInternalServerError, "the answer could not be encoded: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(body, '\n'))
}

// appendState appends st's JSON: encoding/json's, but for the claims and
// board tasks the Backend encoded ahead (ClaimsJSON, TasksJSON), which
// are copied in rather than encoded, or checked, again (checking 10,000
// claims costs more than encoding them).
func appendState(b []byte, st APIState) ([]byte, error) {
	type plain APIState
	rest, err := json.Marshal(struct {
		plain
		// Shallower than plain's fields of the same names, so they hide
		// them; nil, so they are left out: the members spliced below.
		Claims *struct{} `json:"claims,omitempty"`
		Board  *struct{} `json:"board,omitempty"`
	}{plain: plain(st)})
	if err != nil {
		return nil, err
	}
	b = append(b, `{"claims":`...)
	if b, err = appendEncoded(b, st.ClaimsJSON, st.Claims); err != nil {
		return nil, err
	}
	b = append(b, `,"board":`...)
	if b, err = appendBoard(b, st.Board); err != nil {
		return nil, err
	}
	return appendMembers(b, rest), nil
}

// appendBoard appends bd's JSON, as appendState.
func appendBoard(b []byte, bd APIBoard) ([]byte, error) {
	type plain APIBoard
	rest, err := json.Marshal(struct {
		plain
		Tasks *struct{} `json:"tasks,omitempty"`
	}{plain: plain(bd)})
	if err != nil {
		return nil, err
	}
	b = append(b, `{"tasks":`...)
	if b, err = appendEncoded(b, bd.TasksJSON, bd.Tasks); err != nil {
		return nil, err
	}
	return appendMembers(b, rest), nil
}

// appendEncoded appends raw, or v's JSON if raw is nil.
func appendEncoded(b, raw []byte, v any) ([]byte, error) {
	if raw != nil {
		return append(b, raw...), nil
	}
	j, err := json.Marshal(v)
	return append(b, j...), err
}

// appendMembers closes the object being written in b with the members of
// obj, an encoded object.
func appendMembers(b, obj []byte) []byte {
	if len(obj) > 2 {
		b = append(b, ',')
		b = append(b, obj[1:len(obj)-1]...)
	}
	return append(b, '}')
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
