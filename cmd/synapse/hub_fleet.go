package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/cluster"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/hub"
)

// registerFleet adds the flags of a fleet on etcd (docs/scale-out.md).
func (f *hubFlags) registerFleet(fs *flag.FlagSet) {
	fs.StringVar(&f.etcd, "etcd", "", "etcd client URLs `URL[,URL…]`: run as a member of a fleet whose namespace ownership and claims live in etcd (needs --hub-id and a cluster token); without it the hub stands alone")
	fs.StringVar(&f.advertise, "advertise", "", "ws://HOST:PORT peers and clients reach this hub at (default: the listening address)")
	fs.DurationVar(&f.etcdLeaseTTL, "etcd-lease-ttl", cluster.DefaultLeaseTTL, "TTL of this hub's etcd lease: renewed every third, fenced (no more grants) after two thirds without a renewal; a dead hub's namespaces move after about this long")
	fs.StringVar(&f.etcdPrefix, "etcd-prefix", cluster.DefaultPrefix, "key prefix of this fleet in etcd")
	fs.StringVar(&f.clusterToken, "cluster-token", "", "secret every hub of the fleet presents to the others and accepts from them (shows in ps: prefer --cluster-token-file)")
	fs.StringVar(&f.clusterTokenFile, "cluster-token-file", "", "read --cluster-token from the first line of `PATH`")
}

// fleetMember is a hub's membership and ownership on etcd.
type fleetMember struct {
	m      *cluster.Member
	owners *cluster.Owners
	access *cluster.Access // credentials, role grants and identity pins (cluster/access.go)
	left   bool
}

// joinFleet registers the hub in etcd and points cfg at the fleet: the
// sequencer commits to etcd, and ownership and forwarding follow it.
func joinFleet(f *hubFlags, cfg *hub.Config, listen net.Addr, etcdTLS *tls.Config, log *slog.Logger) (*fleetMember, error) {
	if f.hubID == "" {
		return nil, errors.New("--etcd needs --hub-id: the fleet names each hub (for example --hub-id syn-east)")
	}
	tok := f.clusterToken
	if f.clusterTokenFile != "" {
		if tok != "" {
			return nil, errors.New("give the cluster token once: --cluster-token or --cluster-token-file")
		}
		var err error
		if tok, err = gate.ReadTokenFile(f.clusterTokenFile); err != nil {
			return nil, fmt.Errorf("--cluster-token-file: %w", err)
		}
	}
	if tok == "" {
		return nil, errors.New("--etcd needs --cluster-token (or --cluster-token-file): hubs of a fleet forward to each other and serve only hubs that present it")
	}
	if len(cfg.Federation.Owners) > 0 {
		return nil, errors.New("--etcd decides namespace ownership itself: drop --namespace-owner")
	}
	adv := f.advertise
	if adv == "" {
		adv = "ws://" + listen.String()
		if f.tls.cert != "" {
			adv = "wss://" + listen.String()
		}
	}
	if !strings.HasPrefix(adv, "ws://") && !strings.HasPrefix(adv, "wss://") {
		return nil, fmt.Errorf("--advertise %s: want ws://HOST:PORT", adv)
	}
	fm := &fleetMember{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := cluster.Join(ctx, cluster.Config{
		Endpoints: strings.Split(f.etcd, ","), HubID: f.hubID, Advertise: adv, LeaseTTL: f.etcdLeaseTTL,
		Prefix: f.etcdPrefix, Version: version, Logger: log, TLS: etcdTLS,
		Fence:         func(budget time.Duration) { fm.owners.Fence(budget) },
		IdemRetention: fleetIdemRetention(f.idemWindow),
	})
	if err != nil {
		return nil, fmt.Errorf("%w. Is etcd running at %s? Check --etcd", err, f.etcd)
	}
	fm.m, fm.owners, fm.access = m, cluster.NewOwners(m), cluster.NewAccess(m)
	cfg.HubID = f.hubID
	cfg.Store, cfg.Mail, cfg.Fleet, cfg.Chats = fm.owners, fm.owners, fm.owners, cluster.NewChats(m)
	cfg.Federation.Authority = fm.owners
	cfg.Federation.PeerURI = fm.owners.PeerURI
	cfg.Federation.SharedPeerToken = tok
	return fm, nil
}

// start connects the hub and follows the fleet.
func (fm *fleetMember) start(h *hub.Hub) error {
	fm.owners.SetHost(h)
	if err := fm.owners.Start(); err != nil {
		return err
	}
	fm.access.Follow(h.Access(), h) // what any hub issues, revokes, grants or pins applies here
	return nil
}

func (fm *fleetMember) describe() string {
	c := fm.m.Config()
	return fmt.Sprintf("etcd %s (prefix %s, lease TTL %s, advertised as %s): claims, board, directed mail, credentials, role grants, identity pins; broadcast chat in memory", strings.Join(c.Endpoints, ","), c.Prefix, c.LeaseTTL, c.Advertise)
}

// leave revokes the hub's lease once it no longer serves: its namespaces
// are free for the other hubs at once.
func (fm *fleetMember) leave() {
	if fm.left {
		return
	}
	fm.left = true
	fm.access.Close()
	fm.owners.Close()
	fm.m.Leave()
}

// fleetIdemRetention is the fleet's --idempotency-window: the same promise
// as a journal's, 0 (forever) written without a lease.
func fleetIdemRetention(w time.Duration) time.Duration {
	if w <= 0 {
		return -1
	}
	return w
}
