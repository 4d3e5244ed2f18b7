package client

import (
	"fmt"
	"testing"

	"github.com/synapse-hub/synapse/hub"
)

func TestMailbox_InboxAckAndReplayOnReconnect(t *testing.T) {
	th := startHub(t, hub.Config{}, true)
	ctx := testCtx(t)
	a := th.dial(t, "p/a")
	for i := 0; i < 3; i++ {
		if _, err := a.Send(ctx, "p/b", fmt.Sprintf("m%d", i), SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	b := th.dial(t, "p/b", func(o *Options) { o.Mailbox = true })
	in, err := b.Inbox(ctx)
	if err != nil || len(in) != 3 {
		t.Fatalf("inbox = %v, %v", in, err)
	}
	for i, f := range in {
		if !f.Replayed() || f.Seq() <= 0 || f.Payload != fmt.Sprintf("m%d", i) || (i > 0 && f.Seq() <= in[i-1].Seq()) {
			t.Fatalf("inbox[%d] = %s", i, f.Raw)
		}
	}
	if err := b.Ack(ctx, in[1].Seq()); err != nil {
		t.Fatal(err)
	}
	if b.Acked() != in[1].Seq() {
		t.Fatalf("cursor = %d", b.Acked())
	}
	in2, err := b.Inbox(ctx)
	if err != nil || len(in2) != 1 || in2[0].Seq() != in[2].Seq() {
		t.Fatalf("inbox after ack = %v, %v", in2, err)
	}
	b.Close()

	// A later process resumes from its stored cursor; replayed chats reach
	// its subscribers on reconnect.
	b2 := th.dial(t, "p/b", func(o *Options) { o.Mailbox = true; o.SinceSeq = in[2].Seq() })
	if in3, err := b2.Inbox(ctx); err != nil || len(in3) != 0 {
		t.Fatalf("inbox from the stored cursor = %v, %v", in3, err)
	}
	sub := b2.Subscribe(ctx, func(f Frame) bool { return f.Type == "chat" && f.Replayed() })
	if _, err := a.Send(ctx, "p/b", "m3", SendOptions{}); err != nil {
		t.Fatal(err)
	}
	th.ln.dropAll() // the socket drops; the client reconnects with mailbox:true since_seq = its cursor
	if f := recv(t, sub, "replayed m3 after the reconnect"); f.Payload != "m3" || !f.Replayed() {
		t.Fatalf("replayed = %s", f.Raw)
	}
}
