package hub

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/journal"
)

// fedNet is a set of in-process hubs on real loopback sockets, each
// knowing the others' URIs before it starts (a federation is configured
// by address).
type fedNet struct {
	t    *testing.T
	uris map[string]string
	hubs map[string]*Hub
}

// startFed starts one hub per id; cfg gives each hub's Config from the
// URIs of all of them.
func startFed(t *testing.T, ids []string, cfg func(id string, uris map[string]string) Config) *fedNet {
	t.Helper()
	n := &fedNet{t: t, uris: map[string]string{}, hubs: map[string]*Hub{}}
	lns := map[string]net.Listener{}
	for _, id := range ids {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[id] = ln
		n.uris[id] = "ws://" + ln.Addr().String()
	}
	for _, id := range ids {
		c := cfg(id, n.uris)
		c.HubID = id
		if c.Logger == nil {
			c.Logger = slog.New(slog.NewTextHandler(testLogOut, nil))
		}
		h, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h.Handler()}
		go srv.Serve(lns[id])
		n.hubs[id] = h
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			h.Close(ctx)
			srv.Close()
		})
	}
	return n
}

func (n *fedNet) agent(hubID, name string) *client.Client {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URI: n.uris[hubID], Name: name})
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { c.Close() })
	return c
}

// twoHubs: syn-a owns namespace proj; syn-b forwards to it.
func twoHubs(t *testing.T, mutate ...func(id string, c *Config)) *fedNet {
	return startFed(t, []string{"syn-a", "syn-b"}, func(id string, uris map[string]string) Config {
		c := Config{Federation: federation.Config{
			Owners:         []string{"proj=syn-a"},
			ClaimPeers:     map[string]string{},
			ClaimPeerToken: "tok-" + id,
			PeerTokens:     map[string]string{"syn-a": "tok-syn-a", "syn-b": "tok-syn-b"},
			ForwardTimeout: 5 * time.Second,
		}}
		for _, p := range []string{"syn-a", "syn-b"} {
			if p != id {
				c.Federation.ClaimPeers[p] = uris[p]
			}
		}
		for _, m := range mutate {
			m(id, &c)
		}
		return c
	})
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantRefused(t *testing.T, err error, code string) *client.Refused {
	t.Helper()
	var r *client.Refused
	if !errors.As(err, &r) || r.Code != code {
		t.Fatalf("got %v; want a refusal %s", err, code)
	}
	return r
}

// A claim made on a non-owner is decided by the namespace's owner: the
// grant comes from syn-a, and an overlapping claim made directly on the
// owner is refused against it (INV-MH-1, INV-ME-2 across hubs).
func TestFederation_ForwardedClaimDecidedByOwner_INV_MH_1(t *testing.T) {
	n := twoHubs(t)
	ctx := ctx10(t)
	alice := n.agent("syn-b", "proj/alice")
	bob := n.agent("syn-a", "proj/bob")
	cl, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src/core"}})
	if err != nil {
		t.Fatalf("forwarded claim: %v", err)
	}
	if cl.Owner != "proj/alice" || cl.Epoch < 1 {
		t.Fatalf("grant %+v", cl)
	}
	_, err = bob.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"src/core/x.go"}})
	if r := wantRefused(t, err, "SCOPE_CONFLICT"); r.Holder != "proj/alice" {
		t.Fatalf("holder %q", r.Holder)
	}
	st, err := bob.State(ctx)
	if err != nil || len(st.ActiveClaims) != 1 || st.ActiveClaims[0].TaskID != "T1" {
		t.Fatalf("owner's state %+v %v; want T1 held there", st, err)
	}
	// The non-owner holds nothing of its own: authority lives in one place.
	if st, err := alice.State(ctx); err != nil || len(st.ActiveClaims) != 0 {
		t.Fatalf("non-owner's own claims %+v %v; want none", st, err)
	}
}

