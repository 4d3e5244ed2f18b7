package hub

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/coord"
)

// issue mints a credential on th's registry, failing the test on error.
func issue(t *testing.T, th *testHub, pattern string, roles ...string) (string, access.Credential) {
	t.Helper()
	tok, c, err := th.h.Access().Issue(access.IssueRequest{Pattern: pattern, Roles: roles}, th.h.now())
	if err != nil {
		t.Fatal(err)
	}
	return tok, c
}

// credJoin binds name with tok and waits for its own joined presence.
func credJoin(t *testing.T, th *testHub, name, tok string, kv ...any) *tconn {
	t.Helper()
	c := th.dial()
	c.send(hb(name, append([]any{"token", tok}, kv...)...))
	c.expect("welcome")
	c.expectWhere("presence_update", func(m map[string]any) bool { return m["agent"] == name })
	return c
}

// Issue23 item 8: a token bound to alpha/* that binds beta/x is refused
// with the reference's payload and close 4010, and nothing changed: the
// name is not online, no presence was sent, no claim was made.
func TestCred_TokenBoundToAlphaCannotBindBeta_Issue23(t *testing.T) {
	th := startHub(t, Config{RequireCredentials: true})
	tok, _ := issue(t, th, "alpha/*")
	watcher := credJoin(t, th, "alpha/watch", tok)
	bad := th.dial()
	bad.send(hb("beta/x", "token", tok))
	if m := bad.expect("auth_denied"); m["payload"] != "Token is not authorised for agent 'beta/x'." {
		t.Fatalf("auth_denied = %v", m)
	}
	bad.expectClose(4010, "auth denied")
	th.h.mu.Lock()
	bound := th.h.reg.byName["beta/x"] != nil
	_, seen := th.h.reg.lastSeen["beta/x"]
	th.h.mu.Unlock()
	if bound || seen {
		t.Fatalf("a refused bind changed the registry (bound %v, last_seen %v)", bound, seen)
	}
	watcher.send(map[string]any{"sender": "alpha/watch", "type": "who_request", "target": "System", "payload": ""})
	who := watcher.expect("who_snapshot")
	if slices.Contains(anyStrings(who["online_agents"]), "beta/x") {
		t.Fatalf("beta/x is online: %v", who["online_agents"])
	}
	// Its own names bind, sidecars included, and share one quota principal.
	credJoin(t, th, "alpha/x-rx", tok)
}

func anyStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// Issue23 item 8: revoking a credential mid-session closes its live
// sockets (auth_denied, then 4010 "credential revoked"), leaves other
// credentials' sockets alone, and refuses the token on reconnect.
func TestCred_RevokedMidSessionClosesItsSockets_Issue23(t *testing.T) {
	th := startHub(t, Config{Token: "operator"})
	tok, c := issue(t, th, "alpha/*")
	other, _ := issue(t, th, "beta/*")
	a := credJoin(t, th, "alpha/a", tok)
	b := credJoin(t, th, "beta/b", other)
	op := th.dial()
	op.send(hb("ops/lead", "token", "operator"))
	op.expect("welcome")
	op.send(f("token_revoke", "sender", "ops/lead", "credential_id", c.ID))
	if m := op.expect("token_revoked"); fmt.Sprint(m["sockets_closed"]) != "1" {
		t.Fatalf("token_revoked = %v", m)
	}
	if m := a.expect("auth_denied"); !strings.Contains(m["payload"].(string), "revoked") {
		t.Fatalf("auth_denied = %v", m)
	}
	a.expectClose(RevokedCloseCode, "credential revoked")
	b.send(f("claim", "sender", "beta/b", "task_id", "T1", "paths", []string{"b.go"}))
	b.expect("claim_granted")
	again := th.dial()
	again.send(hb("alpha/a", "token", tok))
	if m := again.expect("auth_denied"); !strings.Contains(m["payload"].(string), "was revoked") {
		t.Fatalf("reconnect: %v", m)
	}
	again.expectClose(4010, "auth denied")
	wantMetric(t, th, "synapse_credential_revoked_closes_total 1")
}

