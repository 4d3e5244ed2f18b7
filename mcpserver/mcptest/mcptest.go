// Package mcptest holds the MCP client helpers the tests of the MCP server
// and of `synapse mcp` share.
package mcptest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Call calls a tool and, when out is not nil, decodes its structured
// content into out. A transport error fails the test; a tool error is the
// result's IsError.
func Call(t testing.TB, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if out != nil && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", tool, b, err)
		}
	}
	return res
}

// Text is the text content of a result.
func Text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// Tools lists the server's tools, sorted by name.
func Tools(t testing.TB, cs *mcp.ClientSession) []*mcp.Tool {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := slices.Clone(res.Tools)
	slices.SortFunc(tools, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })
	return tools
}

// Names are the tools' names, in order.
func Names(tools []*mcp.Tool) []string {
	names := make([]string, len(tools))
	for i, tl := range tools {
		names[i] = tl.Name
	}
	return names
}

// Updates records the resources/updated notifications a client receives.
type Updates struct {
	mu   sync.Mutex
	uris []string
	ch   chan string
}

// NewUpdates returns an empty recorder.
func NewUpdates() *Updates { return &Updates{ch: make(chan string, 100)} }

// Handler is the client's ResourceUpdatedHandler.
func (u *Updates) Handler(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
	u.mu.Lock()
	u.uris = append(u.uris, req.Params.URI)
	u.mu.Unlock()
	select {
	case u.ch <- req.Params.URI:
	default:
	}
}

// NewClient is an MCP client whose notifications u records.
func NewClient(u *Updates) *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "synapse-test", Version: "1"}, &mcp.ClientOptions{ResourceUpdatedHandler: u.Handler})
}

// Await waits for a notification about uri.
func (u *Updates) Await(t testing.TB, uri string) {
	t.Helper()
	u.Until(t, uri, nil)
}

// Until calls act (when not nil) and waits for a notification about uri,
// calling act again every 250 ms: under the 2026-07-28 protocol the SDK
// client's Subscribe returns before the server has registered the
// subscription, so one change may come too early to be notified.
func (u *Updates) Until(t testing.TB, uri string, act func(i int)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		if act != nil {
			act(i)
		}
		select {
		case got := <-u.ch:
			if got == uri {
				return
			}
			continue
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			u.mu.Lock()
			defer u.mu.Unlock()
			t.Fatalf("no notification for %s; got %v", uri, u.uris)
		}
	}
}
