package hub

// The malformed-input suite: bad frames over a real socket after
// registration. Each gets a typed reply (decode refusals: `error` with the
// reference's text and target "all"; verb refusals: the verb's refusal
// frame with an error_code), the socket stays usable, nothing reaches the
// other socket, and the state and the board are unchanged.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// malformedRow is one bad frame. In frame, $A and $B stand for the two
// agents' names.
type malformedRow struct {
	name    string
	frame   string
	binary  bool
	typ     string         // the reply's type
	payload string         // its payload with names as letters; "" = the reference's text is unknown, type only
	decode  bool           // a decode refusal: target "all" (traces/errors.jsonl), error_code optional
	fields  map[string]any // further fields the reply must carry
}

const (
	mfMalformed = "Malformed JSON."
	mfNotObject = "Malformed frame: expected a JSON object."
)

// mfDeep is a chat frame whose nesting, counting the frame itself, is depth.
func mfDeep(depth int, open, close, inner string) string {
	return `{"sender":"$A","target":"all","type":"chat","payload":"deep","nest":` +
		strings.Repeat(open, depth-2) + inner + strings.Repeat(close, depth-2) + `}`
}

// mfNotNumber is our refusal of a strict fencing field of the wrong type.
func mfNotNumber(field string) string { return "Malformed frame: '" + field + "' must be a number." }

func mfObjects(depth int) string { return mfDeep(depth, `{"d":`, `}`, `{}`) }
func mfArrays(depth int) string  { return mfDeep(depth, `[`, `]`, `[]`) }

