package gate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/wire"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

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

// signer builds signed frames the way the Python client does
// (Signer), failing the test on error.
type signer struct {
	t      *testing.T
	kid    string
	secret string
	s      *Signer
}

// sign returns frame (a map as the test would send it) with an auth
// object stamped at ts and signed over the text the hub will decode.
func (s *signer) sign(frame map[string]any, ts float64, nonce string) map[string]any {
	s.t.Helper()
	if s.s == nil {
		s.s = &Signer{KeyID: s.kid, Secret: []byte(s.secret)}
	}
	m, err := s.s.Sign(frame, ts, nonce)
	if err != nil {
		s.t.Fatal(err)
	}
	return m
}

func authKeys() []MessageAuthKey {
	return []MessageAuthKey{
		{ID: "main", Secret: []byte("s3cret"), Senders: []string{"p/a"}},
		{ID: "other", Secret: []byte("0ther"), Senders: []string{"p/b"}},
	}
}

// The verifier's window is exact at both ends (INV-CK-2) and the nonce is
// admitted only once the HMAC holds.
func TestVerifier_WindowEdgesAndNonceAfterHMAC_INV_CK_2(t *testing.T) {
	v, _ := NewVerifier(authKeys(), false, 0)
	sg := &signer{t: t, kid: "main", secret: "s3cret"}
	const now = 1782648000.0
	verify := func(ts float64, nonce string) string {
		m := sg.sign(map[string]any{"sender": "p/a", "type": "claim", "task_id": "T"}, ts, nonce)
		return v.Verify("p/a", inbound(t, m), now)
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
	if got := v.Verify("p/a", inbound(t, m), now); got != VerifyBadAuthentication {
		t.Fatalf("forged: %s", got)
	}
	if got := verify(now, "fresh"); got != VerifyOK {
		t.Fatalf("genuine after forgery: %s", got)
	}
	// The frame's sender must be the bound one.
	if got := v.Verify("p/b", inbound(t, sg.sign(map[string]any{"sender": "p/a", "type": "claim"}, now, "x")), now); got != VerifySenderMismatch {
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
