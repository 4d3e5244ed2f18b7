package main

// inbox and listen: reading what the hub holds and sends for an agent.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/synapse-hub/synapse/client"
)

const inboxUsage = `Usage: synapse inbox [--ack] [--json]
       synapse inbox --wait [--timeout 10m] [--directed-only] [--ack] [--json]

Shows the directed messages waiting for --name, oldest first: what was sent
to it (or to its project or roles) while it was offline, or not yet
acknowledged. --ack acknowledges them: they are not shown again, and each
sender that asked for a receipt is told the message was delivered.

--wait blocks until there is a message for --name, for Stop hooks and
scripts: it returns at once (exit 0) with the mailbox if anything is
waiting after --name's cursor (the hub's mailbox watermark, which --ack
moves), else with the first message that arrives: a directed one, or a
chat to all unless --directed-only. It waits as the sidecar NAME-pane-rx,
so the agent itself may stay connected as NAME, and while it waits a
message to NAME counts as delivered. Without --ack the messages stay in the
mailbox, and the next --wait returns them again at once.

'synapse wait TASK' is another thing: it waits for a task to be free, not
for a message. 'synapse arm NAME' is a waiter that never stops: it runs a
command for every message (docs/waking.md).

The mailbox lives in the hub's journal: a hub started with --no-db has none.
`

func runInbox(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("inbox", inboxUsage, ", 4 --wait timed out (nothing arrived)", stderr)
	f.register(fs)
	ack := fs.Bool("ack", false, "acknowledge the messages shown")
	wait := fs.Bool("wait", false, "block until a message is there (the mailbox after the cursor, or one arriving)")
	timeout := fs.Duration("timeout", 10*time.Minute, "with --wait: give up after this long, exit 4 (0 = wait until interrupted)")
	directedOnly := fs.Bool("directed-only", false, "with --wait: only a message addressed to --name (or its project or roles) wakes it, not a chat to all")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(stderr, "inbox", "unexpected argument %q", pos[0])
	}
	if !*wait && (*directedOnly || isSet(fs, "timeout")) {
		return usageError(stderr, "inbox", "--timeout and --directed-only go with --wait")
	}
	if *timeout < 0 {
		return usageError(stderr, "inbox", "--timeout %s is negative (0 waits until interrupted)", *timeout)
	}
	if *wait {
		if err := f.resolve(); err != nil {
			fmt.Fprintf(stderr, "synapse inbox: %v\n", err)
			return exitUsage
		}
		return inboxWait(&f, *timeout, *directedOnly, *ack, stdout, stderr)
	}
	c, code := f.start(stderr, "inbox", false, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	msgs, err := c.Inbox(ctx)
	if err != nil {
		return f.failure(stderr, "inbox", err)
	}
	var last int64
	for _, m := range msgs {
		last = max(last, m.Seq())
	}
	if *ack && last > 0 {
		if err := c.Ack(ctx, last); err != nil {
			return f.failure(stderr, "inbox", err)
		}
	}
	if f.asJSON {
		out := make([]map[string]any, 0, len(msgs))
		for _, m := range msgs {
			out = append(out, map[string]any{"seq": m.Seq(), "sender": m.Sender, "target": m.Target, "payload": m.Payload,
				"timestamp": m.Timestamp, "client_msg_id": m.String("client_msg_id")})
		}
		printJSON(stdout, map[string]any{"name": f.name, "messages": out, "acked_through": c.Acked()})
		return exitOK
	}
	if len(msgs) == 0 {
		fmt.Fprintf(stdout, "No message is waiting for %s.\n", f.name)
		return exitOK
	}
	for _, m := range msgs {
		fmt.Fprintf(stdout, "#%d %s %s → %s: %s\n", m.Seq(), fmtTime(m.Timestamp), m.Sender, m.Target, m.Payload)
	}
	if *ack {
		fmt.Fprintf(stdout, "Acknowledged through #%d.\n", last)
	} else {
		fmt.Fprintf(stdout, "%d waiting. Acknowledge them with 'synapse inbox --ack'.\n", len(msgs))
	}
	return exitOK
}

const listenUsage = `Usage: synapse listen [--types T,...] [--all] [--ack] [--count N] [--for DURATION] [--json]

Connects as --name and prints every frame the hub sends it as it arrives,
until Ctrl-C: first the directed messages waiting in its mailbox (marked
"replayed"), then live chats, claim and board events, presence. Claim and
board events are those of --name's namespace and of the claims it is party
to (scoped fan-out); --all shows every agent's. With --ack each directed
message is acknowledged once printed. --json prints each frame as the JSON
the hub sent, one per line.
`

func runListen(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("listen", listenUsage, "", stderr)
	f.register(fs)
	types := fs.String("types", "", "only these frame types, comma separated (e.g. chat,claim_granted)")
	ack := fs.Bool("ack", false, "acknowledge each directed message once printed")
	count := fs.Int("count", 0, "stop after this many frames (0: until interrupted)")
	dur := fs.Duration("for", 0, "stop after this long (0: until interrupted)")
	all := fs.Bool("all", false, "every agent's claim and board events (the full fan-out), not only those of your namespace")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(stderr, "listen", "unexpected argument %q", pos[0])
	}
	if err := f.resolve(); err != nil {
		fmt.Fprintf(stderr, "synapse listen: %v\n", err)
		return exitUsage
	}
	want := map[string]bool{}
	for _, t := range strings.Split(*types, ",") {
		if t = strings.TrimSpace(t); t != "" {
			want[t] = true
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	fanout := client.FanoutNamespace
	if *all {
		fanout = client.FanoutFull
	}
	dctx, cancel := context.WithTimeout(ctx, f.timeout)
	o := f.options(f.name)
	o.Fanout, o.Presence = fanout, client.PresenceCompact
	c, err := client.Dial(dctx, o)
	cancel()
	if err != nil {
		return f.failure(stderr, "listen", err)
	}
	defer c.Close()
	// Subscribe first, then read the mailbox: nothing that arrives between
	// the two is missed (a message is at worst shown twice, and chat is
	// at-least-once anyway).
	frames := c.Subscribe(ctx, func(fr client.Frame) bool { return len(want) == 0 || want[fr.Type] })
	backlog, err := c.Inbox(ctx)
	if err != nil && ctx.Err() == nil {
		return f.failure(stderr, "listen", err)
	}
	if !f.asJSON {
		fmt.Fprintf(stderr, "synapse listen: connected to %s as %s; Ctrl-C to stop.\n", f.uri, f.name)
	}
	n := 0
	show := func(fr client.Frame) bool {
		if len(want) > 0 && !want[fr.Type] {
			return true
		}
		if f.asJSON {
			stdout.Write(append(fr.Raw, '\n'))
		} else {
			tag := ""
			if fr.Replayed() {
				tag = " (replayed)"
			}
			fmt.Fprintf(stdout, "%s %s%s %s → %s: %s\n", time.Unix(int64(fr.Timestamp), 0).UTC().Format("15:04:05"), fr.Type, tag, fr.Sender, fr.Target, fr.Payload)
		}
		if *ack && fr.Type == "chat" && fr.Seq() > 0 && fr.Target != "all" {
			actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.Ack(actx, fr.Seq())
			cancel()
		}
		n++
		return *count == 0 || n < *count
	}
	for _, fr := range backlog {
		if !show(fr) {
			return exitOK
		}
	}
	for {
		select {
		case fr, ok := <-frames:
			if !ok {
				return exitOK
			}
			if !show(fr) {
				return exitOK
			}
		case <-ctx.Done():
			return exitOK
		}
	}
}