func malformedRows() []malformedRow {
	rows := []malformedRow{
		// Not JSON at all (PROTOCOL.md §1.2): "Malformed JSON.", target "all".
		{name: "truncated object", frame: `{"sender": "$A", "type": "chat", "payload": "x"`},
		{name: "truncated inside a string", frame: `{"sender": "$A", "type": "cha`},
		{name: "lone open brace", frame: `{`},
		{name: "empty frame", frame: ``},
		{name: "whitespace only", frame: " \t\r\n "},
		{name: "UTF-8 BOM before the object", frame: "\ufeff" + `{"sender":"$A","type":"state_request"}`},
		{name: "NaN literal", frame: `{"sender":"$A","target":"all","type":"chat","payload":NaN}`},
		{name: "Infinity literal", frame: `{"sender":"$A","type":"claim","task_id":"X","ttl_seconds":Infinity}`},
		{name: "-Infinity literal", frame: `{"sender":"$A","type":"claim","task_id":"X","ttl_seconds":-Infinity}`},
		{name: "1e400 overflows a float", frame: `{"sender":"$A","type":"chat","payload":1e400}`},
		{name: "-1e400 overflows a float", frame: `{"sender":"$A","type":"chat","payload":-1e400}`},
		{name: "huge integer", frame: `{"sender":"$A","type":"release","task_id":"MINE","epoch":123456789012345678901234567890}`},
		{name: "integer just past int64", frame: `{"sender":"$A","type":"release","task_id":"MINE","epoch":9223372036854775808}`},
		{name: "invalid UTF-8 byte 0xff", frame: "{\"sender\":\"$A\",\"type\":\"chat\",\"payload\":\"\xff\"}"},
		{name: "overlong UTF-8 encoding", frame: "{\"sender\":\"$A\",\"type\":\"chat\",\"payload\":\"\xc0\xaf\"}"},
		{name: "UTF-8-encoded surrogate", frame: "{\"sender\":\"$A\",\"type\":\"chat\",\"payload\":\"\xed\xa0\x80\"}"},
		{name: "truncated UTF-8 sequence", frame: "{\"sender\":\"$A\",\"type\":\"chat\",\"payload\":\"\xe2\x82\"}"},
		{name: "objects nested 65 deep", frame: mfObjects(65)},
		{name: "objects nested 70 deep", frame: mfObjects(70)},
		{name: "objects nested 1000 deep", frame: mfObjects(1000)},
		{name: "arrays nested 65 deep", frame: mfArrays(65)},
		{name: "unclosed brackets 1000 deep", frame: `{"sender":"$A","nest":` + strings.Repeat(`[`, 1000)},
		{name: "trailing garbage", frame: `{"sender":"$A","type":"state_request"} x`},
		{name: "two objects in one frame", frame: `{"sender":"$A","type":"state_request"}{"sender":"$A","type":"state_request"}`},
		{name: "single-quoted strings", frame: `{'sender': '$A', 'type': 'chat'}`},
		{name: "unquoted keys", frame: `{sender: "$A", type: "chat"}`},
		{name: "trailing comma", frame: `{"sender":"$A","type":"chat",}`},
		{name: "comment", frame: `{"sender":"$A","type":"chat" /* hi */}`},
		{name: "raw control character in a string", frame: "{\"sender\":\"$A\",\"type\":\"chat\",\"payload\":\"a\x01b\"}"},
		{name: "invalid escape", frame: `{"sender":"$A","type":"chat","payload":"\x41"}`},
		{name: "number with a leading zero", frame: `{"sender":"$A","type":"history_request","limit":01}`},
		{name: "hex number", frame: `{"sender":"$A","type":"history_request","limit":0x10}`},
		{name: "binary message with non-UTF-8 bytes", frame: "\x00\xff\xfe{", binary: true},

		// JSON, but not an object.
		{name: "array", frame: `["$A", "chat"]`, payload: mfNotObject},
		{name: "empty array", frame: `[]`, payload: mfNotObject},
		{name: "string", frame: `"hello"`, payload: mfNotObject},
		{name: "number", frame: `42`, payload: mfNotObject},
		{name: "true", frame: `true`, payload: mfNotObject},
		{name: "null", frame: `null`, payload: mfNotObject},

		// Duplicate keys: the last one wins, as in Python.
		{name: "duplicate target, the last not a string", frame: `{"sender":"$A","target":"all","target":7,"type":"chat","payload":"x"}`,
			payload: "Malformed frame: 'target' must be a string."},
		{name: "duplicate type, the last unknown", frame: `{"sender":"$A","type":"state_request","type":"frobnicate"}`,
			typ: "error", payload: "Unknown message type 'frobnicate'."},

		// Unknown verbs.
		{name: "unknown type", frame: `{"sender":"$A","target":"System","type":"frobnicate","payload":"?"}`,
			typ: "error", payload: "Unknown message type 'frobnicate'."},
		{name: "unknown type with a NUL", frame: `{"sender":"$A","target":"System","type":"claim\u0000"}`,
			typ: "error", payload: "Unknown message type 'claim\x00'."},

		// claim with fields of the wrong type: non-list paths mean the whole
		// worktree, a bad ttl_seconds means the default (PROTOCOL.md §2.4).
		// Each is aimed at B's claims, so it is refused whatever the hub makes
		// of the bad field.
		{name: "claim paths as a string", frame: `{"sender":"$A","target":"System","type":"claim","task_id":"X1","worktree":"/wt/held","paths":"src/x.go"}`,
			typ: "claim_denied", payload: "Task 'X1' file scope conflicts with 'HELD' held by B.", fields: map[string]any{"reason_code": "SCOPE_CONFLICT", "task_id": "X1"}},
		{name: "claim paths as a number", frame: `{"sender":"$A","target":"System","type":"claim","task_id":"X2","worktree":"/wt/held","paths":7}`,
			typ: "claim_denied", payload: "Task 'X2' file scope conflicts with 'HELD' held by B.", fields: map[string]any{"reason_code": "SCOPE_CONFLICT", "task_id": "X2"}},
		{name: "claim paths as an object", frame: `{"sender":"$A","target":"System","type":"claim","task_id":"X3","worktree":"/wt/held","paths":{"src":true}}`,
			typ: "claim_denied", payload: "Task 'X3' file scope conflicts with 'HELD' held by B.", fields: map[string]any{"reason_code": "SCOPE_CONFLICT", "task_id": "X3"}},
		{name: "claim ttl_seconds as a bool", frame: `{"sender":"$A","target":"System","type":"claim","task_id":"HELD","ttl_seconds":true}`,
			typ: "claim_denied", payload: "Task 'HELD' is already claimed by B.", fields: map[string]any{"reason_code": "LEASE_LIVE"}},
		{name: "claim ttl_seconds as garbage", frame: `{"sender":"$A","target":"System","type":"claim","task_id":"HELD","ttl_seconds":"soon"}`,
			typ: "claim_denied", payload: "Task 'HELD' is already claimed by B.", fields: map[string]any{"reason_code": "LEASE_LIVE"}},
		{name: "claim ttl_seconds huge", frame: `{"sender":"$A","target":"System","type":"claim","task_id":"HELD","ttl_seconds":1e308}`,
			typ: "claim_denied", payload: "Task 'HELD' is already claimed by B.", fields: map[string]any{"reason_code": "LEASE_LIVE"}},
		{name: "claim without task_id", frame: `{"sender":"$A","target":"System","type":"claim","payload":""}`,
			typ: "claim_denied", payload: "Task ID is required.", fields: map[string]any{"reason_code": "TASK_ID_REQUIRED"}},

		// Fencing fields of the wrong type on A's own claim: a strict epoch
		// is a JSON number, not a bool (PROTOCOL.md §2.5, §9.6). If the hub
		// ignored it, MINE would be released and the state check fails. The
		// reference's wording is not recorded; the text is ours.
		{name: "release epoch as a string", frame: `{"sender":"$A","target":"System","type":"release","task_id":"MINE","epoch":"1"}`,
			typ: "error", payload: mfNotNumber("epoch")},
		{name: "release epoch as a bool", frame: `{"sender":"$A","target":"System","type":"release","task_id":"MINE","epoch":true}`,
			typ: "error", payload: mfNotNumber("epoch")},
		{name: "release epoch as an object", frame: `{"sender":"$A","target":"System","type":"release","task_id":"MINE","epoch":{"n":1}}`,
			typ: "error", payload: mfNotNumber("epoch")},
		{name: "task_update epoch as a string", frame: `{"sender":"$A","target":"System","type":"task_update","task_id":"MINE","status":"working","epoch":"x"}`,
			typ: "error", payload: mfNotNumber("epoch")},
		{name: "task_update expected_version as a string", frame: `{"sender":"$A","target":"System","type":"task_update","task_id":"MINE","status":"working","expected_version":"0"}`,
			typ: "error", payload: mfNotNumber("expected_version")},
		{name: "checkpoint epoch as a list", frame: `{"sender":"$A","target":"System","type":"checkpoint","task_id":"MINE","checkpoint":"c","epoch":[1]}`,
			typ: "error", payload: mfNotNumber("epoch")},
		{name: "handoff epoch as a bool", frame: `{"sender":"$A","target":"System","type":"handoff","task_id":"MINE","to_agent":"$B","epoch":false}`,
			typ: "error", payload: mfNotNumber("epoch")},

		// Fencing numbers that are not integer lexemes: the verb's own
		// refusal, like a stale epoch; MINE's epoch is 2 (INV-EF-2, INV-EF-3).
		{name: "release epoch 2.5", frame: `{"sender":"$A","target":"System","type":"release","task_id":"MINE","epoch":2.5}`,
			typ: "release_denied", payload: "Task 'MINE' epoch 2.5 is not an integer.", fields: map[string]any{"error_code": "EPOCH_INVALID", "task_id": "MINE"}},
		{name: "release epoch 2.0", frame: `{"sender":"$A","target":"System","type":"release","task_id":"MINE","epoch":2.0}`,
			typ: "release_denied", payload: "Task 'MINE' epoch 2.0 is not an integer.", fields: map[string]any{"error_code": "EPOCH_INVALID"}},
		{name: "task_update expected_version 0.5", frame: `{"sender":"$A","target":"System","type":"task_update","task_id":"MINE","status":"working","expected_version":0.5}`,
			typ: "error", payload: "Task 'MINE' expected_version 0.5 is not an integer.", fields: map[string]any{"error_code": "VERSION_INVALID", "task_id": "MINE"}},

		// Other verbs.
		{name: "release evidence with non-strings on B's claim", frame: `{"sender":"$A","target":"System","type":"release","task_id":"HELD","evidence":[1,{"a":1},null],"approvals":{"x":1}}`,
			typ: "release_denied", payload: "Task 'HELD' is owned by B, not A."},
		{name: "handoff without to_agent", frame: `{"sender":"$A","target":"System","type":"handoff","task_id":"MINE"}`,
			typ: "handoff_denied", payload: "Handoff target 'System' is not online."},
		{name: "task_update with an unknown status", frame: `{"sender":"$A","target":"System","type":"task_update","task_id":"MINE","status":"bogus"}`,
			typ: "error", payload: "Task 'MINE' cannot transition claimed -> bogus."},
		{name: "checkpoint on B's claim", frame: `{"sender":"$A","target":"System","type":"checkpoint","task_id":"HELD","checkpoint":"c"}`,
			typ: "checkpoint_denied", payload: "Task 'HELD' owned by B, not A."},
		{name: "wait_request on an unclaimed task", frame: `{"sender":"$A","target":"System","type":"wait_request","task_id":"nope"}`,
			typ: "wait_denied", payload: "Task 'nope' is not claimed; nothing to wait for."},
		{name: "ledger_task without title", frame: `{"sender":"$A","target":"System","type":"ledger_task","task_id":"ship"}`,
			typ: "error", payload: "Task title is required."},
		{name: "ledger_task without task_id", frame: `{"sender":"$A","target":"System","type":"ledger_task","title":"Ship"}`,
			typ: "error", payload: "Task ID is required."},
		{name: "ledger_task expected_version as a string", frame: `{"sender":"$A","target":"System","type":"ledger_task","task_id":"ship","title":"Ship","expected_version":"1"}`,
			typ: "error", payload: "Malformed frame: 'expected_version' must be an integer."},
		{name: "ledger_task expected_version as a float", frame: `{"sender":"$A","target":"System","type":"ledger_task","task_id":"ship","title":"Ship","expected_version":1.0}`,
			typ: "error", payload: "Malformed frame: 'expected_version' must be an integer."},
		{name: "ledger_task expected_version as a bool", frame: `{"sender":"$A","target":"System","type":"ledger_task","task_id":"ship","title":"Ship","expected_version":true}`,
			typ: "error", payload: "Malformed frame: 'expected_version' must be an integer."},
		{name: "ledger_task_update with an unknown status", frame: `{"sender":"$A","target":"System","type":"ledger_task_update","task_id":"plan","status":"bogus"}`,
			typ: "error", payload: "Unknown ledger status 'bogus'."},
		{name: "ledger_task_update of a task not on the board", frame: `{"sender":"$A","target":"System","type":"ledger_task_update","task_id":"nope","status":"done"}`,
			typ: "error", payload: "Task 'nope' is not on the board."},
		{name: "ledger_progress with an unknown kind", frame: `{"sender":"$A","target":"System","type":"ledger_progress","task_id":"plan","payload":"x","kind":"gossip"}`,
			typ: "error", payload: "Unknown progress kind 'gossip'."},
		{name: "resource without kind", frame: `{"sender":"$A","target":"System","type":"resource","name":"h200"}`,
			typ: "error", payload: "resource offer requires kind+name"},
		{name: "resource with a blank name", frame: `{"sender":"$A","target":"System","type":"resource","kind":"gpu","name":"  "}`,
			typ: "error", payload: "resource offer requires kind+name"},
		{name: "advertise persist as a string", frame: `{"sender":"$A","target":"System","type":"advertise","persist":"yes"}`,
			typ: "error", payload: "Malformed frame: 'persist' must be a boolean."},
		{name: "advertise dispatchable as a number", frame: `{"sender":"$A","target":"System","type":"advertise","dispatchable":1}`,
			typ: "error", payload: "Malformed frame: 'dispatchable' must be a boolean."},
		{name: "release of an unclaimed task", frame: `{"sender":"$A","target":"System","type":"release","task_id":"nope"}`,
			typ: "release_denied", payload: "Task 'nope' is not currently claimed."},
		{name: "task_update on B's claim", frame: `{"sender":"$A","target":"System","type":"task_update","task_id":"HELD","status":"working"}`,
			typ: "error", payload: "Task 'HELD' owned by B, not A."},
		{name: "checkpoint without task_id", frame: `{"sender":"$A","target":"System","type":"checkpoint","checkpoint":"c"}`,
			typ: "checkpoint_denied", payload: "Task ID is required."},
		{name: "handoff to its own owner", frame: `{"sender":"$A","target":"System","type":"handoff","task_id":"MINE","to_agent":"$A"}`,
			typ: "handoff_denied", payload: "Task 'MINE' is already owned by A."},
		{name: "wait_request on its own claim", frame: `{"sender":"$A","target":"System","type":"wait_request","task_id":"MINE"}`,
			typ: "wait_denied", payload: "You already hold 'MINE'."},
		{name: "ledger_progress without task_id", frame: `{"sender":"$A","target":"System","type":"ledger_progress","payload":"x"}`,
			typ: "error", payload: "Task ID is required."},
		{name: "ledger_task causal_parent as a string", frame: `{"sender":"$A","target":"System","type":"ledger_task","task_id":"ship","title":"Ship","causal_parent":"x"}`,
			typ: "error"},
		{name: "advertise for another identity", frame: `{"sender":"$A","target":"System","type":"advertise","agent":"$B"}`,
			typ: "error", payload: "Capability registration for another identity requires the connection to be that identity or a recognised receiver sidecar."},
		{name: "chat on a channel it is not a member of", frame: `{"sender":"$A","target":"all","type":"chat","payload":"x","channel":"ops"}`,
			typ: "error", payload: "not a member of channel 'ops'"},
		{name: "chat with an incomplete semantic response", frame: `{"sender":"$A","target":"$B","type":"chat","payload":"x","response_to_seq":"soon"}`,
			typ: "error"},
		// Not a refusal: an unparsable limit means "all" (PROTOCOL.md §2.12).
		{name: "history_request with limit abc", frame: `{"sender":"$A","target":"System","type":"history_request","limit":"abc"}`,
			typ: "history_snapshot", payload: "History snapshot", fields: map[string]any{"requested_limit": "all"}},
	}
	// Routing fields of every non-string JSON type (null is allowed).
	for _, field := range []string{"sender", "target", "type", "channel"} {
		for _, bad := range []struct{ name, value string }{{"number", `7`}, {"bool", `true`}, {"list", `["x"]`}, {"object", `{"x":1}`}} {
			frame := map[string]string{"sender": `"$A"`, "target": `"System"`, "type": `"state_request"`}
			frame[field] = bad.value
			text := `{"sender":` + frame["sender"] + `,"target":` + frame["target"] + `,"type":` + frame["type"]
			if field == "channel" {
				text += `,"channel":` + bad.value
			}
			rows = append(rows, malformedRow{name: field + " as a " + bad.name, frame: text + `}`,
				payload: "Malformed frame: '" + field + "' must be a string."})
		}
	}
	for i := range rows {
		if rows[i].typ == "" { // decode refusals
			rows[i].typ, rows[i].decode = "error", true
			if rows[i].payload == "" {
				rows[i].payload = mfMalformed
			}
		}
	}
	return rows
}

