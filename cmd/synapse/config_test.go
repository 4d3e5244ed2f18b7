package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

// goldenClock is the hub clock of the golden tests: leases and times print
// the same on every run.
const goldenClock = 1782648000.0 // 2026-06-28T12:00:00Z

// isolate keeps the user's environment and config file out of a test.
func isolate(t *testing.T) {
	t.Setenv("SYNAPSE_CONFIG", filepath.Join(t.TempDir(), "none.json"))
	for _, k := range []string{"SYNAPSE_URI", "SYNAPSE_TOKEN", "SYNAPSE_NAME", "SYNAPSE_LEASES", "SYNAPSE_CA"} {
		t.Setenv(k, "")
	}
}

// startCLIHub serves an in-process hub with a fixed clock and returns its
// URI.
func startCLIHub(t *testing.T, cfg hub.Config) string {
	t.Helper()
	isolate(t)
	if cfg.Clock == nil {
		cfg.Clock = func() float64 { return goldenClock }
	}
	if cfg.HubID == "" {
		cfg.HubID = "syn-golden00"
	}
	return hubtest.Start(t, cfg)
}

// agent holds a name online for the test's length, as a running agent does.
func agent(t *testing.T, uri, name string) *client.Client { return hubtest.Agent(t, uri, name) }

// waitOffline waits until name is no longer online: a command's socket is
// unbound asynchronously after it closes, so the next command may still
// see it for a moment.
func waitOffline(t *testing.T, uri, name string) {
	t.Helper()
	watchHub(t, uri, name+" offline", func(ctx context.Context, c *client.Client) (bool, error) {
		w, err := c.Who(ctx)
		return err == nil && !slices.Contains(w.OnlineAgents, name), err
	})
}

// watchHub asks the hub at uri, as test/watcher, until done says so (for
// 20 s at the most); an error from done ends the test.
func watchHub(t *testing.T, uri, what string, done func(context.Context, *client.Client) (bool, error)) {
	t.Helper()
	watcher := agent(t, uri, "test/watcher")
	defer watcher.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := done(ctx, watcher)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConfig_FlagThenEnvThenFileThenDefault(t *testing.T) {
	isolate(t)
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(`{"uri":"ws://file:1","token":"file-token","name":"file/name"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SYNAPSE_CONFIG", path)
	t.Setenv("SYNAPSE_TOKEN", "env-token")
	f := clientFlags{name: "flag/name"}
	if err := f.resolve(); err != nil {
		t.Fatal(err)
	}
	if f.name != "flag/name" || f.token != "env-token" || f.uri != "ws://file:1" {
		t.Fatalf("resolved %+v", f)
	}
	os.Remove(path)
	f = clientFlags{}
	if err := f.resolve(); err != nil {
		t.Fatal(err)
	}
	if f.uri != client.DefaultURI || f.name == "" || f.token != "env-token" {
		t.Fatalf("defaults %+v", f)
	}
	os.WriteFile(path, []byte(`{not json`), 0o600)
	if code, _, errOut := runCmd("who", "--uri", "ws://127.0.0.1:1"); code != exitUsage || !strings.Contains(errOut, path) {
		t.Fatalf("a broken config file: exit %d %s", code, errOut)
	}
}

func TestClientCommands_HelpExplainsFlagsAndExitCodes(t *testing.T) {
	isolate(t)
	for _, cmd := range []string{"claim", "renew", "release", "handoff", "update", "checkpoint", "wait", "lock", "send", "who", "status", "state", "board"} {
		code, _, errOut := runCmd(cmd, "--help")
		if code != 0 {
			t.Errorf("%s --help: exit %d", cmd, code)
		}
		for _, want := range []string{"Usage: synapse " + cmd, "SYNAPSE_URI", "SYNAPSE_CONFIG", "Exit codes", "-json"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s --help does not mention %q", cmd, want)
			}
		}
	}
	if code, _, errOut := runCmd("task", "--help"); code != 0 || !strings.Contains(errOut, "declare") {
		t.Errorf("task --help: %d %s", code, errOut)
	}
}

func TestClientCommands_UnreachableHubExitsThree(t *testing.T) {
	isolate(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	uri := "ws://" + ln.Addr().String()
	ln.Close()
	for _, args := range [][]string{{"claim", "T1"}, {"who"}, {"status"}, {"send", "all", "hi"}, {"wait", "T1"}} {
		code, _, errOut := runCmd(append(args, "--uri", uri)...)
		if code != exitUnreachable || !strings.Contains(errOut, "Is `synapse hub` running? Set --uri or SYNAPSE_URI") {
			t.Errorf("%v: exit %d, %s", args, code, errOut)
		}
	}
}

func TestClientCommands_UsageErrorsExitTwo(t *testing.T) {
	isolate(t)
	for _, args := range [][]string{{"claim"}, {"claim", "a", "b"}, {"claim", "--nope"}, {"handoff", "T1"}, {"lock", "T1"}, {"send", "all"}, {"task", "declare", "B1"}, {"task", "frob"}, {"who", "extra"}} {
		if code, _, errOut := runCmd(args...); code != exitUsage {
			t.Errorf("%v: exit %d, %s", args, code, errOut)
		}
	}
}

// A refused connection says what to do for its cause: a credential that
// may not bind the name points at its names, a revoked one lets the hub's
// sentence speak, a missing or wrong token asks for the token (issue 23).
func TestFailure_HintFitsTheRefusal_Issue23(t *testing.T) {
	f := &clientFlags{uri: "ws://127.0.0.1:1"}
	for _, c := range []struct {
		msg, want, not string
	}{
		{"Token is not authorised for agent 'alpha/ann'.", "may bind only the names its credential names", "Pass the hub's token"},
		{"Credential 'ab12' was revoked; ask the operator for a new one (synapse token issue).", "was revoked", "Pass the hub's token"},
		{"Invalid authentication token.", "Pass the hub's token", "credential names"},
	} {
		var stderr strings.Builder
		code := f.failure(&stderr, "claim", &client.RejectedError{Code: 4010, Reason: "auth denied", Message: c.msg})
		if code != exitRefused || !strings.Contains(stderr.String(), c.want) || strings.Contains(stderr.String(), c.not) {
			t.Errorf("%q: exit %d, %q; want exit %d with %q and without %q", c.msg, code, stderr.String(), exitRefused, c.want, c.not)
		}
	}
}
