package cluster

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseEvery is how often a retention lease is renewed by a fresh grant.
var leaseEvery = time.Hour

// retention hands out the lease that records kept for a while (idempotency
// records, mail) are written under: one lease granted at most leaseEvery
// ago with a TTL of keep + leaseEvery, so etcd deletes each record between
// keep and keep + leaseEvery after it was written, and the database stays
// bounded. It is not the hub's lease: the records outlive the hub that
// wrote them (a retry or a reader may reach the next owner).
type retention struct {
	keep func() time.Duration // read at each grant, so tests may shorten it

	mu sync.Mutex
	id clientv3.LeaseID
	at time.Time
}

// lease returns the lease to write under now, granting a fresh one when
// the current one is older than leaseEvery; 0 (no lease: kept forever)
// when keep is negative.
func (r *retention) lease(ctx context.Context, cli *clientv3.Client) (clientv3.LeaseID, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keep() < 0 {
		return 0, nil
	}
	if r.id != 0 && time.Since(r.at) < leaseEvery {
		return r.id, nil
	}
	g, err := cli.Grant(ctx, int64((r.keep()+leaseEvery)/time.Second))
	if err != nil {
		return 0, err
	}
	r.id, r.at = g.ID, time.Now()
	return g.ID, nil
}
