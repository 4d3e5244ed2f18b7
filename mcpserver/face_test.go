package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/synapse-hub/synapse/client"
)

// maxToolsList is the budget of a full tools/list (issue 21 item 6).
const maxToolsList = 8 << 10

func toolsListBytes(t *testing.T, opts Options) (int, *mcp.ListToolsResult) {
	t.Helper()
	cs, _ := connectInMemory(t, New(opts))
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	return len(b), res
}

func TestToolsList_FitsItsBudget_Issue21_6(t *testing.T) {
	uri := startHub(t)
	n, res := toolsListBytes(t, Options{Client: serverClient(t, uri, "proj/me")})
	if n > maxToolsList {
		t.Fatalf("tools/list is %d bytes, over the budget of %d", n, maxToolsList)
	}
	t.Logf("tools/list: %d bytes, %d tools", n, len(res.Tools))
	for _, tl := range res.Tools {
		if tl.OutputSchema != nil {
			t.Errorf("%s lists an output schema by default", tl.Name)
		}
	}
	with, _ := toolsListBytes(t, Options{Client: serverClient(t, uri, "proj/schemas"), OutputSchemas: true})
	if with <= n {
		t.Fatalf("OutputSchemas: %d bytes, not more than %d", with, n)
	}
}

func TestToolsList_ListArgumentsArePlainArrays_Issue21_6(t *testing.T) {
	uri := startHub(t)
	_, res := toolsListBytes(t, Options{Client: serverClient(t, uri, "proj/me")})
	arrays := 0
	for _, tl := range res.Tools {
		b, _ := json.Marshal(tl.InputSchema)
		if strings.Contains(string(b), `"null"`) {
			t.Errorf("%s: input schema still allows null: %s", tl.Name, b)
		}
		arrays += strings.Count(string(b), `"type":"array"`)
	}
	if arrays < 5 { // claim's paths, globs, files; release's lists; depends_on
		t.Fatalf("only %d array arguments found", arrays)
	}
}

func TestTools_ResultsKeepStructuredContentWithoutOutputSchemas(t *testing.T) {
	uri := startHub(t)
	cs, _ := connectInMemory(t, New(Options{Client: serverClient(t, uri, "proj/me")}))
	var st StatusResult
	if res := call(t, cs, "status", nil, &st); res.IsError || st.Name != "proj/me" {
		t.Fatalf("status: %q %+v", text(res), st)
	}
}

func TestWait_DefaultStaysUnderTheTSClientsTimeout_Issue21_6(t *testing.T) {
	if DefaultWait >= 60*time.Second || DefaultProgressEvery >= DefaultWait {
		t.Fatalf("DefaultWait %s must stay under 60 s, and progress come inside it (%s)", DefaultWait, DefaultProgressEvery)
	}
}

func TestWait_SendsProgressWhenGivenAToken_Issue21_6(t *testing.T) {
	uri := startHub(t)
	holder := dial(t, uri, "proj/holder")
	ctx := context.Background()
	if _, err := holder.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil {
		t.Fatal(err)
	}
	s := New(Options{Client: serverClient(t, uri, "proj/me"), ProgressEvery: 20 * time.Millisecond})
	ct, st := mcp.NewInMemoryTransports()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.Run(sctx, st)
	progress := make(chan float64, 100)
	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			if r.Params.ProgressToken == "tok-1" {
				select {
				case progress <- r.Params.Progress:
				default:
				}
			}
		}})
	cs, err := cl.Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cs.Close(); s.Close() }()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{"task_id": "T1", "timeout_seconds": 600}}
		p.SetProgressToken("tok-1")
		res, err := cs.CallTool(ctx, p)
		done <- answer{res, err}
	}()
	// The holder releases only once progress has come: no race on time.
	select {
	case <-progress:
	case <-time.After(30 * time.Second):
		t.Fatal("no notifications/progress while waiting")
	}
	if _, err := holder.Release(ctx, "T1", client.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.res.IsError || !strings.Contains(text(a.res), "is free") {
		t.Fatalf("wait: %v %v", a.err, a.res)
	}
}
