package main

import (
	"bytes"
	"strings"
	"testing"
)

// An off-loopback hub without a token would let anyone act as any agent:
// it must refuse to start unless told.
func TestHub_RefusesOffLoopbackWithoutToken(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"hub", "--host", "0.0.0.0", "--no-db"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "--token") || !strings.Contains(errb.String(), "--insecure-off-loopback") {
		t.Fatalf("exit %d, stderr %q: want 2 and a message naming --token and --insecure-off-loopback", code, errb.String())
	}
}

func TestHub_ExposureRules(t *testing.T) {
	cases := []struct {
		f  hubFlags
		ok bool
	}{
		{hubFlags{host: "127.0.0.1"}, true},
		{hubFlags{host: "::1"}, true},
		{hubFlags{host: "localhost"}, true},
		{hubFlags{host: "0.0.0.0"}, false},
		{hubFlags{host: "0.0.0.0", token: "s3cret"}, true},
		{hubFlags{host: "0.0.0.0", insecure: true}, true},
	}
	for _, c := range cases {
		if err := checkExposure(c.f); (err == nil) != c.ok {
			t.Errorf("%+v: err %v, want ok=%v", c.f, err, c.ok)
		}
	}
}

func TestHub_HelpNamesTheDefaults(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"hub", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"127.0.0.1:8876", defaultJournalPath(), "--no-db", "--max-claims-per-agent", "SIGTERM"} {
		if !strings.Contains(errb.String(), strings.TrimPrefix(want, "--")) {
			t.Errorf("hub --help does not mention %q", want)
		}
	}
}