// A credential is the quota principal of every name it binds (INV-ME-5),
// and the shared token keeps working beside credentials.
func TestCred_CredentialIsTheQuotaPrincipal_INV_ME_5(t *testing.T) {
	th := startHub(t, Config{Token: "operator", Limits: coord.Limits{MaxClaimsPerPrincipal: 1}})
	tok, _ := issue(t, th, "alpha/*")
	a := credJoin(t, th, "alpha/a", tok)
	a.send(f("claim", "sender", "alpha/a", "task_id", "T1", "paths", []string{"a.go"}))
	a.expect("claim_granted")
	b := credJoin(t, th, "alpha/b", tok)
	b.send(f("claim", "sender", "alpha/b", "task_id", "T2", "paths", []string{"b.go"}))
	if d := b.expect("claim_denied"); d["reason_code"] != "QUOTA_EXCEEDED" {
		t.Fatalf("second name, same credential: %v", d)
	}
	shared := th.dial()
	shared.send(hb("ops/x", "token", "operator"))
	shared.expect("welcome")
	shared.send(f("claim", "sender", "ops/x", "task_id", "T3", "paths", []string{"c.go"}))
	shared.expect("claim_granted")
}

// A wrong or unknown credential is refused like a wrong token, and an
// expired one is refused with what to do.
func TestCred_UnknownAndExpiredAreRefused_Issue23(t *testing.T) {
	clock := newFakeClock()
	th := startHub(t, Config{RequireCredentials: true, Clock: clock.now})
	c1 := th.dial()
	c1.send(hb("alpha/a", "token", access.TokenPrefix+"nope"))
	if m := c1.expect("auth_denied"); m["payload"] != "Invalid authentication token." {
		t.Fatal(m)
	}
	c1.expectClose(4010, "auth denied")
	tok, _, err := th.h.Access().Issue(access.IssueRequest{Pattern: "alpha/*", TTL: 60}, clock.now())
	if err != nil {
		t.Fatal(err)
	}
	live := credJoin(t, th, "alpha/a", tok)
	clock.advance(61)
	live.send(f("claim", "sender", "alpha/a", "task_id", "T1", "paths", []string{"a.go"}))
	if m := live.expect("auth_denied"); !strings.Contains(m["payload"].(string), "expired") {
		t.Fatal(m)
	}
	live.expectClose(RevokedCloseCode, "credential expired")
	c2 := th.dial()
	c2.send(hb("alpha/b", "token", tok))
	if m := c2.expect("auth_denied"); !strings.Contains(m["payload"].(string), "expired") {
		t.Fatal(m)
	}
}

// The admin verbs need the shared token or the admin role: a plain
// credential is refused and nothing is issued.
func TestCred_AdminVerbsNeedTheOperator_Issue23(t *testing.T) {
	th := startHub(t, Config{Token: "operator"})
	tok, _ := issue(t, th, "alpha/*")
	a := credJoin(t, th, "alpha/a", tok)
	a.send(f("token_issue", "sender", "alpha/a", "name_pattern", "*"))
	if m := a.expect("error"); m["error_code"] != "admin_required" {
		t.Fatal(m)
	}
	if n := len(th.h.Access().List()); n != 1 {
		t.Fatalf("%d credentials after a refused issue", n)
	}
	adminTok, _ := issue(t, th, "ops/*", access.AdminRole)
	op := credJoin(t, th, "ops/admin", adminTok)
	op.send(f("token_issue", "sender", "ops/admin", "name_pattern", "gamma/*", "roles", []string{"gamma/dev"}, "note", "ci"))
	m := op.expect("token_issued")
	if tok, _ := m["token"].(string); !access.IsCredentialToken(tok) {
		t.Fatalf("token_issued = %v", m)
	}
	op.send(f("token_list", "sender", "ops/admin"))
	if l := op.expect("token_list"); len(l["credentials"].([]any)) != 3 {
		t.Fatalf("token_list = %v", l)
	}
	// An open hub has no admin.
	open := startHub(t, Config{})
	x := open.join("p/x")
	x.send(f("token_list", "sender", "p/x"))
	if m := x.expect("error"); m["error_code"] != "admin_required" {
		t.Fatal(m)
	}
}

