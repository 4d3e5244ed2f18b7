package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/mcpserver"
	"github.com/synapse-hub/synapse/mcpserver/mcptest"
)

// pkgDir is this package's folder (tests may change the working directory).
var pkgDir, _ = os.Getwd()

// buildSynapse builds the binary into a temporary folder.
func buildSynapse(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "synapse")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = pkgDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// realClock makes a test hub keep real time (leases expire, keepers renew).
func realClock() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func mcpCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	return mcptest.Call(t, cs, tool, args, out)
}

func mcpText(res *mcp.CallToolResult) string { return mcptest.Text(res) }

func mcpTools(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	return mcptest.Names(mcptest.Tools(t, cs))
}

var (
	fullToolNames    = []string{"board", "checkpoint", "claim", "claim_update", "handoff", "inbox", "release", "renew", "send", "status", "task_declare", "task_progress", "task_update", "wait", "who"}
	minimalToolNames = []string{"claim", "inbox", "release", "send", "status", "wait"}
)

// startStdioMCP runs `synapse mcp` as a subprocess speaking MCP on its
// stdio, the way Claude Code starts it, at the protocol Claude Code speaks.
func startStdioMCP(t *testing.T, bin string, args ...string) (*mcp.ClientSession, *mcptest.Updates) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), "SYNAPSE_CONFIG="+filepath.Join(t.TempDir(), "none.json"), "SYNAPSE_URI=", "SYNAPSE_NAME=", "SYNAPSE_TOKEN=")
	cmd.Stderr = os.Stderr
	n := mcptest.NewUpdates()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcptest.NewClient(n).Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, n
}

func TestMCP_StdioBinary_ToolsClaimRefusalAndNotification(t *testing.T) {
	bin := buildSynapse(t)
	uri := startCLIHub(t, hub.Config{Clock: realClock})
	cs, notes := startStdioMCP(t, bin, "--uri", uri, "--name", "proj/claude-1")
	if got := cs.InitializeResult(); got == nil || got.ServerInfo.Name != "synapse" || got.Capabilities.Resources == nil || !got.Capabilities.Resources.Subscribe {
		t.Fatalf("initialize: %+v", got)
	}
	if got := mcpTools(t, cs); !slices.Equal(got, fullToolNames) {
		t.Fatalf("tools %v", got)
	}
	var st mcpserver.StatusResult
	if res := mcpCall(t, cs, "status", nil, &st); res.IsError || st.Name != "proj/claude-1" {
		t.Fatalf("status: %s", mcpText(res))
	}
	var cl mcpserver.ClaimResult
	if res := mcpCall(t, cs, "claim", map[string]any{"task_id": "T1", "paths": []string{"src"}}, &cl); res.IsError || !cl.Granted || !cl.Claim.KeptAlive {
		t.Fatalf("claim: %s", mcpText(res))
	}
	if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: mcpserver.ClaimsURI}); err != nil {
		t.Fatal(err)
	}
	other := agent(t, uri, "proj/codex-1")
	_, err := other.Claim(context.Background(), client.ClaimRequest{TaskID: "T2", Paths: []string{"docs"}})
	if err != nil {
		t.Fatal(err)
	}
	notes.Await(t, mcpserver.ClaimsURI)
	var ref mcpserver.ClaimResult
	res := mcpCall(t, cs, "claim", map[string]any{"task_id": "T3", "paths": []string{"docs/x.md"}}, &ref)
	if !res.IsError || ref.Holder != "proj/codex-1" || !strings.Contains(mcpText(res), "proj/codex-1") {
		t.Fatalf("refusal: %s %+v", mcpText(res), ref)
	}
	var rl mcpserver.ReleaseResult
	if res := mcpCall(t, cs, "release", map[string]any{"task_id": "T1", "evidence": []string{"tests pass"}}, &rl); res.IsError || !rl.Released {
		t.Fatalf("release: %s", mcpText(res))
	}

	mini, _ := startStdioMCP(t, bin, "--uri", uri, "--name", "proj/claude-2", "--tools", "minimal")
	if got := mcpTools(t, mini); !slices.Equal(got, minimalToolNames) {
		t.Fatalf("minimal tools %v", got)
	}
}

