package cluster

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The mirror applies each event once: a watch made again after a break
// resends events it has (skipped), and an event that comes after a
// progress notification naming a later revision is still applied (etcd
// before 3.4.24 may send the notification ahead of events still queued,
// etcd issue 15220): the records a fleet read is served from hold every
// acknowledged write once it arrives (issue 22's read-your-writes).
func TestMirror_AppliesEachEventOnceAndEventsBehindAProgressNotification_Issue22(t *testing.T) {
	o := &Owners{pfx: "/s/"}
	m := &o.rec
	m.advanced = make(chan struct{})
	m.running, m.recs = true, map[string]*record{}
	put := func(key string, rev int64, val string) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev, Value: []byte(val)}}
	}
	resp := func(rev int64, evs ...*clientv3.Event) clientv3.WatchResponse {
		return clientv3.WatchResponse{Header: &pb.ResponseHeader{Revision: rev}, Events: evs}
	}
	a, b := "/s/ns/alpha/claims/T1", "/s/ns/alpha/claims/T2"
	m.apply(o, resp(5, put(a, 5, "one")))
	m.apply(o, resp(6, put(a, 6, "two")))
	m.apply(o, resp(6, put(a, 5, "one"))) // resent after a break: older than what is applied
	if got := string(m.recs[a].raw); got != "two" {
		t.Fatalf("after a resent older event the record is %q; want two", got)
	}
	m.apply(o, resp(9)) // a progress notification ahead of a queued event
	if m.rev != 9 {
		t.Fatalf("revision %d after a progress notification at 9", m.rev)
	}
	m.apply(o, resp(9, put(b, 8, "late")))
	if r := m.recs[b]; r == nil || string(r.raw) != "late" {
		t.Fatalf("an event behind a progress notification was not applied: %+v", r)
	}
	if m.rev != 9 {
		t.Fatalf("revision moved back to %d", m.rev)
	}
}
