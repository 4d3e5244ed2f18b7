package main

// channel: private channels (issue 23 item 5; docs/security.md, "Private
// channels"): named audiences whose chats reach their members only.

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/synapse-hub/synapse/client"
)

const channelUsage = `Usage: synapse channel <verb> [args] [flags]

A private channel is a named audience: its chats reach its online members
only, are kept in its own history (not the public one, not a mailbox), and
only members read them back. Its creator owns it and alone invites; an
invited agent joins once; the last member to leave drops it. Membership and
history are kept in the hub's journal. Every verb acts as --name.

  create NAME [--label TEXT]   make a channel you own
  invite NAME AGENT            let AGENT join NAME (owner only)
  join NAME                    join a channel you were invited to
  leave NAME                   leave it
  list                         the channels you are a member of
  history NAME [--limit N]     its newest messages (members only)
  send NAME MESSAGE            say something to its members

A refusal (not a member, not invited, not the owner) exits 1 and changes
nothing. 'synapse send --target channel:NAME' sends to a channel too. A hub
with --acl also asks its rules: 'message channel:NAME' for every verb but
history, which is 'recall channel:NAME'; a refusal names the rule.
`

func runChannel(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, channelUsage)
		return exitUsage
	}
	verb := args[0]
	if verb == "-h" || verb == "--help" || verb == "help" {
		fmt.Fprint(stdout, channelUsage)
		return exitOK
	}
	nargs := map[string]int{"create": 1, "invite": 2, "join": 1, "leave": 1, "list": 0, "history": 1, "send": 2}
	want, known := nargs[verb]
	if !known {
		fmt.Fprintf(stderr, "synapse channel: unknown verb %q: say create, invite, join, leave, list, history or send.\n", verb)
		return exitUsage
	}
	cmd := "channel " + verb
	var f clientFlags
	fs := newFlagSet(cmd, channelUsage, "", stderr)
	f.register(fs)
	label := fs.String("label", "", "create: the channel's display label (default its name)")
	limit := fs.Int("limit", 20, "history: how many of the newest messages")
	pos, code, ok := parseArgs(fs, args[1:])
	if !ok {
		return code
	}
	if len(pos) != want {
		return usageError(stderr, "channel", "%s takes %d argument(s), got %d", verb, want, len(pos))
	}
	c, code := f.start(stderr, cmd, false, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	var res client.ChannelResult
	var err error
	switch verb {
	case "create":
		res, err = c.CreateChannel(ctx, pos[0], *label)
	case "invite":
		res, err = c.InviteToChannel(ctx, pos[0], pos[1])
	case "join":
		res, err = c.JoinChannel(ctx, pos[0])
	case "leave":
		res, err = c.LeaveChannel(ctx, pos[0])
	case "list":
		list, err := c.Channels(ctx)
		if err != nil {
			return f.failure(stderr, cmd, err)
		}
		if f.asJSON {
			if list == nil {
				list = []client.ChannelInfo{}
			}
			printJSON(stdout, list)
			return exitOK
		}
		if len(list) == 0 {
			fmt.Fprintf(stdout, "%s is a member of no channel.\n", f.name)
			return exitOK
		}
		fmt.Fprintf(stdout, "%-24s %-20s %-8s %s\n", "CHANNEL", "OWNER", "KEPT", "MEMBERS")
		for _, ch := range list {
			fmt.Fprintf(stdout, "%-24s %-20s %-8d %s\n", ch.Channel, ch.Owner, ch.Retained, strings.Join(ch.Members, ", "))
		}
		return exitOK
	case "history":
		msgs, err := c.ChannelHistory(ctx, pos[0], *limit)
		if err != nil {
			return f.failure(stderr, cmd, err)
		}
		if f.asJSON {
			if msgs == nil {
				msgs = []json.RawMessage{}
			}
			printJSON(stdout, msgs)
			return exitOK
		}
		for _, raw := range msgs {
			var m struct {
				Sender  string  `json:"sender"`
				Payload any     `json:"payload"`
				TS      float64 `json:"timestamp"`
			}
			_ = json.Unmarshal(raw, &m)
			fmt.Fprintf(stdout, "%s  %s: %v\n", fmtTime(m.TS), m.Sender, m.Payload)
		}
		return exitOK
	case "send":
		sent, err := c.Send(ctx, client.ChannelTarget(pos[0]), pos[1], client.SendOptions{})
		if err != nil {
			return f.failure(stderr, cmd, err)
		}
		if f.asJSON {
			printJSON(stdout, sent)
		} else {
			fmt.Fprintf(stdout, "sent to channel %s\n", pos[0])
		}
		return exitOK
	}
	if err != nil {
		return f.failure(stderr, cmd, err)
	}
	if f.asJSON {
		printJSON(stdout, res)
	} else {
		fmt.Fprintln(stdout, res.Message)
	}
	return exitOK
}
