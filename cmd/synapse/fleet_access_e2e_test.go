package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster/clustertest"
)

// Two `synapse hub --etcd --token` processes (issue 23 on a fleet, as
// cmd/synapse wires it): a credential issued through syn-a opens a socket
// on syn-b at once; revoked through syn-b, it closes that socket; a name
// pinned through syn-a refuses another key on syn-b with 4013, and still
// does after both processes restart.
func TestFleet_Processes_CredentialsAndPinsAreTheFleets_Issue23(t *testing.T) {
	bin := synapseBinary(t)
	x := clustertest.Start(t, false)
	dir := t.TempDir()
	procs := map[string]*fedProc{}
	for _, id := range []string{"syn-a", "syn-b"} {
		p := &fedProc{id: id, db: filepath.Join(dir, id+".db"), port: freePort(t)}
		p.args = []string{"--etcd", x.Endpoint, "--cluster-token", "fleet", "--etcd-lease-ttl", "2s", "--token", "op-secret"}
		p.startNoDB(t, bin)
		procs[id] = p
	}
	a, b := procs["syn-a"], procs["syn-b"]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dial := func(uri, name, tok string, key ed25519.PrivateKey) (*client.Client, error) {
		c, err := client.Dial(ctx, client.Options{URI: uri, Name: name, Token: tok, NoReconnect: true, IdentityKey: key, NoIdentity: key == nil})
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	op, err := dial(a.uri(), "ops/a", "op-secret", nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := op.Admin(ctx, "token_issue", map[string]any{"name_pattern": "proj/*"}, "token_issued")
	if err != nil {
		t.Fatal(err)
	}
	tok := f.String("token")
	var cred struct {
		ID string `json:"id"`
	}
	_ = f.DecodeField("credential", &cred)
	agent, err := dial(b.uri(), "proj/alpha", tok, nil)
	if err != nil {
		t.Fatalf("the credential issued through syn-a, on syn-b: %v", err)
	}
	opB, err := dial(b.uri(), "ops/b", "op-secret", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := opB.Admin(ctx, "token_revoke", map[string]any{"credential_id": cred.ID}, "token_revoked"); err != nil || r.Int("sockets_closed") != 1 {
		t.Fatalf("revoke through syn-b: %v %v", r.Int("sockets_closed"), err)
	}
	for agent.DownReason() == nil && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := dial(a.uri(), "proj/alpha", tok, nil); !isClose(err, 4010) {
		t.Fatalf("the revoked credential on syn-a: %v; want 4010", err)
	}

	k1, k2 := ed25519.NewKeyFromSeed(make([]byte, 32)), ed25519.NewKeyFromSeed(append(make([]byte, 31), 7))
	c1, err := dial(a.uri(), "proj/pinned", "op-secret", k1)
	if err != nil {
		t.Fatal(err)
	}
	c1.Close()
	refused := func(uri string) {
		t.Helper()
		if _, err := dial(uri, "proj/pinned", "op-secret", k2); !isClose(err, 4013) {
			t.Fatalf("another key on %s: %v; want 4013", uri, err)
		}
	}
	refused(b.uri())
	a.stop()
	b.stop()
	a.startNoDB(t, bin)
	b.startNoDB(t, bin)
	refused(b.uri())
	refused(a.uri())
	if _, err := dial(b.uri(), "proj/pinned", "op-secret", k1); err != nil {
		t.Fatalf("the pinned key after the restart: %v", err)
	}
}

func isClose(err error, code int) bool {
	var r *client.RejectedError
	return errors.As(err, &r) && r.Code == code
}