// mfSetup starts a hub with two registered agents: B holds HELD (the whole
// /wt/held worktree), A holds MINE, and the board has the task plan.
func mfSetup(t *testing.T, cfg Config) (a, b *tcConn, names map[string]string, norm *traceNormaliser) {
	t.Helper()
	h, err := New(cfg)
	if err != nil {
		t.Fatalf("hub.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Close(ctx)
	})
	url := tcServe(t, h)
	project := traceProject()
	names = map[string]string{"A": project + "/alpha", "B": project + "/bravo"}
	norm = newTraceNormaliser(h.HubID(), project, names)
	register := func(letter string) *tcConn {
		c := tcDial(t, url, letter)
		if w := c.NextFrame(); w.Type() != "welcome" {
			t.Fatalf("%s: first frame %s, want welcome", letter, w)
		}
		c.SendJSON(map[string]any{"sender": names[letter], "target": "System", "type": "heartbeat", "payload": "online"})
		c.Until("presence_update")
		return c
	}
	a, b = register("A"), register("B")
	step := func(c *tcConn, want string, frame map[string]any) {
		t.Helper()
		c.SendJSON(frame)
		if ev, _ := c.Until(want); ev.Type() != want {
			t.Fatalf("setup: %v", ev)
		}
	}
	step(b, "claim_granted", map[string]any{"sender": names["B"], "target": "System", "type": "claim", "task_id": "HELD", "worktree": "/wt/held"})
	step(a, "claim_granted", map[string]any{"sender": names["A"], "target": "System", "type": "claim", "task_id": "MINE", "worktree": "/wt/a", "paths": []string{"mine.txt"}})
	step(a, "ledger_task_posted", map[string]any{"sender": names["A"], "target": "System", "type": "ledger_task", "task_id": "plan", "title": "Plan"})
	tcCollect([]*tcConn{a, b}, nil) // the broadcasts' other copies
	return a, b, names, norm
}

