package hub

import (
	"crypto/ed25519"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/journal"
)

func testKey(seed byte) ed25519.PrivateKey {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed
	}
	return ed25519.NewKeyFromSeed(s)
}

var nonceN int

// signedFrame is the registration heartbeat of name signed with priv, as
// the reference's clients sign it (gate.SignRegistration).
func signedFrame(t *testing.T, name string, priv ed25519.PrivateKey, extra map[string]any) map[string]any {
	t.Helper()
	f := map[string]any{"sender": name, "target": "System", "type": "heartbeat", "payload": "online", "timestamp": nowTS()}
	for k, v := range extra {
		f[k] = v
	}
	nonceN++
	m, err := gate.SignRegistration(f, priv, "nonce-"+itoa(int64(nonceN)), 1, nowTS())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// joinSigned connects and registers name with a signed registration.
func (th *testHub) joinSigned(name string, priv ed25519.PrivateKey) *tconn {
	tc := th.connect()
	tc.send(signedFrame(th.t, name, priv, nil))
	tc.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == name && m["event"] == "joined" })
	return tc
}

// expectIdentityRefusal reads the 4013 refusal of a registration: its
// error names the verification result, and the close follows.
func (tc *tconn) expectIdentityRefusal(result, reason string) map[string]any {
	tc.t.Helper()
	e := tc.expect("error")
	if e["verification_result"] != result {
		tc.t.Fatalf("refusal %v: verification_result %v, want %s", e, e["verification_result"], result)
	}
	tc.expectClose(IdentityPinClose, reason)
	return e
}

func journalHub(t *testing.T, path string, cfg Config) (*testHub, *journal.Store) {
	t.Helper()
	st, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.Journal = st
	return startHub(t, cfg), st
}

// Issue23 (item 2): a name signed once is pinned to that key in the
// journal; another key, or no signature, is refused 4013 with an error
// naming the recovery command; the pinned key keeps working; unsigned
// names that were never pinned keep first-come binding.
func TestIdentityPin_FirstKeyPinsOtherKeyAndUnsignedRefused4013_Issue23(t *testing.T) {
	th, st := journalHub(t, filepath.Join(t.TempDir(), "hub.db"), Config{})
	a, b := testKey(1), testKey(2)
	first := th.joinSigned("proj/alpha", a)
	pin, ok, err := st.LookupIdentityPin("proj/alpha")
	if err != nil || !ok || pin.KeyID != gate.MachineKeyID(gate.EncodeIdentityPublicKey(a.Public().(ed25519.PublicKey))) {
		t.Fatalf("pin after the first signed registration: %+v %v %v", pin, ok, err)
	}
	first.close()

	other := th.connect()
	other.send(signedFrame(t, "proj/alpha", b, nil))
	e := other.expectIdentityRefusal(gate.IdentityUnknownKey, "identity pin mismatch")
	if msg, _ := e["payload"].(string); !strings.Contains(msg, "synapse identity reclaim proj/alpha") || !strings.Contains(msg, pin.KeyID) {
		t.Fatalf("the refusal does not name the pinned key and the recovery command: %q", msg)
	}
	if e["error_code"] != "identity_pin_mismatch" {
		t.Fatalf("error_code %v", e["error_code"])
	}

	unsigned := th.connect()
	unsigned.send(map[string]any{"sender": "proj/alpha", "target": "System", "type": "heartbeat", "payload": "online"})
	unsigned.expectIdentityRefusal("signature missing", "identity pin mismatch")

	// The same key again (a fresh proof) is admitted; a name never pinned
	// binds unsigned as before.
	th.joinSigned("proj/alpha", a).close()
	th.join("proj/bravo").close()
	if _, ok, _ := st.LookupIdentityPin("proj/bravo"); ok {
		t.Fatal("an unsigned registration pinned its name")
	}
}