// Every claim-family verb is routed to the owner, not only claim
// (PROTOCOL.md §8.3 [obs]): update, checkpoint, wait with its wake-up,
// handoff to an agent of the forwarding hub, fenced release.
func TestFederation_EveryClaimFamilyVerbRouted_INV_MH_2(t *testing.T) {
	n := twoHubs(t)
	ctx := ctx10(t)
	alice := n.agent("syn-b", "proj/alice")
	carol := n.agent("syn-b", "proj/carol")
	dave := n.agent("syn-b", "proj/dave")
	cl, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Update(ctx, client.UpdateRequest{TaskID: "T1", Status: "working", Epoch: cl.Epoch}); err != nil {
		t.Fatalf("update: %v", err)
	}
	if _, err := alice.Checkpoint(ctx, "T1", "step-3", cl.Epoch); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	woke := make(chan error, 1)
	go func() { _, err := carol.Wait(ctx, "T1"); woke <- err }()
	// A stale epoch is fenced at the owner (INV-EF-2).
	if _, err := alice.Release(ctx, "T1", client.ReleaseOptions{Epoch: cl.Epoch + 100}); err == nil {
		t.Fatal("a release with a stale epoch was granted")
	}
	h, err := alice.Handoff(ctx, client.HandoffRequest{TaskID: "T1", To: "proj/dave", Epoch: cl.Epoch})
	if err != nil {
		t.Fatalf("handoff to an agent of the forwarding hub: %v", err)
	}
	if h.Owner != "proj/dave" || h.Epoch <= cl.Epoch || h.Checkpoint != "step-3" {
		t.Fatalf("handed-off claim %+v", h)
	}
	if _, err := dave.Release(ctx, "T1", client.ReleaseOptions{Epoch: h.Epoch}); err != nil {
		t.Fatalf("release by the recipient: %v", err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter on the forwarding hub was never woken")
	}
	owner := n.agent("syn-a", "proj/zed")
	if st, err := owner.State(ctx); err != nil || len(st.ActiveClaims) != 0 {
		t.Fatalf("owner still holds %+v %v", st, err)
	}
}

// An ungoverned namespace and a bare name grant nothing on a governed hub
// (INV-CR-4, INV-MH-3), and the refusal names the namespace.
func TestFederation_UngovernedNamespaceGrantsNothing_INV_MH_3(t *testing.T) {
	n := twoHubs(t)
	ctx := ctx10(t)
	for _, hub := range []string{"syn-a", "syn-b"} {
		other := n.agent(hub, "other/x")
		_, err := other.Claim(ctx, client.ClaimRequest{TaskID: "T1"})
		if r := wantRefused(t, err, "NAMESPACE_UNGOVERNED"); !strings.Contains(r.Message, "'other'") {
			t.Fatalf("%s: refusal does not name the namespace: %q", hub, r.Message)
		}
		bare := n.agent(hub, "bare")
		_, err = bare.Claim(ctx, client.ClaimRequest{TaskID: "T1"})
		wantRefused(t, err, "NAMESPACE_UNGOVERNED")
	}
}

// An owner that cannot be reached refuses the forward with its reason,
// within the timeout, and nothing is granted locally (INV-MH-3).
func TestFederation_UnreachableOwnerRefusesNeverGrantsLocally_INV_MH_3(t *testing.T) {
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURI := "ws://" + dead.Addr().String()
	dead.Close()
	n := startFed(t, []string{"syn-b"}, func(string, map[string]string) Config {
		return Config{Federation: federation.Config{Owners: []string{"proj=syn-a"},
			ClaimPeers: map[string]string{"syn-a": deadURI}, ForwardTimeout: 500 * time.Millisecond}}
	})
	ctx := ctx10(t)
	alice := n.agent("syn-b", "proj/alice")
	start := time.Now()
	_, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1"})
	r := wantRefused(t, err, "OWNER_UNREACHABLE")
	if !strings.Contains(r.Message, "syn-a") || time.Since(start) > 5*time.Second {
		t.Fatalf("refusal %q after %v", r.Message, time.Since(start))
	}
	if st, _ := alice.State(ctx); len(st.ActiveClaims) != 0 {
		t.Fatalf("non-owner granted locally: %+v", st.ActiveClaims)
	}
}

// An owner serves no peer without a token for it (deny-by-default); the
// forwarder refuses, naming the owner.
func TestFederation_PeerWithoutTokenIsRefused_INV_MH_3(t *testing.T) {
	n := twoHubs(t, func(id string, c *Config) {
		if id == "syn-a" {
			c.Federation.PeerTokens = nil // syn-a accepts no peer
		}
	})
	ctx := ctx10(t)
	alice := n.agent("syn-b", "proj/alice")
	_, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1"})
	wantRefused(t, err, "OWNER_UNREACHABLE")
	if got := n.hubs["syn-a"].fed.Stats.PeerRefused.Load(); got == 0 {
		t.Fatal("the owner did not count the refused peer")
	}
}

// Two hubs whose maps both claim the namespace contest it once linked:
// every grant is refused on both (INV-CR-4), and the partition is
// journalled.
func TestFederation_ContestedMapRefusesEverything_INV_CR_4(t *testing.T) {
	dir := t.TempDir()
	stores := map[string]*journal.Store{}
	n := twoHubs(t, func(id string, c *Config) {
		c.Federation.Owners = []string{"proj=" + id} // each believes it owns proj
		st, err := journal.Open(filepath.Join(dir, id+".db"), journal.Options{HubID: id})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores[id], c.Journal = st, st
	})
	ctx := ctx10(t)
	for _, id := range []string{"syn-a", "syn-b"} {
		eventually(t, id+" sees the namespace contested", func() bool { return len(n.hubs[id].fed.Contested()) == 1 })
		a := n.agent(id, "proj/x-"+id)
		_, err := a.Claim(ctx, client.ClaimRequest{TaskID: "T-" + id})
		r := wantRefused(t, err, "NAMESPACE_PARTITIONED")
		if !strings.Contains(r.Message, "contested") {
			t.Fatalf("refusal %q", r.Message)
		}
	}
	for id, st := range stores {
		found := false
		eventually(t, id+" journals the partition", func() bool {
			_ = st.ScanKinds([]string{"multihub_partition"}, func(string, []byte) error { found = true; return nil })
			return found
		})
	}
}

// Two default hubs grant the same task independently: without an
// ownership map there is no cross-host mutual exclusion, as the spec says
// (INV-MH-4).
func TestFederation_DefaultHubsGrantIndependently_INV_MH_4(t *testing.T) {
	n := startFed(t, []string{"syn-1", "syn-2"}, func(string, map[string]string) Config { return Config{} })
	ctx := ctx10(t)
	for _, id := range []string{"syn-1", "syn-2"} {
		a := n.agent(id, "proj/a-"+id)
		if _, err := a.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
}

// A forward carrying an idem_key applies once however it is retried: via
// the same hub, or directly at the owner (INV-CR-1, INV-DG-2 across hubs).
func TestFederation_IdempotentForwardAppliesOnce_INV_CR_1(t *testing.T) {
	n := twoHubs(t)
	ctx := ctx10(t)
	alice := n.agent("syn-b", "proj/alice")
	first, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1", IdemKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1", IdemKey: "k1"})
	if err != nil || again.Epoch != first.Epoch {
		t.Fatalf("retry through the forwarder: %+v %v; want the stored grant at epoch %d", again, err, first.Epoch)
	}
	alice.Close()
	direct := n.agent("syn-a", "proj/alice")
	viaOwner, err := direct.Claim(ctx, client.ClaimRequest{TaskID: "T1", IdemKey: "k1"})
	if err != nil || viaOwner.Epoch != first.Epoch {
		t.Fatalf("retry at the owner: %+v %v; want the stored grant at epoch %d", viaOwner, err, first.Epoch)
	}
}

