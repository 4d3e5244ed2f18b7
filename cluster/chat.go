package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Chats on a fleet (issue 22 item 2): every chat that is not a directed
// letter (broadcasts, lists, globs, roles, projects, bare names) is
// written by the hub it was sent on to chat/<hub>-<time>-<n> under a
// lease of ChatRetention, and every hub follows chat/ with a watch and
// hands each chat to its own matching sockets and to its history. The
// revision that wrote a chat is its msg_id: etcd's revisions are one total
// order, so every hub relays the fleet's chats in one order, and a
// sender's chats in the order it sent them (its hub writes one only after
// the previous one committed: PostChat is called on the sender's read
// goroutine). A hub that starts reads the newest chats back into its
// history, so history outlives the hub a chat was sent through.
//
// Chats are not authority: the write is not guarded by any owner key, and
// any hub that can reach etcd may post.

// ChatRetention is how long etcd keeps a chat (between it and an hour
// more: see retention). A starting hub's history is rebuilt from what is
// kept, at most --max-history chats.
var ChatRetention = 24 * time.Hour

// Chats is the fleet's chat store, one per hub (delivery.ChatStore).
type Chats struct {
	cli  *clientv3.Client
	pfx  string
	self string
	wait time.Duration // bounds one etcd call
	keep retention
	next atomic.Int64
}

// NewChats is member m's chat store.
func NewChats(m *Member) *Chats {
	return &Chats{cli: m.cli, pfx: m.cfg.Prefix + "chat/", self: m.cfg.HubID, wait: m.cfg.LeaseTTL / 3,
		keep: retention{keep: func() time.Duration { return ChatRetention }}}
}

// PostChat stores rec and returns the revision that wrote it.
func (c *Chats) PostChat(ctx context.Context, rec []byte) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, c.wait)
	lease, err := c.keep.lease(lctx, c.cli)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("%w: chat lease: %v", ErrNoEtcd, err)
	}
	key := c.pfx + c.self + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(c.next.Add(1), 36)
	pctx, cancel := context.WithTimeout(ctx, c.wait)
	defer cancel()
	r, err := c.cli.Put(pctx, key, string(rec), clientv3.WithLease(lease))
	if err != nil {
		return 0, fmt.Errorf("%w: post chat: %v", ErrNoEtcd, err)
	}
	return r.Header.Revision, nil
}

// FollowChats calls fn with the newest tail chats kept, oldest first, and
// then, from its own goroutine until ctx ends, with every chat written
// after them, in revision order. A watch that breaks (etcd lost, the
// revision compacted) is resumed after a range read of the chats written
// since the last one handed over: chats are kept under their lease, not by
// the watch's history, so compaction loses none.
func (c *Chats) FollowChats(ctx context.Context, tail int, fn func(rev int64, rec []byte)) error {
	gctx, cancel := context.WithTimeout(ctx, c.wait)
	r, err := c.cli.Get(gctx, c.pfx, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(int64(tail)))
	cancel()
	if err != nil {
		return fmt.Errorf("%w: read chats: %v", ErrNoEtcd, err)
	}
	kvs := slices.Clone(r.Kvs)
	slices.Reverse(kvs)
	for _, kv := range kvs {
		fn(kv.ModRevision, kv.Value)
	}
	rev := r.Header.Revision // every chat up to it has been handed over
	go func() {
		for ctx.Err() == nil {
			rev = c.watch(ctx, rev, fn)
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryEvery):
			}
			rev = c.catchUp(ctx, rev, fn)
		}
	}()
	return nil
}

// watch hands over the chats written after rev until the watch breaks,
// and returns the revision handed over through.
func (c *Chats) watch(ctx context.Context, rev int64, fn func(rev int64, rec []byte)) int64 {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range c.cli.Watch(wctx, c.pfx, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if resp.Err() != nil {
			return rev
		}
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypePut || ev.Kv.Version != 1 || ev.Kv.ModRevision <= rev {
				continue // expiries, rewrites, and what was handed over already
			}
			rev = ev.Kv.ModRevision
			fn(rev, ev.Kv.Value)
		}
	}
	return rev
}

// catchUp hands over the chats kept that were written after rev, oldest
// first, and returns the revision of that read (rev if etcd did not
// answer: the next watch starts from rev again).
func (c *Chats) catchUp(ctx context.Context, rev int64, fn func(rev int64, rec []byte)) int64 {
	gctx, cancel := context.WithTimeout(ctx, c.wait)
	defer cancel()
	r, err := c.cli.Get(gctx, c.pfx, clientv3.WithPrefix(), clientv3.WithMinModRev(rev+1),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))
	if err != nil {
		return rev
	}
	for _, kv := range r.Kvs {
		if kv.Version == 1 {
			fn(kv.ModRevision, kv.Value)
		}
	}
	return r.Header.Revision
}
