package client_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
)

// Issue23 (item 2): the SDK provisions this machine's key on first use
// (mode 0600, where the reference's clients keep theirs), signs its
// registration by default so the hub pins the name to it, and reuses the
// same key next time; another key is then refused with IdentityRefused
// and the hub's recovery command, and does not retry.
func TestIdentity_SDKSignsWithMachineKeyByDefault_Issue23(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	t.Setenv(client.NoIdentityEnv, "")
	pins := &hub.MemoryPins{}
	uri := hubtest.Start(t, hub.Config{IdentityPins: pins})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URI: uri, Name: "proj/alpha", NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	path, _ := client.MachineKeyPath()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("machine key %s: %v %v", path, fi, err)
	}
	key, err := client.LoadOrCreateIdentityKey(path)
	if err != nil {
		t.Fatal(err)
	}
	pin, ok, _ := pins.LookupIdentityPin("proj/alpha")
	if !ok || pin.PublicKey != gate.EncodeIdentityPublicKey(key.Public().(ed25519.PublicKey)) {
		t.Fatalf("the name is not pinned to the machine key: %+v %v", pin, ok)
	}
	again, err := client.Dial(ctx, client.Options{URI: uri, Name: "proj/alpha", NoReconnect: true})
	if err != nil {
		t.Fatalf("the machine key's own name was refused: %v", err)
	}
	again.Close()

	_, other, _ := ed25519.GenerateKey(nil)
	_, err = client.Dial(ctx, client.Options{URI: uri, Name: "proj/alpha", IdentityKey: other, NoReconnect: true})
	var rej *client.RejectedError
	if !errors.As(err, &rej) || !rej.IdentityRefused() || !strings.Contains(rej.Message, "synapse identity reclaim proj/alpha") {
		t.Fatalf("another key: %v", err)
	}
	// Unsigned (NoIdentity) is refused too for a pinned name, and binds
	// a name never pinned, without pinning it.
	if _, err := client.Dial(ctx, client.Options{URI: uri, Name: "proj/alpha", NoIdentity: true, NoReconnect: true}); !errors.As(err, &rej) || !rej.IdentityRefused() {
		t.Fatalf("unsigned on a pinned name: %v", err)
	}
	t.Setenv(client.NoIdentityEnv, "1")
	u, err := client.Dial(ctx, client.Options{URI: uri, Name: "proj/bravo", NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	u.Close()
	if _, ok, _ := pins.LookupIdentityPin("proj/bravo"); ok {
		t.Fatal("SYNAPSE_NO_IDENTITY still signed")
	}
}

// Issue23: a key file other users may read is refused, never used.
func TestIdentity_KeyFileReadableByOthersRefused_Issue23(t *testing.T) {
	path := filepath.Join(t.TempDir(), "identity", "machine.pem")
	if _, err := client.LoadOrCreateIdentityKey(path); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644)
	if _, err := client.LoadOrCreateIdentityKey(path); !errors.Is(err, client.ErrIdentityKeyFile) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a world-readable key: %v", err)
	}
}
