package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/gate"
)

// --pprof listens on loopback only: a profile exposes memory contents.
func TestPprof_LoopbackOnly(t *testing.T) {
	policy, err := gate.NewRequestPolicy(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:6060", "example.com:6060", "6060"} {
		if _, err := servePprof(addr, policy); err == nil {
			t.Errorf("servePprof(%q) accepted an address off loopback", addr)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop, err := servePprof(addr, policy)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "goroutine") {
		t.Fatalf("pprof index: %d %.200s", resp.StatusCode, b)
	}

	// The hub's Host rule: a DNS-rebinding page (Host: evil.example) may
	// not read the command line, which shows --token.
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/debug/pprof/cmdline", nil)
	req.Host = "evil.example"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("pprof cmdline with a foreign Host: %d, want 403", resp.StatusCode)
	}
}
