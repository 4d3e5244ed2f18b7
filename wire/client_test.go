package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

// A chat's client fields are kept only when well formed (INV-CK-1: the
// client's stamp is advisory, finite and non-zero; PROTOCOL.md §2.2 step 3:
// client_msg_id a non-blank string of at most 256 bytes, no controls).
func TestClientFields_KeptOnlyWhenWellFormed_INV_CK_1(t *testing.T) {
	for v, ok := range map[any]bool{json.Number("1.5"): true, json.Number("0"): false, json.Number("NaN"): false, "1.5": false, nil: false} {
		if _, got := ClientTimestamp(v); got != ok {
			t.Errorf("ClientTimestamp(%#v) kept %v; want %v", v, got, ok)
		}
	}
	for v, ok := range map[any]bool{" m-1 ": true, "": false, "  ": false, "a\x01b": false, strings.Repeat("x", 257): false, strings.Repeat("x", 256): true, 7: false} {
		if _, got := ClientMsgID(v); got != ok {
			t.Errorf("ClientMsgID(%q) kept %v; want %v", v, got, ok)
		}
	}
	if id, _ := ClientMsgID(" m-1 "); id != "m-1" {
		t.Errorf("ClientMsgID trims: %q", id)
	}
	if got := string(AppendAny(nil, nil, "")); got != `""` {
		t.Errorf("AppendAny of an absent value with a default: %s", got)
	}
}
