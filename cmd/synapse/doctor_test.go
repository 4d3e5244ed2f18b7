package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/hub"
)

func TestDoctor_LiveHubAndIntegrations(t *testing.T) {
	uri := startCLIHub(t, hub.Config{Clock: realClock})
	dir := inDir(t)
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state")) // no journal there
	bin := filepath.Join(dir, "bin", "syn")                 // any name: the hook is found by its "guard" verb
	os.MkdirAll(filepath.Dir(bin), 0o755)
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	for _, host := range []string{"claude", "codex"} {
		if code, _, errOut := runCmd("init", host, "--name", "proj/"+host, "--command", bin); code != 0 {
			t.Fatal(errOut)
		}
	}
	code, out, errOut := runCmd("doctor", "--uri", uri)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"✓ hub ", "✓ health ", "✓ port ", "- journal ", "✓ claude ", "✓ codex ", "- cursor ", "✓ claude-hook ", "- git-hook "} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	// A configuration pointing at a binary that is gone is wrong.
	os.Remove(bin)
	code, out, _ = runCmd("doctor", "--uri", uri, "--json")
	var rep struct {
		OK     bool    `json:"ok"`
		Checks []check `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err, out)
	}
	if code != exitRefused || rep.OK {
		t.Fatalf("exit %d ok %v", code, rep.OK)
	}
	for _, c := range rep.Checks {
		if c.Name == "claude" && (c.Status != "fail" || !strings.Contains(c.Fix, "synapse init claude")) {
			t.Errorf("claude check %+v", c)
		}
	}
}

func TestDoctor_DeadHubSaysHowToStartIt(t *testing.T) {
	dir := inDir(t)
	db := filepath.Join(dir, "hub.db")
	os.WriteFile(db, []byte("x"), 0o644)
	code, out, _ := runCmd("doctor", "--uri", "ws://127.0.0.1:1", "--connect-timeout", "1s", "--db", db)
	if code != exitRefused {
		t.Fatalf("exit %d\n%s", code, out)
	}
	for _, want := range []string{"✗ hub ", "fix: start it with 'synapse hub'", "- port ", "nothing listens on 127.0.0.1:1", "✗ journal ", "chmod 600"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}
