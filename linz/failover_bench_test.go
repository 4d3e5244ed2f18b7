package linz

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster"
	"github.com/synapse-hub/synapse/internal/testbin"
)

// Failover and planned-move pauses of a fleet, measured as distributions
// over many trials (issue 22, item 5): three hub processes on a
// three-member etcd of processes (etcd 3.7 embedded, re-executed), over
// real sockets between processes. Run with
//
//	go test ./linz -run XXX -bench 'FleetFailover|FleetMovePause' -benchtime 1x
//
// LINZ_TRIALS sets the trials per measure (default 20). Task ids and
// worktrees carry the namespace: on a fleet both are judged per owner hub,
// not per namespace (docs/scale-out.md, "Left open").

func trials() int {
	if n, err := strconv.Atoi(os.Getenv("LINZ_TRIALS")); err == nil && n > 0 {
		return n
	}
	return 20
}

// benchFleet starts the etcd and three hubs with lease ttl.
func benchFleet(b *testing.B, ttl time.Duration) []*fleetHub {
	etcd := startEtcd(b, etcdEmbedded, "")
	bin := testbin.Synapse(b)
	dir := b.TempDir()
	if os.Getenv("LINZ_KEEP_LOGS") != "" { // to see where a slow trial's time went
		var err error
		if dir, err = os.MkdirTemp("", "linz-bench-logs-"); err != nil {
			b.Fatal(err)
		}
		b.Logf("the hubs' logs are kept in %s", dir)
	}
	hubs := make([]*fleetHub, 3)
	for i := range hubs {
		h := &fleetHub{id: fmt.Sprintf("syn-%c", 'a'+i), bin: bin, host: "127.0.0.1", port: testbin.FreePort(b), etcd: etcd.endpoints(false), ttl: ttl}
		var err error
		if h.log, err = os.Create(filepath.Join(dir, h.id+".log")); err != nil {
			b.Fatal(err)
		}
		if err := h.start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(h.kill)
		hubs[i] = h
	}
	return hubs
}

func dialB(b *testing.B, uri, name string) *client.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URI: uri, Name: name, NoReconnect: true, NoMovingRetry: true})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// quantile is the q-quantile of sorted durations (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func report(b *testing.B, what string, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(float64(quantile(ds, 0.5).Microseconds())/1000, what+"-p50-ms")
	b.ReportMetric(float64(quantile(ds, 0.99).Microseconds())/1000, what+"-p99-ms")
	b.ReportMetric(float64(ds[len(ds)-1].Microseconds())/1000, what+"-max-ms")
	b.Logf("%s over %d trials: p50 %v, p99 %v, max %v (all: %v)", what, len(ds), quantile(ds, 0.5), quantile(ds, 0.99), ds[len(ds)-1], ds)
}

// BenchmarkFleetFailover: a namespace's owner is SIGKILLed while an agent
// on another hub claims fresh tasks in it every few milliseconds; the
// failover is the time from the kill to the first grant by another hub.
// Target: lease TTL + 1 s at p99.
func BenchmarkFleetFailover(b *testing.B) {
	for _, ttl := range []time.Duration{2 * time.Second, cluster.DefaultLeaseTTL} {
		b.Run("ttl="+ttl.String(), func(b *testing.B) {
			hubs := benchFleet(b, ttl)
			var took []time.Duration
			for trial := 0; trial < trials(); trial++ {
				owner, prober := hubs[trial%3], hubs[(trial+1)%3]
				ns := fmt.Sprintf("fo%d", trial)
				first := dialB(b, owner.uri(), ns+"/first")
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				cl, err := first.Claim(ctx, client.ClaimRequest{TaskID: ns + ".seed", Worktree: "/bench/" + ns, Paths: []string{"seed"}})
				first.Close()
				if err != nil || cl.HubID != owner.id {
					b.Fatalf("first use on %s: %+v %v", owner.id, cl, err)
				}
				probe := dialB(b, prober.uri(), ns+"/probe")
				owner.kill()
				killed := time.Now()
				for k := 0; ; k++ {
					cctx, ccancel := context.WithTimeout(ctx, time.Second)
					g, err := probe.Claim(cctx, client.ClaimRequest{TaskID: fmt.Sprintf("%s.p%d", ns, k), Worktree: "/bench/" + ns, Paths: []string{fmt.Sprintf("p%d", k)}})
					ccancel()
					if err == nil && g.HubID != owner.id {
						took = append(took, time.Since(killed))
						break
					}
					if ctx.Err() != nil {
						b.Fatalf("trial %d: %s not served again within a minute", trial, ns)
					}
					time.Sleep(5 * time.Millisecond)
				}
				probe.Close()
				cancel()
				if err := owner.start(); err != nil {
					b.Fatal(err)
				}
			}
			report(b, "failover", took)
		})
	}
}

// BenchmarkFleetMovePause: an agent on a third hub claims fresh tasks in a
// namespace back to back while it moves from one hub to another; the
// pause is the longest gap between two grants around the move. Target:
// 50 ms at p99.
func BenchmarkFleetMovePause(b *testing.B) {
	for _, ttl := range []time.Duration{2 * time.Second, cluster.DefaultLeaseTTL} {
		b.Run("ttl="+ttl.String(), func(b *testing.B) {
			hubs := benchFleet(b, ttl)
			var pauses []time.Duration
			for trial := 0; trial < trials(); trial++ {
				from, to, prober := hubs[trial%3], hubs[(trial+1)%3], hubs[(trial+2)%3]
				ns := fmt.Sprintf("mv%d", trial)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				first := dialB(b, from.uri(), ns+"/first")
				if cl, err := first.Claim(ctx, client.ClaimRequest{TaskID: ns + ".seed", Worktree: "/bench/" + ns, Paths: []string{"seed"}}); err != nil || cl.HubID != from.id {
					b.Fatalf("first use on %s: %+v %v", from.id, cl, err)
				}
				probe, err := client.Dial(ctx, client.Options{URI: prober.uri(), Name: ns + "/probe", NoReconnect: true}) // retries NAMESPACE_MOVING, as users' clients do
				if err != nil {
					b.Fatal(err)
				}
				stop, done := make(chan struct{}), make(chan struct{})
				var grants []time.Time
				go func() {
					defer close(done)
					for k := 0; ; k++ {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := probe.Claim(ctx, client.ClaimRequest{TaskID: fmt.Sprintf("%s.p%d", ns, k), Worktree: "/bench/" + ns, Paths: []string{fmt.Sprintf("p%d", k)}}); err == nil {
							grants = append(grants, time.Now())
						}
					}
				}()
				time.Sleep(300 * time.Millisecond)
				asked := time.Now()
				if _, err := first.Move(ctx, ns, to.id); err != nil {
					b.Fatalf("trial %d: move %s to %s: %v", trial, ns, to.id, err)
				}
				time.Sleep(300 * time.Millisecond)
				close(stop)
				<-done
				cancel()
				probe.Close()
				first.Close()
				var worst time.Duration
				for i := 1; i < len(grants); i++ {
					if grants[i].After(asked) {
						worst = max(worst, grants[i].Sub(grants[i-1]))
					}
				}
				pauses = append(pauses, worst)
				b.Logf("trial %d: %s from %s to %s asked at %s, pause %v", trial, ns, from.id, to.id, asked.UTC().Format("15:04:05.000"), worst)
			}
			report(b, "move-pause", pauses)
		})
	}
}
