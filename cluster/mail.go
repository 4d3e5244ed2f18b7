package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/sequencer"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Directed mail on a fleet. A directed chat to one agent is written by the
// owner of the agent's namespace, guarded by its owner key like every
// authoritative write, to mail/<identity>/<id> under a lease of
// MailRetention; its seq is the etcd revision that wrote it (unique and
// increasing across the fleet). Every hub watches mail/ and hands each
// new letter to the sockets of its addressee, wherever the addressee is
// connected; a reconnecting agent's hub reads the letters after its
// watermark, mailbox/<identity>, which only the namespace's owner advances
// (ack). Acknowledged mail and watermarks therefore live beyond any one
// machine (INV-DG-3 on a fleet).

// MailRetention bounds how long an unacknowledged letter is kept.
var MailRetention = 7 * 24 * time.Hour

// mailState is the mail side of Owners, apart from its lock: posting runs
// on session goroutines, not on the sequencer.
type mailState struct {
	keep retention // the lease letters are written under (MailRetention)
	next atomic.Int64
}

func (o *Owners) mailPrefix(identity string) string { return o.pfx + "mail/" + identity + "/" }
func (o *Owners) watermarkKey(identity string) string {
	return o.pfx + "mailbox/" + identity
}

// padSeq writes a seq so that byte order is number order.
func padSeq(seq int64) string { return fmt.Sprintf("%020d", seq) }

// PostMail stores a letter to identity; this hub must own identity's
// namespace (else sequencer.ErrRetry). It returns the letter's seq.
func (o *Owners) PostMail(ctx context.Context, identity string, frame []byte) (int64, error) {
	ns := coord.NamespaceOf(identity)
	o.mu.Lock()
	epoch, ok := o.mine[ns]
	frozen := o.frozen[ns]
	o.mu.Unlock()
	if !ok || frozen {
		return 0, fmt.Errorf("%w: namespace %q is not served here", sequencer.ErrRetry, ns)
	}
	lctx, cancel := context.WithTimeout(ctx, o.m.cfg.LeaseTTL/3)
	lease, err := o.mail.keep.lease(lctx, o.cli)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("%w: mail lease: %v", sequencer.ErrRetry, err)
	}
	key := o.mailPrefix(identity) + o.self + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(o.mail.next.Add(1), 36)
	tctx, cancel := context.WithTimeout(ctx, o.m.cfg.LeaseTTL/3)
	defer cancel()
	t, err := o.cli.Txn(tctx).If(clientv3.Compare(clientv3.ModRevision(o.ownerKey(ns)), "=", epoch)).
		Then(clientv3.OpPut(key, string(frame), clientv3.WithLease(lease))).Commit()
	if err != nil {
		return 0, fmt.Errorf("%w: etcd: %v", sequencer.ErrRetry, err)
	}
	if !t.Succeeded {
		return 0, fmt.Errorf("%w: namespace %q moved away from %s", sequencer.ErrRetry, ns, o.self)
	}
	o.m.Applied()
	return t.Header.Revision, nil
}

// MailAfter calls fn with the letters to identity after max(after, its
// watermark), oldest first, at most limit, and says how many there were.
// Any hub may read.
func (o *Owners) MailAfter(ctx context.Context, identity string, after int64, limit int, fn func(seq int64, frame []byte)) (int, error) {
	wm, _, err := o.watermark(ctx, identity)
	if err != nil {
		return 0, err
	}
	from := max(after, wm)
	r, err := o.cli.Get(ctx, o.mailPrefix(identity), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend), clientv3.WithMinModRev(from+1), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return 0, fmt.Errorf("%w: read mail: %v", ErrNoEtcd, err)
	}
	for _, kv := range r.Kvs {
		if strings.Contains(strings.TrimPrefix(string(kv.Key), o.mailPrefix(identity)), "/") {
			continue // a letter to a longer name (proj/bob/x), not to proj/bob
		}
		fn(kv.ModRevision, kv.Value)
	}
	return len(r.Kvs), nil
}

func (o *Owners) watermark(ctx context.Context, identity string) (int64, int64, error) {
	r, err := o.cli.Get(ctx, o.watermarkKey(identity))
	if err != nil {
		return 0, 0, fmt.Errorf("%w: read watermark: %v", ErrNoEtcd, err)
	}
	if len(r.Kvs) == 0 {
		return 0, 0, nil
	}
	wm, _ := strconv.ParseInt(strings.TrimLeft(string(r.Kvs[0].Value), "0"), 10, 64)
	return wm, r.Kvs[0].ModRevision, nil
}

// AckMail advances identity's watermark to seq (never back), guarded by
// the owner key of identity's namespace, which this hub must own.
func (o *Owners) AckMail(ctx context.Context, identity string, seq int64) error {
	ns := coord.NamespaceOf(identity)
	for try := 0; try < 5; try++ {
		o.mu.Lock()
		epoch, ok := o.mine[ns]
		o.mu.Unlock()
		if !ok {
			return fmt.Errorf("%w: namespace %q is not served here", sequencer.ErrRetry, ns)
		}
		wm, wmRev, err := o.watermark(ctx, identity)
		if err != nil {
			return err
		}
		if seq <= wm {
			return nil
		}
		k := o.watermarkKey(identity)
		t, err := o.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(o.ownerKey(ns)), "=", epoch),
			clientv3.Compare(clientv3.ModRevision(k), "=", wmRev),
		).Then(clientv3.OpPut(k, padSeq(seq))).Commit()
		if err != nil {
			return fmt.Errorf("%w: etcd: %v", sequencer.ErrRetry, err)
		}
		if t.Succeeded {
			o.m.Applied()
			return nil
		}
	}
	return fmt.Errorf("%w: watermark of %s contended", sequencer.ErrRetry, identity)
}

// WatchMail calls fn with every letter written after it was called, until
// ctx ends: the hub hands it to its addressee's sockets. The revision to
// follow from is read before it returns, so no letter written afterwards
// is missed however late the watch goroutine starts.
func (o *Owners) WatchMail(ctx context.Context, fn func(identity string, seq int64, frame []byte)) {
	var rev int64
	gctx, cancel := context.WithTimeout(ctx, o.m.cfg.LeaseTTL/3)
	if r, err := o.cli.Get(gctx, o.pfx+"mail/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
		rev = r.Header.Revision
	}
	cancel()
	go func() {
		pfx := o.pfx + "mail/"
		for ctx.Err() == nil {
			opts := []clientv3.OpOption{clientv3.WithPrefix()}
			if rev > 0 {
				opts = append(opts, clientv3.WithRev(rev+1))
			}
			for resp := range o.cli.Watch(clientv3.WithRequireLeader(ctx), pfx, opts...) {
				if resp.Err() != nil {
					break
				}
				rev = resp.Header.Revision
				for _, ev := range resp.Events {
					if ev.Type != clientv3.EventTypePut || ev.Kv.Version != 1 {
						continue // deletions (lease expiry) and rewrites are not letters
					}
					rest := strings.TrimPrefix(string(ev.Kv.Key), pfx)
					i := strings.LastIndexByte(rest, '/')
					if i <= 0 {
						continue
					}
					fn(rest[:i], ev.Kv.ModRevision, ev.Kv.Value)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(retryEvery):
			}
		}
	}()
}
