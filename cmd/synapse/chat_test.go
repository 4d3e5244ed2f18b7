package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/hub"
)

func TestSend_DeliveredAndNotDelivered(t *testing.T) {
	uri := startCLIHub(t, hub.Config{})
	bravo := agent(t, uri, "proj/bravo")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inbox := bravo.Subscribe(ctx, func(f client.Frame) bool { return f.Type == "chat" })
	code, out, e := runCmd("send", "proj/bravo", "please", "review", "T1", "--uri", uri, "--name", "proj/alpha")
	if code != 0 || out != "Sent to proj/bravo (msg 1): delivered to proj/bravo.\n" {
		t.Fatalf("exit %d %q %s", code, out, e)
	}
	if f := <-inbox; f.Sender != "proj/alpha" || f.Payload != "please review T1" {
		t.Fatalf("bravo got %s", f.Raw)
	}
	code, out, e = runCmd("send", "proj/delta", "hello?", "--json", "--uri", uri, "--name", "proj/alpha")
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != exitRefused || got["delivered"] != false || !strings.Contains(e, "nobody online") {
		t.Fatalf("exit %d %v %s %s", code, err, out, e)
	}
	if code, out, _ := runCmd("send", "all", "standup", "--uri", uri, "--name", "proj/alpha"); code != 0 || out != "Sent to all (msg 3).\n" {
		t.Fatalf("broadcast: %d %q", code, out)
	}
}
