package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

// startFederation serves hubs ids configured by cfg (hubtest.Mesh, for
// instance) for a CLI test and returns their URIs.
func startFederation(t *testing.T, ids []string, cfg func(id string, uris map[string]string) hub.Config) map[string]string {
	t.Helper()
	isolate(t)
	return hubtest.StartFederation(t, ids, cfg)
}

// waitPeersUp waits until the hub at uri has every link to its peers up.
func waitPeersUp(t *testing.T, uri string) {
	t.Helper()
	watchHub(t, uri, "the links of "+uri, func(ctx context.Context, c *client.Client) (bool, error) {
		st, err := c.Namespaces(ctx)
		return err == nil && st.PeersUp() == len(st.Peers), err
	})
}

// startOldHub serves a hub from before ns_request: its welcome does not
// announce "namespaces", so no client asks it.
func startOldHub(t *testing.T) string {
	t.Helper()
	saved := hub.Features
	hub.Features = slices.DeleteFunc(slices.Clone(saved), func(f string) bool { return f == client.FeatureNamespaces })
	defer func() { hub.Features = saved }() // hub.New has copied it
	return startCLIHub(t, hub.Config{})
}

func TestNS_HelpExplainsOwnershipAndListsTheVerbs(t *testing.T) {
	isolate(t)
	code, _, errOut := runCmd("ns", "--help")
	if code != exitOK || !strings.Contains(errOut, "owned by exactly one hub") || !strings.Contains(errOut, "\n  list ") {
		t.Fatalf("ns --help: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := runCmd("ns", "list", "--help"); code != exitOK || !strings.Contains(errOut, "Usage: synapse ns list") || !strings.Contains(errOut, "-json") {
		t.Fatalf("ns list --help: exit %d\n%s", code, errOut)
	}
	for _, args := range [][]string{{"ns"}, {"ns", "move"}, {"ns", "list", "extra"}} {
		if code, _, errOut := runCmd(args...); code != exitUsage {
			t.Errorf("%v: exit %d, want a usage error\n%s", args, code, errOut)
		}
	}
	if _, out, _ := runCmd("completion", "bash"); !strings.Contains(out, " ns ") {
		t.Errorf("bash completion does not offer ns:\n%s", out)
	}
}

func TestNSList_GovernedHubShowsMapPeersAndContests(t *testing.T) {
	uris := startFederation(t, []string{"syn-a", "syn-b"}, hubtest.Mesh("proj=syn-a", "ops=syn-b"))
	agent(t, uris["syn-b"], "web/x")
	waitPeersUp(t, uris["syn-b"])
	code, out, errOut := runCmd("ns", "list", "--uri", uris["syn-b"], "--name", "ops/me")
	want := `Hub syn-b is governed by an ownership map: 3 namespaces, 1 of 1 peers up.

NAMESPACE        OWNER            OUTCOME      REACHABLE
ops              syn-b            local        yes
proj             syn-a            remote       yes
web              -                ungoverned   no

PEER             URI                          MODE         UP   LAST ERROR
syn-a            ` + fmt.Sprintf("%-28s", uris["syn-a"]) + ` multiplexed  yes  -

No namespace is contested.
`
	if code != exitOK || out != want {
		t.Fatalf("exit %d\n--- got\n%s--- want\n%s%s", code, out, want, errOut)
	}
	code, out, _ = runCmd("ns", "list", "--json", "--uri", uris["syn-b"], "--name", "ops/me")
	var snap map[string]any
	if err := json.Unmarshal([]byte(out), &snap); err != nil || code != exitOK {
		t.Fatalf("ns list --json: exit %d %v\n%s", code, err, out)
	}
	for _, key := range []string{"hub_id", "governed", "namespaces", "peers", "contested", "forwarded", "observed_claims"} {
		if _, ok := snap[key]; !ok {
			t.Errorf("--json lacks %q: %s", key, out)
		}
	}
	if snap["hub_id"] != "syn-b" || len(snap["namespaces"].([]any)) != 3 {
		t.Fatalf("--json: %s", out)
	}
}

func TestNSList_PeersWithoutAMapWarn_INV_MH_4(t *testing.T) {
	uris := startFederation(t, []string{"syn-a", "syn-b"}, hubtest.Mesh())
	code, out, errOut := runCmd("ns", "list", "--uri", uris["syn-a"])
	for _, want := range []string{"Hub syn-a is not governed", "\nsyn-b ", "Warning: this hub has peers but no --namespace-owner map", "INV-MH-4"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Fatalf("exit %d: missing %q in\n%s%s", code, want, out, errOut)
		}
	}
	if strings.Contains(out, "NAMESPACE ") {
		t.Fatalf("an ungoverned hub has no ownership table:\n%s", out)
	}
}

