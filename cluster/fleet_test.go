package cluster_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster"
	"github.com/synapse-hub/synapse/cluster/clustertest"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/hub"
)

// fleetHub is one in-process hub on etcd.
type fleetHub struct {
	id, uri string
	m       *cluster.Member
	owners  *cluster.Owners
	h       *hub.Hub
	srv     *http.Server
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startFleetHub(t *testing.T, endpoint, id string, ttl time.Duration) *fleetHub {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fh := &fleetHub{id: id, uri: "ws://" + ln.Addr().String()}
	fh.m, err = cluster.Join(context.Background(), cluster.Config{Endpoints: []string{endpoint}, HubID: id, Advertise: fh.uri,
		LeaseTTL: ttl, Logger: quiet(), MaxFences: 100, Fence: func(b time.Duration) { fh.owners.Fence(b) }})
	if err != nil {
		t.Fatal(err)
	}
	fh.owners = cluster.NewOwners(fh.m)
	fh.h, err = hub.New(hub.Config{HubID: id, Store: fh.owners, Logger: quiet(),
		Federation: federation.Config{Authority: fh.owners, PeerURI: fh.owners.PeerURI, SharedPeerToken: "fleet-secret", ForwardTimeout: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	fh.owners.SetHost(fh.h)
	if err := fh.owners.Start(); err != nil {
		t.Fatal(err)
	}
	fh.srv = &http.Server{Handler: fh.h.Handler()}
	go fh.srv.Serve(ln)
	t.Cleanup(fh.stop)
	return fh
}

// stop closes the hub cleanly: it leaves the fleet (revoking its lease).
func (fh *fleetHub) stop() {
	if fh.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fh.owners.Close()
	fh.m.Leave()
	fh.h.Close(ctx)
	fh.srv.Close()
	fh.srv = nil
}

// crash stops the hub without revoking its lease: the fleet learns of it
// only when etcd expires the lease.
func (fh *fleetHub) crash() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fh.m.Abandon()
	fh.owners.Close()
	fh.srv.Close()
	fh.h.Close(ctx)
	fh.srv = nil
}

func dial(t *testing.T, uri, name string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URI: uri, Name: name, NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func refusedCode(err error) string {
	var r *client.Refused
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

// claimRetrying claims, retrying while the namespace is moving.
func claimRetrying(ctx context.Context, c *client.Client, r client.ClaimRequest) (*client.Claim, error) {
	for {
		cl, err := c.Claim(ctx, r)
		if refusedCode(err) != "NAMESPACE_MOVING" || ctx.Err() != nil {
			return cl, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A namespace is taken by the first hub that serves it; the other hub
// forwards to it; when the owner dies, the next request elsewhere takes the
// namespace over within two lease TTLs, warmed from etcd: every
// acknowledged claim is still there and epochs keep rising (rules 1, 2,
// INV-EF-1 across owners).
func TestFleet_FirstUseOwnsFailoverKeepsAcknowledgedClaims_Rules1_2(t *testing.T) {
	x := clustertest.Start(t, true)
	ttl := 2 * time.Second
	a := startFleetHub(t, x.Endpoint, "syn-a", ttl)
	b := startFleetHub(t, x.Endpoint, "syn-b", ttl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	alice := dial(t, b.uri, "proj/alice")
	first, err := claimRetrying(ctx, alice, client.ClaimRequest{TaskID: "T1", Paths: []string{"src/core"}})
	if err != nil || first.HubID != "syn-b" {
		t.Fatalf("first use on syn-b: %+v %v", first, err)
	}
	bob := dial(t, a.uri, "proj/bob")
	_, err = claimRetrying(ctx, bob, client.ClaimRequest{TaskID: "T2", Paths: []string{"src/core/x.go"}})
	if refusedCode(err) != "SCOPE_CONFLICT" {
		t.Fatalf("overlap via syn-a: %v; want SCOPE_CONFLICT decided by the owner syn-b", err)
	}
	second, err := claimRetrying(ctx, bob, client.ClaimRequest{TaskID: "T3", Paths: []string{"docs"}})
	if err != nil || second.HubID != "syn-b" {
		t.Fatalf("forwarded grant: %+v %v", second, err)
	}

	killed := time.Now()
	b.crash()
	var took time.Duration
	for {
		_, err = bob.Claim(ctx, client.ClaimRequest{TaskID: "T4", Paths: []string{"src/core/y.go"}})
		if c := refusedCode(err); c == "SCOPE_CONFLICT" {
			took = time.Since(killed)
			break
		} else if err == nil {
			t.Fatal("after failover a claim overlapping an acknowledged one was granted")
		} else if c != "NAMESPACE_MOVING" && c != "OWNER_UNREACHABLE" {
			t.Fatalf("during failover: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("the namespace was not served again")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if took > 2*ttl+2*time.Second {
		t.Fatalf("served again %v after the kill; want within about 2 TTL (%v)", took, 2*ttl)
	}
	t.Logf("failover: first decision by the new owner %v after the kill (TTL %v)", took, ttl)
	third, err := claimRetrying(ctx, bob, client.ClaimRequest{TaskID: "T5", Paths: []string{"other"}})
	if err != nil || third.HubID != "syn-a" || third.Epoch <= second.Epoch {
		t.Fatalf("grant by the new owner: %+v %v; want syn-a with an epoch above %d", third, err, second.Epoch)
	}
}
