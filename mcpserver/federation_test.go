package mcpserver

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

// A claim-family tool refused by a federated hub's ownership gate names
// the namespace and the hub that owns it, in the text and the result.
func TestTools_FederatedRefusalNamesTheOwnerHubAndNamespace(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "ws://" + ln.Addr().String()
	ln.Close()
	uris := hubtest.StartFederation(t, []string{"syn-b"}, func(string, map[string]string) hub.Config {
		return hub.Config{Federation: federation.Config{Owners: []string{"proj=syn-a"},
			ClaimPeers: map[string]string{"syn-a": dead}, ForwardTimeout: 300 * time.Millisecond}}
	})
	cs, _ := connectInMemory(t, New(Options{Client: serverClient(t, uris["syn-b"], "proj/alice")}))
	var out ClaimResult
	res := call(t, cs, "claim", map[string]any{"task_id": "T1"}, &out)
	if !res.IsError || out.Code != "OWNER_UNREACHABLE" || out.Namespace != "proj" || out.OwnerHubID != "syn-a" {
		t.Fatalf("claim: isError %v %+v", res.IsError, out)
	}
	if msg := text(res); !strings.Contains(msg, "syn-a") || !strings.Contains(msg, "'proj'") {
		t.Fatalf("claim refusal text does not name the owner and namespace: %q", msg)
	}
	if res := call(t, cs, "claim_update", map[string]any{"task_id": "T1", "status": "working"}, nil); !res.IsError || !strings.Contains(text(res), "syn-a") {
		t.Fatalf("claim_update: isError %v %q", res.IsError, text(res))
	}
}

// Whatever the hub's sentence says (a reference hub words it its own way),
// the text names the namespace and its owner; it does not repeat them
// when the sentence already does.
func TestExplain_NamesTheOwnerWhenTheHubsSentenceDoesNot(t *testing.T) {
	s := &Server{}
	for _, tc := range []struct {
		name string
		ref  client.Refused
		want string
	}{
		{"unreachable", client.Refused{Code: "OWNER_UNREACHABLE", Message: "Claim could not be forwarded.", Namespace: "proj", Ownership: "remote", OwnerHubID: "syn-a", ForwardError: "timeout"},
			"Claim could not be forwarded. (OWNER_UNREACHABLE) Namespace 'proj' is owned by hub syn-a, which this hub could not reach (timeout): retry shortly."},
		{"ungoverned", client.Refused{Code: "NAMESPACE_UNGOVERNED", Message: "Refused.", Namespace: "web", Ownership: "ungoverned"},
			"Refused. (NAMESPACE_UNGOVERNED) Namespace 'web' has no owning hub, so no hub grants claims in it."},
		{"partitioned", client.Refused{Code: "NAMESPACE_PARTITIONED", Message: "Refused.", Namespace: "proj", Ownership: "partitioned", OwnerHubID: "syn-a", Contesting: []string{"syn-c"}},
			"Refused. (NAMESPACE_PARTITIONED) Namespace 'proj' is owned by hub syn-a but contested by syn-c: nothing is granted there until the hubs agree."},
		{"not owner", client.Refused{Code: "NAMESPACE_NOT_OWNED", Message: "Refused.", Namespace: "proj", Ownership: "remote", OwnerHubID: "syn-a"},
			"Refused. (NAMESPACE_NOT_OWNED) Namespace 'proj' is owned by hub syn-a (remote here)."},
		{"already named", client.Refused{Code: "OWNER_UNREACHABLE", Message: "Namespace 'proj' is owned by hub syn-a, and forwarding to it failed (timeout).", Namespace: "proj", Ownership: "remote", OwnerHubID: "syn-a", ForwardError: "timeout"},
			"Namespace 'proj' is owned by hub syn-a, and forwarding to it failed (timeout). (OWNER_UNREACHABLE)"},
		{"not federated", client.Refused{Code: "EPOCH_STALE", Message: "Stale."}, "Stale. (EPOCH_STALE)"},
	} {
		if got := s.explain(&tc.ref); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
