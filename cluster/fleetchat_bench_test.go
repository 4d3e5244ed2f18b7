package cluster_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster/clustertest"
)

// BenchmarkFleetBroadcast measures a broadcast's reach across a fleet
// (issue 22's cost: every hub's agents within 20 ms p99): three hubs and
// an embedded etcd (fsync on) in this process on the same two cores; an
// agent on syn-a broadcasts, one at a time, and agents on syn-b and syn-c
// receive over real sockets. Each chat's latency runs from the sender's
// call to its arrival at the later of the two other hubs' agents: the
// client's write, the post to etcd (one quorum commit), the watch's
// delivery to every hub and each hub's write to its socket.
func BenchmarkFleetBroadcast(b *testing.B) {
	x := clustertest.Start(b, false)
	a := startFleetHubB(b, x.Endpoint, "syn-a")
	hb := startFleetHubB(b, x.Endpoint, "syn-b")
	hc := startFleetHubB(b, x.Endpoint, "syn-c")
	ctx := context.Background()
	dialB := func(uri, name string) *client.Client {
		c, err := client.Dial(ctx, client.Options{URI: uri, Name: name, NoReconnect: true, SubscriberBuffer: 1024})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	sender := dialB(a.uri, "proj/sender")
	fromSender := func(f client.Frame) bool { return f.Type == "chat" && f.Sender == "proj/sender" }
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	atB := dialB(hb.uri, "proj/at-b").Subscribe(subCtx, fromSender)
	atC := dialB(hc.uri, "proj/at-c").Subscribe(subCtx, fromSender)
	await := func(ch <-chan client.Frame, payload string) {
		deadline := time.After(10 * time.Second)
		for {
			select {
			case f := <-ch:
				if f.Payload == payload {
					return
				}
			case <-deadline:
				b.Fatalf("broadcast %q never arrived", payload)
			}
		}
	}
	for i := range 20 { // warm: leases, watches, connections
		p := "warm " + strconv.Itoa(i)
		if _, err := sender.Send(ctx, "all", p, client.SendOptions{}); err != nil {
			b.Fatal(err)
		}
		await(atB, p)
		await(atC, p)
	}
	lats := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		p := strconv.Itoa(i)
		t0 := time.Now()
		done := make(chan struct{})
		go func() { await(atC, p); close(done) }()
		if _, err := sender.Send(ctx, "all", p, client.SendOptions{}); err != nil {
			b.Fatal(err)
		}
		await(atB, p)
		<-done
		lats = append(lats, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lats)
	if len(lats) == 0 {
		return
	}
	q := func(f float64) float64 {
		return float64(lats[min(len(lats)-1, int(f*float64(len(lats))))].Microseconds())
	}
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}