// A handoff across namespaces is refused on a governed hub: the lease
// would sit under an authority that does not own its holder.
func TestFederation_CrossNamespaceHandoffRefused(t *testing.T) {
	n := twoHubs(t, func(id string, c *Config) { c.Federation.Owners = append(c.Federation.Owners, "ops=syn-b") })
	ctx := ctx10(t)
	alice := n.agent("syn-a", "proj/alice")
	n.agent("syn-a", "ops/eve")
	cl, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = alice.Handoff(ctx, client.HandoffRequest{TaskID: "T1", To: "ops/eve", Epoch: cl.Epoch})
	wantRefused(t, err, "CROSS_NAMESPACE_HANDOFF")
}

// A watched peer's claims are folded into advisory state: shown in
// ns_snapshot, granting nothing here (INV-MH-2); its chats reach the
// watcher redacted; a released claim stops being observed.
func TestFederation_WatchIsAdvisoryOnly_INV_MH_2(t *testing.T) {
	dir := t.TempDir()
	n := startFed(t, []string{"syn-a", "syn-w"}, watchPair(t, dir))
	ctx := ctx10(t)
	alice := n.agent("syn-a", "proj/alice")
	if _, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Send(ctx, "proj/bob", "secret plan", client.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	w := n.hubs["syn-w"].fed
	if err := w.Poll(ctx, "syn-a"); err != nil {
		t.Fatalf("poll: %v", err)
	}
	obs := w.Observed()
	if len(obs.Claims) != 1 || obs.Claims[0].TaskID != "T1" || obs.Claims[0].Hub != "syn-a" || obs.Claims[0].Owner != "proj/alice" {
		t.Fatalf("observed %+v; want T1 of proj/alice at syn-a", obs.Claims)
	}
	// state_snapshot and who_snapshot show it as observed@HUB (additive).
	probe := tcDial(t, n.uris["syn-w"], "probe")
	probe.SendJSON(map[string]any{"sender": "proj/probe", "type": "state_request"})
	snap, _ := probe.Until("state_snapshot")
	oc, _ := snap.Frame["snapshot"].(map[string]any)["observed_claims"].([]any)
	if len(oc) != 1 || oc[0].(map[string]any)["observed_as"] != "proj/alice@syn-a" || oc[0].(map[string]any)["advisory"] != true {
		t.Fatalf("state_snapshot observed_claims %v", oc)
	}
	if st, err := n.agent("syn-w", "proj/sdk").State(ctx); err != nil || len(st.ObservedClaims) != 1 || st.ObservedClaims[0].ObservedAs != "proj/alice@syn-a" {
		t.Fatalf("SDK State().ObservedClaims: %+v %v", st, err)
	}
	probe.SendJSON(map[string]any{"sender": "proj/probe", "type": "who_request"})
	who, _ := probe.Until("who_snapshot")
	if oa, _ := who.Frame["observed_agents"].([]any); len(oa) != 1 || oa[0] != "proj/alice@syn-a" {
		t.Fatalf("who_snapshot observed_agents %v", who.Frame["observed_agents"])
	}
	// Observed grants nothing: the watcher is a default hub and grants T1
	// and the same scope to its own agent (INV-MH-4), untouched by the fold.
	bob := n.agent("syn-w", "proj/bob")
	if _, err := bob.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil {
		t.Fatalf("the observed claim changed the watcher's own decision: %v", err)
	}
	events, _, _, err := fedHost{n.hubs["syn-a"]}.LogPage(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if strings.Contains(string(e.Payload), "secret plan") {
			t.Fatalf("the log served to peers shows a chat: %s %s", e.Kind, e.Payload)
		}
	}
	if _, err := alice.Release(ctx, "T1", client.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Poll(ctx, "syn-a"); err != nil {
		t.Fatal(err)
	}
	if obs := w.Observed(); len(obs.Claims) != 0 {
		t.Fatalf("a released claim is still observed: %+v", obs.Claims)
	}
}

// A peer whose logged event changes under the watcher is quarantined: its
// observations are dropped, the quarantine is journalled and survives the
// watcher's restart (PROTOCOL.md §6.4).
func TestFederation_EquivocatingPeerQuarantined(t *testing.T) {
	dir := t.TempDir()
	aDB := filepath.Join(dir, "syn-a.db")
	n := startFed(t, []string{"syn-a", "syn-w"}, watchPair(t, dir))
	ctx := ctx10(t)
	alice := n.agent("syn-a", "proj/alice")
	if _, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src"}}); err != nil {
		t.Fatal(err)
	}
	w := n.hubs["syn-w"].fed
	if err := w.Poll(ctx, "syn-a"); err != nil || len(w.Observed().Claims) != 1 {
		t.Fatalf("first poll: %v %+v", err, w.Observed())
	}
	// The peer rewrites a logged event: the claim now names someone else.
	db, err := sql.Open("sqlite", aDB)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE events SET payload = replace(payload, 'proj/alice', 'proj/mallory') WHERE kind = 'claim'`); err != nil {
		t.Fatal(err)
	}
	err = w.Poll(ctx, "syn-a")
	if !errors.Is(err, federation.ErrEquivocation) {
		t.Fatalf("poll after the rewrite: %v; want ErrEquivocation", err)
	}
	obs := w.Observed()
	if len(obs.Claims) != 0 || obs.Quarantined["syn-a"] == "" {
		t.Fatalf("after equivocation: %+v; want syn-a quarantined and forgotten", obs)
	}
	st := n.hubs["syn-w"].cfg.Journal
	eventually(t, "the equivocation is journalled", func() bool {
		found := false
		_ = st.ScanKinds([]string{"multihub_equivocation"}, func(string, []byte) error { found = true; return nil })
		return found
	})
	// A fresh watcher on the same journal starts quarantined.
	h2, err := New(Config{HubID: "syn-w", Journal: st, Logger: quietLogger(),
		Federation: federation.Config{Watch: map[string]string{"syn-a": n.uris["syn-a"]}, ClaimPeerToken: "w", WatchInterval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close(context.Background())
	if err := h2.fed.Poll(ctx, "syn-a"); !errors.Is(err, federation.ErrEquivocation) {
		t.Fatalf("after restart the peer is pulled again: %v", err)
	}
}

// testLogOut receives the federation tests' hub logs (os.Stderr to debug).
var testLogOut io.Writer = io.Discard

// A reference hub forwards a claim as PROTOCOL.md §6.2 shows: a fresh
// socket whose first frame is multihub_claim_request. We answer with
// multihub_claim_result carrying the grant, charged to the peer; an
// unauthorised peer gets granted:false and nothing is granted (INV-MH-3).
func TestFederation_ReferenceShapedForward(t *testing.T) {
	n := twoHubs(t)
	req := map[string]any{"sender": "syn-b", "target": "all", "type": "multihub_claim_request", "payload": "", "timestamp": 1782648000.0,
		"namespace": "proj", "claimant": "proj/alice", "task_id": "T",
		"claim": map[string]any{"sender": "proj/alice", "type": "claim", "task_id": "T", "paths": []string{"src"}}, "token": "tok-syn-b"}
	c := tcDial(t, n.uris["syn-a"], "reference forwarder")
	c.SendJSON(req)
	res, _ := c.Until("multihub_claim_result")
	grant, _ := res.Frame["grant"].(map[string]any)
	if res.Frame["granted"] != true || res.Frame["owner_hub_id"] != "syn-a" || res.Frame["task_id"] != "T" || grant == nil || grant["owner"] != "proj/alice" {
		t.Fatalf("result %s", res)
	}
	req["token"] = "wrong"
	req["task_id"], req["claim"] = "U", map[string]any{"task_id": "U"}
	bad := tcDial(t, n.uris["syn-a"], "unauthorised forwarder")
	bad.SendJSON(req)
	res, _ = bad.Until("multihub_claim_result")
	if res.Frame["granted"] != false || res.Frame["grant"] != nil {
		t.Fatalf("unauthorised result %s", res)
	}
	ctx := ctx10(t)
	st, err := n.agent("syn-a", "proj/auditor").State(ctx)
	if err != nil || len(st.ActiveClaims) != 1 || st.ActiveClaims[0].TaskID != "T" {
		t.Fatalf("owner state %+v %v; want only T", st, err)
	}
}

// A hub that speaks only the reference's shapes is forwarded claims one
// socket each, and refuses to forward other verbs (unsupported).
func TestFederation_ReferencePeerFallback(t *testing.T) {
	n := twoHubs(t, func(id string, c *Config) { c.Federation.ReferenceOnly = id == "syn-b" })
	ctx := ctx10(t)
	alice := n.agent("syn-b", "proj/alice")
	cl, err := alice.Claim(ctx, client.ClaimRequest{TaskID: "T1"})
	if err != nil || cl.Owner != "proj/alice" {
		t.Fatalf("claim through a reference-shaped forward: %+v %v", cl, err)
	}
	_, err = alice.Release(ctx, "T1", client.ReleaseOptions{})
	if r := wantRefused(t, err, "OWNER_UNREACHABLE"); r.ForwardError != "unsupported" {
		t.Fatalf("release: %q", r.Message)
	}
}

// watchPair configures syn-a (journalled, accepting syn-w) and syn-w
// (journalled, watching syn-a's log; polled by the test) in dir.
func watchPair(t *testing.T, dir string) func(id string, uris map[string]string) Config {
	return func(id string, uris map[string]string) Config {
		st, err := journal.Open(filepath.Join(dir, id+".db"), journal.Options{HubID: id})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		c := Config{Journal: st}
		if id == "syn-a" {
			c.Federation = federation.Config{PeerTokens: map[string]string{"syn-w": "w"}}
		} else {
			c.Federation = federation.Config{Watch: map[string]string{"syn-a": uris["syn-a"]}, ClaimPeerToken: "w", WatchInterval: time.Hour}
		}
		return c
	}
}

// Forwarded claims are charged to the forwarding hub's principal,
// federation-peer:<hub>, never to the asserted names (INV-ME-5 across
// hubs): agents of one forwarding hub share its budget, while an agent
// connected to the owner keeps its own.
func TestFederation_ForwardedClaimsShareThePeersQuota_INV_ME_5(t *testing.T) {
	n := twoHubs(t, func(id string, c *Config) {
		if id == "syn-a" {
			c.Limits = coord.DefaultLimits()
			c.Limits.MaxClaimsPerPrincipal = 2
		}
	})
	ctx := ctx10(t)
	for i, name := range []string{"proj/b1", "proj/b2", "proj/b3"} {
		_, err := n.agent("syn-b", name).Claim(ctx, client.ClaimRequest{TaskID: "T-" + name, Paths: []string{name}})
		switch {
		case i < 2 && err != nil:
			t.Fatalf("%s: %v", name, err)
		case i == 2:
			wantRefused(t, err, "QUOTA_EXCEEDED")
		}
	}
	if _, err := n.agent("syn-a", "proj/local").Claim(ctx, client.ClaimRequest{TaskID: "T-local", Paths: []string{"local"}}); err != nil {
		t.Fatalf("an agent on the owner was charged the peer's quota: %v", err)
	}
	st, err := n.agent("syn-a", "proj/auditor").State(ctx)
	if err != nil || len(st.ActiveClaims) != 3 {
		t.Fatalf("owner state %+v %v", st, err)
	}
}

// Static federation carries the forwarding socket's credential too
// (issue 23): an owner that holds the credential (here both hubs share one
// registry) charges the credential (INV-ME-5), so two credentials behind
// one forwarding hub have a budget each; an owner that does not hold it
// keeps the forwarding hub's principal, federation-peer:<hub>, and its
// agents share one budget, as before.
func TestFederation_ForwardCarriesTheCredential_OwnerChargesItWhenItHoldsIt_INV_ME_5(t *testing.T) {
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("owner holds the credential=%v", shared), func(t *testing.T) {
			regB := access.NewRegistry(nil, nil, nil)
			tokX, _, _ := regB.Issue(access.IssueRequest{Pattern: "proj/x*"}, 1)
			tokY, _, _ := regB.Issue(access.IssueRequest{Pattern: "proj/y*"}, 1)
			n := twoHubs(t, func(id string, c *Config) {
				c.Token, c.Access = "op-"+id, access.NewRegistry(nil, nil, nil)
				if id == "syn-b" || shared {
					c.Access = regB
				}
				if id == "syn-a" {
					c.Limits = coord.DefaultLimits()
					c.Limits.MaxClaimsPerPrincipal = 2
				}
			})
			ctx := ctx10(t)
			dial := func(name, tok string) *client.Client {
				c, err := client.Dial(ctx, client.Options{URI: n.uris["syn-b"], Name: name, Token: tok, NoReconnect: true, NoIdentity: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			for _, name := range []string{"proj/x1", "proj/x2"} {
				if _, err := dial(name, tokX).Claim(ctx, client.ClaimRequest{TaskID: "T-" + name, Paths: []string{name}}); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			_, err := dial("proj/y1", tokY).Claim(ctx, client.ClaimRequest{TaskID: "T-y1", Paths: []string{"y1"}})
			if shared && err != nil {
				t.Fatalf("the owner holds credential Y, which has its own budget: %v", err)
			}
			if !shared {
				wantRefused(t, err, "QUOTA_EXCEEDED") // federation-peer:syn-b's budget, spent by X's two claims
			}
		})
	}
}

// A forward resent after its first send was lost — the owner died or
// froze after reading it, so it may have applied it — whose resend is
// answered "nothing was decided" (NAMESPACE_MOVING: the owner is giving
// the namespace up, or another hub owns it now) has an unknown outcome:
// the agent is told OWNER_UNREACHABLE, "may or may not", never that
// nothing was decided (INV-CR-1 across hubs; found by the fleet harness
// as a handoff refused NAMESPACE_MOVING that showed in the recovered
// state). The owner here is a peer that drops the link after reading the
// first send and refuses the resend.
func TestFederation_AResendAfterALostSendIsAnUnknownOutcome_INV_CR_1(t *testing.T) {
	forwards := make(chan int, 4)
	seen := 0
	fake := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := r.Context()
		for {
			_, data, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var f struct {
				Type  string `json:"type"`
				FwdID int64  `json:"fwd_id"`
			}
			_ = json.Unmarshal(data, &f)
			switch f.Type {
			case federation.TypeHello:
				_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"multihub_welcome","sender":"syn-f","target":"syn-b","hub_id":"syn-f","features":["forward"],"owners":{"proj":"syn-f"}}`))
			case federation.TypeForward:
				seen++
				forwards <- seen
				if seen == 1 {
					return // read, maybe applied, never answered: the link drops
				}
				refusal := `{"type":"claim_denied","sender":"SynapseHub","target":"proj/alice","task_id":"T1","reason_code":"NAMESPACE_MOVING","error_code":"NAMESPACE_MOVING","payload":"Nothing was decided."}`
				_ = ws.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"type":"multihub_forward_result","sender":"syn-f","target":"syn-b","fwd_id":%d,"frames":[%s]}`, f.FwdID, refusal)))
			}
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go fake.Serve(ln)
	t.Cleanup(func() { fake.Close() })
	n := startFed(t, []string{"syn-b"}, func(string, map[string]string) Config {
		return Config{Federation: federation.Config{Owners: []string{"proj=syn-f"}, ClaimPeerToken: "tok-syn-b",
			ClaimPeers: map[string]string{"syn-f": "ws://" + ln.Addr().String()}, ForwardTimeout: 5 * time.Second}}
	})
	ctx := ctx10(t)
	c, err := client.Dial(ctx, client.Options{URI: n.uris["syn-b"], Name: "proj/alice", NoMovingRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Claim(ctx, client.ClaimRequest{TaskID: "T1", IdemKey: "k1"})
	r := wantRefused(t, err, "OWNER_UNREACHABLE")
	if !strings.Contains(r.Message, "may or may not") {
		t.Fatalf("the refusal does not say the outcome is unknown: %q", r.Message)
	}
	if len(forwards) != 2 {
		t.Fatalf("the owner saw %d sends; want the first and its resend", len(forwards))
	}
}
