package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
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
	for _, want := range []string{"✓ hub ", "✓ health ", "✓ port ", "- federation   a single hub", "- journal ", "✓ claude ", "✓ codex ", "- cursor ", "✓ claude-hook ", "- git-hook "} {
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

// doctorFederation runs doctor --json and returns its federation checks.
func doctorFederation(t *testing.T, args ...string) (int, []check) {
	t.Helper()
	code, out, errOut := runCmd(append([]string{"doctor", "--json"}, args...)...)
	var rep struct {
		Checks []check `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s%s", err, out, errOut)
	}
	var fed []check
	for _, c := range rep.Checks {
		if c.Name == "federation" {
			fed = append(fed, c)
		}
	}
	return code, fed
}

// Hubs linked without an ownership map give no cross-host mutual
// exclusion: doctor warns, and a warning alone does not fail it.
func TestDoctor_WarnsOfPeersWithoutAMap_INV_MH_4(t *testing.T) {
	uris := startFederation(t, []string{"syn-a", "syn-b"}, hubtest.Mesh())
	dir := inDir(t)
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	code, out, errOut := runCmd("doctor", "--uri", uris["syn-a"])
	if code != exitOK || !strings.Contains(out, "! federation   this hub has peers but no --namespace-owner map") || !strings.Contains(out, "fix: give every hub the same --namespace-owner map") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	code, fed := doctorFederation(t, "--uri", uris["syn-a"])
	if code != exitOK || len(fed) != 1 || fed[0].Status != "warn" || !strings.Contains(fed[0].Detail, "INV-MH-4") {
		t.Fatalf("--json: exit %d %+v", code, fed)
	}
}

// On a governed hub, online agents whose namespace has no owner get every
// claim refused: doctor names the namespace and the agents, once each,
// and not the namespace of its own throw-away connection.
func TestDoctor_WarnsOfOnlineAgentsInUngovernedNamespaces(t *testing.T) {
	uris := startFederation(t, []string{"syn-a", "syn-b"}, hubtest.Mesh("proj=syn-a"))
	dir := inDir(t)
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	_, fed := doctorFederation(t, "--uri", uris["syn-a"], "--name", "doc")
	if len(fed) != 1 || fed[0].Status != "ok" || !strings.Contains(fed[0].Detail, "hub syn-a is governed") {
		t.Fatalf("a governed hub whose agents all have owners: %+v", fed)
	}
	agent(t, uris["syn-a"], "proj/alice")
	agent(t, uris["syn-a"], "web/x")
	agent(t, uris["syn-a"], "web/y")
	agent(t, uris["syn-a"], "solo")
	code, fed := doctorFederation(t, "--uri", uris["syn-a"], "--name", "doc")
	if code != exitOK || len(fed) != 2 {
		t.Fatalf("exit %d, checks %+v; want two warnings", code, fed)
	}
	bare, web := fed[0], fed[1]
	if bare.Status != "warn" || !strings.Contains(bare.Detail, "solo is online with a bare name") || strings.Contains(bare.Detail, "doc-q") || !strings.Contains(bare.Fix, "PROJECT/NAME") {
		t.Errorf("bare names: %+v", bare)
	}
	if web.Status != "warn" || !strings.Contains(web.Detail, "namespace web has no owner") || !strings.Contains(web.Detail, "web/x, web/y are online") ||
		web.Fix != "add --namespace-owner web=HUB_ID on every hub" {
		t.Errorf("namespace web: %+v", web)
	}
}

func TestDoctor_OldHubSkipsTheFederationCheck(t *testing.T) {
	uri := startOldHub(t)
	dir := inDir(t)
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	if _, fed := doctorFederation(t, "--uri", uri); len(fed) != 1 || fed[0].Status != "skip" || !strings.Contains(fed[0].Detail, "predates ns_request") {
		t.Fatalf("%+v", fed)
	}
}

// Two hubs whose maps both give themselves proj contest it; doctor warns
// until the maps agree (INV-CR-4).
func TestDoctor_WarnsOfContestedNamespaces_INV_CR_4(t *testing.T) {
	uris := startFederation(t, []string{"syn-a", "syn-b"}, func(id string, uris map[string]string) hub.Config {
		c := hubtest.Mesh()(id, uris)
		c.Federation.Owners = []string{"proj=" + id}
		return c
	})
	dir := inDir(t)
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, fed := doctorFederation(t, "--uri", uris["syn-a"], "--name", "proj/doc")
		if len(fed) == 1 && fed[0].Status == "warn" {
			if !strings.Contains(fed[0].Detail, "namespace proj is contested: owner syn-a, also asserted by syn-b") || !strings.Contains(fed[0].Fix, "agree on proj") {
				t.Fatalf("%+v", fed[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no contest warning: %+v", fed)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
