package hub

import "testing"

func TestSmoke_ClaimGrantedOverTheWire(t *testing.T) {
	th := startHub(t, Config{})
	a := th.join("p/a")
	a.send(map[string]any{"sender": "p/a", "type": "claim", "target": "System", "task_id": "T1", "paths": []string{"x"}})
	m := a.expect("claim_granted")
	t.Log(m)
}
