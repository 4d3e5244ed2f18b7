package hub

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// INV-ME-5 on the wire: the claim cap is charged to a server-derived quota
// principal, so an agent cannot multiply its budget by connecting under
// more names.
func TestQuota_NameRotationDoesNotMultiplyTheBudget_INV_ME_5(t *testing.T) {
	th := startHub(t, Config{Limits: coord.Limits{MaxClaimsPerPrincipal: 2}})
	a := th.join("proj/a")
	for _, task := range []string{"T1", "T2"} {
		a.send(map[string]any{"sender": "proj/a", "type": "claim", "task_id": task, "paths": []string{task + ".go"}})
		a.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == task })
	}
	b := th.join("proj/b") // another name, same host: the same open-host principal
	b.send(map[string]any{"sender": "proj/b", "type": "claim", "task_id": "T3", "paths": []string{"T3.go"}})
	d := b.expect("claim_denied")
	if d["reason_code"] != "QUOTA_EXCEEDED" {
		t.Fatalf("a second name on the same host got %v; want QUOTA_EXCEEDED", d)
	}
	// Renewal by the owner stays free at the cap (INV-LL-4).
	a.send(map[string]any{"sender": "proj/a", "type": "claim", "task_id": "T1", "paths": []string{"T1.go"}})
	a.expectWhere("claim_granted", func(m map[string]any) bool { return m["task_id"] == "T1" })
}

func TestQuota_TokenPrincipalIsTheReferenceDigest(t *testing.T) {
	th := startHub(t, Config{Token: "s3cret"})
	sum := sha256.Sum256([]byte("synapse-channel:claim-quota-principal:v1\x00s3cret"))
	want := "auth-token:" + hex.EncodeToString(sum[:])
	s := &session{h: th.h, host: "127.0.0.1"}
	if got := s.principal(); got != want {
		t.Fatalf("principal %q, want %q (PROTOCOL.md §5.1)", got, want)
	}
	open := &session{h: &Hub{cfg: Config{}}, host: "10.1.2.3"}
	if got := open.principal(); got != "open-host:10.1.2.3" {
		t.Fatalf("open hub principal %q", got)
	}
}
