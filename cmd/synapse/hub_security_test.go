package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/hub"
)

func secretFile(t *testing.T, text string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// runHubErr runs `synapse hub args…` that must fail before listening.
func runHubErr(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(append([]string{"hub", "--no-db", "--port", "0"}, args...), &out, &errb); code != 2 {
		t.Fatalf("hub %v: exit %d, stderr %q; want 2", args, code, errb.String())
	}
	return errb.String()
}

func TestHubSecurity_SecureTurnsOnTheReferenceRates(t *testing.T) {
	sec, err := resolveSecurity(&hubFlags{secure: true}, map[string]bool{"secure": true})
	if err != nil || sec.RateLimits != gate.SecureRateLimits {
		t.Fatalf("--secure: %+v, %v; want %+v", sec.RateLimits, err, gate.SecureRateLimits)
	}
	if gate.SecureRateLimits != (gate.RateLimits{AgentPerSecond: 100, AgentBurst: 20, HostPerSecond: 500, HostBurst: 100}) {
		t.Fatalf("secure limits drifted from the reference's: %+v", gate.SecureRateLimits)
	}
	// An explicit --rate-* flag wins over --secure, 0 included (off).
	sec, _ = resolveSecurity(&hubFlags{secure: true, ratePerAgent: 0, burstHost: 7},
		map[string]bool{"secure": true, "rate-per-agent": true, "rate-burst-host": true})
	want := gate.RateLimits{AgentPerSecond: 0, AgentBurst: 20, HostPerSecond: 500, HostBurst: 7}
	if sec.RateLimits != want {
		t.Fatalf("--secure with overrides: %+v, want %+v", sec.RateLimits, want)
	}
	// Without --secure the limits are the flags', off by default.
	sec, _ = resolveSecurity(&hubFlags{}, map[string]bool{})
	if sec.RateLimits != (gate.RateLimits{}) {
		t.Fatalf("default limits %+v, want off", sec.RateLimits)
	}
	sec, _ = resolveSecurity(&hubFlags{ratePerHost: 50, burstHost: 10}, map[string]bool{"rate-per-host": true, "rate-burst-host": true})
	if sec.RateLimits != (gate.RateLimits{HostPerSecond: 50, HostBurst: 10}) {
		t.Fatalf("explicit host limit %+v", sec.RateLimits)
	}
	if out := runHubErr(t, "--rate-per-agent", "-1"); !strings.Contains(out, "--rate-per-agent") {
		t.Fatalf("negative rate: %q", out)
	}
}

func TestHubSecurity_AuthFailLimit(t *testing.T) {
	for _, c := range []struct {
		flag int
		want hub.Setting[int]
	}{{10, hub.Set(10)}, {3, hub.Set(3)}, {0, hub.Off[int]()}} {
		sec, _ := resolveSecurity(&hubFlags{authFailLimit: c.flag}, map[string]bool{})
		if sec.AuthFailuresPerMinute != c.want {
			t.Errorf("--auth-fail-limit %d → %v, want %v", c.flag, sec.AuthFailuresPerMinute, c.want)
		}
	}
}

func TestHubSecurity_TokenFile(t *testing.T) {
	p := secretFile(t, "s3cret\n", 0o600)
	f := hubFlags{tokenFile: p, token: "from-env"}
	if _, err := resolveSecurity(&f, map[string]bool{"token-file": true}); err != nil || f.token != "s3cret" {
		t.Fatalf("token %q, %v: the file must beat SYNAPSE_TOKEN", f.token, err)
	}
	f = hubFlags{tokenFile: p, token: "flag"}
	if _, err := resolveSecurity(&f, map[string]bool{"token-file": true, "token": true}); err == nil {
		t.Fatal("--token and --token-file together were accepted")
	}
	open := secretFile(t, "s3cret\n", 0o644)
	if out := runHubErr(t, "--token-file", open); !strings.Contains(out, "readable by every user") || !strings.Contains(out, "chmod 600") {
		t.Fatalf("world-readable token file: %q", out)
	}
	// The file's token counts as a token for the exposure check.
	f = hubFlags{host: "0.0.0.0", tokenFile: p}
	if _, err := resolveSecurity(&f, map[string]bool{}); err != nil || checkExposure(f) != nil {
		t.Fatalf("off-loopback with --token-file refused: %v", checkExposure(f))
	}
}

func TestHubSecurity_MessageAuthKeys(t *testing.T) {
	file := secretFile(t, "# keys\nci:s2:p/ci,p/b\n", 0o600)
	f := hubFlags{keySpecs: keySpecs{"main:s:1:p/a"}, keyFile: file, requireMsgAuth: true}
	sec, err := resolveSecurity(&f, map[string]bool{})
	if err != nil || len(sec.MessageAuthKeys) != 2 || !sec.RequireMessageAuth {
		t.Fatalf("%+v, %v", sec, err)
	}
	if k := sec.MessageAuthKeys[0]; k.ID != "main" || string(k.Secret) != "s:1" || k.Senders[0] != "p/a" {
		t.Fatalf("flag key %+v", k)
	}
	if k := sec.MessageAuthKeys[1]; k.ID != "ci" || strings.Join(k.Senders, ",") != "p/ci,p/b" {
		t.Fatalf("file key %+v", k)
	}
	if out := runHubErr(t, "--require-message-auth"); !strings.Contains(out, "--message-auth-key") {
		t.Fatalf("require without a key: %q", out)
	}
	if out := runHubErr(t, "--message-auth-key", "main:secret"); !strings.Contains(out, "KEY_ID:SECRET:SENDER") {
		t.Fatalf("bad key spec: %q", out)
	}
	if out := runHubErr(t, "--message-auth-key-file", secretFile(t, "main:s:p/a\n", 0o604)); !strings.Contains(out, "chmod 600") {
		t.Fatalf("world-readable key file: %q", out)
	}
	var keys keySpecs
	_ = keys.Set("a:b:c")
	_ = keys.Set("d:e:f")
	if len(keys) != 2 || keys.String() != "a:b:c d:e:f" {
		t.Fatalf("repeatable flag: %v", keys)
	}
}

func TestHubSecurity_HelpExplainsEveryFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"hub", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, flag := range []string{"-token-file", "-auth-fail-limit", "-message-auth-key", "-message-auth-key-file",
		"-require-message-auth", "-secure", "-rate-per-agent", "-rate-burst-agent", "-rate-per-host", "-rate-burst-host"} {
		if !strings.Contains(errb.String(), "  "+flag+" ") && !strings.Contains(errb.String(), "  "+flag+"\n") {
			t.Errorf("hub --help does not list %s", flag)
		}
	}
}
