package client

import (
	"context"
	"fmt"
)

// Ack tells the hub this agent has processed the directed chat with the
// given seq (PROTOCOL.md §2.3): the hub advances the agent's mailbox
// watermark, so a later replay starts after it, and settles a pending
// delivery receipt for the chat's sender. The hub checks that the chat was
// addressed to this agent and ignores anything else silently, so Ack has
// no reply; it returns once the frame is written. The client's own cursor
// (since_seq on reconnect) moves to seq if it is higher.
func (c *Client) Ack(ctx context.Context, seq int64) error {
	if seq <= 0 {
		return fmt.Errorf("client: ack: seq %d is not a journal seq", seq)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m := c.envelope("ack", "")
	m["seq"] = seq
	if c.opts.MailboxFor != "" {
		m["mailbox_for"] = c.opts.MailboxFor
	}
	if err := c.write(m); err != nil {
		return err
	}
	for {
		cur := c.acked.Load()
		if seq <= cur || c.acked.CompareAndSwap(cur, seq) {
			return nil
		}
	}
}

// Acked returns the client's mailbox cursor: the highest seq it acked.
func (c *Client) Acked() int64 { return c.acked.Load() }

// Inbox returns the directed chats waiting for this agent after its
// cursor, in seq order, each marked Replayed with its Seq: it asks the hub
// for a mailbox replay on the live connection and collects it. Nothing is
// acknowledged; call Ack for what was processed. A hub without a journal
// has no mailbox and returns none.
func (c *Client) Inbox(ctx context.Context) ([]Frame, error) {
	hb := c.envelope("heartbeat", "alive")
	hb["mailbox"] = true
	hb["since_seq"] = c.acked.Load()
	if c.opts.MailboxFor != "" {
		hb["mailbox_for"] = c.opts.MailboxFor
	}
	if c.opts.Roles != nil {
		hb["roles"] = c.opts.Roles
	}
	frames, err := c.doMany(ctx, []map[string]any{hb, c.envelope("who_request", "")}, func(f Frame) (bool, bool) {
		switch {
		case f.Type == "chat" && f.Replayed():
			return true, false
		case f.Type == "who_snapshot":
			return true, true
		}
		return false, false
	})
	if err != nil {
		return nil, err
	}
	return frames[:len(frames)-1], nil
}

// write sends one frame that gets no reply.
func (c *Client) write(m map[string]any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	cn, closed := c.conn, c.closed
	c.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case cn == nil:
		return ErrDisconnected
	}
	if err := writeJSON(cn.ws, m); err != nil {
		return fmt.Errorf("%w: %v", ErrDisconnected, err)
	}
	return nil
}