// startMCPHub serves an in-process hub with its /mcp (hubMCP) over
// loopback and returns its http:// URL.
func startMCPHub(t *testing.T, cfg hub.Config) string {
	t.Helper()
	var self string
	m := hubMCP("", nil, func() string { return self }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	cfg.MCP, cfg.Logger = m, slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := hub.New(cfg)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(func() {
		m.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.Close(ctx)
		srv.Close()
	})
	self = "ws" + strings.TrimPrefix(srv.URL, "http")
	return srv.URL
}

func TestMCP_HubServesMCPAtSlashMCP(t *testing.T) {
	isolate(t)
	base := startMCPHub(t, hub.Config{})
	self := "ws" + strings.TrimPrefix(base, "http")

	// Without a name: a clear refusal.
	resp, err := http.Post(base+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "?name=") {
		t.Fatalf("no name: %d %s", resp.StatusCode, body)
	}

	n := mcptest.NewUpdates()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcptest.NewClient(n).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp?name=proj/cursor-1", MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := mcpTools(t, cs); !slices.Equal(got, fullToolNames) {
		t.Fatalf("tools %v", got)
	}
	var cl mcpserver.ClaimResult
	if res := mcpCall(t, cs, "claim", map[string]any{"task_id": "T1"}, &cl); res.IsError || cl.Claim.Owner != "proj/cursor-1" {
		t.Fatalf("claim: %s", mcpText(res))
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: mcpserver.InboxURI}); err != nil {
		t.Fatal(err)
	}
	other := agent(t, self, "proj/claude-9")
	if _, err := other.Send(ctx, "proj/cursor-1", "done with T0?", client.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	n.Await(t, mcpserver.InboxURI)
	var in mcpserver.InboxResult
	if res := mcpCall(t, cs, "inbox", nil, &in); res.IsError || len(in.Messages) != 1 || in.Messages[0].From != "proj/claude-9" {
		t.Fatalf("inbox: %s", mcpText(res))
	}
}

func TestMCP_Usage(t *testing.T) {
	isolate(t)
	if code, _, errOut := runCmd("mcp", "--tools", "huge"); code != exitUsage || !strings.Contains(errOut, "full or minimal") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	code, _, errOut := runCmd("mcp", "--help")
	if code != 0 || !strings.Contains(errOut, "--tools") || !strings.Contains(errOut, "X-Synapse-Name") {
		t.Fatalf("help: %d %s", code, errOut)
	}
}

// A host that pipes its requests and closes stdin gets every reply: `synapse
// mcp` answers what it read before it exits, and exits.
func TestMCP_StdioAnswersEveryRequestReadBeforeStdinCloses(t *testing.T) {
	bin := buildSynapse(t)
	uri := startCLIHub(t, hub.Config{Clock: realClock})
	in := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"0"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"status","arguments":{}}}
`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "mcp", "--uri", uri, "--name", "proj/pipe")
	cmd.Env = append(os.Environ(), "SYNAPSE_CONFIG="+filepath.Join(t.TempDir(), "none.json"), "SYNAPSE_URI=", "SYNAPSE_NAME=", "SYNAPSE_TOKEN=")
	cmd.Stdin = strings.NewReader(in)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("synapse mcp: %v\nstdout: %s", err, out)
	}
	if len(bytes.TrimSpace(out)) == 0 {
		t.Fatal("synapse mcp printed nothing: it exited on EOF before answering")
	}
	replies := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		if id, ok := m["id"]; ok {
			replies[fmt.Sprint(id)] = m
		}
	}
	for _, id := range []string{"1", "2", "3"} {
		if r := replies[id]; r == nil || r["result"] == nil {
			t.Errorf("request %s: reply %v, want a result\nstdout: %s", id, r, out)
		}
	}
	list, _ := replies["2"]["result"].(map[string]any)
	if tools, _ := list["tools"].([]any); len(tools) != len(fullToolNames) {
		t.Errorf("tools/list gave %d tools, want %d", len(tools), len(fullToolNames))
	}
}

// With the hub down `synapse mcp` still completes the handshake, so the
// host shows the reason instead of "failed to connect": each tool says the
// hub is not reachable and what to do, and once a hub listens the same
// server works, without a restart (issue 21 item 6). A name another live
// connection holds is said the same way, and is not taken over.
func TestMCP_HubDownOrNameTakenStillHandshakesAndSaysWhy_Issue21_6(t *testing.T) {
	bin := buildSynapse(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cs, _ := startStdioMCP(t, bin, "--uri", "ws://"+addr, "--name", "proj/late")
	res := mcpCall(t, cs, "status", map[string]any{}, nil)
	if !res.IsError || !strings.Contains(mcpText(res), addr) || !strings.Contains(mcpText(res), "synapse hub") {
		t.Fatalf("status with the hub down: error %v, %q", res.IsError, mcpText(res))
	}
	h, err := hub.New(hub.Config{Clock: realClock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if ln, err = net.Listen("tcp", addr); err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := httptest.NewUnstartedServer(h.Handler())
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() { h.Close(context.Background()); srv.Close() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if res = mcpCall(t, cs, "status", map[string]any{}, nil); !res.IsError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never connected once the hub came up: %s", mcpText(res))
		}
	}
	if res := mcpCall(t, cs, "claim", map[string]any{"task_id": "T1"}, nil); res.IsError {
		t.Fatalf("claim once connected: %s", mcpText(res))
	}

	uri := "ws://" + addr
	holder := agent(t, uri, "proj/held")
	taken, _ := startStdioMCP(t, bin, "--uri", uri, "--name", "proj/held")
	var text string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if res = mcpCall(t, taken, "status", map[string]any{}, nil); res.IsError && strings.Contains(mcpText(res), "proj/held") {
			text = mcpText(res)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a taken name was not said: error %v %q", res.IsError, mcpText(res))
		}
	}
	if !strings.Contains(text, "another --name") {
		t.Errorf("the taken name's advice: %q", text)
	}
	if _, err := holder.Who(context.Background()); err != nil {
		t.Errorf("the holder lost its name to the MCP server: %v", err)
	}
}
