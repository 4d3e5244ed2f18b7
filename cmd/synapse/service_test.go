package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/internal/testbin"
)

// serviceHome gives the test a home, config and state dir of its own, and
// no user service manager (no user bus), as in CI.
func serviceHome(t *testing.T) (cfg, state string) {
	t.Helper()
	isolate(t)
	home := t.TempDir()
	cfg, state = filepath.Join(home, ".config"), filepath.Join(home, ".local", "state")
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("XDG_STATE_HOME", state)
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path="+filepath.Join(home, "no-bus"))
	return cfg, state
}

// --dry-run prints the unit and the commands and writes nothing; the unit
// restarts on failure, keeps the journal in the state dir, and passes
// systemd-analyze verify where Debian's systemd is installed (issue 21
// item 5).
func TestService_DryRunPrintsAVerifiedUnitAndWritesNothing_Issue21_5(t *testing.T) {
	bin := testbin.Synapse(t)
	cfg, state := serviceHome(t)
	code, out, e := runCmd("service", "install", "--dry-run", "--launchd=false", "--json", "--command", bin, "--", "--token-file", "/tmp/tok en")
	var got struct{ Unit, Content, WouldRun, Journal string }
	if err := json.Unmarshal([]byte(strings.ReplaceAll(out, "would_run", "wouldrun")), &got); err != nil || code != 0 {
		t.Fatalf("exit %d %v %s %s", code, err, out, e)
	}
	journal := filepath.Join(state, "synapse", "hub.db")
	if got.Unit != filepath.Join(cfg, "systemd", "user", "synapse-hub.service") || got.Journal != journal ||
		!strings.Contains(got.Content, "Restart=on-failure") || !strings.Contains(got.Content, `hub --db "`+journal+`" "--token-file" "/tmp/tok en"`) ||
		got.WouldRun != "systemctl --user daemon-reload && systemctl --user enable --now synapse-hub.service" {
		t.Fatalf("%+v", got)
	}
	if _, err := os.Stat(got.Unit); !os.IsNotExist(err) {
		t.Fatalf("--dry-run wrote the unit: %v", err)
	}
	p := filepath.Join(t.TempDir(), "synapse-hub.service")
	os.WriteFile(p, []byte(got.Content), 0o644)
	verifyUnit(t, p, "synapse-hub.service")

	if code, out, _ := runCmd("service", "install", "--dry-run", "--launchd", "--command", bin); code != 0 ||
		!strings.Contains(out, "<string>dev.synapse.hub</string>") || !strings.Contains(out, "<key>KeepAlive</key>") || !strings.Contains(out, "launchctl bootstrap gui/") {
		t.Fatalf("launchd: %s", out)
	}
}

// Without a user bus install writes the unit and says what to run; status
// says it is installed, not running, and where the journal and log are;
// uninstall removes it; a unit that is not Synapse's is left alone
// (issue 21 item 5).
func TestService_InstallWithoutAUserBusSaysWhatToRun_Issue21_5(t *testing.T) {
	bin := testbin.Synapse(t)
	cfg, state := serviceHome(t)
	unit := filepath.Join(cfg, "systemd", "user", "synapse-hub.service")
	code, out, e := runCmd("service", "install", "--launchd=false", "--command", bin)
	if code != 0 || !strings.Contains(out, "Not started") || !strings.Contains(out, "systemctl --user daemon-reload && systemctl --user enable --now synapse-hub.service") {
		t.Fatalf("install: %d\n%s\n%s", code, out, e)
	}
	if !strings.Contains(readFile(t, unit), "ExecStart=\""+bin+"\" hub --db") {
		t.Fatal("the unit was not written")
	}
	code, out, _ = runCmd("service", "status", "--launchd=false", "--json")
	var st struct {
		Installed bool
		Running   string
		Journal   string
		Log       string
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || !st.Installed || st.Running == "yes" ||
		st.Journal != filepath.Join(state, "synapse", "hub.db") || st.Log != "journalctl --user -u synapse-hub.service" {
		t.Fatalf("status: %d %v %s", code, err, out)
	}
	if code, out, _ := runCmd("service", "uninstall", "--launchd=false"); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("uninstall: %s", out)
	}
	if _, err := os.Stat(unit); !os.IsNotExist(err) {
		t.Fatal("uninstall left the unit")
	}
	os.WriteFile(unit, []byte("[Service]\nExecStart=/bin/true\n"), 0o644)
	if code, _, e := runCmd("service", "install", "--launchd=false", "--command", bin); code != exitRefused || !strings.Contains(e, "not Synapse's") {
		t.Fatalf("a foreign unit: %d %s", code, e)
	}
	if readFile(t, unit) != "[Service]\nExecStart=/bin/true\n" {
		t.Fatal("a foreign unit was changed")
	}
	if code, _, _ := runCmd("service", "restart"); code != exitUsage {
		t.Fatalf("an unknown verb: %d", code)
	}
}
