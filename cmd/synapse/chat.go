package main

// send: one message to an agent, a list, a glob, a project, a role or all.

import (
	"fmt"
	"io"
	"strings"

	"github.com/synapse-hub/synapse/client"
)

const sendUsage = `Usage: synapse send TARGET TEXT...

Sends TEXT from --name to TARGET: an agent (proj/bravo), a comma list
(proj/a,proj/b), a glob (proj/*), a project (proj), a role (proj/reviewer)
or all. A message to named agents asks the hub for a delivery receipt and
exits 1 when nobody online received it: the hub then keeps it in the
recipient's mailbox ('synapse inbox'), delivers it when the recipient reads
it, and tells the sender with a deferred receipt.
`

func runSend(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("send", sendUsage, "", stderr)
	f.register(fs)
	noReceipt := fs.Bool("no-receipt", false, "do not ask for (or wait for) a delivery receipt")
	priority := fs.Bool("priority", false, "mark the message as priority")
	msgID := fs.String("client-msg-id", "", "your id for the message, so a retry is recognised (default random)")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) < 2 {
		return usageError(stderr, "send", "give a target and the text")
	}
	target, text := pos[0], strings.Join(pos[1:], " ")
	directed := target != "all" && !strings.ContainsAny(target, "*?[")
	c, code := f.start(stderr, "send", false, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	s, err := c.Send(ctx, target, text, client.SendOptions{ReceiptRequested: directed && !*noReceipt, Priority: *priority, ClientMsgID: *msgID})
	if err != nil {
		return f.failure(stderr, "send", err)
	}
	delivered := s.Receipt == nil || s.Receipt.Delivered
	if f.asJSON {
		printJSON(stdout, map[string]any{"target": target, "msg_id": s.MsgID, "seq": s.Seq, "client_msg_id": s.ClientMsgID, "delivered": delivered, "receipt": s.Receipt})
	} else if s.Receipt != nil {
		fmt.Fprintf(stdout, "Sent to %s (msg %d): %s.\n", target, s.MsgID, s.Receipt.Message)
	} else {
		fmt.Fprintf(stdout, "Sent to %s (msg %d).\n", target, s.MsgID)
	}
	if !delivered {
		fmt.Fprintf(stderr, "synapse send: nobody online received it (%s). Check 'synapse who'.\n", s.Receipt.Reason)
		return exitRefused
	}
	return exitOK
}
