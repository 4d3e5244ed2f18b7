package hub

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/gate"
)

// fakeClock is a hub clock that moves only when told, so window and
// refill tests never sleep.
type fakeClock struct {
	mu sync.Mutex
	t  float64
}

func newFakeClock() *fakeClock { return &fakeClock{t: 1782648000} }

func (c *fakeClock) now() float64 { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) advance(d float64) { c.mu.Lock(); c.t += d; c.mu.Unlock() }

func metricsText(t *testing.T, th *testHub) string {
	t.Helper()
	resp, err := http.Get(th.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func wantMetric(t *testing.T, th *testHub, line string) {
	t.Helper()
	if body := metricsText(t, th); !strings.Contains(body, line+"\n") {
		t.Errorf("/metrics lacks %q", line)
	}
}

// traces/auth.jsonl: no token and a wrong token are denied with the
// reference's payloads and close 4010 "auth denied"; the right token binds
// and later frames need none.
func TestAuth_TokenRefusalsAndLaterFramesNeedNoToken_TraceAuth(t *testing.T) {
	th := startHub(t, Config{Token: "secret"})
	for _, c := range []struct {
		extra []any
		want  string
	}{
		{nil, "Authentication token required."},
		{[]any{"token", ""}, "Authentication token required."},
		{[]any{"token", "wrong"}, "Invalid authentication token."},
		{[]any{"token", "secret-but-longer"}, "Invalid authentication token."},
	} {
		c1 := th.dial()
		c1.send(hb("A", c.extra...))
		if m := c1.expect("auth_denied"); m["payload"] != c.want || m["target"] != "A" {
			t.Errorf("token %v: got %v, want payload %q", c.extra, m, c.want)
		}
		c1.expectClose(4010, "auth denied")
	}
	a := th.dial()
	a.send(hb("A", "token", "secret"))
	a.expect("welcome")
	a.expect("presence_update")
	a.send(map[string]any{"sender": "A", "target": "System", "type": "who_request", "payload": "who"})
	a.expect("who_snapshot")
	a.send(f("claim", "sender", "A", "task_id", "T1", "token", "anything")) // a later token is ignored, not checked
	a.expect("claim_granted")
	wantMetric(t, th, "synapse_auth_failures_total 4")
}

// Failed first frames are limited per remote host: once the host has spent
// its burst, even the right token is refused unchecked (a guesser learns
// nothing), until the bucket refills.
func TestAuth_FailedAttemptsLockOutTheHost(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, Config{Token: "secret", AuthFailuresPerMinute: Set(2), Clock: clk.now})
	for i := 0; i < 2; i++ {
		c := th.dial()
		c.send(hb("A", "token", "guess"))
		if m := c.expect("auth_denied"); m["payload"] != "Invalid authentication token." {
			t.Fatalf("attempt %d: %v", i, m)
		}
		c.expectClose(4010, "auth denied")
	}
	c := th.dial()
	c.send(hb("A", "token", "secret"))
	if m := c.expect("auth_denied"); !strings.HasPrefix(m["payload"].(string), "Too many failed authentication attempts") {
		t.Fatalf("locked-out host got %v", m)
	}
	c.expectClose(4010, "auth denied")
	wantMetric(t, th, "synapse_auth_lockout_refusals_total 1")

	clk.advance(30) // 2 per minute: one attempt earned back
	ok := th.dial()
	ok.send(hb("A", "token", "secret"))
	ok.expect("welcome")
}

func TestAuth_FailedAttemptLimitOffWhenNegative(t *testing.T) {
	th := startHub(t, Config{Token: "secret", AuthFailuresPerMinute: Off[int]()})
	for i := 0; i < DefaultAuthFailuresPerMinute+2; i++ {
		c := th.dial()
		c.send(hb("A", "token", "guess"))
		if m := c.expect("auth_denied"); m["payload"] != "Invalid authentication token." {
			t.Fatalf("attempt %d: %v", i, m)
		}
	}
}

// INV-ME-5 with a token: the quota principal is the token's digest, so two
// names presenting one token share one claim budget.
func TestAuth_TokenIsTheQuotaPrincipal_INV_ME_5(t *testing.T) {
	th := startHub(t, Config{Token: "secret", Limits: coord.Limits{MaxClaimsPerPrincipal: 1}})
	a := th.dial()
	a.send(hb("p/a", "token", "secret"))
	a.expect("presence_update")
	a.send(f("claim", "task_id", "T1", "paths", []string{"a.go"}))
	a.expect("claim_granted")
	b := th.dial()
	b.send(hb("p/b", "token", "secret"))
	b.expect("presence_update")
	b.send(f("claim", "sender", "p/b", "task_id", "T2", "paths", []string{"b.go"}))
	if d := b.expect("claim_denied"); d["reason_code"] != "QUOTA_EXCEEDED" {
		t.Fatalf("second name, same token: %v; want QUOTA_EXCEEDED", d)
	}
}

func TestNew_RefusesBadMessageAuthConfig(t *testing.T) {
	for _, cfg := range []Config{
		{RequireMessageAuth: true},
		{MessageAuthKeys: []gate.MessageAuthKey{{ID: "k", Secret: []byte("s"), Senders: []string{"a"}}, {ID: "k", Secret: []byte("t"), Senders: []string{"b"}}}},
		{MessageAuthKeys: []gate.MessageAuthKey{{ID: "k", Secret: []byte("s")}}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// signer builds signed frames the way the Python client does
// (gate.Signer), failing the test on error.
type signer struct {
	t      *testing.T
	kid    string
	secret string
	s      *gate.Signer
}

// sign returns frame (a map as the test would send it) with an auth
// object stamped at ts and signed over the text the hub will decode.
func (s *signer) sign(frame map[string]any, ts float64, nonce string) map[string]any {
	s.t.Helper()
	if s.s == nil {
		s.s = &gate.Signer{KeyID: s.kid, Secret: []byte(s.secret)}
	}
	m, err := s.s.Sign(frame, ts, nonce)
	if err != nil {
		s.t.Fatal(err)
	}
	return m
}

func authKeys() []gate.MessageAuthKey {
	return []gate.MessageAuthKey{
		{ID: "main", Secret: []byte("s3cret"), Senders: []string{"p/a"}},
		{ID: "other", Secret: []byte("0ther"), Senders: []string{"p/b"}},
	}
}

// expectAuthRefusal reads the refusal of a signed frame: an error frame to
// the sender with the reference's payload, verification_result and our
// error_code.
func expectAuthRefusal(t *testing.T, c *tconn, result string) {
	t.Helper()
	m := c.expect("error")
	if m["verification_result"] != result || m["payload"] != "per-message authentication failed: "+result ||
		m["error_code"] != "message_auth_failed" || m["target"] != "p/a" {
		t.Fatalf("got %v; want refusal %q", m, result)
	}
}

// Per-message authentication over a real socket: a signed claim is
// granted; tampering, replay, a key bound to another sender, an unknown
// key, a wrong algorithm and a bad sequence are refused with the
// reference's verification_result.
func TestMessageAuth_SignedFrameAcceptedAndRefusals(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, Config{MessageAuthKeys: authKeys(), RequireMessageAuth: true, Clock: clk.now})
	clk.advance(60) // past the boot horizon
	a := th.join("p/a")
	sg := &signer{t: t, kid: "main", secret: "s3cret"}
	now := clk.now()

	ok := sg.sign(f("claim", "task_id", "T1", "paths", []string{"a.go"}), now, "nonce-1")
	a.send(ok)
	a.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == "T1" })

	t.Run("replayed", func(t *testing.T) {
		a.send(ok) // the very same frame again, inside the window
		expectAuthRefusal(t, a, gate.VerifyReplayed)
	})
	t.Run("tampered", func(t *testing.T) {
		m := sg.sign(f("claim", "task_id", "T2", "paths", []string{"b.go"}), now, "nonce-2")
		m["task_id"] = "T3"
		a.send(m)
		expectAuthRefusal(t, a, gate.VerifyBadAuthentication)
	})
	t.Run("tampered auth field", func(t *testing.T) {
		m := sg.sign(f("claim", "task_id", "T2", "paths", []string{"b.go"}), now, "nonce-3")
		m["auth"].(map[string]any)["sequence"] = json.Number("99")
		a.send(m)
		expectAuthRefusal(t, a, gate.VerifyBadAuthentication)
	})
	t.Run("key not bound to the sender", func(t *testing.T) {
		other := &signer{t: t, kid: "other", secret: "0ther"}
		a.send(other.sign(f("claim", "task_id", "T2"), now, "nonce-4"))
		expectAuthRefusal(t, a, gate.VerifySenderMismatch)
	})
	t.Run("unknown key", func(t *testing.T) {
		ghost := &signer{t: t, kid: "ghost", secret: "s3cret"}
		a.send(ghost.sign(f("claim", "task_id", "T2"), now, "nonce-5"))
		expectAuthRefusal(t, a, gate.VerifyUnknownKey)
	})
	t.Run("wrong algorithm", func(t *testing.T) {
		m := f("claim", "task_id", "T2")
		m["auth"] = map[string]any{"alg": "hmac-sha1", "kid": "main", "nonce": "n", "sequence": 1, "timestamp": now, "value": "00"}
		a.send(m)
		expectAuthRefusal(t, a, gate.VerifyBadAuthentication)
	})
	t.Run("sequence not a positive int", func(t *testing.T) {
		for _, seq := range []any{0, 1.5, true, "1"} {
			m := f("claim", "task_id", "T2")
			m["auth"] = map[string]any{"alg": "hmac-sha256", "kid": "main", "nonce": "n", "sequence": seq, "timestamp": now, "value": "00"}
			a.send(m)
			expectAuthRefusal(t, a, gate.VerifySequenceMismatch)
		}
	})
	t.Run("missing", func(t *testing.T) {
		a.send(f("release", "task_id", "T1"))
		expectAuthRefusal(t, a, gate.VerifyMissing)
	})
	t.Run("unsigned verbs pass", func(t *testing.T) {
		a.send(f("chat", "target", "all", "payload", "hi"))
		a.expect("chat")
		a.send(f("ledger_task", "task_id", "B1", "title", "t"))
		a.expect("ledger_task_posted")
	})
	// Still one live claim: nothing refused reached the state.
	a.send(sg.sign(f("release", "task_id", "T1"), now, "nonce-6"))
	a.expectWhere("release_granted", func(m map[string]any) bool { return m["task_id"] == "T1" })
	wantMetric(t, th, `synapse_message_auth_failures_total{result="replayed"} 1`)
	wantMetric(t, th, `synapse_message_auth_failures_total{result="bad_authentication"} 3`)
}

// INV-CK-2 on the wire: the signed timestamp must lie in [now−10 s,
// now+1 s] of the hub's clock; 11 s old and 2 s ahead are refused as
// expired, both ends of the window are accepted.
func TestMessageAuth_SkewWindow_INV_CK_2(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, Config{MessageAuthKeys: authKeys(), RequireMessageAuth: true, Clock: clk.now})
	clk.advance(60) // past the boot horizon
	a := th.join("p/a")
	sg := &signer{t: t, kid: "main", secret: "s3cret"}
	now := clk.now()
	for i, c := range []struct {
		offset float64
		ok     bool
	}{
		{-11, false}, {+2, false}, {-10.01, false}, {+1.01, false},
		{-10, true}, {+1, true}, {0, true},
	} {
		task := "W" + itoa(int64(i))
		a.send(sg.sign(f("claim", "task_id", task, "paths", []string{task}), now+c.offset, "n"+task))
		if c.ok {
			a.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == task })
		} else {
			expectAuthRefusal(t, a, gate.VerifyExpired)
		}
	}
}

