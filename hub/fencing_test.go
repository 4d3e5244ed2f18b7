package hub

// Fencing integers over real sockets: an epoch or expected_version that is
// a JSON number but not an integer lexeme (7.5, and 7.0 too) is refused
// with the verb's own refusal frame, as a stale epoch is, and changes
// nothing; the hub never truncates a fence (INV-EF-2, INV-EF-3).

import (
	"encoding/json"
	"strconv"
	"testing"
)

// fencingSetup starts a hub with p/a holding T1 and p/b online, and
// returns both sockets and T1's epoch.
func fencingSetup(t *testing.T) (a, b *tconn, epoch int64) {
	t.Helper()
	th := startHub(t, Config{})
	a, b = th.join("p/a"), th.join("p/b")
	a.send(f("claim", "task_id", "T1", "paths", []string{"src/a.go"}))
	g := a.expect("claim_granted")
	epoch, err := strconv.ParseInt(string(g["epoch"].(json.Number)), 10, 64)
	if err != nil {
		t.Fatalf("claim_granted epoch %v: %v", g["epoch"], err)
	}
	return a, b, epoch
}

// wantRefusal reads a's next frame of type typ and checks its code and task.
func wantRefusal(t *testing.T, a *tconn, typ, code string) {
	t.Helper()
	m := a.expect(typ)
	if m["error_code"] != code || m["task_id"] != "T1" || m["target"] != "p/a" {
		t.Fatalf("got %v, want %s with error_code %s, task_id T1, target p/a", m, typ, code)
	}
}

func TestFencing_NonIntegerEpochIsRefusedAndChangesNothing_INV_EF_2(t *testing.T) {
	t.Parallel()
	a, _, e := fencingSetup(t)
	for _, bad := range []string{strconv.FormatInt(e, 10) + ".5", strconv.FormatInt(e, 10) + ".0", strconv.FormatInt(e, 10) + "e0"} {
		epoch := json.Number(bad)
		a.send(f("release", "task_id", "T1", "epoch", epoch, "idem_key", "rel"))
		wantRefusal(t, a, "release_denied", "EPOCH_INVALID")
		a.send(f("task_update", "task_id", "T1", "status", "working", "epoch", epoch))
		wantRefusal(t, a, "error", "EPOCH_INVALID")
		a.send(f("checkpoint", "task_id", "T1", "checkpoint", "c", "epoch", epoch))
		wantRefusal(t, a, "checkpoint_denied", "EPOCH_INVALID")
		a.send(f("handoff", "task_id", "T1", "to_agent", "p/b", "epoch", epoch))
		wantRefusal(t, a, "handoff_denied", "EPOCH_INVALID")
	}
	// Nothing moved: the version is still 0 (no update, no checkpoint), the
	// claim is still A's at its epoch, and the refused release did not spend
	// its idempotency key.
	a.send(f("task_update", "task_id", "T1", "status", "working", "expected_version", 0, "epoch", e))
	if u := a.expect("task_updated"); u["version"] != json.Number("1") {
		t.Fatalf("task_updated %v, want version 1", u)
	}
	a.send(f("release", "task_id", "T1", "epoch", e, "idem_key", "rel"))
	if r := a.expect("release_granted"); r["owner"] != "p/a" {
		t.Fatalf("release_granted %v, want owner p/a", r)
	}
}

func TestFencing_NonIntegerExpectedVersionIsRefusedAndChangesNothing_INV_EF_3(t *testing.T) {
	t.Parallel()
	a, _, _ := fencingSetup(t)
	for _, bad := range []string{"0.5", "0.0", "-0.5", "1e0"} {
		a.send(f("task_update", "task_id", "T1", "status", "working", "expected_version", json.Number(bad)))
		wantRefusal(t, a, "error", "VERSION_INVALID")
	}
	a.send(f("task_update", "task_id", "T1", "status", "working", "expected_version", 0))
	if u := a.expect("task_updated"); u["version"] != json.Number("1") || u["status"] != "working" {
		t.Fatalf("task_updated %v, want version 1 (the refused updates changed nothing)", u)
	}
}
