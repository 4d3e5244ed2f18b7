package wire

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// traceDir holds the reference hub's golden traces; package hub keeps the
// copy (hub/testdata/traces), and wire reads it rather than a second copy.
const traceDir = "../hub/testdata/traces"

// traceSend is one inbound frame of a golden trace, as the client sent it.
type traceSend struct {
	name string // scenario:step
	data []byte
}

// traceSends returns every client frame of the traces matching pattern,
// byte for byte: a "frame" record's object as it stands in the file
// (Python's json.dumps form, which is what the reference clients send), or
// a "raw" text.
func traceSends(tb testing.TB, pattern string) []traceSend {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(traceDir, pattern))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no traces %s in %s: %v", pattern, traceDir, err)
	}
	var out []traceSend
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			tb.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var rec struct {
				Scenario string          `json:"scenario"`
				Step     int             `json:"step"`
				Dir      string          `json:"dir"`
				Frame    json.RawMessage `json:"frame"`
				Raw      *string         `json:"raw"`
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				tb.Fatalf("%s: %v", file, err)
			}
			if rec.Dir != "send" {
				continue
			}
			data := []byte(rec.Frame)
			if rec.Raw != nil {
				data = []byte(*rec.Raw)
			}
			out = append(out, traceSend{rec.Scenario + ":" + strconv.Itoa(rec.Step), data})
		}
		f.Close()
		if err := sc.Err(); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// hotFrame returns the first trace frame whose type is verb (for a
// heartbeat, the registration one).
func hotFrame(tb testing.TB, sends []traceSend, verb string) []byte {
	tb.Helper()
	for _, s := range sends {
		var m map[string]any
		if json.Unmarshal(s.data, &m) == nil && m["type"] == verb {
			return s.data
		}
	}
	tb.Fatalf("no %s frame in the traces", verb)
	return nil
}