// mfSnapshot asks c for the state and the board and returns both,
// normalised (timestamps, names), as one comparable text.
func mfSnapshot(t *testing.T, c *tcConn, name string, norm *traceNormaliser) string {
	t.Helper()
	var out []string
	for _, q := range []struct{ req, reply, field string }{{"state_request", "state_snapshot", "snapshot"}, {"board_request", "board_snapshot", "board"}} {
		c.SendJSON(map[string]any{"sender": name, "target": "System", "type": q.req, "payload": q.req})
		ev := c.NextFrame()
		if ev.Type() != q.reply {
			t.Fatalf("%s: got %s, want %s (the socket must stay usable)", q.req, ev, q.reply)
		}
		out = append(out, traceJSON(norm.Frame(ev.Frame)[q.field]))
	}
	return strings.Join(out, "\n")
}

// The rows run in a few groups, each on its own hub, so the suite's quiet
// periods overlap.
const mfGroups = 4

func TestMalformed_EveryBadFrameGetsATypedReplyAndChangesNothing(t *testing.T) {
	t.Parallel()
	rows := malformedRows()
	if len(rows) < 50 {
		t.Fatalf("only %d bad frames; the suite promises at least 50", len(rows))
	}
	t.Logf("%d bad frames", len(rows))
	for g := range mfGroups {
		t.Run(fmt.Sprintf("group%d", g), func(t *testing.T) {
			t.Parallel()
			var mine []malformedRow
			for i := g; i < len(rows); i += mfGroups {
				mine = append(mine, rows[i])
			}
			mfRun(t, mine)
		})
	}
}

