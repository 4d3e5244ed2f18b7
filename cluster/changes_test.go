package cluster

import (
	"fmt"
	"slices"
	"testing"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// payload is ev's record as the owner writes it to etcd.
func payload(t *testing.T, ev coord.Event) []byte {
	t.Helper()
	rec, ok := journal.Encode(ev)
	if !ok {
		t.Fatalf("%T is not journalled", ev)
	}
	return rec.Payload
}

// describe names an event of the dashboard's feed in a line.
func describe(ev coord.Event) string {
	switch e := ev.(type) {
	case coord.ClaimGranted:
		return fmt.Sprintf("granted %s %s e%d renewal=%v", e.Claim.TaskID, e.Claim.Owner, e.Claim.Epoch, e.Renewal)
	case coord.HandedOff:
		return fmt.Sprintf("handoff %s %s from %s", e.Claim.TaskID, e.Claim.Owner, e.From)
	case coord.CheckpointSaved:
		return fmt.Sprintf("checkpoint %s %q", e.Claim.TaskID, e.Claim.Checkpoint)
	case coord.TaskUpdated:
		return fmt.Sprintf("updated %s %s", e.Claim.TaskID, e.Claim.Status)
	case coord.Released:
		return fmt.Sprintf("released %s %s e%d", e.TaskID, e.Owner, e.Epoch)
	case coord.ClaimExpired:
		return fmt.Sprintf("expired %s e%d", e.TaskID, e.Epoch)
	case coord.TaskPosted:
		return fmt.Sprintf("task %s %s by=%q update=%v redeclared=%v", e.Task.TaskID, e.Task.Status, e.By, e.Update, e.Redeclared)
	}
	return fmt.Sprintf("%T", ev)
}

// The fleet's changes are derived from the records before and after each
// event, as the owner's commit hook would have published them: grants,
// renewals, a lapsed claim granted afresh, handoffs (within a namespace's
// key, or moving to another namespace's key in one revision), checkpoints,
// updates, releases and expiries, and board tasks posted, re-declared and
// updated, in revision order (issue 22, /api/events on a fleet).
func TestChangeEvents_DeriveTheCommittedEventsFromRecords_Issue22(t *testing.T) {
	const now = 1000.0
	claim := func(task, owner string, epoch int64, at float64) *coord.Claim {
		return &coord.Claim{TaskID: task, Owner: owner, Status: coord.StatusClaimed, Epoch: epoch, ClaimedAt: at, ExpiresAt: at + 60, Paths: []string{task}}
	}
	with := func(c *coord.Claim, f func(*coord.Claim)) *coord.Claim {
		n := *c
		f(&n)
		return &n
	}
	rec := func(key string, c *coord.Claim) *record {
		return &record{key: key, claim: true, raw: payload(t, coord.ClaimGranted{Claim: c})}
	}
	put := func(rev int64, key string, prev *record, c *coord.Claim) change {
		return change{key: key, claim: true, rev: rev, prev: prev, raw: payload(t, coord.ClaimGranted{Claim: c})}
	}
	task := func(id, title, status string, deps ...string) *coord.BoardTask {
		return &coord.BoardTask{TaskID: id, Title: title, Status: status, DependsOn: deps, CreatedBy: "beta/bob", Version: 1}
	}
	putTask := func(rev int64, prev, n *coord.BoardTask) change {
		c := change{key: "ns/beta/board/" + n.TaskID, rev: rev, raw: payload(t, coord.TaskPosted{Task: n})}
		if prev != nil {
			c.prev = &record{key: c.key, raw: payload(t, coord.TaskPosted{Task: prev})}
		}
		return c
	}
	t1 := claim("T1", "alpha/ann", 1, now-10)
	renewed := with(t1, func(c *coord.Claim) { c.Epoch, c.ClaimedAt, c.ExpiresAt = 2, now-5, now+55 })
	lapsed := with(t1, func(c *coord.Claim) { c.ExpiresAt = now - 100 })
	anew := claim("T1", "alpha/cid", 3, now-1)
	checked := with(renewed, func(c *coord.Claim) { c.Checkpoint = "step-2" })
	working := with(checked, func(c *coord.Claim) { c.Status = coord.StatusWorking })
	handed := with(working, func(c *coord.Claim) { c.Owner, c.Epoch = "alpha/dan", 4 })
	moved := with(handed, func(c *coord.Claim) { c.Owner, c.Epoch = "beta/bob", 5 })
	decoded := rec("ns/alpha/claims/T1", handed)
	decoded.c, decoded.done, decoded.raw = handed, true, nil // a record a read decoded already
	k1, k2 := "ns/alpha/claims/T1", "ns/beta/claims/T1"
	t2 := claim("T2", "beta/bob", 6, now-1)
	t3 := claim("T3", "beta/bob", 7, now-100) // its lease ran out at now-40
	b1 := task("B1", "Ship", "open", "A1")
	chs := []change{
		put(10, k1, nil, t1),
		put(11, k1, rec(k1, t1), renewed),
		put(12, k1, rec(k1, lapsed), anew),
		put(13, k1, rec(k1, renewed), checked),
		put(14, k1, rec(k1, checked), working),
		put(15, k1, rec(k1, working), handed),
		{key: k1, claim: true, rev: 16, prev: decoded}, put(16, k2, nil, moved), // one transaction: the key moves
		put(17, "ns/beta/claims/T2", nil, t2),
		{key: "ns/beta/claims/T2", claim: true, rev: 18, prev: rec("ns/beta/claims/T2", t2)},
		{key: "ns/beta/claims/T3", claim: true, rev: 18, prev: rec("ns/beta/claims/T3", t3)},
		putTask(19, nil, b1),
		putTask(20, b1, task("B1", "Ship it", "open", "A1")),
		putTask(21, task("B1", "Ship it", "open", "A1"), task("B1", "Ship it", "done", "A1")),
		{key: "ns/beta/board/B0", rev: 22, prev: &record{raw: payload(t, coord.TaskPosted{Task: task("B0", "Gone", "open")})}},
	}
	var got []string
	for _, ev := range changeEvents(chs, now) {
		got = append(got, describe(ev))
	}
	want := []string{
		"granted T1 alpha/ann e1 renewal=false",
		"granted T1 alpha/ann e2 renewal=true",
		"granted T1 alpha/cid e3 renewal=false",
		`checkpoint T1 "step-2"`,
		"updated T1 working",
		"handoff T1 alpha/dan from alpha/ann",
		"handoff T1 beta/bob from alpha/dan",
		"granted T2 beta/bob e6 renewal=false",
		"released T2 beta/bob e6",
		"expired T3 e7",
		`task B1 open by="beta/bob" update=false redeclared=false`,
		`task B1 open by="" update=false redeclared=true`,
		`task B1 done by="" update=true redeclared=false`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("derived events:\n%s\nwant:\n%s", fmt.Sprintln(got), fmt.Sprintln(want))
	}
}
