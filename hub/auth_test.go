package hub

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/wire"
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
	th := startHub(t, Config{Token: "secret", AuthFailuresPerMinute: 2, Clock: clk.now})
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
	th := startHub(t, Config{Token: "secret", AuthFailuresPerMinute: -1})
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

func TestReadTokenFile_FirstLineTrimmedAndNotWorldReadable(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte("  s3cret \nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := ReadTokenFile(p); err != nil || tok != "s3cret" {
		t.Fatalf("got %q, %v", tok, err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTokenFile(p); err == nil || !strings.Contains(err.Error(), "readable by every user") || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable token file: err %v", err)
	}
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := ReadTokenFile(empty); err == nil {
		t.Fatal("an empty first line was accepted")
	}
	if _, err := ReadTokenFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing file was accepted")
	}
}

func TestParseMessageAuthKey(t *testing.T) {
	k, err := ParseMessageAuthKey("main:se:cr:et:p/a, p/b ,")
	if err != nil || k.ID != "main" || string(k.Secret) != "se:cr:et" || strings.Join(k.Senders, "|") != "p/a|p/b" {
		t.Fatalf("got %+v, %v", k, err)
	}
	for _, bad := range []string{"", "main", "main:secret", ":s:p/a", "main::p/a", "main:secret:", "main:secret: , "} {
		if _, err := ParseMessageAuthKey(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "keys")
	_ = os.WriteFile(p, []byte("# fleet keys\nmain:s1:p/a\n\nci:s2:p/ci,p/b\n"), 0o600)
	keys, err := ReadMessageAuthKeyFile(p)
	if err != nil || len(keys) != 2 || keys[1].ID != "ci" || len(keys[1].Senders) != 2 {
		t.Fatalf("got %+v, %v", keys, err)
	}
	_ = os.WriteFile(p, []byte("main:s1:p/a\nbroken\n"), 0o600)
	if _, err := ReadMessageAuthKeyFile(p); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad line: err %v", err)
	}
	_ = os.Chmod(p, 0o604)
	if _, err := ReadMessageAuthKeyFile(p); err == nil {
		t.Fatal("world-readable key file accepted")
	}
}

