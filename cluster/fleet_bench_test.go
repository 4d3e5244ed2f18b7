package cluster_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster/clustertest"
)

// BenchmarkFleetClaims measures durable claim-family mutations through one
// hub whose namespaces live in etcd (fsync on, etcd embedded in this
// process on the same two cores): agents each claim fresh tasks in a loop
// over real sockets; every grant is acknowledged only after its fenced
// etcd transaction committed. It reports claims/s, the round trip's
// p50/p99 and the process CPU per claim (hub, agents and etcd together).
// Agents use scoped fan-out in namespaces of their own.
func BenchmarkFleetClaims(b *testing.B) {
	for _, agents := range []int{1, 64} {
		b.Run(fmt.Sprintf("agents=%d", agents), func(b *testing.B) { benchFleet(b, agents) })
	}
}

func benchFleet(b *testing.B, agents int) {
	x := clustertest.Start(b, false)
	h := startFleetHubB(b, x.Endpoint, "syn-bench")
	ctx := context.Background()
	cs := make([]*client.Client, agents)
	for i := range cs {
		// Each agent its own namespace and scoped fan-out: what is measured
		// is the durable path, not every agent decoding every grant.
		c, err := client.Dial(ctx, client.Options{URI: h.uri, Name: fmt.Sprintf("b%d/agent", i), NoReconnect: true})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	for i, c := range cs { // first use takes each namespace
		if _, err := c.Claim(ctx, client.ClaimRequest{TaskID: fmt.Sprintf("warm%d", i), Paths: []string{fmt.Sprintf("warm%d", i)}}); err != nil {
			b.Fatal(err)
		}
	}
	per := max(1, b.N/agents)
	lats := make([][]time.Duration, agents)
	cpu0 := cpuSeconds()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range per {
				task := fmt.Sprintf("a%d-%d", i, k)
				t0 := time.Now()
				if _, err := c.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{task}}); err != nil {
					b.Error(err)
					return
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := cpuSeconds() - cpu0
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	q := func(f float64) float64 { return float64(all[min(len(all)-1, int(f*float64(len(all))))].Microseconds()) }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(len(all))/b.Elapsed().Seconds(), "claims/s")
	b.ReportMetric(cpu/float64(len(all))*1e6, "cpu-µs/claim")
}

// cpuSeconds reads this process's user+system CPU time from /proc.
func cpuSeconds() float64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100 // clock ticks (USER_HZ = 100 on Linux)
}
