package journal

import (
	"context"
	"fmt"
	"slices"
)

// Report is what Check found in a journal file.
type Report struct {
	HubID     string
	LastSeq   int64            // highest seq ever assigned
	Events    int64            // rows present
	Kinds     map[string]int64 // rows per kind
	Bad       []Quarantined    // rows that do not decode (at most 1000 listed)
	BadCount  int
	Snapshots []SnapshotInfo // newest first; Err says why one is unusable
	Problems  []string       // schema and ordering problems
}

// OK reports whether the file is sound: schema as expected, seqs in order,
// every row readable and every snapshot intact.
func (r *Report) OK() bool {
	if r.BadCount > 0 || len(r.Problems) > 0 {
		return false
	}
	for _, s := range r.Snapshots {
		if s.Err != "" {
			return false
		}
	}
	return true
}

// expectedColumns are the columns Check requires, in order.
var expectedColumns = map[string][]string{
	"events":     {"seq", "ts", "kind", "payload"},
	"operations": {"operation_key", "request_digest", "response_json", "response_sha256", "first_event_seq", "commit_seq", "committed_at"},
	"snapshots":  {"seq", "created_at", "format", "sha256", "body"},
	"meta":       {"key", "value"},
}

// Check opens the journal at path read-only and verifies it: the schema,
// that seqs increase and stay within the AUTOINCREMENT counter, that every
// row of a kind the codec knows decodes, and every snapshot's digest and
// body. It returns an error only when the file cannot be read at all.
func Check(path string) (Report, error) {
	st, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		return Report{}, err
	}
	defer st.Close()
	r := Report{HubID: st.HubID(), Kinds: make(map[string]int64)}
	ctx := context.Background()
	for table, want := range expectedColumns {
		rows, err := st.rdb.QueryContext(ctx, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
		if err != nil {
			return r, fmt.Errorf("journal: check: %w", err)
		}
		var got []string
		for rows.Next() {
			var name string
			rows.Scan(&name)
			got = append(got, name)
		}
		rows.Close()
		if !slices.Equal(got, want) {
			r.Problems = append(r.Problems, fmt.Sprintf("table %s has columns %v, want %v", table, got, want))
		}
	}
	// SQLite's own structural check: a damaged index or table page that
	// the event scan below would not read.
	qc, err := st.rdb.QueryContext(ctx, `PRAGMA quick_check`)
	if err != nil {
		return r, fmt.Errorf("journal: check: %w", classify(err))
	}
	for qc.Next() {
		var line string
		qc.Scan(&line)
		if line != "ok" {
			r.Problems = append(r.Problems, "sqlite quick_check: "+line)
		}
	}
	err = qc.Err()
	qc.Close()
	if err != nil {
		return r, fmt.Errorf("journal: check: %w", classify(err))
	}
	if r.LastSeq, err = st.LastSeq(); err != nil {
		return r, err
	}
	var prev int64
	err = st.Scan(0, func(seq int64, _ float64, kind string, payload []byte) error {
		r.Events++
		r.Kinds[kind]++
		if seq <= prev {
			r.Problems = append(r.Problems, fmt.Sprintf("seq %d after %d", seq, prev))
		}
		prev = seq
		if _, _, err := Decode(kind, payload); err != nil {
			r.BadCount++
			if len(r.Bad) < 1000 {
				r.Bad = append(r.Bad, Quarantined{Seq: seq, Kind: kind, Err: err.Error()})
			}
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	if prev > r.LastSeq {
		r.Problems = append(r.Problems, fmt.Sprintf("seq %d is above the sequence counter %d", prev, r.LastSeq))
	}
	infos, bodies, err := st.snapshots()
	if err != nil {
		return r, err
	}
	for i := range infos {
		if infos[i].Err == "" {
			if _, err := DecodeImage(bodies[i]); err != nil {
				infos[i].Err = err.Error()
			}
		}
		if infos[i].Seq > r.LastSeq {
			infos[i].Err = fmt.Sprintf("covers seq %d beyond the journal's last seq %d", infos[i].Seq, r.LastSeq)
		}
	}
	r.Snapshots = infos
	return r, nil
}
