package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/journal"
)

// BenchmarkClaimRoundTrip measures claim → claim_granted over real sockets
// with 1 and 32 concurrent agents, each renewing its own claim in a loop,
// and reports p50/p99: memory-only and with a journal (every grant
// committed at synchronous=FULL, group-committed), with full broadcast
// fan-out and with scoped fan-out.
func BenchmarkClaimRoundTrip(b *testing.B) {
	for _, journaled := range []bool{false, true} {
		for _, agents := range []int{1, 32} {
			for _, scoped := range []bool{false, true} {
				name := fmt.Sprintf("agents=%d", agents)
				if scoped {
					name += "/scoped"
				}
				if journaled {
					name += "/journal"
				}
				b.Run(name, func(b *testing.B) { benchClaims(b, agents, scoped, journaled) })
			}
		}
	}
}

func benchClaims(b *testing.B, agents int, scoped, journaled bool) {
	cfg := Config{Logger: quietLogger()}
	if journaled {
		st, err := journal.Open(filepath.Join(b.TempDir(), "bench.db"), journal.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		cfg.Journal = st
	}
	h, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	defer h.Close(context.Background())
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	runClaimAgents(b, url, agents, scoped)
}

// runClaimAgents connects agents to url, each renewing its own claim in a
// loop, and reports the round trip's p50/p99 and the claims/s.
func runClaimAgents(b *testing.B, url string, agents int, scoped bool) {
	ctx := context.Background()
	type agent struct {
		c     *websocket.Conn
		claim []byte
		mine  []byte
		lat   []time.Duration
	}
	as := make([]*agent, agents)
	for i := range as {
		c, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			b.Fatal(err)
		}
		c.SetReadLimit(1 << 20)
		defer c.CloseNow()
		name := fmt.Sprintf("p%d/agent", i)
		reg := map[string]any{"sender": name, "type": "heartbeat", "target": "System", "payload": "online"}
		if scoped {
			reg["fanout"] = "scoped"
		}
		rb, _ := json.Marshal(reg)
		if err := c.Write(ctx, websocket.MessageText, rb); err != nil {
			b.Fatal(err)
		}
		cb, _ := json.Marshal(map[string]any{"sender": name, "type": "claim", "target": "System", "task_id": name + "/T", "paths": []string{name}})
		as[i] = &agent{c: c, claim: cb, mine: []byte(`"owner":"` + name + `"`)}
	}
	per := max(1, b.N/agents)
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, a := range as {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				t0 := time.Now()
				if err := a.c.Write(ctx, websocket.MessageText, a.claim); err != nil {
					b.Error(err)
					return
				}
				for {
					_, data, err := a.c.Read(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					if bytes.Contains(data, []byte(`"type":"claim_granted"`)) && bytes.Contains(data, a.mine) {
						break
					}
				}
				a.lat = append(a.lat, time.Since(t0))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	var all []time.Duration
	for _, a := range as {
		all = append(all, a.lat...)
	}
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	p := func(q float64) float64 { return float64(all[min(len(all)-1, int(q*float64(len(all))))].Microseconds()) }
	b.ReportMetric(p(0.50), "p50-µs")
	b.ReportMetric(p(0.99), "p99-µs")
	b.ReportMetric(float64(len(all))/b.Elapsed().Seconds(), "claims/s")
}

// BenchmarkForwardedClaimRoundTrip is BenchmarkClaimRoundTrip through a
// non-owner: the agents are connected to syn-b, every claim is forwarded
// over one multiplexed link to the owner syn-a and its grant delivered
// back. Compare its p50 with the local one's for the cost of forwarding.
func BenchmarkForwardedClaimRoundTrip(b *testing.B) {
	for _, journaled := range []bool{false, true} {
		for _, agents := range []int{1, 32} {
			name := fmt.Sprintf("agents=%d", agents)
			if journaled {
				name += "/journal"
			}
			b.Run(name, func(b *testing.B) { benchForwarded(b, agents, journaled) })
		}
	}
}

func benchForwarded(b *testing.B, agents int, journaled bool) {
	owner := Config{HubID: "syn-a", Logger: quietLogger(), Limits: benchLimits(),
		Federation: federation.Config{Owners: []string{"*=syn-a"}, PeerTokens: map[string]string{"syn-b": "t"}}}
	if journaled {
		st, err := journal.Open(filepath.Join(b.TempDir(), "bench.db"), journal.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		owner.Journal = st
	}
	ha, err := New(owner)
	if err != nil {
		b.Fatal(err)
	}
	sa := httptest.NewServer(ha.Handler())
	defer sa.Close()
	defer ha.Close(context.Background())
	hb, err := New(Config{HubID: "syn-b", Logger: quietLogger(), Federation: federation.Config{Owners: []string{"*=syn-a"},
		ClaimPeers: map[string]string{"syn-a": "ws" + strings.TrimPrefix(sa.URL, "http")}, ClaimPeerToken: "t"}})
	if err != nil {
		b.Fatal(err)
	}
	sb := httptest.NewServer(hb.Handler())
	defer sb.Close()
	defer hb.Close(context.Background())
	for !hb.fed.PeerReachable("syn-a") {
		time.Sleep(5 * time.Millisecond)
	}
	runClaimAgents(b, "ws"+strings.TrimPrefix(sb.URL, "http"), agents, false)
}

// benchLimits lets one forwarding peer hold every benchmark claim: its
// agents share the peer's quota (INV-ME-5).
func benchLimits() coord.Limits {
	l := coord.DefaultLimits()
	l.MaxClaimsPerPrincipal = 1 << 20
	return l
}
