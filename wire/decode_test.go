package wire

import (
	"errors"
	"strings"
	"testing"
)

// The decode refusals of traces/errors.jsonl, each with the reference's text.
func TestDecode_RefusesLikeTheReference(t *testing.T) {
	deep := `{"sender":"A","nest":` + strings.Repeat(`{"d":`, 70) + `1` + strings.Repeat(`}`, 70) + `}`
	cases := []struct {
		name, frame string
		want        *DecodeError
		text        string
	}{
		{"truncated object", `{"sender": "A", "type": "chat", "payload": "x"`, ErrMalformedJSON, "Malformed JSON."},
		{"array", `["A", "chat"]`, ErrNotObject, "Malformed frame: expected a JSON object."},
		{"non-string target", `{"sender":"A","target":123}`, nil, "Malformed frame: 'target' must be a string."},
		{"nested 70 deep", deep, ErrMalformedJSON, "Malformed JSON."},
		{"NaN literal", `{"sender": "A", "payload": NaN}`, ErrMalformedJSON, "Malformed JSON."},
		{"Infinity literal", `{"payload": Infinity}`, ErrMalformedJSON, "Malformed JSON."},
		{"float overflow", `{"payload": 1e400}`, ErrMalformedJSON, "Malformed JSON."},
		{"huge integer", `{"epoch": 123456789012345678901234567890}`, ErrMalformedJSON, "Malformed JSON."},
		{"invalid UTF-8", "{\"payload\": \"\xff\"}", ErrMalformedJSON, "Malformed JSON."},
		{"trailing garbage", `{"a":1} x`, ErrMalformedJSON, "Malformed JSON."},
		{"non-string type", `{"type":["chat"]}`, nil, "Malformed frame: 'type' must be a string."},
	}
	for _, c := range cases {
		_, err := Decode([]byte(c.frame), DefaultMaxFrameBytes, DefaultMaxDepth)
		var de *DecodeError
		if !errors.As(err, &de) || de.Message != c.text {
			t.Errorf("%s: got %v, want %q", c.name, err, c.text)
		}
		if c.want != nil && de != c.want {
			t.Errorf("%s: got %v, want the sentinel %v", c.name, err, c.want)
		}
	}
	if _, err := Decode([]byte(`{"sender":null,"type":"claim","nest":`+strings.Repeat("[", 63)+strings.Repeat("]", 63)+`}`), DefaultMaxFrameBytes, DefaultMaxDepth); err != nil {
		t.Fatalf("depth 64 and a null sender must decode: %v", err)
	}
}

func TestInbound_CoercionsFollowPython(t *testing.T) {
	in, err := Decode([]byte(`{"type":" Claim ","epoch":7.9,"ev":1.0,"ttl":"45","bad_ttl":true,"takeover":"false","mailbox":1,"paths":["a",2,null],"none":null}`), 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	if in.Type() != "claim" {
		t.Errorf("type %q", in.Type())
	}
	if _, ok, err := in.StrictInt("epoch"); !ok || err != ErrNotInteger {
		t.Errorf("epoch 7.9: %v %v, want ErrNotInteger (a fence is never truncated)", ok, err)
	}
	if _, ok, err := in.StrictInt("ev"); !ok || err != ErrNotInteger {
		t.Errorf("expected_version 1.0: %v %v, want ErrNotInteger (only an integer lexeme)", ok, err)
	}
	if _, ok, err := in.StrictInt("bad_ttl"); !ok || err != ErrNotNumber {
		t.Errorf("a bool fence: %v %v, want ErrNotNumber", ok, err)
	}
	if _, ok, _ := in.StrictInt("none"); ok {
		t.Errorf("null epoch counts as absent")
	}
	if v, ok := in.LenientFloat("ttl"); v != 45 || !ok {
		t.Errorf("numeric string ttl: %v %v", v, ok)
	}
	if _, ok := in.LenientFloat("bad_ttl"); ok {
		t.Errorf("a bool ttl means the default")
	}
	if !in.Truthy("takeover") || in.IsTrue("mailbox") {
		t.Errorf("truthiness: takeover \"false\" is truthy; mailbox must be literal true")
	}
	if got := in.Strings("paths"); len(got) != 2 || got[0] != "a" || got[1] != "2" {
		t.Errorf("paths %q", got)
	}
	if none, _ := Decode([]byte(`{}`), 0, 64); none.Type() != "chat" {
		t.Errorf("a frame without type is a chat")
	}
}

func TestFrame_WritesThePythonForm(t *testing.T) {
	got := string(NewFrame("claim_granted", "all", "Task 'T1' claimed by A.", 1782651600, "syn-1").
		Float("lease_expires_at", 1e16).Strs("paths", nil).Null("git").Bytes())
	want := `{"sender":"SynapseHub","target":"all","type":"claim_granted","payload":"Task 'T1' claimed by A.","timestamp":1782651600.0,"hub_id":"syn-1","lease_expires_at":1e+16,"paths":[],"git":null}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
