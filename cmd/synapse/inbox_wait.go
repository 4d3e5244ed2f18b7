package main

// inbox --wait: block until a message for the agent is there, for Stop
// hooks and scripts (issue 21 item 2; docs/waking.md).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/wire"
)

// paneSidecar is the name inbox --wait connects as: the identity's
// -pane-rx sidecar, which may replay and ack its mailbox, and whose socket
// tells senders the agent is reachable (PROTOCOL.md §1.7). synapse arm
// holds the other sidecar, -rx, so the two run side by side.
func paneSidecar(name string) string { return wire.Sidecars(name)[1] }

// wakeFrame reports whether a live frame wakes a waiter for name: a chat
// someone else sent it, directed or (unless directedOnly) to all.
func wakeFrame(fr client.Frame, name string, directedOnly bool) bool {
	if fr.Type != "chat" || fr.Replayed() || wire.Identity(fr.Sender) == name {
		return false
	}
	return !directedOnly || journal.IsDirected(fr.Target)
}

// inboxWait is inbox --wait: the mailbox after the cursor if anything is
// there, else the first message that arrives, else exit 4 at the timeout.
func inboxWait(f *clientFlags, timeout time.Duration, directedOnly, ack bool, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dctx, cancel := context.WithTimeout(ctx, f.timeout)
	o := f.options(paneSidecar(f.name))
	o.MailboxFor, o.NoReconnect = f.name, true
	c, err := client.Dial(dctx, o)
	cancel()
	var rej *client.RejectedError
	if errors.As(err, &rej) && (rej.Code == 4009 || rej.Code == 4016) {
		fmt.Fprintf(stderr, "synapse inbox: another 'synapse inbox --wait' for %s is running (%s is online); wait for it, or stop it.\n", f.name, paneSidecar(f.name))
		return exitRefused
	}
	if err != nil {
		return f.failure(stderr, "inbox", err)
	}
	defer c.Close()
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// Subscribe before the replay: a message committed after the replay
	// read the mailbox arrives live, so none falls between the two.
	live := c.Subscribe(wctx, func(fr client.Frame) bool { return wakeFrame(fr, f.name, directedOnly) })
	cctx, ccancel := f.callCtx()
	msgs, err := c.Inbox(cctx)
	ccancel()
	if err != nil {
		return f.failure(stderr, "inbox", err)
	}
	woken := "mailbox"
	if len(msgs) == 0 {
		woken = "live"
		select {
		case fr, ok := <-live:
			switch {
			case ok:
				msgs = append(msgs, fr)
			case wctx.Err() == nil:
				fmt.Fprintf(stderr, "synapse inbox: lost the connection to the hub at %s while waiting; nothing arrived. Run it again.\n", f.uri)
				return exitUnreachable
			}
		case <-wctx.Done():
		}
		if len(msgs) == 0 {
			if ctx.Err() != nil {
				return exitTimeout // interrupted: nothing arrived
			}
			if f.asJSON {
				printJSON(stdout, map[string]any{"name": f.name, "messages": []any{}, "reason": "timeout"})
			}
			fmt.Fprintf(stderr, "synapse inbox: no message for %s within %s.\n", f.name, timeout)
			return exitTimeout
		}
		for more := true; more; { // what arrived with it
			select {
			case fr, ok := <-live:
				if more = ok; ok {
					msgs = append(msgs, fr)
				}
			default:
				more = false
			}
		}
	}
	var last int64
	for _, m := range msgs {
		if journal.IsDirected(m.Target) {
			last = max(last, m.Seq())
		}
	}
	if ack && last > 0 {
		actx, cancel := f.callCtx()
		err := c.Ack(actx, last)
		cancel()
		if err != nil {
			return f.failure(stderr, "inbox", err)
		}
	}
	if f.asJSON {
		out := make([]map[string]any, 0, len(msgs))
		for _, m := range msgs {
			out = append(out, map[string]any{"seq": m.Seq(), "sender": m.Sender, "target": m.Target, "payload": m.Payload,
				"timestamp": m.Timestamp, "client_msg_id": m.String("client_msg_id"), "priority": string(m.Field("priority")) == "true", "replayed": m.Replayed()})
		}
		printJSON(stdout, map[string]any{"name": f.name, "messages": out, "woken_by": woken, "acked_through": c.Acked()})
		return exitOK
	}
	for _, m := range msgs {
		fmt.Fprintf(stdout, "#%d %s %s → %s: %s\n", m.Seq(), fmtTime(m.Timestamp), m.Sender, m.Target, m.Payload)
	}
	if ack && last > 0 {
		fmt.Fprintf(stdout, "Acknowledged through #%d.\n", last)
	}
	return exitOK
}

// isSet reports whether the flag was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
