package journal

import (
	"context"
	"path/filepath"
	"testing"
)

func openTemp(t testing.TB) *Store {
	t.Helper()
	st, err := Open(filepath.Join(t.TempDir(), "journal.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestAppendScan_RoundTrip(t *testing.T) {
	st := openTemp(t)
	ctx := context.Background()
	first, err := st.Append(ctx, &Batch{TS: 10.5, Records: []Record{
		{Kind: "release", Payload: []byte(`{"task_id":"a"}`), Durable: true},
		{Kind: "release", Payload: []byte(`{"task_id":"b"}`), Durable: true},
	}, Operations: []Operation{{Key: "k", RequestDigest: "d", Response: []byte(`{"x": "é"}`)}}})
	if err != nil || first != 1 {
		t.Fatal(first, err)
	}
	var got []string
	if err := st.Scan(0, func(seq int64, ts float64, kind string, p []byte) error {
		got = append(got, kind+" "+string(p))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Log(got)
	op, ok, err := st.Operation("k")
	t.Log(op, ok, err, string(op.Response))
}
