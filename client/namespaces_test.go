package client_test

// Federated hubs seen through the SDK: the ownership fields of a refusal
// and the ns_request snapshot.

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

func fedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func refusal(t *testing.T, err error, code string) *client.Refused {
	t.Helper()
	var ref *client.Refused
	if !errors.As(err, &ref) || ref.Code != code {
		t.Fatalf("err = %v, want a *Refused %s", err, code)
	}
	return ref
}

// eventually retries cond until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

func deadURI(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "ws://" + ln.Addr().String()
}

// A refusal by the ownership gate carries the namespace, how the hub
// resolves it, its owner and why forwarding failed; Error names the owner.
func TestRefused_OwnerUnreachableCarriesNamespaceAndOwner(t *testing.T) {
	uris := hubtest.StartFederation(t, []string{"syn-b"}, func(string, map[string]string) hub.Config {
		return hub.Config{Federation: federation.Config{Owners: []string{"proj=syn-a"},
			ClaimPeers: map[string]string{"syn-a": deadURI(t)}, ForwardTimeout: 300 * time.Millisecond}}
	})
	alice := hubtest.Agent(t, uris["syn-b"], "proj/alice")
	_, err := alice.Claim(fedCtx(t), client.ClaimRequest{TaskID: "T1"})
	ref := refusal(t, err, "OWNER_UNREACHABLE")
	if ref.Frame != "claim_denied" || ref.Namespace != "proj" || ref.Ownership != "remote" || ref.OwnerHubID != "syn-a" || ref.ForwardError == "" {
		t.Fatalf("refusal %+v", ref)
	}
	if !strings.HasSuffix(ref.Error(), " (OWNER_UNREACHABLE, owner syn-a)") {
		t.Fatalf("Error() = %q: want the code and the owner", ref.Error())
	}
	// task_update is refused with a plain error frame, with the same fields.
	_, err = alice.Update(fedCtx(t), client.UpdateRequest{TaskID: "T1", Status: "working"})
	if ref := refusal(t, err, "OWNER_UNREACHABLE"); ref.Frame != "error" || ref.OwnerHubID != "syn-a" || ref.Namespace != "proj" {
		t.Fatalf("task_update refusal %+v", ref)
	}
}

// An ungoverned namespace has no owner: the refusal says so, and Error
// keeps its old form.
func TestRefused_UngovernedHasNoOwner(t *testing.T) {
	uris := hubtest.StartFederation(t, []string{"syn-a"}, hubtest.Mesh("proj=syn-a"))
	other := hubtest.Agent(t, uris["syn-a"], "other/x")
	_, err := other.Claim(fedCtx(t), client.ClaimRequest{TaskID: "T1"})
	ref := refusal(t, err, "NAMESPACE_UNGOVERNED")
	if ref.Namespace != "other" || ref.Ownership != "ungoverned" || ref.OwnerHubID != "" || ref.ForwardError != "" {
		t.Fatalf("refusal %+v", ref)
	}
	if ref.Error() != ref.Message+" (NAMESPACE_UNGOVERNED)" {
		t.Fatalf("Error() = %q", ref.Error())
	}
}

// Two hubs that each believe they own proj contest it: the refusal lists
// the contesting hub, and the snapshot lists the contest (INV-CR-4).
func TestRefused_PartitionedListsTheContestingHubs(t *testing.T) {
	uris := hubtest.StartFederation(t, []string{"syn-a", "syn-b"}, func(id string, uris map[string]string) hub.Config {
		c := hubtest.Mesh()(id, uris)
		c.Federation.Owners = []string{"proj=" + id}
		return c
	})
	ctx := fedCtx(t)
	a := hubtest.Agent(t, uris["syn-a"], "proj/x")
	eventually(t, "syn-a sees proj contested", func() bool {
		st, err := a.Namespaces(ctx)
		return err == nil && len(st.Contested) == 1
	})
	_, err := a.Claim(ctx, client.ClaimRequest{TaskID: "T1"})
	ref := refusal(t, err, "NAMESPACE_PARTITIONED")
	if ref.Ownership != "partitioned" || ref.OwnerHubID != "syn-a" || !slices.Equal(ref.Contesting, []string{"syn-b"}) {
		t.Fatalf("refusal %+v", ref)
	}
	st, err := a.Namespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Contested[0]; c.Namespace != "proj" || c.Outcome != client.OwnershipPartitioned || !slices.Equal(c.Contesting, []string{"syn-b"}) {
		t.Fatalf("contested %+v", st.Contested)
	}
}

// Namespaces returns the map as the asked hub resolves it: the namespaces
// it names and those its agents use, the peers with their links, and the
// raw snapshot.
func TestNamespaces_GovernedHubResolvesTheMapAndItsAgents(t *testing.T) {
	uris := hubtest.StartFederation(t, []string{"syn-a", "syn-b"}, hubtest.Mesh("proj=syn-a", "ops=syn-b"))
	ctx := fedCtx(t)
	hubtest.Agent(t, uris["syn-b"], "web/x")
	b := hubtest.Agent(t, uris["syn-b"], "ops/me")
	var st *client.NamespaceStatus
	eventually(t, "syn-b's link to syn-a is up", func() bool {
		var err error
		st, err = b.Namespaces(ctx)
		return err == nil && st.PeersUp() == 1
	})
	if st.HubID != "syn-b" || !st.Governed || st.Warning != "" || len(st.Contested) != 0 {
		t.Fatalf("snapshot %+v", st)
	}
	for ns, want := range map[string]client.NamespaceRoute{
		"ops":  {Namespace: "ops", Outcome: "local", OwnerHubID: "syn-b", Reachable: true},
		"proj": {Namespace: "proj", Outcome: "remote", OwnerHubID: "syn-a", Reachable: true},
		"web":  {Namespace: "web", Outcome: "ungoverned"},
	} {
		if got := st.Route(ns); got == nil || got.Namespace != want.Namespace || got.Outcome != want.Outcome || got.OwnerHubID != want.OwnerHubID || got.Reachable != want.Reachable {
			t.Errorf("%s: %+v, want %+v", ns, got, want)
		}
	}
	if len(st.Peers) != 1 {
		t.Fatalf("peers %+v", st.Peers)
	}
	if p := st.Peers[0]; p.Peer != "syn-a" || p.URI != uris["syn-a"] || p.Mode != "multiplexed" || !p.ClaimPeer {
		t.Fatalf("peer %+v", p)
	}
	if !strings.Contains(string(st.Raw), `"hub_id":"syn-b"`) {
		t.Fatalf("raw snapshot %s", st.Raw)
	}
}

// Hubs linked without an ownership map say so: no cross-host exclusion.
func TestNamespaces_PeersWithoutAMapWarn_INV_MH_4(t *testing.T) {
	uris := hubtest.StartFederation(t, []string{"syn-a", "syn-b"}, hubtest.Mesh())
	c := hubtest.Agent(t, uris["syn-a"], "proj/me")
	st, err := c.Namespaces(fedCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Governed || len(st.Namespaces) != 0 || len(st.Peers) != 1 || !strings.Contains(st.Warning, "INV-MH-4") {
		t.Fatalf("snapshot %+v", st)
	}
}
