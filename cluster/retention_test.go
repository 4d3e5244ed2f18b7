package cluster

import (
	"context"
	"testing"
	"time"
)

// A fleet keeps idempotency records as long as the hub's
// --idempotency-window says (the journal's promise, INV-CR-1), the package
// default when it says nothing, and forever (no lease) when told so.
func TestRetention_IdemWindowFollowsTheConfig_INV_CR_1(t *testing.T) {
	for _, c := range []struct {
		cfg, want time.Duration
	}{{0, IdemRetention}, {3 * time.Hour, 3 * time.Hour}, {-1, -1}} {
		o := NewOwners(&Member{cfg: Config{IdemRetention: c.cfg}})
		if got := o.idemKeep.keep(); got != c.want {
			t.Errorf("Config.IdemRetention %v: records kept %v, want %v", c.cfg, got, c.want)
		}
	}
	forever := retention{keep: func() time.Duration { return -1 }}
	if id, err := forever.lease(context.Background(), nil); id != 0 || err != nil {
		t.Errorf("a negative window: lease %v, %v; want none (kept forever), without asking etcd", id, err)
	}
}