// Issue23 (item 8): a signed registration replayed from another socket
// is refused, whether the first socket is still there or gone, and the
// replay binds nothing.
func TestIdentityPin_ReplayedRegistrationFromAnotherSocket_Refused_Issue23(t *testing.T) {
	th, _ := journalHub(t, filepath.Join(t.TempDir(), "hub.db"), Config{})
	frame := signedFrame(t, "proj/alpha", testKey(1), nil)
	raw, _ := json.Marshal(frame)
	first := th.connect()
	first.sendRaw(string(raw))
	first.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "proj/alpha" })

	replay := th.connect()
	replay.sendRaw(string(raw))
	replay.expectIdentityRefusal(gate.IdentityReplayed, "identity pin mismatch")
	first.close()

	again := th.connect()
	again.sendRaw(string(raw)) // the name is free now: still the same used proof
	again.expectIdentityRefusal(gate.IdentityReplayed, "identity pin mismatch")

	// A replay of a proof for a name not yet pinned (captured before the
	// name was ever used here) is refused too, and pins nothing.
	unpinned := signedFrame(t, "proj/bravo", testKey(3), nil)
	ub, _ := json.Marshal(unpinned)
	c1 := th.connect()
	c1.sendRaw(string(ub))
	c1.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "proj/bravo" })
	c2 := th.connect()
	c2.sendRaw(string(ub))
	c2.expectIdentityRefusal(gate.IdentityReplayed, "identity pin mismatch")
}

// Issue23: a restart (a new hub on the same journal) keeps both the pin
// and the nonces it admitted: the other key is refused, and a proof the
// first process admitted is refused as replayed.
func TestIdentityPin_SurvivesRestartWithItsReplayCache_Issue23(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hub.db")
	st, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h1, err := New(Config{Journal: st, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h1.Handler())
	th1 := &testHub{t: t, h: h1, srv: srv, url: "ws" + strings.TrimPrefix(srv.URL, "http")}
	raw, _ := json.Marshal(signedFrame(t, "proj/alpha", testKey(1), nil))
	c1 := th1.connect()
	c1.sendRaw(string(raw))
	c1.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == "proj/alpha" })
	c1.close()
	h1.Close(t.Context())
	srv.Close()
	st.Close()

	th, _ := journalHub(t, path, Config{})
	c := th.connect()
	c.sendRaw(string(raw))
	c.expectIdentityRefusal(gate.IdentityReplayed, "identity pin mismatch")
	o := th.connect()
	o.send(signedFrame(t, "proj/alpha", testKey(2), nil))
	o.expectIdentityRefusal(gate.IdentityUnknownKey, "identity pin mismatch")
	th.joinSigned("proj/alpha", testKey(1))
}