// Issue23 item 8 (item 3): with credentials in force a role asserted in a
// heartbeat without a grant is ignored, the client is told which, and mail
// to that role reaches only its holders.
func TestRoles_HeartbeatRoleWithoutGrantIsIgnored_Issue23(t *testing.T) {
	th := startHub(t, Config{Token: "operator"})
	tok, _ := issue(t, th, "proj/*", "proj/reviewer")
	if err := th.h.Access().Grant(access.Grant{Role: "proj/lead", To: "proj/b"}); err != nil {
		t.Fatal(err)
	}
	a := credJoin(t, th, "proj/a", tok, "roles", []string{"proj/reviewer", "proj/admin"})
	n := a.expect("notice")
	if n["error_code"] != "role_not_granted" || !slices.Equal(anyStrings(n["ignored_roles"]), []string{"proj/admin"}) {
		t.Fatalf("notice = %v", n)
	}
	b := credJoin(t, th, "proj/b", tok, "roles", []string{"proj/lead"})
	c := credJoin(t, th, "proj/c", tok)
	c.send(map[string]any{"sender": "proj/c", "type": "who_request", "target": "System", "payload": ""})
	roles := c.expect("who_snapshot")["agent_roles"].(map[string]any)
	if got := anyStrings(roles["proj/a"]); !slices.Equal(got, []string{"proj/reviewer"}) {
		t.Fatalf("proj/a roles = %v", got)
	}
	if got := anyStrings(roles["proj/b"]); !slices.Equal(got, []string{"proj/lead"}) {
		t.Fatalf("proj/b roles = %v (granted by synapse role grant)", got)
	}
	// Mail to the ungranted role reaches nobody but the sender's echo.
	c.send(map[string]any{"sender": "proj/c", "type": "chat", "target": "proj/admin", "payload": "to admins"})
	c.send(map[string]any{"sender": "proj/c", "type": "chat", "target": "proj/lead", "payload": "to leads"})
	c.send(map[string]any{"sender": "proj/c", "type": "chat", "target": "proj/reviewer", "payload": "to reviewers"})
	got := a.expectWhere("chat", func(m map[string]any) bool { return m["payload"] != "to leads" })
	if got["payload"] != "to reviewers" {
		t.Fatalf("proj/a got %v first: mail to an ungranted role reached the agent that only asserted it", got["payload"])
	}
	b.expectWhere("chat", func(m map[string]any) bool { return m["payload"] == "to leads" })
}

// With only the shared token (no credential, no ACL) roles stay claimed,
// as the reference's clients expect, and no notice is sent.
func TestRoles_SharedTokenAloneLeavesRolesClaimed_Issue23(t *testing.T) {
	th := startHub(t, Config{Token: "operator"})
	a := th.dial()
	a.send(hb("proj/a", "token", "operator", "roles", []string{"proj/anything"}))
	a.expect("welcome")
	a.send(map[string]any{"sender": "proj/a", "type": "who_request", "target": "System", "payload": ""})
	who := a.expect("who_snapshot")
	if got := anyStrings(who["agent_roles"].(map[string]any)["proj/a"]); !slices.Equal(got, []string{"proj/anything"}) {
		t.Fatalf("roles = %v", got)
	}
}

const testACL = `{"rules":[
 {"id":"alpha-claims","principal":"alpha/*","permission":"claim","target_kind":"claim","target_pattern":"*"},
 {"id":"alpha-paths","principal":"alpha/*","permission":"claim","target_kind":"path","target_pattern":"src/alpha/*"},
 {"id":"alpha-release","principal":"alpha/*","permission":"release","target_kind":"claim","target_pattern":"*"},
 {"id":"chat-all","permission":"message","target_kind":"agent","target_pattern":"*"},
 {"id":"lead-sees","principal":"ops/lead","permission":"observe","target_kind":"claim","target_pattern":"*"},
 {"id":"lead-who","principal":"ops/lead","permission":"observe","target_kind":"agent","target_pattern":"*"}
]}`

