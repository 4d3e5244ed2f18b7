package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/journal"
)

func journalHub(t *testing.T) string {
	t.Helper()
	st, err := journal.Open(filepath.Join(t.TempDir(), "hub.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return startCLIHub(t, hub.Config{Journal: st})
}

// A message to an offline agent waits in its mailbox; inbox shows it,
// --ack acknowledges it, and it is not shown again (INV-DG-3).
func TestInbox_ShowsThenAcksTheMailbox_INV_DG_3(t *testing.T) {
	uri := journalHub(t)
	if code, _, e := runCmd("send", "proj/bravo", "review", "T1", "please", "--uri", uri, "--name", "proj/alpha"); code != exitRefused || !strings.Contains(e, "nobody online") {
		t.Fatalf("send to an offline agent: exit %d %s", code, e)
	}
	code, out, e := runCmd("inbox", "--json", "--uri", uri, "--name", "proj/bravo")
	var got struct {
		Messages []struct {
			Seq     int64  `json:"seq"`
			Sender  string `json:"sender"`
			Payload string `json:"payload"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 || len(got.Messages) != 1 ||
		got.Messages[0].Payload != "review T1 please" || got.Messages[0].Sender != "proj/alpha" || got.Messages[0].Seq <= 0 {
		t.Fatalf("inbox --json: exit %d %v %s %s", code, err, out, e)
	}
	if code, out, e := runCmd("inbox", "--ack", "--uri", uri, "--name", "proj/bravo"); code != 0 || !strings.Contains(out, "review T1 please") || !strings.Contains(out, "Acknowledged through") {
		t.Fatalf("inbox --ack: exit %d %s %s", code, out, e)
	}
	if code, out, _ := runCmd("inbox", "--uri", uri, "--name", "proj/bravo"); code != 0 || !strings.Contains(out, "No message is waiting") {
		t.Fatalf("inbox after the ack: exit %d %s", code, out)
	}
}

func TestListen_PrintsTheMailboxFirst(t *testing.T) {
	uri := journalHub(t)
	runCmd("send", "proj/bravo", "while you were out", "--uri", uri, "--name", "proj/alpha")
	code, out, e := runCmd("listen", "--count", "1", "--for", "20s", "--types", "chat", "--uri", uri, "--name", "proj/bravo")
	if code != 0 || !strings.Contains(out, "chat (replayed) proj/alpha → proj/bravo: while you were out") {
		t.Fatalf("listen: exit %d\n%s\n%s", code, out, e)
	}
}

func TestCompletion_ListsTheCommands(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, _ := runCmd("completion", shell)
		if code != 0 || !strings.Contains(out, "claim") || !strings.Contains(out, "inbox") {
			t.Errorf("completion %s: exit %d %q", shell, code, out)
		}
	}
	if code, _, _ := runCmd("completion", "tcsh"); code != exitUsage {
		t.Errorf("an unknown shell must be a usage error, got %d", code)
	}
}
