package cluster_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster"
	"github.com/synapse-hub/synapse/cluster/clustertest"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/journal"
)

// Credentials, role grants and identity pins on a fleet (issue 23 items
// 1–3; cluster/access.go): stored in etcd, followed by every hub.

const opToken = "operator-secret"

// accessHub is a fleet hub with the operator's shared token, whose
// credentials, grants and pins are the fleet's (cluster.Access), wired
// as cmd/synapse wires them.
type accessHub struct {
	*fleetHub
	acc *cluster.Access
}

func startAccessHub(t *testing.T, endpoint, id string, maxClaims int) *accessHub {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fh := &fleetHub{id: id, uri: "ws://" + ln.Addr().String()}
	fh.m, err = cluster.Join(context.Background(), cluster.Config{Endpoints: []string{endpoint}, HubID: id, Advertise: fh.uri,
		LeaseTTL: 3 * time.Second, Logger: quiet(), MaxFences: 100, Fence: func(b time.Duration) { fh.owners.Fence(b) }})
	if err != nil {
		t.Fatal(err)
	}
	fh.owners = cluster.NewOwners(fh.m)
	acc := cluster.NewAccess(fh.m)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	creds, grants, err := acc.Load(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	lim := coord.DefaultLimits()
	lim.MaxClaimsPerPrincipal = maxClaims
	fh.h, err = hub.New(hub.Config{HubID: id, Store: fh.owners, Mail: fh.owners, Logger: quiet(), Limits: lim,
		Token: opToken, Access: access.NewRegistry(acc, creds, grants), IdentityPins: acc,
		Federation: federation.Config{Authority: fh.owners, PeerURI: fh.owners.PeerURI, SharedPeerToken: "fleet-secret", ForwardTimeout: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	fh.owners.SetHost(fh.h)
	if err := fh.owners.Start(); err != nil {
		t.Fatal(err)
	}
	acc.Follow(fh.h.Access(), fh.h)
	fh.srv = &http.Server{Handler: fh.h.Handler()}
	go fh.srv.Serve(ln)
	ah := &accessHub{fleetHub: fh, acc: acc}
	t.Cleanup(ah.stop)
	return ah
}

func (ah *accessHub) stop() {
	ah.acc.Close()
	ah.fleetHub.stop()
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// connect dials uri as name with token (and key, nil: unsigned).
func connect(ctx context.Context, uri, name, token string, key ed25519.PrivateKey) (*client.Client, error) {
	return client.Dial(ctx, client.Options{URI: uri, Name: name, Token: token, NoReconnect: true, IdentityKey: key, NoIdentity: key == nil})
}

func mustConnect(t *testing.T, uri, name, token string, key ed25519.PrivateKey) *client.Client {
	t.Helper()
	c, err := connect(ctxT(t, 10*time.Second), uri, name, token, key)
	if err != nil {
		t.Fatalf("connect %s to %s: %v", name, uri, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// issue mints a credential through the hub at uri, as the operator.
func issue(t *testing.T, uri, pattern string, roles ...string) (string, access.Credential) {
	t.Helper()
	op := mustConnect(t, uri, admin(), opToken, nil)
	defer op.Close()
	f, err := op.Admin(ctxT(t, 10*time.Second), "token_issue", map[string]any{"name_pattern": pattern, "roles": roles}, "token_issued")
	if err != nil {
		t.Fatalf("token_issue through %s: %v", uri, err)
	}
	var c access.Credential
	if err := f.DecodeField("credential", &c); err != nil {
		t.Fatal(err)
	}
	return f.String("token"), c
}

var admins atomic.Int64

// admin is a fresh name for an operator's socket.
func admin() string { return "ops/admin-" + strconv.FormatInt(admins.Add(1), 10) }

func rejectedCode(err error) int {
	var r *client.RejectedError
	if errors.As(err, &r) {
		return r.Code
	}
	return 0
}

// waitFor calls ok every 20 ms until it holds or the (generous) deadline.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 15 s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func twoAccessHubs(t *testing.T, maxClaims int) (*clustertest.Etcd, *accessHub, *accessHub) {
	t.Helper()
	x := clustertest.Start(t, true)
	return x, startAccessHub(t, x.Endpoint, "syn-a", maxClaims), startAccessHub(t, x.Endpoint, "syn-b", maxClaims)
}

// A token issued through hub A opens a socket on hub B at once (no wait
// for B's watch: B reads an unseen credential from etcd), and only for the
// names its pattern matches.
func TestFleetAccess_TokenIssuedOnAWorksOnBAtOnce_Issue23(t *testing.T) {
	_, a, b := twoAccessHubs(t, 100)
	tok, _ := issue(t, a.uri, "proj/alpha*")
	mustConnect(t, b.uri, "proj/alpha", tok, nil)
	if _, err := connect(ctxT(t, 10*time.Second), b.uri, "proj/beta", tok, nil); rejectedCode(err) != 4010 {
		t.Fatalf("a name outside the pattern on B: %v; want close 4010", err)
	}
}

// Revoking a credential through hub B closes, 4010 "credential revoked",
// the socket that used it on hub A, and A refuses the token from then on.
func TestFleetAccess_RevokeThroughBClosesTheSocketOnA_Issue23(t *testing.T) {
	_, a, b := twoAccessHubs(t, 100)
	tok, cred := issue(t, a.uri, "proj/*")
	ctx := ctxT(t, 20*time.Second)
	agent := dialRaw(t, ctx, a.uri)
	agent.write(map[string]any{"type": "heartbeat", "sender": "proj/alpha", "target": "System", "payload": "online", "token": tok})
	agent.read("welcome")
	op := mustConnect(t, b.uri, admin(), opToken, nil)
	if _, err := op.Admin(ctx, "token_revoke", map[string]any{"credential_id": cred.ID}, "token_revoked"); err != nil {
		t.Fatalf("token_revoke through B: %v", err)
	}
	if m := agent.read("auth_denied"); !strings.Contains(m["payload"].(string), "was revoked") {
		t.Fatalf("auth_denied on A: %v", m)
	}
	if code, reason := agent.closed(); code != 4010 || reason != "credential revoked" {
		t.Fatalf("the socket on A closed %d %q; want 4010 credential revoked", code, reason)
	}
	if _, err := connect(ctxT(t, 10*time.Second), a.uri, "proj/alpha", tok, nil); rejectedCode(err) != 4010 {
		t.Fatalf("the revoked token on A: %v; want 4010", err)
	}
}

// A role granted through hub A is honoured on hub B: an agent there that
// asserts it keeps it (and one not granted is still ignored).
func TestFleetAccess_RoleGrantedThroughAIsHonouredOnB_Issue23(t *testing.T) {
	_, a, b := twoAccessHubs(t, 100)
	tok, _ := issue(t, a.uri, "proj/*")
	op := mustConnect(t, a.uri, admin(), opToken, nil)
	if _, err := op.Admin(ctxT(t, 10*time.Second), "role_grant", map[string]any{"role": "proj/reviewer", "to": "proj/alpha"}, "role_granted"); err != nil {
		t.Fatalf("role_grant through A: %v", err)
	}
	waitFor(t, "B's registry holds the grant", func() bool { return b.h.Access().Granted("proj/alpha", "proj/reviewer") })
	c, err := client.Dial(ctxT(t, 10*time.Second), client.Options{URI: b.uri, Name: "proj/alpha", Token: tok, NoReconnect: true,
		NoIdentity: true, Roles: []string{"proj/reviewer", "proj/lead"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "B shows the granted role only", func() bool {
		w, err := c.Who(ctxT(t, 5*time.Second))
		return err == nil && slices.Equal(w.AgentRoles["proj/alpha"], []string{"proj/reviewer"})
	})
}

// A name pinned through hub A refuses another key on hub B with 4013, and
// still does after both hubs restart (the pin is in etcd, not in a hub).
func TestFleetAccess_PinOnARefusesAnotherKeyOnB_Issue23(t *testing.T) {
	x, a, b := twoAccessHubs(t, 100)
	k1, k2 := testKey(1), testKey(2)
	mustConnect(t, a.uri, "proj/pinned", opToken, k1).Close()
	refusedOn := func(uri string) {
		t.Helper()
		_, err := connect(ctxT(t, 10*time.Second), uri, "proj/pinned", opToken, k2)
		if rejectedCode(err) != 4013 {
			t.Fatalf("another key on %s: %v; want close 4013", uri, err)
		}
	}
	refusedOn(b.uri)
	a.stop()
	b.stop()
	a2 := startAccessHub(t, x.Endpoint, "syn-a", 100)
	b2 := startAccessHub(t, x.Endpoint, "syn-b", 100)
	refusedOn(b2.uri)
	refusedOn(a2.uri)
	mustConnect(t, b2.uri, "proj/pinned", opToken, k1)
}

// Two hubs pinning one name with different keys at once resolve to one
// winner (create-if-absent in one etcd transaction); both learn it.
func TestFleetAccess_RacingPinsHaveOneWinner_Issue23(t *testing.T) {
	x := clustertest.Start(t, true)
	var stores []*cluster.Access
	for _, id := range []string{"syn-a", "syn-b", "syn-c", "syn-d"} {
		m, err := cluster.Join(context.Background(), cluster.Config{Endpoints: []string{x.Endpoint}, HubID: id, Advertise: "ws://127.0.0.1:1",
			LeaseTTL: 3 * time.Second, Logger: quiet(), MaxFences: 100, Fence: func(time.Duration) {}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Leave)
		stores = append(stores, cluster.NewAccess(m))
	}
	for round := 0; round < 10; round++ {
		name := "proj/race-" + string(rune('a'+round))
		got := make([]journal.IdentityPin, len(stores))
		made := make([]bool, len(stores))
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, m, err := s.PinIdentity(journal.IdentityPin{Name: name, KeyID: "key-" + string(rune('0'+i)), PublicKey: "pk", PinnedAt: 1})
				if err != nil {
					t.Error(err)
				}
				got[i], made[i] = p, m
			}()
		}
		wg.Wait()
		winners := 0
		for i := range stores {
			if made[i] {
				winners++
			}
			if got[i].KeyID != got[0].KeyID {
				t.Fatalf("round %d: hubs disagree on the pin: %+v", round, got)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners; want 1", round, winners)
		}
	}
}

// A forwarded claim is charged at the owner to the credential of the
// socket that sent it, not to the forwarding hub: two credentials on hub A
// each get their own budget at the owner B (INV-ME-5 across hubs).
func TestFleetAccess_ForwardedClaimIsChargedToItsCredential_INV_ME_5(t *testing.T) {
	_, a, b := twoAccessHubs(t, 2)
	ctx := ctxT(t, 30*time.Second)
	tokZ, _ := issue(t, b.uri, "proj/z*")
	if _, err := claimMoving(ctx, mustConnect(t, b.uri, "proj/z1", tokZ, nil), client.ClaimRequest{TaskID: "T0", Paths: []string{"p0"}}); err != nil {
		t.Fatalf("first use on B: %v", err)
	}
	tokX, _ := issue(t, a.uri, "proj/x*")
	tokY, _ := issue(t, a.uri, "proj/y*")
	for i, name := range []string{"proj/x1", "proj/x2", "proj/x3"} {
		_, err := claimMoving(ctx, mustConnect(t, a.uri, name, tokX, nil), client.ClaimRequest{TaskID: "TX" + name, Paths: []string{name}})
		switch {
		case i < 2 && err != nil:
			t.Fatalf("%s through A: %v", name, err)
		case i == 2 && refusedCode(err) != "QUOTA_EXCEEDED":
			t.Fatalf("%s, the credential's third claim: %v; want QUOTA_EXCEEDED", name, err)
		}
	}
	// Under the forwarding hub's principal (federation-peer:syn-a) this
	// would be refused: A's agents already hold two claims at B.
	if _, err := claimMoving(ctx, mustConnect(t, a.uri, "proj/y1", tokY, nil), client.ClaimRequest{TaskID: "TY", Paths: []string{"y"}}); err != nil {
		t.Fatalf("another credential on A was charged the first one's budget: %v", err)
	}
	st, err := mustConnect(t, b.uri, "proj/z-auditor", tokZ, nil).State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if owner := st.ActiveClaims; len(owner) != 4 {
		t.Fatalf("owner B holds %d claims; want 4", len(owner))
	}
}

// claimMoving is a claim retried while its namespace is being taken.
func claimMoving(ctx context.Context, c *client.Client, r client.ClaimRequest) (*client.Claim, error) {
	for {
		cl, err := c.Claim(ctx, r)
		if refusedCode(err) != "NAMESPACE_MOVING" || ctx.Err() != nil {
			return cl, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The owner checks the credential a forward names: a revoked one, one the
// fleet never issued, or one whose pattern does not cover the agent is
// refused with its error_code and nothing is claimed; a live one passes.
// The forwarder is a raw peer socket, as a hub whose watch lags (or that
// lies) would be.
func TestFleetAccess_ForwardNamingARevokedCredentialIsRefused_Issue23(t *testing.T) {
	_, a, b := twoAccessHubs(t, 100)
	ctx := ctxT(t, 30*time.Second)
	tokZ, _ := issue(t, b.uri, "proj/*")
	if _, err := claimMoving(ctx, mustConnect(t, b.uri, "proj/z1", tokZ, nil), client.ClaimRequest{TaskID: "T0", Paths: []string{"p0"}}); err != nil {
		t.Fatalf("first use on B: %v", err)
	}
	_, live := issue(t, a.uri, "proj/x*")
	_, revoked := issue(t, a.uri, "proj/x*")
	op := mustConnect(t, a.uri, admin(), opToken, nil)
	if _, err := op.Admin(ctx, "token_revoke", map[string]any{"credential_id": revoked.ID}, "token_revoked"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B sees the revocation", func() bool { c, _ := b.h.Access().Get(revoked.ID); return c.Revoked > 0 })

	peer := dialRaw(t, ctx, b.uri)
	write, read := peer.write, peer.read
	write(map[string]any{"type": "multihub_hello", "sender": "syn-z", "token": "fleet-secret", "features": []string{"multihub_forward"}})
	read("multihub_welcome")
	fwd := func(id int, agent, credID, task string) string {
		t.Helper()
		write(map[string]any{"type": "multihub_forward", "sender": "syn-z", "fwd_id": id, "agent": agent, "credential_id": credID, "credential_name": agent,
			"frame": map[string]any{"type": "claim", "sender": agent, "task_id": task, "paths": []string{task}}})
		res := read("multihub_forward_result")
		frames, _ := res["frames"].([]any)
		for _, f := range frames {
			if m, _ := f.(map[string]any); m != nil {
				if code, _ := m["error_code"].(string); code != "" {
					return code
				}
			}
		}
		return ""
	}
	cases := []struct {
		agent, cred, want string
	}{
		{"proj/x1", revoked.ID, "forward_credential_revoked"},
		{"proj/x1", "000000000000", "forward_credential_unknown"},
		{"proj/other", live.ID, "forward_credential_name"},
		{"proj/x1", live.ID, ""},
	}
	for i, c := range cases {
		if got := fwd(i+1, c.agent, c.cred, "TF"+string(rune('0'+i))); got != c.want {
			t.Fatalf("forward %d (%s under %s): error_code %q; want %q", i+1, c.agent, c.cred, got, c.want)
		}
	}
	st, err := mustConnect(t, b.uri, "proj/z-auditor", tokZ, nil).State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var tasks []string
	for _, c := range st.ActiveClaims {
		tasks = append(tasks, c.TaskID)
	}
	slices.Sort(tasks)
	if strings.Join(tasks, ",") != "T0,TF3" {
		t.Fatalf("claims at the owner %v; want T0 and TF3 only (refused forwards change nothing)", tasks)
	}
}

// rawSocket is a WebSocket to a hub without the SDK, to see frames and
// close codes as they are.
type rawSocket struct {
	t    *testing.T
	ctx  context.Context
	conn *websocket.Conn
}

func dialRaw(t *testing.T, ctx context.Context, uri string) *rawSocket {
	t.Helper()
	conn, _, err := websocket.Dial(ctx, uri, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	return &rawSocket{t: t, ctx: ctx, conn: conn}
}

func (r *rawSocket) write(m map[string]any) {
	r.t.Helper()
	bs, _ := json.Marshal(m)
	if err := r.conn.Write(r.ctx, websocket.MessageText, bs); err != nil {
		r.t.Fatal(err)
	}
}

// read returns the next frame of type typ, skipping others.
func (r *rawSocket) read(typ string) map[string]any {
	r.t.Helper()
	for {
		_, bs, err := r.conn.Read(r.ctx)
		if err != nil {
			r.t.Fatalf("waiting for %s: %v", typ, err)
		}
		var m map[string]any
		_ = json.Unmarshal(bs, &m)
		if m["type"] == typ {
			return m
		}
	}
}

// closed reads until the hub closes the socket and returns its code and
// reason.
func (r *rawSocket) closed() (int, string) {
	r.t.Helper()
	for {
		_, _, err := r.conn.Read(r.ctx)
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if errors.As(err, &ce) {
			return int(ce.Code), ce.Reason
		}
		r.t.Fatalf("socket ended without a close frame: %v", err)
	}
}

func testKey(seed byte) ed25519.PrivateKey {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed
	}
	return ed25519.NewKeyFromSeed(s)
}

// A pin reclaimed through hub B closes its live holder on hub A (4017 on
// A, as a reclaim on A would), and the name then pins anew on any hub.
func TestFleetAccess_ReclaimThroughBClosesTheHolderOnA_Issue23(t *testing.T) {
	_, a, b := twoAccessHubs(t, 100)
	k1, k2 := testKey(1), testKey(2)
	holder := mustConnect(t, a.uri, "proj/pinned", opToken, k1)
	waitFor(t, "B sees the pin A made", func() bool { _, ok, _ := b.acc.LookupIdentityPin("proj/pinned"); return ok })
	op := mustConnect(t, b.uri, admin(), opToken, nil)
	res, err := op.ReclaimIdentityPin(ctxT(t, 10*time.Second), "proj/pinned", "", "new machine")
	if err != nil || !res.Applied {
		t.Fatalf("reclaim through B: %+v %v", res, err)
	}
	waitFor(t, "the holder on A was closed", func() bool { return holder.DownReason() != nil })
	waitFor(t, "A's view of the pin is gone", func() bool { _, ok, _ := a.acc.LookupIdentityPin("proj/pinned"); return !ok })
	mustConnect(t, a.uri, "proj/pinned", opToken, k2)
	if _, err := connect(ctxT(t, 10*time.Second), b.uri, "proj/pinned", opToken, k1); rejectedCode(err) != 4013 {
		t.Fatalf("the old key after the name pinned anew to k2: %v; want 4013", err)
	}
}

// A signed registration admitted on hub A and replayed, byte for byte, to
// hub B within its window is refused there as replayed (4013): the nonce
// is claimed in the fleet's etcd before the bind, not only in A's memory
// (issue 23: refuse replayed registration tokens). A second, freshly signed
// registration with the same key still binds on B.
func TestFleetAccess_ReplayOnAnotherHubIsRefused_Issue23(t *testing.T) {
	_, a, b := twoAccessHubs(t, 100)
	key := testKey(7)
	f := map[string]any{"sender": "proj/replayed", "target": "System", "type": "heartbeat", "payload": "online",
		"timestamp": float64(time.Now().UnixNano()) / 1e9, "token": opToken}
	signed, err := gate.SignRegistration(f, key, "fleet-nonce-1", 1, float64(time.Now().UnixNano())/1e9)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 15*time.Second)
	first := dialRaw(t, ctx, a.uri)
	first.write(signed)
	first.read("welcome")
	replay := dialRaw(t, ctx, b.uri)
	replay.write(signed)
	if e := replay.read("error"); e["verification_result"] != gate.IdentityReplayed {
		t.Fatalf("replay on B answered %v; want verification_result %q", e, gate.IdentityReplayed)
	}
	if code, _ := replay.closed(); code != 4013 {
		t.Fatalf("replay on B closed %d; want 4013", code)
	}
	mustConnect(t, b.uri, "proj/replayed-2", opToken, key) // the key itself is fine, signed anew
}
