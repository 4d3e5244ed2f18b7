package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The official MCP TypeScript SDK client (compat/mcpclient, from npm)
// against the real binaries: `synapse mcp` over stdio and the hub's /mcp —
// tools, a refusal, wait with progress, channel events for a message and
// a freed task, DELETE (issue 21 items 1, 6 and 8). It skips only where
// node or npm is missing; ./deps.sh (the README's test command, and .ci/run) installs both.
func TestMCP_TypeScriptSDKClient_Issue21_8(t *testing.T) {
	isolate(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (CI installs Debian's nodejs and npm)")
	}
	dir, err := filepath.Abs(filepath.Join(pkgDir, "..", "..", "compat", "mcpclient"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		if _, err := exec.LookPath("npm"); err != nil {
			t.Skip("npm is not installed (CI installs Debian's npm)")
		}
		if out, err := exec.Command(filepath.Join(dir, "install.sh")).CombinedOutput(); err != nil {
			t.Fatalf("compat/mcpclient/install.sh: %v\n%s", err, out)
		}
	}
	bin := buildSynapse(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	hub, _ := startHubProcess(t, bin, filepath.Join(t.TempDir(), "hub.db"), port)
	t.Cleanup(func() { hub.Process.Kill(); hub.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "check.mjs"), bin, "ws://"+addr, "http://"+addr+"/mcp")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || strings.Contains(string(out), "FAIL") {
		t.Fatalf("the TypeScript SDK client's checks failed: %v", err)
	}
}

// Each limit of synapse mcp is a flag that refuses a value it cannot use.
func TestMCP_TuningFlagsRefuseNonPositiveDurations_Issue21_6(t *testing.T) {
	isolate(t)
	for _, flag := range []string{"--lease-lead", "--wait-default", "--progress-every"} {
		if code, _, errOut := runCmd("mcp", flag, "0s", "--name", "proj/x"); code != exitUsage || !strings.Contains(errOut, flag) {
			t.Errorf("%s 0s: exit %d: %s", flag, code, errOut)
		}
	}
}