// mfRun sends each row's frame over one registered socket and checks the
// reply, the other socket's silence and the unchanged state.
func mfRun(t *testing.T, rows []malformedRow) {
	a, b, names, norm := mfSetup(t, Config{})
	baseline := mfSnapshot(t, a, names["A"], norm)
	for _, row := range rows {
		text := strings.NewReplacer("$A", names["A"], "$B", names["B"]).Replace(row.frame)
		if row.binary {
			a.SendBinary([]byte(text))
		} else {
			a.SendText(text)
		}
		got := tcCollect([]*tcConn{a, b}, map[*tcConn]int{a: 1})
		if len(got[b]) > 0 {
			t.Errorf("%s: the other socket received %v", row.name, got[b])
		}
		if len(got[a]) != 1 || got[a][0].Closed || got[a][0].Frame == nil {
			t.Errorf("%s: got %v, want one %s frame", row.name, got[a], row.typ)
			if len(got[a]) > 0 && got[a][len(got[a])-1].Closed {
				t.Fatalf("%s: the socket was closed", row.name)
			}
			continue
		}
		reply := norm.Frame(got[a][0].Frame)
		wantTarget := "A"
		if row.decode {
			wantTarget = "all"
		}
		if reply["type"] != row.typ || reply["target"] != wantTarget || (row.payload != "" && reply["payload"] != row.payload) {
			t.Errorf("%s: got %s, want type %q target %q payload %q", row.name, traceJSON(reply), row.typ, wantTarget, row.payload)
		}
		for k, v := range row.fields {
			if reply[k] != v {
				t.Errorf("%s: %s is %s, want %v", row.name, k, traceJSON(reply[k]), v)
			}
		}
		if code, _ := reply["error_code"].(string); !row.decode && (row.typ == "error" || strings.HasSuffix(row.typ, "_denied")) && code == "" {
			t.Errorf("%s: refusal without error_code: %s", row.name, traceJSON(reply))
		}
		if after := mfSnapshot(t, a, names["A"], norm); after != baseline {
			t.Fatalf("%s: the state changed\nbefore %s\nafter  %s", row.name, baseline, after)
		}
	}
}

