package pyjson

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestAppendCanonical_AgreesWithCPython checks AppendCanonical against what
// CPython's json.dumps(sort_keys=True, separators=(",", ":"), allow_nan=False)
// printed for the same texts, in both ensure_ascii modes: the fuzz corpora of
// FuzzCanonical and of the per-message signer (gate.FuzzSignMessage), run
// through testdata/cpython_dumps.py (CPython 3.11). A null is a value
// CPython refuses to print (a float out of range), which must be
// ErrNotCanonical here. The hand-written vectors pin the rules; these pin
// that the rules are CPython's.
func TestAppendCanonical_AgreesWithCPython(t *testing.T) {
	f, err := os.Open("testdata/cpython_dumps.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var row struct {
			In    string  `json:"in"`
			UTF8  *string `json:"utf8"`
			ASCII *string `json:"ascii"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		d := json.NewDecoder(strings.NewReader(row.In))
		d.UseNumber()
		var v any
		if d.Decode(&v) != nil {
			continue // CPython's loads is laxer (NaN, Infinity); the hub's decoder refuses these
		}
		n++
		for _, c := range []struct {
			ascii bool
			want  *string
		}{{false, row.UTF8}, {true, row.ASCII}} {
			got, err := AppendCanonical(nil, v, c.ascii)
			switch {
			case c.want == nil && !errors.Is(err, ErrNotCanonical):
				t.Errorf("%q ascii=%v: CPython refuses it, AppendCanonical gives %q, %v", row.In, c.ascii, got, err)
			case c.want != nil && (err != nil || string(got) != *c.want):
				t.Errorf("%q ascii=%v:\n got %q (%v)\nwant %q (CPython)", row.In, c.ascii, got, err, *c.want)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 50 {
		t.Fatalf("only %d vectors compared", n)
	}
}
