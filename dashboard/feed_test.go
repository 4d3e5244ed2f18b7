package dashboard

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/coord"
)

// A stream that does not read is dropped once its buffer is full; the
// publisher never waits for it (--dashboard-event-buffer).
func TestFeed_SlowStreamIsDroppedNeverBlocksThePublisher(t *testing.T) {
	dropped := 0
	f := NewFeed(FeedConfig{Buffer: 4, Dropped: func() { dropped++ }})
	stuck, _ := f.Subscribe()
	for i := range 20 {
		f.Presence("proj/a"+strconv.Itoa(i), true, 1)
	}
	n := 0
	for range stuck.Events() {
		n++
	}
	if n != 4 || dropped != 1 || f.Streams() != 0 || f.Listening() {
		t.Fatalf("stuck stream got %d events, %d dropped, %d streams open; want its buffer's 4, 1, 0", n, dropped, f.Streams())
	}
	f.Unsubscribe(stuck) // what its handler does on the way out: a no-op now
}

// Events are numbered one more than the last only while a stream listens;
// Mark reports the last id and the refusals, newest first, bounded.
func TestFeed_MarkIsTheLastEventAndTheNewestRefusals(t *testing.T) {
	f := NewFeed(FeedConfig{Refusals: 3})
	f.Mailbox("p/a") // nobody listens: not numbered
	s, last := f.Subscribe()
	if last != 0 {
		t.Fatalf("first subscriber's last id = %d, want 0", last)
	}
	for i := range 5 {
		f.Refusal(APIRefusal{TaskID: "T" + strconv.Itoa(i)})
	}
	id, refs := f.Mark()
	if id != 5 || len(refs) != 3 || refs[0].TaskID != "T4" || refs[2].TaskID != "T2" {
		t.Fatalf("Mark = %d %+v, want 5 and T4, T3, T2", id, refs)
	}
	for want := uint64(1); want <= 5; want++ {
		msg := <-s.Events()
		prefix := "id: " + strconv.FormatUint(want, 10) + "\nevent: refusal\ndata: "
		if string(msg[:len(prefix)]) != prefix || string(msg[len(msg)-2:]) != "\n\n" {
			t.Fatalf("event %d = %q", want, msg)
		}
	}
	if _, refs := NewFeed(FeedConfig{}).Mark(); len(refs) != 0 {
		t.Fatalf("a feed remembering no refusals has %+v", refs)
	}
}

func TestFeed_StreamsAreLimitedAndCloseEndsThem(t *testing.T) {
	f := NewFeed(FeedConfig{Streams: 1})
	s, _ := f.Subscribe()
	if extra, _ := f.Subscribe(); extra != nil {
		t.Fatal("a second stream opened past Streams 1")
	}
	f.Close()
	if _, open := <-s.Events(); open {
		t.Fatal("Close left a stream open")
	}
	if again, _ := f.Subscribe(); again != nil {
		t.Fatal("a closed feed opened a stream")
	}
}

// Restart ends the open streams and keeps the feed open (a fleet hub that
// missed changes: its browsers reload); Opened runs after each stream
// opens, not for one refused (issue 22).
func TestFeed_RestartEndsStreamsAndOpenedFollowsEachOpen_Issue22(t *testing.T) {
	opened := 0
	f := NewFeed(FeedConfig{Streams: 2, Opened: func() { opened++ }})
	s1, _ := f.Subscribe()
	s2, _ := f.Subscribe()
	if extra, _ := f.Subscribe(); extra != nil || opened != 2 {
		t.Fatalf("a third stream past Streams 2: %v; Opened ran %d times, want 2", extra, opened)
	}
	f.Presence("p/a", true, 1)
	f.Restart()
	for _, s := range []*Subscriber{s1, s2} {
		if msg := <-s.Events(); !strings.Contains(string(msg), "event: presence") {
			t.Fatalf("a stream lost what was queued before Restart: %q", msg)
		}
		if _, open := <-s.Events(); open {
			t.Fatal("Restart left a stream open")
		}
		f.Unsubscribe(s) // its handler's way out: a no-op now
	}
	if f.Listening() || f.Streams() != 0 {
		t.Fatal("streams counted after Restart")
	}
	s3, last := f.Subscribe()
	if s3 == nil || last != 1 || opened != 3 {
		t.Fatalf("after Restart: stream %v, last id %d (want 1: ids go on), Opened %d times (want 3)", s3, last, opened)
	}
}

// Committed turns the core's events into the API's claim, release and task
// events.
func TestFeed_CommittedPublishesClaimReleaseAndTaskEvents(t *testing.T) {
	f := NewFeed(FeedConfig{})
	s, _ := f.Subscribe()
	c := &coord.Claim{TaskID: "T1", Owner: "p/a", Worktree: "/repo", Epoch: 3}
	f.Committed([]coord.Event{
		coord.ClaimGranted{Claim: c},
		coord.Released{TaskID: "T1", Owner: "p/a", Epoch: 3},
		coord.TaskPosted{By: "p/a", Task: &coord.BoardTask{TaskID: "B", Status: "open"}},
	})
	var got []string
	for range 3 {
		msg := string(<-s.Events())
		var typ, data string
		for _, line := range strings.Split(msg, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				typ = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				data = v
			}
		}
		var body map[string]any
		if err := json.Unmarshal([]byte(data), &body); err != nil {
			t.Fatal(err)
		}
		got = append(got, typ)
		switch typ {
		case "claim":
			if body["kind"] != "granted" || body["claim"].(map[string]any)["paths"] == nil {
				t.Fatalf("claim event = %v (paths must be [], not null)", body)
			}
		case "task":
			if body["kind"] != "posted" || body["task"].(map[string]any)["depends_on"] == nil {
				t.Fatalf("task event = %v (depends_on must be [], not null)", body)
			}
		}
	}
	if len(got) != 3 || got[0] != "claim" || got[1] != "release" || got[2] != "task" {
		t.Fatalf("events = %v", got)
	}
}
