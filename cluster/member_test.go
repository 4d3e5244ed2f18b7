package cluster

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/cluster/clustertest"
)

// quiet is the tests' logger: silent, or warnings and worse on stderr
// with SYNAPSE_TEST_LOG=1 (to see why a fleet test failed).
func quiet() *slog.Logger {
	if os.Getenv("SYNAPSE_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// A member renews its lease at T/3: its registration outlives several
// TTLs, and it serves throughout (rule 1).
func TestMember_RenewsAndServes_Rule1(t *testing.T) {
	x := clustertest.Start(t, true)
	m, err := Join(context.Background(), Config{Endpoints: []string{x.Endpoint}, HubID: "syn-a", Advertise: "ws://127.0.0.1:1", LeaseTTL: 2 * time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Leave()
	time.Sleep(5 * time.Second)
	if !m.Serving() {
		t.Fatal("not serving after 2.5 TTLs of renewals")
	}
	r, err := m.Client().Get(context.Background(), m.key("hubs", "syn-a"))
	if err != nil || len(r.Kvs) != 1 || r.Kvs[0].Lease != int64(m.Lease()) {
		t.Fatalf("registration %v %v", r, err)
	}
}

// With etcd gone, the member fences itself at 2T/3: it stops serving
// before its local deadline, the Fence callback runs while it no longer
// serves and before the lease is revoked, and it never reports serving at
// or after deadline − eps (rules 3, 4). When etcd is back it registers
// again under a new lease.
func TestMember_FencesBeforeTheLeaseCanExpire_Rules3_4(t *testing.T) {
	x := clustertest.Start(t, true)
	var mu sync.Mutex
	var fencedAt time.Time
	var servingDuringFence bool
	var m *Member
	fenced := make(chan struct{}, 1)
	var err error
	m, err = Join(context.Background(), Config{Endpoints: []string{x.Endpoint}, HubID: "syn-a", Advertise: "ws://127.0.0.1:1",
		LeaseTTL: 3 * time.Second, Logger: quiet(), MaxFences: 10,
		Fence: func(budget time.Duration) {
			mu.Lock()
			fencedAt, servingDuringFence = time.Now(), m.Serving()
			mu.Unlock()
			select {
			case fenced <- struct{}{}:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Leave()
	firstLease := m.Lease()
	// Watch Serving against the deadline while etcd is down.
	stop := make(chan struct{})
	violations := make(chan time.Duration, 1)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			dl := m.Deadline()
			if m.Serving() && !time.Now().Before(dl.Add(-m.epsilon())) {
				select {
				case violations <- time.Since(dl):
				default:
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	x.Close()
	select {
	case <-fenced:
	case <-time.After(10 * time.Second):
		t.Fatal("no fence within 10 s of losing etcd")
	}
	close(stop)
	mu.Lock()
	defer mu.Unlock()
	if servingDuringFence {
		t.Fatal("the hub still served while it fenced")
	}
	if dl := m.Deadline(); !fencedAt.Before(dl) {
		t.Fatalf("fenced at %v, after the local deadline %v", fencedAt, dl)
	}
	select {
	case d := <-violations:
		t.Fatalf("served %v past deadline − eps", d)
	default:
	}
	x.Restart(t)
	deadline := time.Now().Add(15 * time.Second)
	for !m.Serving() {
		if time.Now().After(deadline) {
			t.Fatal("did not rejoin after etcd came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if m.Lease() == firstLease {
		t.Fatal("a fenced member resumed its old lease")
	}
}

// Consecutive fences with no applied work between them escalate to a
// process exit; applied work resets the count (rule 9).
func TestMember_FenceBudgetEscalatesToExit_Rule9(t *testing.T) {
	x := clustertest.Start(t, true)
	exited := make(chan string, 1)
	m, err := Join(context.Background(), Config{Endpoints: []string{x.Endpoint}, HubID: "syn-a", Advertise: "ws://127.0.0.1:1",
		LeaseTTL: 2 * time.Second, Logger: quiet(), MaxFences: 1, Exit: func(r string) { exited <- r }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Abandon()
	m.Applied()
	x.Close()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("a spent fence budget did not exit")
	}
}
