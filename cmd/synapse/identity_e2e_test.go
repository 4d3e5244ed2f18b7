package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/internal/testbin"
)

// Issue23 (items 2, 8): the real binary keeps a name's pin across a
// SIGKILL and restart: the other key is refused 4013 with the recovery
// command, the pinned key is admitted; 'synapse identity list --db' shows
// the pin and 'synapse identity reclaim NAME --db' on the stopped hub's
// journal frees it for the new key.
func TestHubProcess_PinMismatchAfterRestart_ReclaimOffline_Issue23(t *testing.T) {
	bin := testbin.Synapse(t)
	isolate(t)
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	db := filepath.Join(t.TempDir(), "hub.db")
	port := freePort(t)
	uri := "ws://127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, keyA, _ := ed25519.GenerateKey(nil)
	_, keyB, _ := ed25519.GenerateKey(nil)
	dial := func(key ed25519.PrivateKey) error {
		c, err := client.Dial(ctx, client.Options{URI: uri, Name: "proj/alpha", IdentityKey: key, NoReconnect: true})
		if err == nil {
			c.Close()
		}
		return err
	}

	hub1, _ := startHubProcess(t, bin, db, port)
	if err := dial(keyA); err != nil {
		t.Fatal(err)
	}
	hub1.Process.Signal(syscall.SIGKILL)
	hub1.Wait()

	hub2, _ := startHubProcess(t, bin, db, port)
	err := dial(keyB)
	var rej *client.RejectedError
	if !errors.As(err, &rej) || rej.Code != 4013 || !strings.Contains(rej.Message, "synapse identity reclaim proj/alpha") {
		t.Fatalf("after SIGKILL and restart another key got %v; want close 4013 naming the reclaim", err)
	}
	// A name's pinned key: a reconnect after a restart is admitted at once.
	if err := dial(keyA); err != nil {
		t.Fatalf("the pinned key after the restart: %v", err)
	}
	hub2.Process.Signal(syscall.SIGTERM)
	hub2.Wait()

	run := func(args ...string) (int, string) { return runSynapse(t, args...) }
	if code, out := run("identity", "list", "--db", db); code != 0 || !strings.Contains(out, "proj/alpha") {
		t.Fatalf("identity list --db: %d %s", code, out)
	}
	if code, out := run("identity", "reclaim", "proj/alpha", "--db", db, "--expected-key-id", "machine-0000000000000000"); code != 1 || !strings.Contains(out, "nothing changed") {
		t.Fatalf("a reclaim with the wrong key id: %d %s", code, out)
	}
	if code, out := run("identity", "reclaim", "proj/alpha", "--db", db); code != 0 || !strings.Contains(out, "reclaimed") {
		t.Fatalf("identity reclaim --db: %d %s", code, out)
	}
	hub3, _ := startHubProcess(t, bin, db, port)
	defer func() { hub3.Process.Signal(syscall.SIGTERM); hub3.Wait() }()
	if err := dial(keyB); err != nil {
		t.Fatalf("the new key after the reclaim: %v", err)
	}
	if err := dial(keyA); !errors.As(err, &rej) || rej.Code != 4013 {
		t.Fatalf("the old key after the new one pinned the name: %v", err)
	}
}
