package wire

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/synapse-hub/synapse/pyjson"
)

// Fields clients send that the hub keeps only when they are well formed,
// and values it echoes in Python's form.

// ClientTimestamp keeps a finite, non-zero numeric client stamp as advisory
// client_timestamp; anything else is dropped (INV-CK-1, PROTOCOL.md §10).
func ClientTimestamp(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f == 0 {
		return 0, false
	}
	return f, true
}

// ClientMsgID keeps a client_msg_id that is a non-blank string of at most
// 256 UTF-8 bytes with no control characters (PROTOCOL.md §2.2 step 3).
func ClientMsgID(v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		return "", false
	}
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 256 || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return "", false
	}
	return s, true
}

// AppendAny writes a decoded JSON value in Python's form; absent values
// (and values with no JSON form) are written as def.
func AppendAny(b []byte, v any, def any) []byte {
	if v == nil {
		v = def
	}
	out, err := pyjson.AppendValue(b, v)
	if err != nil {
		return append(b, "null"...)
	}
	return out
}

// StringItems is the string items of the frame's list field k (numbers
// and the rest skipped, unlike Strings); empty, not nil, when k is not a
// list.
func (in *Inbound) StringItems(k string) []string {
	list, _ := in.Value(k).([]any)
	out := make([]string, 0, len(list))
	for _, v := range list {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
