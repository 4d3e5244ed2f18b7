package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// JournalRecord is the i-th fixture record: a full claim dict, the most
// common and the largest durable payload.
func JournalRecord(i int) journal.Record {
	r := ClaimRequest(i)
	c := &coord.Claim{
		TaskID: r.TaskID, Owner: r.Agent, Worktree: r.Worktree, Paths: r.Paths, QuotaPrincipal: r.Principal,
		ClaimedAt: t0, ExpiresAt: t0 + 3600, Epoch: int64(i + 1),
	}
	rec, _ := journal.Encode(coord.ClaimGranted{Claim: c})
	return rec
}

// AppendRate appends `records` fixture records in batches of batchSize to a
// fresh journal in dir, at synchronous=FULL, and returns records per second.
func AppendRate(dir string, batchSize, records int) (float64, error) {
	path := filepath.Join(dir, fmt.Sprintf("append-%d.db", batchSize))
	defer removeJournal(path)
	st, err := journal.Open(path, journal.Options{})
	if err != nil {
		return 0, err
	}
	defer st.Close()
	batch := &journal.Batch{Records: make([]journal.Record, batchSize)}
	for k := range batchSize {
		batch.Records[k] = JournalRecord(k)
	}
	ctx := context.Background()
	start := time.Now()
	for done := 0; done < records; done += batchSize {
		batch.TS = t0 + float64(done)
		if _, err := st.Append(ctx, batch); err != nil {
			return 0, err
		}
	}
	n := (records + batchSize - 1) / batchSize * batchSize
	return float64(n) / time.Since(start).Seconds(), nil
}

func removeJournal(path string) {
	for _, s := range []string{"", "-wal", "-shm"} {
		os.Remove(path + s)
	}
}

// FillJournal writes a journal of n events at path as a busy hub would:
// `claims` claims (fixture ClaimRequest), then rounds of checkpoints,
// progress notes, releases and new claims over them, in batches of 512. When snapshotTail
// >= 0 it writes a snapshot of the state as it was snapshotTail events
// before the end. It returns the live state at the end (expired at the
// last step's time) and that time.
func FillJournal(path string, n, claims, snapshotTail int) (*coord.State, float64, error) {
	st, err := journal.Open(path, journal.Options{})
	if err != nil {
		return nil, 0, err
	}
	defer st.Close()
	live := coord.New(coord.Limits{})
	ctx := context.Background()
	now := t0
	batch := &journal.Batch{}
	written := 0
	flush := func() error {
		if len(batch.Records) == 0 {
			return nil
		}
		if _, err := st.Append(ctx, batch); err != nil {
			return err
		}
		written += len(batch.Records)
		batch.Records = batch.Records[:0]
		return nil
	}
	snapAt := n - snapshotTail
	for i := 0; written+len(batch.Records) < n; i++ {
		var cmd coord.Command
		if i < claims {
			cmd = ClaimRequest(i)
		} else {
			k := i % claims
			agent := ClaimRequest(k).Agent
			task := fmt.Sprintf("task-%06d", k)
			// Whole rounds over the tasks: checkpoint, note, release,
			// claim again. Updates stay at one per lease: the core keeps
			// a lease-heap entry per update of the same epoch (see
			// docs/journal.md), which many updates per lease make slow.
			switch (i / claims) % 4 {
			case 1:
				cmd = coord.CheckpointRequest{Agent: agent, TaskID: task, Checkpoint: fmt.Sprintf("cp-%d", i)}
			case 2:
				cmd = coord.PostProgress{Agent: agent, TaskID: task, Text: fmt.Sprintf("step %d done", i)}
			case 3:
				cmd = coord.ReleaseRequest{Agent: agent, TaskID: task}
			default:
				cmd = ClaimRequest(k)
			}
		}
		now += 0.0005
		o := live.Step(cmd, now)
		if o.Refusal != nil {
			return nil, 0, fmt.Errorf("fixture step %d: %v", i, o.Refusal)
		}
		batch.TS = now
		for _, ev := range o.Events {
			if rec, ok := journal.Encode(ev); ok {
				batch.Records = append(batch.Records, rec)
			}
		}
		if len(batch.Records) >= 512 {
			if err := flush(); err != nil {
				return nil, 0, err
			}
		}
		if snapshotTail >= 0 && written+len(batch.Records) >= snapAt && snapAt >= 0 {
			if err := flush(); err != nil {
				return nil, 0, err
			}
			seq, err := st.LastSeq()
			if err != nil {
				return nil, 0, err
			}
			if err := st.WriteSnapshot(seq, live.Image(), now); err != nil {
				return nil, 0, err
			}
			snapAt = -1
		}
	}
	if err := flush(); err != nil {
		return nil, 0, err
	}
	live.Tick(now)
	return live, now, nil
}

// Restart opens the journal at path and replays it, as a hub starting up
// does, and returns how long that took and what it rebuilt.
func Restart(path string, now float64, useSnapshot bool) (time.Duration, *journal.Recovered, error) {
	start := time.Now()
	st, err := journal.Open(path, journal.Options{})
	if err != nil {
		return 0, nil, err
	}
	defer st.Close()
	rec, err := journal.Replay(st, coord.Limits{}, now, journal.ReplayOptions{NoSnapshot: !useSnapshot})
	if err != nil {
		return 0, nil, err
	}
	return time.Since(start), rec, nil
}
