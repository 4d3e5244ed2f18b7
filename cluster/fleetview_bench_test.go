package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster/clustertest"
)

// BenchmarkFleetRead10kClaims3Hubs measures a fleet-wide state_request
// (issue 22's cost): three hubs on one etcd (embedded, in this process,
// on the same cores), 10,000 live claims in 30 namespaces spread over the
// three owners, and a client asking each hub in turn over a real socket.
// Each answer is every claim of the fleet, range-read from etcd at one
// revision; no owner's sequencer is entered (the answering hub's own is
// asked only for its resource offers). It reports the round trip's
// p50/p99 in ms (the client's decoding of 10,000 claims included), the
// hub's etcd read alone, and the claims each answer held.
func BenchmarkFleetRead10kClaims3Hubs(b *testing.B) {
	x := clustertest.Start(b, true)
	hubs := []*fleetHub{startFleetHubB(b, x.Endpoint, "syn-a"), startFleetHubB(b, x.Endpoint, "syn-b"), startFleetHubB(b, x.Endpoint, "syn-c")}
	ctx := context.Background()
	const claims, owners = 10_000, 30
	var wg sync.WaitGroup
	for i := range owners {
		c, err := client.Dial(ctx, client.Options{URI: hubs[i%3].uri, Name: fmt.Sprintf("ns%d/agent", i), NoReconnect: true})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := i; k < claims; k += owners {
				task := fmt.Sprintf("t%05d", k)
				if _, err := c.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{task}, TTL: time.Hour}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	readers := make([]*client.Client, 3)
	for i, h := range hubs {
		c, err := client.Dial(ctx, client.Options{URI: h.uri, Name: fmt.Sprintf("viewer/%d", i), NoReconnect: true})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		readers[i] = c
	}
	var lats, reads []time.Duration
	n := 0
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		st, err := readers[i%3].State(ctx)
		if err != nil {
			b.Fatal(err)
		}
		lats = append(lats, time.Since(t0))
		n = len(st.ActiveClaims)
		t0 = time.Now() // the etcd read alone, as the hub makes it
		if _, err := hubs[i%3].owners.Snapshot(ctx); err != nil {
			b.Fatal(err)
		}
		reads = append(reads, time.Since(t0))
	}
	b.StopTimer()
	if n != claims {
		b.Fatalf("an answer held %d claims; want %d", n, claims)
	}
	q := func(l []time.Duration, f float64) float64 {
		slices.Sort(l)
		return float64(l[min(len(l)-1, int(f*float64(len(l))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(lats, 0.5), "state-p50-ms")
	b.ReportMetric(q(lats, 0.99), "state-p99-ms")
	b.ReportMetric(q(reads, 0.5), "etcd-read-p50-ms")
	b.ReportMetric(q(reads, 0.99), "etcd-read-p99-ms")
	b.ReportMetric(float64(n), "claims")
}
