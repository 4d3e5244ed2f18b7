package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
)

type waitResult struct {
	code     int
	out, err string
}

// inboxWaitJSON is inbox --wait --json's output.
type inboxWaitJSON struct {
	Messages []struct {
		Seq      int64  `json:"seq"`
		Sender   string `json:"sender"`
		Target   string `json:"target"`
		Payload  string `json:"payload"`
		Priority bool   `json:"priority"`
	} `json:"messages"`
	WokenBy      string `json:"woken_by"`
	AckedThrough int64  `json:"acked_through"`
}

func decodeWait(t *testing.T, r waitResult) inboxWaitJSON {
	t.Helper()
	var got inboxWaitJSON
	if err := json.Unmarshal([]byte(r.out), &got); err != nil {
		t.Fatalf("inbox --wait --json: exit %d %v\n%s\n%s", r.code, err, r.out, r.err)
	}
	return got
}

// startInboxWait runs inbox --wait in the background and returns once its
// sidecar is online.
func startInboxWait(t *testing.T, uri, name string, args ...string) <-chan waitResult {
	t.Helper()
	done := make(chan waitResult, 1)
	go func() {
		code, out, e := runCmd(append([]string{"inbox", "--wait", "--json", "--uri", uri, "--name", name}, args...)...)
		done <- waitResult{code, out, e}
	}()
	watchHub(t, uri, paneSidecar(name)+" online", func(ctx context.Context, c *client.Client) (bool, error) {
		w, err := c.Who(ctx)
		return err == nil && slices.Contains(w.OnlineAgents, paneSidecar(name)), err
	})
	return done
}

// A message waiting after the agent's cursor returns inbox --wait at once;
// --ack moves the cursor, so the next --wait blocks (here: times out,
// exit 4) instead of returning it again (issue 21 item 2, INV-DG-3).
func TestInboxWait_ReturnsTheMailboxAfterTheCursor_Issue21_2(t *testing.T) {
	uri := journalHub(t)
	runCmd("send", "proj/bravo", "while you were out", "--uri", uri, "--name", "proj/alpha")
	code, out, e := runCmd("inbox", "--wait", "--json", "--uri", uri, "--name", "proj/bravo")
	got := decodeWait(t, waitResult{code, out, e})
	if code != 0 || got.WokenBy != "mailbox" || len(got.Messages) != 1 || got.Messages[0].Payload != "while you were out" {
		t.Fatalf("exit %d: %+v %s", code, got, e)
	}
	// Not acked: it is still there.
	if code, out, _ := runCmd("inbox", "--wait", "--uri", uri, "--name", "proj/bravo"); code != 0 || !strings.Contains(out, "while you were out") {
		t.Fatalf("without --ack the message must stay: exit %d %s", code, out)
	}
	if code, out, _ := runCmd("inbox", "--wait", "--ack", "--uri", uri, "--name", "proj/bravo"); code != 0 || !strings.Contains(out, "Acknowledged through") {
		t.Fatalf("--wait --ack: exit %d %s", code, out)
	}
	if code, out, e := runCmd("inbox", "--wait", "--timeout", "300ms", "--uri", uri, "--name", "proj/bravo"); code != exitTimeout || !strings.Contains(e, "no message for proj/bravo") {
		t.Fatalf("after the ack: exit %d %s %s", code, out, e)
	}
}