// Depth 64, counting the frame itself, is allowed; 65 is not (the rows
// above). A chat nested exactly 64 deep is relayed to everyone.
func TestMalformed_Depth64IsAccepted(t *testing.T) {
	t.Parallel()
	a, b, names, norm := mfSetup(t, Config{})
	for _, frame := range []string{mfObjects(64), mfArrays(64)} {
		a.SendText(strings.ReplaceAll(frame, "$A", names["A"]))
		got := tcCollect([]*tcConn{a, b}, map[*tcConn]int{a: 1, b: 1})
		for _, c := range []*tcConn{a, b} {
			if len(got[c]) != 1 || got[c][0].Type() != "chat" {
				t.Fatalf("%s: got %v, want the chat relayed", c.Label, got[c])
			}
			var nest any = norm.Frame(got[c][0].Frame)["nest"]
			depth := 1
			for {
				switch x := nest.(type) {
				case map[string]any:
					nest, depth = x["d"], depth+1
					continue
				case []any:
					depth++
					if len(x) > 0 {
						nest = x[0]
						continue
					}
				}
				break
			}
			if depth != 64 {
				t.Errorf("%s: relayed nest is %d deep, want 64 (the whole payload kept)", c.Label, depth)
			}
		}
	}
}

// A frame above MaxFrameBytes closes the socket with 1009 (the reference's
// WebSocket library does the same); other sockets and the state are
// unaffected.
func TestMalformed_OversizedFrameCloses1009(t *testing.T) {
	t.Parallel()
	const limit = 4096
	a, b, names, norm := mfSetup(t, Config{MaxFrameBytes: limit})
	baseline := mfSnapshot(t, b, names["B"], norm)
	big, _ := json.Marshal(map[string]any{"sender": names["A"], "type": "chat", "payload": strings.Repeat("x", limit)})
	a.SendText(string(big))
	a.ExpectClose(websocket.StatusMessageTooBig, tcAnyReason)
	got := tcCollect([]*tcConn{b}, map[*tcConn]int{b: 1})
	if len(got[b]) != 1 || got[b][0].Type() != "presence_update" || norm.Frame(got[b][0].Frame)["event"] != "left" {
		t.Errorf("B: got %v, want A's presence_update left", got[b])
	}
	if after := mfSnapshot(t, b, names["B"], norm); after != baseline {
		t.Errorf("the state changed\nbefore %s\nafter  %s", baseline, after)
	}
}
