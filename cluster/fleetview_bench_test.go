package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/cluster"
	"github.com/synapse-hub/synapse/cluster/clustertest"
)

// BenchmarkFleetRead10kClaims3Hubs measures a fleet-wide state_request
// (issue 22's cost): three hubs on one etcd (embedded, in this process,
// on the same cores), 10,000 live claims in 30 namespaces spread over the
// three owners, and a client asking each hub in turn over a real socket.
// Each answer is every claim of the fleet at a revision no older than
// etcd's when it was asked, from the hub's mirror; no owner's sequencer is
// entered (the answering hub's own is asked only for its resource
// offers). It reports, in ms: the round trip (state-, the client's
// decoding of 10,000 claims into structs included), the same request on
// a raw socket to the reply's last byte (answer-: the hub's answer plus
// the socket, nothing decoded), the hub's fleet read alone (read-), the
// dashboard's GET /api/state to its body's last byte (api-state-), a
// hub's first read (which lists and decodes every record); and the heap
// in use after the reads (three hubs, etcd and the clients).
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
	// A hub's first fleet read starts its mirror (a list of every record,
	// decoded): timed apart, the worst of the three.
	var cold time.Duration
	for _, h := range hubs {
		t0 := time.Now()
		if _, err := h.owners.Snapshot(ctx); err != nil {
			b.Fatal(err)
		}
		cold = max(cold, time.Since(t0))
	}
	raws := make([]func(), 3)
	for i, h := range hubs {
		raws[i] = rawStateReader(b, h.uri, fmt.Sprintf("viewer/raw%d", i))
	}
	api := func(h *fleetHub) {
		resp, err := http.Get("http" + strings.TrimPrefix(h.uri, "ws") + "/api/state")
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
	}
	for i, h := range hubs { // and its first answers encode every claim: once, apart too
		raws[i]()
		api(h)
	}
	var lats, reads, answers, apis []time.Duration
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
		t0 = time.Now() // the fleet read alone, as the hub makes it
		if _, err := hubs[i%3].owners.Snapshot(ctx); err != nil {
			b.Fatal(err)
		}
		reads = append(reads, time.Since(t0))
		// and the hub's answer as bytes: the same request on a raw socket,
		// timed to the last byte of its reply, nothing decoded
		t0 = time.Now()
		raws[i%3]()
		answers = append(answers, time.Since(t0))
		t0 = time.Now()
		api(hubs[i%3])
		apis = append(apis, time.Since(t0))
	}
	b.StopTimer()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if n != claims {
		b.Fatalf("an answer held %d claims; want %d", n, claims)
	}
	q := func(l []time.Duration, f float64) float64 {
		slices.Sort(l)
		return float64(l[min(len(l)-1, int(f*float64(len(l))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(lats, 0.5), "state-p50-ms")
	b.ReportMetric(q(lats, 0.99), "state-p99-ms")
	b.ReportMetric(q(reads, 0.5), "read-p50-ms")
	b.ReportMetric(q(reads, 0.99), "read-p99-ms")
	b.ReportMetric(q(answers, 0.5), "answer-p50-ms")
	b.ReportMetric(q(answers, 0.99), "answer-p99-ms")
	b.ReportMetric(q(apis, 0.5), "api-state-p50-ms")
	b.ReportMetric(q(apis, 0.99), "api-state-p99-ms")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MB")
	b.ReportMetric(float64(n), "claims")
	b.ReportMetric(float64(cold.Microseconds())/1000, "first-read-ms")
}

// rawStateReader binds name on a raw socket and returns a call that sends
// state_request and returns once the whole state_snapshot frame is in.
func rawStateReader(b *testing.B, uri, name string) func() {
	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, uri, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ws.CloseNow() })
	ws.SetReadLimit(-1)
	write := func(m map[string]any) {
		buf, _ := json.Marshal(m)
		if err := ws.Write(ctx, websocket.MessageText, buf); err != nil {
			b.Fatal(err)
		}
	}
	snaps := make(chan struct{}, 1)
	go func() { // reads all the time, so the hub's pings are answered
		for {
			_, msg, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if bytes.Contains(msg[:min(len(msg), 4096)], []byte(`"state_snapshot"`)) {
				snaps <- struct{}{}
			}
		}
	}()
	write(map[string]any{"sender": name, "target": "System", "type": "heartbeat", "payload": "online", "presence": "none"})
	return func() {
		write(map[string]any{"sender": name, "target": "System", "type": "state_request", "payload": ""})
		select {
		case <-snaps:
		case <-time.After(30 * time.Second):
			b.Fatal("no state_snapshot on the raw socket")
		}
	}
}

// BenchmarkFleetClaimsWithDashboards measures what fleet reads cost the
// grant path (issue 22): three hubs on one etcd (fsync on, in this
// process, on the same cores) holding 10,000 claims, agents on every hub
// claiming and releasing in their own namespaces, in phases without a
// reader and with a dashboard open on every hub (a GET of /api/state on
// each hub every second, each answer the fleet's 10,000 claims). The
// phases alternate, three of each (SYNAPSE_BENCH_PHASE in all, per kind;
// SYNAPSE_BENCH_DASHBOARD=events opens the dashboard as its page does —
// /api/state once, then /api/events followed — instead of reading
// /api/state every second):
// etcd's keyspace grows through a run (each claim leaves an idempotency
// record) and others' load on a shared machine drifts, which sequential
// phases would charge to the later one. A phase without dashboards begins
// once every hub's mirror stopped for want of a reader (idle 2 s here);
// one with them begins after each hub's first read (its mirror's list,
// each claim's first encoding), so it measures dashboards open, not their
// opening. Reported: claims/s and the process's CPU per claim (hubs, etcd
// and agents) without and with (CPU per claim moves much less with
// others' load than claims/s), and the reads' latency.
func BenchmarkFleetClaimsWithDashboards(b *testing.B) {
	cluster.SetMirrorIdle(b, 2*time.Second)
	x := clustertest.Start(b, false)
	hubs := []*fleetHub{startFleetHubB(b, x.Endpoint, "syn-a"), startFleetHubB(b, x.Endpoint, "syn-b"), startFleetHubB(b, x.Endpoint, "syn-c")}
	ctx := context.Background()
	const held, agents = 10_000, 48
	cs := make([]*client.Client, agents)
	for i := range cs {
		c, err := client.Dial(ctx, client.Options{URI: hubs[i%3].uri, Name: fmt.Sprintf("ns%d/agent", i), NoReconnect: true})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := i; k < held; k += agents {
				task := fmt.Sprintf("h%05d", k)
				if _, err := c.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{task}, TTL: time.Hour}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	phase := 8 * time.Second
	if d, err := time.ParseDuration(os.Getenv("SYNAPSE_BENCH_PHASE")); err == nil {
		phase = d
	}
	// run has every agent claim and release fresh tasks for d: the grants,
	// and the CPU seconds they took.
	run := func(d time.Duration, tag string) (int64, float64) {
		var n atomic.Int64
		cpu0 := cpuSeconds()
		stop := time.Now().Add(d)
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; time.Now().Before(stop); k++ {
					task := fmt.Sprintf("%s%d-%d", tag, i, k)
					if _, err := c.Claim(ctx, client.ClaimRequest{TaskID: task, Paths: []string{task}}); err != nil {
						b.Error(err)
						return
					}
					n.Add(1)
					if _, err := c.Release(ctx, task, client.ReleaseOptions{}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return n.Load(), cpuSeconds() - cpu0
	}
	getState := func(ctx context.Context, h *fleetHub) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http"+strings.TrimPrefix(h.uri, "ws")+"/api/state", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	var reads atomic.Int64
	var lats []time.Duration
	var lmu sync.Mutex
	// dashboards opens one on every hub, reading /api/state every second
	// until the returned call closes them.
	dashboards := func() (closeAll func()) {
		for _, h := range hubs {
			if err := getState(ctx, h); err != nil {
				b.Fatal(err)
			}
		}
		dctx, stop := context.WithCancel(ctx)
		var dwg sync.WaitGroup
		if os.Getenv("SYNAPSE_BENCH_DASHBOARD") == "events" {
			// As the dashboard's page does: the state once (above), then
			// the live feed, /api/events, followed until it closes.
			for _, h := range hubs {
				dwg.Add(1)
				go func() {
					defer dwg.Done()
					req, _ := http.NewRequestWithContext(dctx, http.MethodGet, "http"+strings.TrimPrefix(h.uri, "ws")+"/api/events", nil)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						if dctx.Err() == nil {
							b.Error(err)
						}
						return
					}
					defer resp.Body.Close()
					n, _ := io.Copy(io.Discard, resp.Body)
					reads.Add(n) // bytes streamed
				}()
			}
			return func() { stop(); dwg.Wait() }
		}
		for _, h := range hubs {
			dwg.Add(1)
			go func() {
				defer dwg.Done()
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for {
					select {
					case <-dctx.Done():
						return
					case <-tick.C:
					}
					t0 := time.Now()
					if err := getState(dctx, h); err != nil {
						if dctx.Err() == nil {
							b.Error(err)
						}
						return
					}
					reads.Add(1)
					lmu.Lock()
					lats = append(lats, time.Since(t0))
					lmu.Unlock()
				}
			}()
		}
		return func() { stop(); dwg.Wait() }
	}
	mirrorsStopped := func() {
		for _, h := range hubs {
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if _, watching := cluster.MirrorRun(h.owners); !watching {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%s's mirror still watches 30 s after its last reader", h.id)
				}
			}
		}
	}
	const rounds = 3
	var grants [2]int64 // without, with
	var cpu [2]float64
	b.ResetTimer()
	for r := range rounds {
		b.StopTimer()
		mirrorsStopped()
		b.StartTimer()
		n, c := run(phase/rounds, fmt.Sprintf("w%d-", r))
		grants[0], cpu[0] = grants[0]+n, cpu[0]+c
		b.StopTimer()
		closeAll := dashboards()
		b.StartTimer()
		n, c = run(phase/rounds, fmt.Sprintf("d%d-", r))
		grants[1], cpu[1] = grants[1]+n, cpu[1]+c
		closeAll()
	}
	b.StopTimer()
	slices.Sort(lats)
	b.ReportMetric(float64(grants[0])/phase.Seconds(), "claims/s-without")
	b.ReportMetric(float64(grants[1])/phase.Seconds(), "claims/s-with")
	b.ReportMetric(cpu[0]/float64(max(grants[0], 1))*1e6, "cpu-µs/claim-without")
	b.ReportMetric(cpu[1]/float64(max(grants[1], 1))*1e6, "cpu-µs/claim-with")
	if os.Getenv("SYNAPSE_BENCH_DASHBOARD") == "events" {
		b.ReportMetric(float64(reads.Load()), "events-bytes")
	} else {
		b.ReportMetric(float64(reads.Load()), "dashboard-reads")
	}
	if len(lats) > 0 {
		b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "api-state-p50-ms")
		b.ReportMetric(float64(lats[len(lats)-1].Microseconds())/1000, "api-state-max-ms")
	}
}
