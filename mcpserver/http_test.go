package mcpserver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/synapse-hub/synapse/client"
)

// serveHTTP serves an HTTPHandler dialling the hub at uri.
func serveHTTP(t *testing.T, uri string, opts HTTPOptions) (*HTTPHandler, string) {
	t.Helper()
	opts.Dial = func(ctx context.Context, name string) (*client.Client, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return client.Dial(ctx, client.Options{URI: uri, Name: name, Fanout: Fanout})
	}
	h := NewHTTPHandler(opts)
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	return h, srv.URL
}

// connectHTTP opens an SDK client session on endpoint, at protocol
// version (latest when "").
func connectHTTP(t *testing.T, endpoint, version string) (*mcp.ClientSession, *updates) {
	t.Helper()
	u := newUpdates()
	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{ResourceUpdatedHandler: u.Handler})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, u
}

func TestHTTP_RefusesARequestWithoutAName(t *testing.T) {
	uri := startHub(t)
	_, base := serveHTTP(t, uri, HTTPOptions{})
	resp, err := http.Post(base, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "?name=") || !strings.Contains(string(body), NameHeader) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

func TestHTTP_TokenIsRequiredWhenSet(t *testing.T) {
	uri := startHub(t)
	_, base := serveHTTP(t, uri, HTTPOptions{Token: "s3cret"})
	req, _ := http.NewRequest(http.MethodPost, base+"?name=proj/a", strings.NewReader(`{}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestHTTP_ToolsAndNotificationsPerAgent(t *testing.T) {
	for _, version := range []string{"", "2025-06-18"} {
		t.Run("protocol-"+version, func(t *testing.T) {
			uri := startHub(t)
			h, base := serveHTTP(t, uri, HTTPOptions{})
			cs, u := connectHTTP(t, base+"?name=proj/http-1", version)
			if got := toolNames(t, cs); !slices.Equal(got, fullTools) {
				t.Fatalf("tools %v", got)
			}
			var st StatusResult
			if res := call(t, cs, "status", nil, &st); res.IsError || st.Name != "proj/http-1" {
				t.Fatalf("status: %q %+v", text(res), st)
			}
			var cl ClaimResult
			if res := call(t, cs, "claim", map[string]any{"task_id": "T1", "paths": []string{"src"}}, &cl); res.IsError || !cl.Granted {
				t.Fatalf("claim: %q", text(res))
			}
			ctx := context.Background()
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: ClaimsURI}); err != nil {
				t.Fatal(err)
			}
			// Another agent, through the same endpoint, is refused and
			// then claims something else: the first is notified.
			cs2, _ := connectHTTP(t, base+"?name=proj/http-2", version)
			var ref ClaimResult
			if res := call(t, cs2, "claim", map[string]any{"task_id": "T2", "paths": []string{"src/a.go"}}, &ref); !res.IsError || ref.Holder != "proj/http-1" {
				t.Fatalf("refusal: %q %+v", text(res), ref)
			}
			u.Until(t, ClaimsURI, func(i int) {
				call(t, cs2, "claim", map[string]any{"task_id": "T3", "paths": []string{"docs"}}, nil)
			})
			if got := h.Agents(); !slices.Equal(got, []string{"proj/http-1", "proj/http-2"}) {
				t.Fatalf("agents %v", got)
			}
		})
	}
}

func TestHTTP_IdleAgentsAreDisconnected(t *testing.T) {
	uri := startHub(t)
	h, base := serveHTTP(t, uri, HTTPOptions{IdleTimeout: 200 * time.Millisecond})
	req, _ := http.NewRequest(http.MethodPost, base, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set(NameHeader, "proj/idle")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := h.Agents(); !slices.Equal(got, []string{"proj/idle"}) {
		t.Fatalf("agents after a request: %v (status %d)", got, resp.StatusCode)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(h.Agents()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still connected: %v", h.Agents())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eventually polls cond (a state another goroutine reaches after a reply
// the test already has) with a generous bound: no timing is asserted.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

func TestHTTP_DeleteEndsTheAgentWhenNoOtherSessionHoldsIt_Issue21_6(t *testing.T) {
	uri := startHub(t)
	h, base := serveHTTP(t, uri, HTTPOptions{})
	peer := dial(t, uri, "proj/peer")
	online := func(name string) bool {
		w, err := peer.Who(context.Background())
		return err == nil && slices.Contains(w.OnlineAgents, name)
	}
	one, _ := connectHTTP(t, base+"?name=proj/a", "2025-11-25")
	two, _ := connectHTTP(t, base+"?name=proj/a", "2025-11-25")
	call(t, one, "status", nil, nil)
	call(t, two, "status", nil, nil)
	if !online("proj/a") {
		t.Fatal("proj/a is not online")
	}
	one.Close() // DELETE: the other session still holds the name
	call(t, two, "status", nil, nil)
	if !slices.Contains(h.Agents(), "proj/a") || !online("proj/a") {
		t.Fatal("ending one of two sessions disconnected the agent")
	}
	two.Close() // DELETE of the last session: offline now, not in 30 minutes
	eventually(t, "proj/a offline after its last session's DELETE", func() bool { return !slices.Contains(h.Agents(), "proj/a") && !online("proj/a") })
}

func TestHTTP_RefusesASessionUsedUnderAnotherName_Issue21_6(t *testing.T) {
	uri := startHub(t)
	h, base := serveHTTP(t, uri, HTTPOptions{})
	cs, _ := connectHTTP(t, base+"?name=proj/a", "2025-11-25")
	call(t, cs, "status", nil, nil)
	post := func(name, sid string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"?name="+name, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("proj/phantom", cs.ID()); code != http.StatusBadRequest || !strings.Contains(body, "belongs to proj/a") {
		t.Fatalf("mismatch: %d %s", code, body)
	}
	if code, body := post("proj/ghost", "no-such-session"); code != http.StatusNotFound {
		t.Fatalf("unknown session: %d %s", code, body)
	}
	if got := h.Agents(); !slices.Equal(got, []string{"proj/a"}) {
		t.Fatalf("agents %v: a refused request brought an agent online", got)
	}
	call(t, cs, "status", nil, nil) // the real session is untouched
}