// What a snapshot shows that a two-hub test cannot easily stage: a down
// peer, bare names, a contest and a quarantined peer.
func TestNSList_RendersContestsQuarantineAndBareNames(t *testing.T) {
	st := &client.NamespaceStatus{
		HubID: "syn-a", Governed: true,
		Namespaces: []client.NamespaceRoute{
			{Namespace: "", Outcome: "ungoverned"},
			{Namespace: "proj", Outcome: "partitioned", OwnerHubID: "syn-a", Contesting: []string{"syn-c"}},
		},
		Peers:       []client.PeerLink{{Peer: "syn-c", URI: "ws://c:8876", Mode: "down", LastError: "dial: refused"}},
		Contested:   []client.NamespaceRoute{{Namespace: "proj", Outcome: "partitioned", OwnerHubID: "syn-a", Contesting: []string{"syn-c"}}},
		Quarantined: map[string]string{"syn-z": "seq 7 changed"},
	}
	var b strings.Builder
	printNamespaces(&b, st)
	want := `Hub syn-a is governed by an ownership map: 2 namespaces, 0 of 1 peers up.

NAMESPACE        OWNER            OUTCOME      REACHABLE
(default)        -                ungoverned   no
proj             syn-a            partitioned  no

PEER             URI                          MODE         UP   LAST ERROR
syn-c            ws://c:8876                  down         no   dial: refused

Contested (every grant in them is refused until the hubs' maps agree):
  proj: owner syn-a, also asserted by syn-c

Quarantined peers (their logs changed under the watch; no longer pulled):
  syn-z: seq 7 changed
`
	if b.String() != want {
		t.Fatalf("--- got\n%s--- want\n%s", b.String(), want)
	}
}

func TestNSList_OldHubIsTooOld(t *testing.T) {
	uri := startOldHub(t)
	code, _, errOut := runCmd("ns", "list", "--uri", uri)
	if code != exitRefused || !strings.Contains(errOut, "too old") || !strings.Contains(errOut, `"namespaces"`) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

func TestStatus_FederationLine(t *testing.T) {
	uris := startFederation(t, []string{"syn-a", "syn-b"}, hubtest.Mesh("proj=syn-a"))
	waitPeersUp(t, uris["syn-b"])
	code, out, errOut := runCmd("status", "--uri", uris["syn-b"], "--name", "proj/me")
	if code != exitOK || !strings.Contains(out, "\nFederation: hub syn-b, governed yes, 1/1 peers up, 0 contested namespaces.\n") {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runCmd("status", "--json", "--uri", uris["syn-b"], "--name", "proj/me")
	var st struct {
		Federation *fedSummary `json:"federation"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != exitOK || st.Federation == nil ||
		*st.Federation != (fedSummary{HubID: "syn-b", Governed: true, PeersUp: 1, Peers: 1}) {
		t.Fatalf("status --json: %v %s", err, out)
	}

	// Peers without a map: the line and the INV-MH-4 warning.
	uris = startFederation(t, []string{"syn-c", "syn-d"}, hubtest.Mesh())
	if _, out, _ := runCmd("status", "--uri", uris["syn-c"]); !strings.Contains(out, "Federation: hub syn-c, governed no,") || !strings.Contains(out, "Warning: ") {
		t.Fatalf("status of a hub with peers and no map:\n%s", out)
	}

	// A lone hub has no federation line; an old one is not asked at all.
	uri := startCLIHub(t, hub.Config{})
	if _, out, _ := runCmd("status", "--uri", uri); strings.Contains(out, "Federation") {
		t.Fatalf("a lone hub shows a federation line:\n%s", out)
	}
	uri = startOldHub(t)
	code, out, errOut = runCmd("status", "--json", "--uri", uri)
	if code != exitOK || strings.Contains(out, `"federation"`) {
		t.Fatalf("status of an old hub: exit %d %s%s", code, out, errOut)
	}
}