// With the agent itself online under its name (its MCP server, say),
// inbox --wait waits beside it as NAME-pane-rx, wakes on a message sent
// while it waits, and its --ack moves the agent's own cursor (issue 21
// item 2).
func TestInboxWait_WakesBesideTheOnlineAgentAndAcksItsCursor_Issue21_2(t *testing.T) {
	uri := journalHub(t)
	bravo := agent(t, uri, "proj/bravo")
	done := startInboxWait(t, uri, "proj/bravo", "--ack", "--timeout", "0")
	if code, _, e := runCmd("send", "proj/bravo", "are you there", "--uri", uri, "--name", "proj/alpha"); code != 0 {
		t.Fatalf("send: %s", e)
	}
	r := <-done
	got := decodeWait(t, r)
	if r.code != 0 || len(got.Messages) != 1 || got.Messages[0].Payload != "are you there" || got.AckedThrough != got.Messages[0].Seq {
		t.Fatalf("exit %d: %+v %s", r.code, got, r.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if left, err := bravo.Inbox(ctx); err != nil || len(left) != 0 {
		t.Fatalf("the sidecar's ack did not move proj/bravo's cursor: %v %v", left, err)
	}
}

// --directed-only: a chat to all does not wake the waiter, one to it does
// (issue 21 item 2).
func TestInboxWait_DirectedOnlyIgnoresChatsToAll_Issue21_2(t *testing.T) {
	uri := journalHub(t)
	done := startInboxWait(t, uri, "proj/bravo", "--directed-only", "--timeout", "0")
	runCmd("send", "all", "lunch", "--uri", uri, "--name", "proj/alpha")
	runCmd("send", "proj/bravo", "for you", "--uri", uri, "--name", "proj/alpha")
	r := <-done
	got := decodeWait(t, r)
	for _, m := range got.Messages {
		if m.Target == "all" {
			t.Fatalf("a chat to all woke a --directed-only waiter: %+v", got)
		}
	}
	if r.code != 0 || len(got.Messages) == 0 || got.Messages[len(got.Messages)-1].Payload != "for you" {
		t.Fatalf("exit %d: %+v %s", r.code, got, r.err)
	}
}

func TestInboxWait_WakeRule_Issue21_2(t *testing.T) {
	frame := func(raw string) client.Frame {
		var fr client.Frame
		if err := json.Unmarshal([]byte(raw), &fr); err != nil {
			t.Fatal(err)
		}
		return fr
	}
	for _, c := range []struct {
		raw                string
		directedOnly, want bool
	}{
		{`{"type":"chat","sender":"p/a","target":"p/b","payload":"x"}`, true, true},
		{`{"type":"chat","sender":"p/a","target":"all","payload":"x"}`, false, true},
		{`{"type":"chat","sender":"p/a","target":"all","payload":"x"}`, true, false},
		{`{"type":"chat","sender":"p/a","target":"p/*","payload":"x"}`, true, false},
		{`{"type":"chat","sender":"p/b","target":"p/c","payload":"x"}`, false, false},    // its own send
		{`{"type":"chat","sender":"p/b-rx","target":"p/c","payload":"x"}`, false, false}, // its sidecar's
		{`{"type":"claim_granted","sender":"p/a","target":"p/b"}`, false, false},
	} {
		if got := wakeFrame(frame(c.raw), "p/b", c.directedOnly); got != c.want {
			t.Errorf("%s directed-only=%v: %v, want %v", c.raw, c.directedOnly, got, c.want)
		}
	}
}

// The exit codes a Stop hook reads: 4 for a timeout, 3 for a hub it cannot
// reach, 2 for bad flags, which change nothing (issue 21 item 2).
func TestInboxWait_ExitCodes_Issue21_2(t *testing.T) {
	uri := journalHub(t)
	if code, _, _ := runCmd("inbox", "--wait", "--timeout", "200ms", "--uri", uri, "--name", "proj/bravo"); code != exitTimeout {
		t.Fatalf("timeout: exit %d, want %d", code, exitTimeout)
	}
	if code, _, e := runCmd("inbox", "--wait", "--uri", "ws://127.0.0.1:1", "--connect-timeout", "1s", "--name", "proj/bravo"); code != exitUnreachable {
		t.Fatalf("no hub: exit %d, want %d: %s", code, exitUnreachable, e)
	}
	for _, args := range [][]string{{"--wait", "--timeout", "-1s"}, {"--directed-only"}, {"--timeout", "1s"}} {
		if code, _, e := runCmd(append([]string{"inbox", "--uri", uri, "--name", "proj/bravo"}, args...)...); code != exitUsage {
			t.Fatalf("%v: exit %d, want 2: %s", args, code, e)
		}
	}
}