func TestNew_RefusesBadMessageAuthConfig(t *testing.T) {
	for _, cfg := range []Config{
		{RequireMessageAuth: true},
		{MessageAuthKeys: []MessageAuthKey{{ID: "k", Secret: []byte("s"), Senders: []string{"a"}}, {ID: "k", Secret: []byte("t"), Senders: []string{"b"}}}},
		{MessageAuthKeys: []MessageAuthKey{{ID: "k", Secret: []byte("s")}}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// The signed bytes are the canonical JSON (sorted keys, ensure_ascii=False)
// of the frame with only auth.value removed (PROTOCOL.md §5.2). The
// expected text is written by hand.
func TestSignMessage_SignsTheCanonicalFrameWithoutValue(t *testing.T) {
	frame := decodeFrame(t, `{"type":"claim","sender":"proj/a","target":"System","payload":"T","timestamp":1782648000.0,
		"task_id":"T","note":"café <ok>","idem_key":"k1",
		"auth":{"alg":"hmac-sha256","kid":"main","nonce":"n1","sequence":1,"timestamp":1782648000.5,"value":"ignored"}}`)
	want := `{"auth":{"alg":"hmac-sha256","kid":"main","nonce":"n1","sequence":1,"timestamp":1782648000.5},` +
		`"idem_key":"k1","note":"café <ok>","payload":"T","sender":"proj/a","target":"System","task_id":"T",` +
		`"timestamp":1782648000.0,"type":"claim"}`
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write([]byte(want))
	got, err := SignMessage([]byte("s3cret"), frame)
	if err != nil || got != hex.EncodeToString(mac.Sum(nil)) {
		t.Fatalf("SignMessage = %s, %v; want the HMAC of %s", got, err, want)
	}
	if frame["auth"].(map[string]any)["value"] != "ignored" {
		t.Fatal("SignMessage changed the frame")
	}
}

func decodeFrame(t *testing.T, text string) map[string]any {
	t.Helper()
	in, err := wire.Decode([]byte(text), 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	return in.Map()
}

// signer builds signed frames the way the Python client does.
type signer struct {
	t      *testing.T
	kid    string
	secret string
	seq    int
}

// sign returns frame (a map as the test would send it) with an auth
// object stamped at ts and signed over the text the hub will decode.
func (s *signer) sign(frame map[string]any, ts float64, nonce string) map[string]any {
	s.t.Helper()
	s.seq++
	frame["auth"] = map[string]any{"alg": "hmac-sha256", "kid": s.kid, "nonce": nonce, "sequence": s.seq, "timestamp": ts}
	b, err := json.Marshal(frame)
	if err != nil {
		s.t.Fatal(err)
	}
	m := decodeFrame(s.t, string(b))
	v, err := SignMessage([]byte(s.secret), m)
	if err != nil {
		s.t.Fatal(err)
	}
	m["auth"].(map[string]any)["value"] = v
	return m
}

func authKeys() []MessageAuthKey {
	return []MessageAuthKey{
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
		expectAuthRefusal(t, a, VerifyReplayed)
	})
	t.Run("tampered", func(t *testing.T) {
		m := sg.sign(f("claim", "task_id", "T2", "paths", []string{"b.go"}), now, "nonce-2")
		m["task_id"] = "T3"
		a.send(m)
		expectAuthRefusal(t, a, VerifyBadAuthentication)
	})
	t.Run("tampered auth field", func(t *testing.T) {
		m := sg.sign(f("claim", "task_id", "T2", "paths", []string{"b.go"}), now, "nonce-3")
		m["auth"].(map[string]any)["sequence"] = json.Number("99")
		a.send(m)
		expectAuthRefusal(t, a, VerifyBadAuthentication)
	})
	t.Run("key not bound to the sender", func(t *testing.T) {
		other := &signer{t: t, kid: "other", secret: "0ther"}
		a.send(other.sign(f("claim", "task_id", "T2"), now, "nonce-4"))
		expectAuthRefusal(t, a, VerifySenderMismatch)
	})
	t.Run("unknown key", func(t *testing.T) {
		ghost := &signer{t: t, kid: "ghost", secret: "s3cret"}
		a.send(ghost.sign(f("claim", "task_id", "T2"), now, "nonce-5"))
		expectAuthRefusal(t, a, VerifyUnknownKey)
	})
	t.Run("wrong algorithm", func(t *testing.T) {
		m := f("claim", "task_id", "T2")
		m["auth"] = map[string]any{"alg": "hmac-sha1", "kid": "main", "nonce": "n", "sequence": 1, "timestamp": now, "value": "00"}
		a.send(m)
		expectAuthRefusal(t, a, VerifyBadAuthentication)
	})
	t.Run("sequence not a positive int", func(t *testing.T) {
		for _, seq := range []any{0, 1.5, true, "1"} {
			m := f("claim", "task_id", "T2")
			m["auth"] = map[string]any{"alg": "hmac-sha256", "kid": "main", "nonce": "n", "sequence": seq, "timestamp": now, "value": "00"}
			a.send(m)
			expectAuthRefusal(t, a, VerifySequenceMismatch)
		}
	})
	t.Run("missing", func(t *testing.T) {
		a.send(f("release", "task_id", "T1"))
		expectAuthRefusal(t, a, VerifyMissing)
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
			expectAuthRefusal(t, a, VerifyExpired)
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
	expectAuthRefusal(t, a, VerifyBadAuthentication)
}

// The verifier's window is exact at both ends (INV-CK-2) and the nonce is
// admitted only once the HMAC holds.
func TestVerifier_WindowEdgesAndNonceAfterHMAC_INV_CK_2(t *testing.T) {
	keys, _ := checkMessageAuthKeys(Config{MessageAuthKeys: authKeys()})
	v := newVerifier(keys, 0)
	sg := &signer{t: t, kid: "main", secret: "s3cret"}
	const now = 1782648000.0
	verify := func(ts float64, nonce string) string {
		m := sg.sign(map[string]any{"sender": "p/a", "type": "claim", "task_id": "T"}, ts, nonce)
		return v.verify("p/a", inbound(t, m), now)
	}
	for _, c := range []struct {
		ts   float64
		want string
	}{
		{now - MessageAuthWindow, VerifyOK},
		{math.Nextafter(now-MessageAuthWindow, 0), VerifyExpired},
		{now + MessageAuthFutureSkew, VerifyOK},
		{math.Nextafter(now+MessageAuthFutureSkew, math.Inf(1)), VerifyExpired},
	} {
		if got := verify(c.ts, "n"+itoa(int64(c.ts*1000))); got != c.want {
			t.Errorf("ts now%+g: %s, want %s", c.ts-now, got, c.want)
		}
	}
	// A forged frame does not burn its nonce: the genuine one still passes.
	m := sg.sign(map[string]any{"sender": "p/a", "type": "claim", "task_id": "T"}, now, "fresh")
	m["task_id"] = "forged"
	if got := v.verify("p/a", inbound(t, m), now); got != VerifyBadAuthentication {
		t.Fatalf("forged: %s", got)
	}
	if got := verify(now, "fresh"); got != VerifyOK {
		t.Fatalf("genuine after forgery: %s", got)
	}
	// The frame's sender must be the bound one.
	if got := v.verify("p/b", inbound(t, sg.sign(map[string]any{"sender": "p/a", "type": "claim"}, now, "x")), now); got != VerifySenderMismatch {
		t.Fatalf("bound to another name: %s", got)
	}
}

// inbound re-encodes a frame and decodes it as the hub does.
func inbound(t *testing.T, m map[string]any) *wire.Inbound {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	in, err := wire.Decode(b, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// The replay cache is bounded per sender: a sender that floods refuses
// only itself, never another sender; nonces are forgotten once their
// timestamp leaves the window, and not before.
func TestReplayCache_PerSenderBoundAndExpiry(t *testing.T) {
	c := newReplayCache(3, 5)
	const now = 100.0
	for i := 0; i < 3; i++ {
		if !c.admit("k\x00flood", "n"+itoa(int64(i)), now+10, now) {
			t.Fatalf("nonce %d refused", i)
		}
	}
	if c.admit("k\x00flood", "n3", now+10, now) {
		t.Fatal("a full sender admitted a 4th live nonce")
	}
	if !c.admit("k\x00quiet", "n0", now+10, now) || !c.admit("k\x00quiet", "n1", now+10, now) {
		t.Fatal("the flood refused another sender")
	}
	if c.admit("k\x00third", "n0", now+10, now) {
		t.Fatal("the total bound (5) was exceeded")
	}
	if c.admit("k\x00quiet", "n0", now+10, now) {
		t.Fatal("a replayed nonce was admitted")
	}
	if c.admit("k\x00quiet", "n0", now+10, now+10) {
		t.Fatal("a nonce was forgotten while its frame was still inside the window")
	}
	later := now + 10.5
	if !c.admit("k\x00quiet", "n0", later+10, later) {
		t.Fatal("an expired nonce was not forgotten")
	}
	if !c.admit("k\x00flood", "n9", later+10, later) || !c.admit("k\x00third", "n0", later+10, later) {
		t.Fatal("expired entries did not free their sender's or the total's room")
	}
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
			release := sg.sign(f("release", "task_id", "T1"), clk.now()+MessageAuthFutureSkew, "n-release")
			a.send(release)
			a.expectWhere("release_granted", func(m map[string]any) bool { return m["task_id"] == "T1" })
			a.send(claim)
			expectAuthRefusal(t, a, VerifyReplayed) // the same process remembers

			clk.advance(0.2) // a quick restart, well inside the window
			th2 := start()
			a2 := th2.join("p/a")
			for _, m := range []map[string]any{claim, release} {
				a2.send(m)
				expectAuthRefusal(t, a2, VerifyExpired)
			}
			clk.advance(MessageAuthFutureSkew + 0.1)
			a2.send(sg.sign(f("claim", "task_id", "T2", "paths", []string{"b.go"}), clk.now(), "n-fresh"))
			a2.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == "T2" })
		})
	}
}