func writeACL(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "acl.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func aclHub(t *testing.T, body string, shadow bool) *testHub {
	t.Helper()
	path := writeACL(t, body)
	p, err := LoadACL(path)
	if err != nil {
		t.Fatal(err)
	}
	return startHub(t, Config{ACL: p, ACLFile: path, ACLShadow: shadow})
}

// Issue23 item 4: a frame the rules do not allow is refused with the
// reference's error and the rule that decided, and changes nothing.
func TestACL_RefusalNamesTheRule_Issue23(t *testing.T) {
	th := aclHub(t, testACL, false)
	a := th.join("alpha/a")
	a.send(f("claim", "sender", "alpha/a", "task_id", "T1", "paths", []string{"src/alpha/x.go"}))
	a.expect("claim_granted")
	a.send(f("claim", "sender", "alpha/a", "task_id", "T2", "paths", []string{"src/beta/x.go"}))
	m := a.expect("error")
	if m["error_code"] != "acl_denied" || m["acl_rule"] != access.DefaultDenyRule || m["acl_decision"] != "deny" ||
		!strings.HasPrefix(m["payload"].(string), "access denied: claim on path:src/beta/x.go") || m["task_id"] != "T2" {
		t.Fatalf("refusal = %v", m)
	}
	b := th.join("beta/b")
	b.send(f("claim", "sender", "beta/b", "task_id", "T3", "paths", []string{"src/alpha/y.go"}))
	if m := b.expect("error"); m["error_code"] != "acl_denied" {
		t.Fatal(m)
	}
	// Nothing changed: T2 and T3 are not claimed.
	lead := th.join("ops/lead")
	lead.send(map[string]any{"sender": "ops/lead", "type": "state_request", "target": "System", "payload": ""})
	snap := lead.expect("state_snapshot")["snapshot"].(map[string]any)
	if claims := snap["active_claims"].([]any); len(claims) != 1 || claims[0].(map[string]any)["task_id"] != "T1" {
		t.Fatalf("claims = %v", claims)
	}
	wantMetric(t, th, `synapse_acl_denied_total{mode="enforce"} 2`)
}

// Issue23 item 4: an explicit deny rule wins and is named.
func TestACL_DenyRuleWinsAndIsNamed_Issue23(t *testing.T) {
	th := aclHub(t, strings.Replace(testACL, `"rules":[`, `"rules":[{"id":"no-secrets","effect":"deny","permission":"claim","target_kind":"path","target_pattern":"*secret*","reason":"secrets are the lead's"},`, 1), false)
	a := th.join("alpha/a")
	a.send(f("claim", "sender", "alpha/a", "task_id", "T1", "paths", []string{"src/alpha/secret.go"}))
	if m := a.expect("error"); m["acl_rule"] != "no-secrets" || m["acl_reason"] != "secrets are the lead's" {
		t.Fatal(m)
	}
}

// Issue23 item 4: shadow mode logs and counts what it would refuse and
// refuses nothing.
func TestACL_ShadowModeRefusesNothing_Issue23(t *testing.T) {
	th := aclHub(t, testACL, true)
	b := th.join("beta/b")
	b.send(f("claim", "sender", "beta/b", "task_id", "T3", "paths", []string{"src/alpha/y.go"}))
	b.expect("claim_granted")
	wantMetric(t, th, `synapse_acl_denied_total{mode="shadow"} 2`)
}

