package hub

import (
	"fmt"
	"testing"
)

// f builds a frame from A (p/a) unless sender is given.
func f(typ string, kv ...any) map[string]any {
	m := map[string]any{"sender": "p/a", "target": "System", "type": typ, "payload": "", "timestamp": nowTS()}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// TestProtocol_EveryVerbAndRefusal runs one case per verb and per refusal
// over real sockets: A (p/a) and B (p/b) are online; setup frames are sent
// by their sender, then send, and A must receive want with fields.
func TestProtocol_EveryVerbAndRefusal(t *testing.T) {
	claimT1 := f("claim", "task_id", "T1", "paths", []string{"src/a.go"})
	cases := []struct {
		name   string
		setup  []map[string]any
		send   map[string]any
		want   string
		fields map[string]any
	}{
		{"claim granted", nil, claimT1, "claim_granted",
			map[string]any{"task_id": "T1", "owner": "p/a", "status": "claimed", "version": "0", "target": "all", "payload": "Task 'T1' claimed by p/a."}},
		{"claim task id required", nil, f("claim"), "claim_denied",
			map[string]any{"reason_code": "TASK_ID_REQUIRED", "error_code": "TASK_ID_REQUIRED", "payload": "Task ID is required."}},
		{"claim lease live", []map[string]any{f("claim", "sender", "p/b", "task_id", "T1")}, claimT1, "claim_denied",
			map[string]any{"reason_code": "LEASE_LIVE", "payload": "Task 'T1' is already claimed by p/b.", "target": "p/a"}},
		{"claim scope conflict", []map[string]any{f("claim", "sender", "p/b", "task_id", "T0", "paths", []string{"src"})}, claimT1, "claim_denied",
			map[string]any{"reason_code": "SCOPE_CONFLICT", "payload": "Task 'T1' file scope conflicts with 'T0' held by p/b."}},
		{"claim quota", []map[string]any{claimT1}, f("claim", "task_id", "T2", "paths", []string{"b"}), "claim_denied",
			map[string]any{"reason_code": "QUOTA_EXCEEDED"}},
		{"release granted unsupported", []map[string]any{claimT1}, f("release", "task_id", "T1"), "release_granted",
			map[string]any{"task_id": "T1", "owner": "p/a"}},
		{"release receipt note", []map[string]any{claimT1}, f("release", "task_id", "T1", "evidence", []string{"ok"}, "freshness_seconds", 1.5), "ledger_progress_posted",
			map[string]any{"payload": "Release receipt from p/a"}},
		{"release not claimed", nil, f("release", "task_id", "T9"), "release_denied",
			map[string]any{"task_id": "T9", "payload": "Task 'T9' is not currently claimed.", "error_code": "NOT_CLAIMED"}},
		{"release not owner", []map[string]any{f("claim", "sender", "p/b", "task_id", "T1")}, f("release", "task_id", "T1"), "release_denied",
			map[string]any{"payload": "Task 'T1' is owned by p/b, not p/a.", "error_code": "NOT_OWNER"}},
		{"release stale epoch", []map[string]any{claimT1}, f("release", "task_id", "T1", "epoch", 99), "release_denied",
			map[string]any{"payload": "Task 'T1' epoch is stale (current 1).", "error_code": "EPOCH_STALE"}},
		{"task_update", []map[string]any{claimT1}, f("task_update", "task_id", "T1", "status", "working", "expected_version", 0), "task_updated",
			map[string]any{"status": "working", "version": "1", "payload": "Task 'T1' updated by p/a."}},
		{"task_update version conflict", []map[string]any{claimT1}, f("task_update", "task_id", "T1", "status", "working", "expected_version", 3), "error",
			map[string]any{"payload": "Task 'T1' version conflict (current 0).", "error_code": "VERSION_CONFLICT", "target": "p/a"}},
		{"task_update illegal transition", []map[string]any{claimT1, f("task_update", "task_id", "T1", "status", "done")}, f("task_update", "task_id", "T1", "status", "working"), "error",
			map[string]any{"payload": "Task 'T1' cannot transition done -> working.", "error_code": "ILLEGAL_TRANSITION"}},
		{"task_update not found", nil, f("task_update", "task_id", "T9", "status", "working"), "error",
			map[string]any{"payload": "Task 'T9' not found.", "error_code": "TASK_NOT_FOUND"}},
		{"handoff granted", []map[string]any{claimT1}, f("handoff", "task_id", "T1", "to_agent", "p/b", "note", "yours"), "handoff_granted",
			map[string]any{"owner": "p/b", "previous_owner": "p/a", "note": "yours", "payload": "Task 'T1' handed from p/a to p/b."}},
		{"handoff target offline", []map[string]any{claimT1}, f("handoff", "task_id", "T1", "to_agent", "p/zz"), "handoff_denied",
			map[string]any{"payload": "Handoff target 'p/zz' is not online.", "error_code": "TARGET_OFFLINE", "task_id": "T1"}},
		{"checkpoint saved (private)", []map[string]any{claimT1}, f("checkpoint", "task_id", "T1", "checkpoint", "step-1"), "checkpoint_saved",
			map[string]any{"target": "p/a", "version": "1", "payload": "Checkpoint saved for 'T1' by p/a."}},
		{"checkpoint not found", nil, f("checkpoint", "task_id", "T9", "checkpoint", "x"), "checkpoint_denied",
			map[string]any{"payload": "Task 'T9' not found.", "task_id": "T9"}},
		{"wait granted", []map[string]any{f("claim", "sender", "p/b", "task_id", "T1")}, f("wait_request", "task_id", "T1"), "wait_granted",
			map[string]any{"holder": "p/b", "payload": "Waiting for 'T1' held by p/b.", "target": "p/a"}},
		{"wait not claimed", nil, f("wait_request", "task_id", "T9"), "wait_denied",
			map[string]any{"payload": "Task 'T9' is not claimed; nothing to wait for.", "error_code": "NOT_CLAIMED"}},
		{"wait own task", []map[string]any{claimT1}, f("wait_request", "task_id", "T1"), "wait_denied",
			map[string]any{"payload": "You already hold 'T1'.", "error_code": "ALREADY_HOLDER"}},
		{"wait ready on release", []map[string]any{f("claim", "sender", "p/b", "task_id", "T1"), f("wait_request", "task_id", "T1")},
			f("release", "sender", "p/b", "task_id", "T1"), "wait_ready", map[string]any{"task_id": "T1", "reason": "release", "target": "p/a"}},
		{"resource offered", nil, f("resource_offer", "kind", "gpu", "name", "h100", "capacity", 2), "resource_offered",
			map[string]any{"key": "p/a:gpu:h100", "payload": "Resource offered by p/a"}},
		{"resource invalid", nil, f("resource", "kind", "gpu"), "error",
			map[string]any{"payload": "resource offer requires kind+name", "error_code": "RESOURCE_INVALID"}},
		{"ledger_task posted", nil, f("ledger_task", "task_id", "d", "title", "Design"), "ledger_task_posted",
			map[string]any{"payload": "Task 'd' declared by p/a."}},
		{"ledger_task title required", nil, f("ledger_task", "task_id", "d"), "error",
			map[string]any{"payload": "Task title is required.", "error_code": "TITLE_REQUIRED"}},
		{"ledger_task expected_version not int", nil, f("ledger_task", "task_id", "d", "title", "x", "expected_version", "1"), "error",
			map[string]any{"payload": "Malformed frame: 'expected_version' must be an integer."}},
		{"ledger_task_update", []map[string]any{f("ledger_task", "task_id", "d", "title", "Design")}, f("ledger_task_update", "task_id", "d", "status", "done"), "ledger_task_updated",
			map[string]any{"payload": "Task 'd' plan updated."}},
		{"ledger_task_update unknown task", nil, f("ledger_task_update", "task_id", "nope", "status", "done"), "error",
			map[string]any{"payload": "Task 'nope' is not on the board."}},
		{"ledger_progress", nil, f("ledger_progress", "task_id", "d", "payload", "started"), "ledger_progress_posted",
			map[string]any{"payload": "Progress from p/a"}},
		{"ledger_progress unknown kind", nil, f("ledger_progress", "task_id", "d", "kind", "gossip", "text", "x"), "error",
			map[string]any{"payload": "Unknown progress kind 'gossip'."}},
		{"board_request", []map[string]any{f("ledger_task", "task_id", "d", "title", "Design")}, f("board_request"), "board_snapshot",
			map[string]any{"payload": "Board snapshot", "target": "p/a"}},
		{"advertise", nil, f("advertise", "description", "x", "skills", []string{"go"}), "capability_advertised",
			map[string]any{"agent": "p/a", "payload": "Capability advertised by p/a"}},
		{"advertise persist not bool", nil, f("advertise", "persist", "yes"), "error",
			map[string]any{"payload": "Malformed frame: 'persist' must be a boolean."}},
		{"manifest_request", []map[string]any{f("advertise", "description", "x")}, f("manifest_request"), "manifest_snapshot",
			map[string]any{"payload": "Manifest snapshot"}},
		{"state_request", []map[string]any{claimT1}, f("state_request"), "state_snapshot",
			map[string]any{"payload": "State snapshot", "target": "p/a"}},
		{"who_request", nil, f("who_request"), "who_snapshot",
			map[string]any{"online_agents": "[p/a p/b]", "connected_clients": "2", "mailbox_pending": "<nil>"}},
		{"history_request", []map[string]any{f("chat", "target", "all", "payload", "hi")}, f("history_request", "limit", 5), "history_snapshot",
			map[string]any{"requested_limit": "5"}},
		{"history_request all", nil, f("history_request"), "history_snapshot",
			map[string]any{"requested_limit": "all"}},
		{"resume_request", []map[string]any{f("chat", "target", "all", "payload", "hi")}, f("resume_request", "since", 0), "resume_snapshot",
			map[string]any{"since": "0"}},
		{"chat broadcast", nil, f("chat", "target", "all", "payload", "hello"), "chat",
			map[string]any{"sender": "p/a", "payload": "hello", "msg_id": "1"}},
		{"chat receipt", nil, f("chat", "target", "p/b", "payload", "x", "receipt_requested", true, "client_msg_id", "c1"), "delivery_receipt",
			map[string]any{"delivered": "true", "recipients": "[p/b]", "payload": "delivered to p/b", "client_msg_id": "c1"}},
		{"chat receipt offline", nil, f("chat", "target", "p/zz", "payload", "x", "receipt_requested", true), "delivery_receipt",
			map[string]any{"delivered": "false", "reason": "no_online_recipient", "dead_lettered": "true"}},
		{"ping", nil, f("ping", "ping_id", "r1"), "pong",
			map[string]any{"payload": "pong", "target": "p/a", "ping_id": "r1"}},
		{"unknown type", nil, f("frobnicate"), "error",
			map[string]any{"payload": "Unknown message type 'frobnicate'.", "target": "p/a"}},
		{"malformed json", nil, nil, "error",
			map[string]any{"payload": "Malformed JSON.", "target": "all", "error_code": "malformed_json"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{}
			if c.name == "claim quota" {
				cfg.Limits = defaultLimitsWith(func(l *limitsT) { l.MaxClaimsPerPrincipal = 1 })
			}
			th := startHub(t, cfg)
			a := th.join("p/a")
			b := th.join("p/b")
			for _, s := range c.setup {
				if s["sender"] == "p/b" {
					b.send(s)
					b.sync("p/b")
				} else {
					a.send(s)
				}
				a.sync("p/a")
			}
			if c.send == nil {
				a.sendRaw(`{"sender": "p/a", "type": "chat"`)
			} else if c.send["sender"] == "p/b" {
				b.send(c.send)
			} else {
				a.send(c.send)
			}
			got := a.expect(c.want)
			for k, v := range c.fields {
				if g := fmt.Sprint(got[k]); g != fmt.Sprint(v) {
					t.Errorf("%s.%s = %s, want %v (frame %v)", c.want, k, g, v, got)
				}
			}
			if got["hub_id"] != th.h.HubID() && c.want != "chat" {
				t.Errorf("hub_id = %v", got["hub_id"])
			}
		})
	}
}