// Without --require-message-auth an unsigned frame passes, but a frame
// that carries auth is still verified.
func TestMessageAuth_OptionalModeVerifiesWhatIsSigned(t *testing.T) {
	clk := newFakeClock()
	th := startHub(t, Config{MessageAuthKeys: authKeys(), Clock: clk.now})
	clk.advance(60) // past the boot horizon
	a := th.join("p/a")
	a.send(f("claim", "task_id", "T1"))
	a.expect("claim_granted")
	a.send(f("claim", "task_id", "T0", "auth", nil))
	a.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == "T0" })
	sg := &signer{t: t, kid: "main", secret: "wrong"}
	a.send(sg.sign(f("claim", "task_id", "T2"), clk.now(), "n"))
	expectAuthRefusal(t, a, gate.VerifyBadAuthentication)
}

// PROTOCOL.md §5.3, INV-CK-2 across a restart: the replay cache is in
// memory, so a hub killed and restarted within the window would forget
// the nonces it admitted. The boot horizon closes that window: a frame
// signed before the new hub started plus the future skew is refused as
// expired, whether the hub has a journal or not; a freshly signed frame
// is accepted. The claim and its release were both accepted before the
// kill, so a replayed claim would otherwise be granted again.
func TestMessageAuth_ReplayRefusedAfterRestart_INV_CK_2(t *testing.T) {
	for _, c := range []struct {
		name    string
		journal bool
	}{{"journal", true}, {"no-db", false}} {
		t.Run(c.name, func(t *testing.T) {
			clk := newFakeClock()
			path := filepath.Join(t.TempDir(), "j.db")
			start := func() *testHub {
				cfg := Config{MessageAuthKeys: authKeys(), RequireMessageAuth: true, Clock: clk.now}
				if c.journal {
					return openJournalHubWith(t, path, cfg).testHub // the first is never closed: SIGKILL
				}
				return startHub(t, cfg)
			}
			th := start()
			clk.advance(60)
			a := th.join("p/a")
			sg := &signer{t: t, kid: "main", secret: "s3cret"}
			claim := sg.sign(f("claim", "task_id", "T1", "paths", []string{"a.go"}), clk.now(), "n-claim")
			a.send(claim)
			a.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == "T1" })
			// Signed as far ahead as the skew allows: the worst case.
			release := sg.sign(f("release", "task_id", "T1"), clk.now()+gate.MessageAuthFutureSkew, "n-release")
			a.send(release)
			a.expectWhere("release_granted", func(m map[string]any) bool { return m["task_id"] == "T1" })
			a.send(claim)
			expectAuthRefusal(t, a, gate.VerifyReplayed) // the same process remembers

			clk.advance(0.2) // a quick restart, well inside the window
			th2 := start()
			a2 := th2.join("p/a")
			for _, m := range []map[string]any{claim, release} {
				a2.send(m)
				expectAuthRefusal(t, a2, gate.VerifyExpired)
			}
			clk.advance(gate.MessageAuthFutureSkew + 0.1)
			a2.send(sg.sign(f("claim", "task_id", "T2", "paths", []string{"b.go"}), clk.now(), "n-fresh"))
			a2.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == "T2" })
		})
	}
}