// Issue23: the reference's own client's signed registration (golden,
// gate/testdata) is accepted on a hub whose token it carries, and pins
// its name to the reference-derived key id.
func TestIdentityPin_ReferenceClientRegistrationAccepted_Issue23(t *testing.T) {
	b, err := os.ReadFile("../gate/testdata/reference_registration.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		KeyID string  `json:"key_id"`
		Now   float64 `json:"now"`
		Frame string  `json:"frame"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	clock.t = ref.Now
	pins := &MemoryPins{}
	th := startHub(t, Config{Token: "s3cret", Clock: clock.now, IdentityPins: pins})
	c := th.dial()
	c.sendRaw(ref.Frame)
	c.expect("welcome")
	p, ok, _ := pins.LookupIdentityPin("proj/älpha <&>")
	if !ok || p.KeyID != ref.KeyID {
		t.Fatalf("pin %+v %v, want key %s", p, ok, ref.KeyID)
	}
}

// Issue23: --require-identity refuses an unsigned registration 4013 and
// admits a signed one; without it unsigned names bind as before.
func TestIdentity_RequireIdentityRefusesUnsigned_Issue23(t *testing.T) {
	th := startHub(t, Config{RequireIdentity: true})
	c := th.connect()
	c.send(map[string]any{"sender": "proj/alpha", "target": "System", "type": "heartbeat", "payload": "online"})
	e := c.expectIdentityRefusal(gate.IdentityMissingSignature, "identity binding failed")
	if msg, _ := e["payload"].(string); !strings.Contains(msg, "--require-identity") {
		t.Fatalf("the refusal does not say why: %q", msg)
	}
	th.joinSigned("proj/alpha", testKey(1))
	// A broken proof is refused, never pinned.
	bad := signedFrame(t, "proj/bravo", testKey(2), nil)
	bad["payload"] = "altered"
	d := th.connect()
	d.send(bad)
	d.expectIdentityRefusal(gate.IdentityBadSignature, "identity binding failed")
}

// Issue23: identity_pin_reclaim on a hub with a token removes the pin
// (audited in the journal), closes the live holder 4017, and the next
// signed registration pins the name anew; on an open hub it is refused
// and nothing changes.
func TestIdentityPin_ReclaimOverTheSocket_Issue23(t *testing.T) {
	th, st := journalHub(t, filepath.Join(t.TempDir(), "hub.db"), Config{Token: "tok"})
	holderFrame := signedFrame(t, "proj/alpha", testKey(1), map[string]any{"token": "tok"})
	holder := th.dial()
	holder.send(holderFrame)
	holder.expect("welcome")
	op := th.dial()
	op.send(map[string]any{"sender": "ops", "type": "heartbeat", "target": "System", "payload": "online", "token": "tok"})
	op.expect("welcome")
	op.send(map[string]any{"sender": "ops", "type": "identity_pin_list"})
	list := op.expect("identity_pin_list_result")
	if pins, _ := list["pins"].([]any); len(pins) != 1 || pins[0].(map[string]any)["name"] != "proj/alpha" {
		t.Fatalf("pins %v", list["pins"])
	}
	op.send(map[string]any{"sender": "ops", "type": "identity_pin_reclaim", "pin_name": "proj/alpha", "expected_key_id": "machine-wrong"})
	if r := op.expect("identity_pin_reclaim_result"); r["applied"] != false {
		t.Fatalf("a reclaim with the wrong expected key applied: %v", r)
	}
	op.send(map[string]any{"sender": "ops", "type": "identity_pin_reclaim", "pin_name": "proj/alpha", "reason": "new laptop"})
	if r := op.expect("identity_pin_reclaim_result"); r["applied"] != true {
		t.Fatalf("reclaim: %v", r)
	}
	holder.expectClose(PinReclaimedClose, "identity pin reclaimed")
	if _, ok, _ := st.LookupIdentityPin("proj/alpha"); ok {
		t.Fatal("the pin is still there")
	}
	n := th.dial()
	n.send(signedFrame(t, "proj/alpha", testKey(2), map[string]any{"token": "tok"}))
	n.expect("welcome")
	if p, ok, _ := st.LookupIdentityPin("proj/alpha"); !ok || p.PublicKey != gate.EncodeIdentityPublicKey(testKey(2).Public().(ed25519.PublicKey)) {
		t.Fatalf("not pinned anew to the new key: %+v", p)
	}

	open := startHub(t, Config{})
	open.joinSigned("proj/alpha", testKey(1))
	o := open.join("ops")
	o.send(map[string]any{"sender": "ops", "type": "identity_pin_reclaim", "pin_name": "proj/alpha"})
	r := o.expect("identity_pin_reclaim_result")
	if r["applied"] != false || !strings.Contains(r["detail"].(string), "--db") {
		t.Fatalf("an open hub reclaimed a pin over the socket: %v", r)
	}
	if _, ok, _ := open.h.ident.pins.LookupIdentityPin("proj/alpha"); !ok {
		t.Fatal("the refused reclaim changed the pin")
	}
}

// reclaimACL lets ops/recover reclaim the pins of proj/*, and nobody
// anything else.
const reclaimACL = `{"rules":[
 {"id":"recover-proj","principal":"ops/recover","permission":"identity-pin-reclaim","target_kind":"agent","target_pattern":"proj/*"}
]}`

func (tc *tconn) reclaim(sender, name string) {
	tc.send(map[string]any{"sender": sender, "type": "identity_pin_reclaim", "target": "System", "pin_name": name, "reason": "test"})
}

// Issue23 (items 2, 4): on a hub with per-agent credentials, reclaiming a
// pin over the socket takes the operator (an admin credential, like the
// admin verbs) or, under access rules, a rule allowing
// identity-pin-reclaim on agent:<name>; a denial is the ACL's, naming the
// rule, and leaves the pin alone.
func TestIdentityPin_ReclaimUnderTheACL_Issue23(t *testing.T) {
	path := writeACL(t, reclaimACL)
	p, err := LoadACL(path)
	if err != nil {
		t.Fatal(err)
	}
	th, st := journalHub(t, filepath.Join(t.TempDir(), "hub.db"), Config{RequireCredentials: true, ACL: p, ACLFile: path})
	projTok, _ := issue(t, th, "proj/*")
	opsTok, _ := issue(t, th, "ops/*")
	holder := th.dial()
	holder.send(signedFrame(t, "proj/alpha", testKey(1), map[string]any{"token": projTok}))
	holder.expect("welcome")
	signedOther := th.dial()
	signedOther.send(signedFrame(t, "other/x", testKey(3), map[string]any{"token": func() string { tok, _ := issue(t, th, "other/*"); return tok }()}))
	signedOther.expect("welcome")
	pinned := func(name string) bool {
		_, ok, err := st.LookupIdentityPin(name)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	// Not the rule's principal: the default deny, named.
	other := credJoin(t, th, "ops/other", opsTok)
	other.reclaim("ops/other", "proj/alpha")
	other.expectACLDenied(access.DefaultDenyRule, "identity-pin-reclaim on agent:proj/alpha")
	// The rule's principal, outside its pattern: denied too.
	rec := credJoin(t, th, "ops/recover", opsTok)
	rec.reclaim("ops/recover", "other/x")
	rec.expectACLDenied(access.DefaultDenyRule, "identity-pin-reclaim on agent:other/x")
	if !pinned("proj/alpha") || !pinned("other/x") {
		t.Fatal("a denied reclaim removed a pin")
	}
	// Allowed: applied, the live holder closed 4017.
	rec.reclaim("ops/recover", "proj/alpha")
	if r := rec.expect("identity_pin_reclaim_result"); r["applied"] != true {
		t.Fatalf("reclaim the rule allows: %v", r)
	}
	holder.expectClose(PinReclaimedClose, "identity pin reclaimed")
	if pinned("proj/alpha") {
		t.Fatal("the allowed reclaim left the pin")
	}
	// The operator (an admin credential) is not subject to the rules.
	adminTok, _ := issue(t, th, "root/*", access.AdminRole)
	admin := credJoin(t, th, "root/op", adminTok)
	admin.reclaim("root/op", "other/x")
	if r := admin.expect("identity_pin_reclaim_result"); r["applied"] != true {
		t.Fatalf("admin reclaim: %v", r)
	}
	wantMetric(t, th, `synapse_acl_denied_total{mode="enforce"} 2`)
}

// Issue23 (item 2): without access rules, a credential that is not the
// operator's may not reclaim (told what would let it), an admin
// credential may; on an open hub an ACL rule counts only for a requester
// that proved its own pinned key, since its name is anyone's; and a rule
// in shadow mode grants nothing.
func TestIdentityPin_ReclaimNeedsTheOperatorOrARule_Issue23(t *testing.T) {
	th := startHub(t, Config{RequireCredentials: true})
	projTok, _ := issue(t, th, "proj/*")
	opsTok, _ := issue(t, th, "ops/*")
	adminTok, _ := issue(t, th, "root/*", access.AdminRole)
	holder := th.dial()
	holder.send(signedFrame(t, "proj/alpha", testKey(1), map[string]any{"token": projTok}))
	holder.expect("welcome")
	ops := credJoin(t, th, "ops/other", opsTok)
	ops.reclaim("ops/other", "proj/alpha")
	if r := ops.expect("identity_pin_reclaim_result"); r["applied"] != false || !strings.Contains(r["detail"].(string), "identity-pin-reclaim on agent:proj/alpha") {
		t.Fatalf("a plain credential reclaimed, or was not told why not: %v", r)
	}
	admin := credJoin(t, th, "root/op", adminTok)
	admin.reclaim("root/op", "proj/alpha")
	if r := admin.expect("identity_pin_reclaim_result"); r["applied"] != true {
		t.Fatalf("admin reclaim: %v", r)
	}
	holder.expectClose(PinReclaimedClose, "identity pin reclaimed")

	open := aclHub(t, reclaimACL, false)
	open.joinSigned("proj/alpha", testKey(1)).close()
	unsigned := open.join("ops/recover")
	unsigned.reclaim("ops/recover", "proj/alpha")
	if r := unsigned.expect("identity_pin_reclaim_result"); r["applied"] != false || !strings.Contains(r["detail"].(string), "signed registration") {
		t.Fatalf("an unsigned name reclaimed on an open hub: %v", r)
	}
	unsigned.close()
	signed := open.joinSigned("ops/recover", testKey(4))
	signed.reclaim("ops/recover", "proj/alpha")
	if r := signed.expect("identity_pin_reclaim_result"); r["applied"] != true {
		t.Fatalf("the rule's principal, pinned, could not reclaim: %v", r)
	}

	// Shadow mode counts the would-be denial and grants nothing: the
	// open hub's refusal stands.
	shadow := aclHub(t, reclaimACL, true)
	shadow.joinSigned("proj/alpha", testKey(1)).close()
	o := shadow.join("ops/other")
	o.reclaim("ops/other", "proj/alpha")
	if r := o.expect("identity_pin_reclaim_result"); r["applied"] != false || !strings.Contains(r["detail"].(string), "--db") {
		t.Fatalf("shadow-mode reclaim: %v", r)
	}
	wantMetric(t, shadow, `synapse_acl_denied_total{mode="shadow"} 1`)
}

// Issue23: a socket refused for its identity (4013 with an identity
// reason) is charged to its host like other closes for cause, so a
// client reconnecting with the wrong key is paced; a full hub's 4013 is
// nobody's conduct and charges nothing.
func TestIdentityPin_RefusalIsChargedToItsHost_Issue23(t *testing.T) {
	th := startHub(t, Config{ClosesPerHostBurst: 2, ClosesPerHostPerSecond: Set(0.001), AuthTimeout: 200 * time.Millisecond})
	th.joinSigned("proj/alpha", testKey(1))
	for range 3 {
		c := th.dialFrom("127.0.0.2")
		c.expect("welcome")
		c.send(signedFrame(t, "proj/alpha", testKey(2), nil))
		c.expectIdentityRefusal(gate.IdentityUnknownKey, reasonPinMismatch)
	}
	eventually(t, "the host with the wrong key owes for its closed sockets", func() bool { return th.h.closes.Debt("127.0.0.2", th.h.now()) > 0 })

	full := startHub(t, Config{MaxClients: 1, ClosesPerHostBurst: 2, ClosesPerHostPerSecond: Set(0.001)})
	full.join("p/one")
	for range 3 {
		c := full.dialFrom("127.0.0.3")
		c.expectClose(IdentityPinClose, "hub at capacity")
	}
	if d := full.h.closes.Debt("127.0.0.3", full.h.now()); d != 0 {
		t.Fatalf("a full hub's refusals charged their host %v s", d)
	}
}