// Issue23 item 8: a reload of a file that does not parse keeps the old
// policy (and says why); a good file is in force at once.
func TestACL_ReloadOfABadFileKeepsTheOldPolicy_Issue23(t *testing.T) {
	th := aclHub(t, testACL, false)
	a := th.join("alpha/a")
	if err := os.WriteFile(th.h.cfg.ACLFile, []byte(`{"rules":[{"permission":"claim",`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := th.h.ReloadACL(); err == nil {
		t.Fatal("a broken file reloaded")
	}
	a.send(f("claim", "sender", "alpha/a", "task_id", "T1", "paths", []string{"src/alpha/x.go"}))
	a.expect("claim_granted") // the old rules still allow it
	a.send(f("claim", "sender", "alpha/a", "task_id", "T2", "paths", []string{"src/beta/x.go"}))
	a.expect("error") // and still refuse this
	wantMetric(t, th, `synapse_acl_reloads_total{result="failed"} 1`)
	allowAll := `{"rules":[{"id":"all-claims","permission":"claim","target_kind":"claim","target_pattern":"*"},{"id":"all-paths","permission":"claim","target_kind":"path","target_pattern":"*"}]}`
	if err := os.WriteFile(th.h.cfg.ACLFile, []byte(allowAll), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := th.h.ReloadACL(); err != nil {
		t.Fatal(err)
	}
	a.send(f("claim", "sender", "alpha/a", "task_id", "T2", "paths", []string{"src/beta/x.go"}))
	a.expect("claim_granted")
}

// Issue23 item 4: reads are filtered by the same rules: an agent sees its
// own claims and what an observe rule shows it; who lists what it may see.
func TestACL_ReadsAreFiltered_Issue23(t *testing.T) {
	th := aclHub(t, testACL, false)
	a := th.join("alpha/a")
	a.send(f("claim", "sender", "alpha/a", "task_id", "T1", "paths", []string{"src/alpha/x.go"}))
	a.expect("claim_granted")
	z := th.join("alpha/z")
	z.send(map[string]any{"sender": "alpha/z", "type": "state_request", "target": "System", "payload": ""})
	snap := z.expect("state_snapshot")["snapshot"].(map[string]any)
	if claims := snap["active_claims"].([]any); len(claims) != 0 {
		t.Fatalf("alpha/z sees another agent's claim without an observe rule: %v", claims)
	}
	if agents := snap["agents"].([]any); len(agents) != 1 {
		t.Fatalf("alpha/z sees agents %v", agents)
	}
	z.send(map[string]any{"sender": "alpha/z", "type": "who_request", "target": "System", "payload": ""})
	if online := anyStrings(z.expect("who_snapshot")["online_agents"]); !slices.Equal(online, []string{"alpha/z"}) {
		t.Fatalf("who for alpha/z = %v", online)
	}
	lead := th.join("ops/lead")
	lead.send(map[string]any{"sender": "ops/lead", "type": "state_request", "target": "System", "payload": ""})
	if claims := lead.expect("state_snapshot")["snapshot"].(map[string]any)["active_claims"].([]any); len(claims) != 1 {
		t.Fatalf("the lead's observe rule shows %v", claims)
	}
	lead.send(map[string]any{"sender": "ops/lead", "type": "who_request", "target": "System", "payload": ""})
	if online := anyStrings(lead.expect("who_snapshot")["online_agents"]); len(online) != 3 {
		t.Fatalf("who for the lead = %v", online)
	}
}

// acl_check answers with the decision and its rule, for the socket's own
// name (and for any name, to the operator).
func TestACL_CheckVerbNamesTheRule_Issue23(t *testing.T) {
	th := aclHub(t, testACL, false)
	a := th.join("alpha/a")
	a.send(f("acl_check", "sender", "alpha/a", "permission", "claim", "target_kind", "path", "target_value", "src/alpha/q.go"))
	if m := a.expect("acl_decision"); m["decision"] != "allow" || m["rule"] != "alpha-paths" {
		t.Fatal(m)
	}
	a.send(f("acl_check", "sender", "alpha/a", "as", "beta/b", "permission", "claim", "target_kind", "path", "target_value", "x"))
	if m := a.expect("error"); m["error_code"] != "admin_required" {
		t.Fatal(m)
	}
}

var _ = time.Second
