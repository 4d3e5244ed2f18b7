package journal

import (
	"context"
	"database/sql"
	"fmt"
)

// Private channels (issue 23 item 5; docs/security.md, "Private
// channels"): each channel's owner and label, its members and pending
// invites, and its retained messages. Tables of ours outside
// SchemaVersion, created by the first write that needs them (pins.go's
// writeExtra); a file without them holds no channel. Channel messages are
// kept here and not in events, so no public history, mailbox, resume or
// replay path ever reads them. Membership changes commit at
// synchronous=FULL, messages at NORMAL (a chat's durability, INV-JA-4).

const channelSchema = `
CREATE TABLE IF NOT EXISTS channels (channel TEXT PRIMARY KEY, owner TEXT NOT NULL, label TEXT NOT NULL,
                     created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS channel_members (channel TEXT NOT NULL, member TEXT NOT NULL, state TEXT NOT NULL,
                     added_by TEXT NOT NULL, added_at REAL NOT NULL, PRIMARY KEY(channel, member));
CREATE TABLE IF NOT EXISTS channel_messages (seq INTEGER PRIMARY KEY AUTOINCREMENT, channel TEXT NOT NULL,
                     ts REAL NOT NULL, sender TEXT NOT NULL, frame TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS channel_messages_channel_idx ON channel_messages(channel, seq);
`

// Channel member states.
const (
	ChannelMember  = "member"
	ChannelInvited = "invited"
)

// Channel is one private channel as kept.
type Channel struct {
	Name      string
	Owner     string
	Label     string
	CreatedAt float64
	Members   map[string]string // name → ChannelMember or ChannelInvited
	Messages  []ChannelMessage  // the newest retained, oldest first
}

// ChannelMessage is one retained channel chat: the frame as relayed.
type ChannelMessage struct {
	Seq    int64
	TS     float64
	Sender string
	Frame  []byte
}

// CreateChannel records a new channel and its owner as its first member.
func (s *Store) CreateChannel(c Channel) error {
	err := s.writeExtra(channelSchema, func(ctx context.Context, x *sql.Conn) error {
		if _, err := x.ExecContext(ctx, `INSERT INTO channels(channel, owner, label, created_at) VALUES(?, ?, ?, ?)`,
			c.Name, c.Owner, c.Label, c.CreatedAt); err != nil {
			return err
		}
		_, err := x.ExecContext(ctx, `INSERT OR REPLACE INTO channel_members(channel, member, state, added_by, added_at) VALUES(?, ?, ?, ?, ?)`,
			c.Name, c.Owner, ChannelMember, c.Owner, c.CreatedAt)
		return err
	})
	if err != nil {
		return fmt.Errorf("journal: create channel %q: %w", c.Name, err)
	}
	return nil
}

// SetChannelMember records member's state in channel (ChannelMember or
// ChannelInvited), or removes it when state is "".
func (s *Store) SetChannelMember(channel, member, state, by string, at float64) error {
	err := s.writeExtra(channelSchema, func(ctx context.Context, x *sql.Conn) error {
		if state == "" {
			_, err := x.ExecContext(ctx, `DELETE FROM channel_members WHERE channel = ? AND member = ?`, channel, member)
			return err
		}
		_, err := x.ExecContext(ctx, `INSERT OR REPLACE INTO channel_members(channel, member, state, added_by, added_at) VALUES(?, ?, ?, ?, ?)`,
			channel, member, state, by, at)
		return err
	})
	if err != nil {
		return fmt.Errorf("journal: channel %q member %q: %w", channel, member, err)
	}
	return nil
}

// DropChannel forgets a channel, its members and its messages.
func (s *Store) DropChannel(channel string) error {
	err := s.writeExtra(channelSchema, func(ctx context.Context, x *sql.Conn) error {
		for _, q := range []string{`DELETE FROM channel_messages WHERE channel = ?`, `DELETE FROM channel_members WHERE channel = ?`,
			`DELETE FROM channels WHERE channel = ?`} {
			if _, err := x.ExecContext(ctx, q, channel); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("journal: drop channel %q: %w", channel, err)
	}
	return nil
}

// AppendChannelMessage keeps one channel chat, the frame frame(seq)
// writes with the seq it is given (the table's own numbering, not the
// events table's), and forgets that channel's messages at or before
// forgetThrough (its retention). It returns the message as kept.
func (s *Store) AppendChannelMessage(channel string, m ChannelMessage, frame func(seq int64) []byte, forgetThrough int64) (ChannelMessage, error) {
	err := s.writeExtraAt(false, channelSchema, func(ctx context.Context, x *sql.Conn) error {
		var last int64
		if err := x.QueryRowContext(ctx, `SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'channel_messages'), 0)`).Scan(&last); err != nil {
			return err
		}
		m.Seq = last + 1
		m.Frame = frame(m.Seq)
		if _, err := x.ExecContext(ctx, `INSERT INTO channel_messages(seq, channel, ts, sender, frame) VALUES(?, ?, ?, ?, ?)`,
			m.Seq, channel, m.TS, m.Sender, string(m.Frame)); err != nil {
			return err
		}
		if forgetThrough > 0 {
			_, err := x.ExecContext(ctx, `DELETE FROM channel_messages WHERE channel = ? AND seq <= ?`, channel, forgetThrough)
			return err
		}
		return nil
	})
	if err != nil {
		return ChannelMessage{}, fmt.Errorf("journal: channel %q message: %w", channel, err)
	}
	return m, nil
}

// Channels reads every channel with its members and its newest keep
// messages.
func (s *Store) Channels(keep int) ([]Channel, error) {
	rows, err := s.rdb.Query(`SELECT channel, owner, label, created_at FROM channels ORDER BY channel`)
	if noTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: channels: %w", err)
	}
	var out []Channel
	for rows.Next() {
		c := Channel{Members: map[string]string{}}
		if err := rows.Scan(&c.Name, &c.Owner, &c.Label, &c.CreatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("journal: channels: %w", err)
		}
		out = append(out, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("journal: channels: %w", err)
	}
	for i := range out {
		c := &out[i]
		mr, err := s.rdb.Query(`SELECT member, state FROM channel_members WHERE channel = ?`, c.Name)
		if err != nil {
			return nil, fmt.Errorf("journal: channel %q members: %w", c.Name, err)
		}
		for mr.Next() {
			var m, st string
			if err := mr.Scan(&m, &st); err != nil {
				mr.Close()
				return nil, fmt.Errorf("journal: channel %q members: %w", c.Name, err)
			}
			c.Members[m] = st
		}
		mr.Close()
		msgs, err := s.rdb.Query(`SELECT seq, ts, sender, frame FROM (SELECT seq, ts, sender, frame FROM channel_messages
			WHERE channel = ? ORDER BY seq DESC LIMIT ?) ORDER BY seq`, c.Name, keep)
		if err != nil {
			return nil, fmt.Errorf("journal: channel %q messages: %w", c.Name, err)
		}
		for msgs.Next() {
			var m ChannelMessage
			var frame string
			if err := msgs.Scan(&m.Seq, &m.TS, &m.Sender, &frame); err != nil {
				msgs.Close()
				return nil, fmt.Errorf("journal: channel %q messages: %w", c.Name, err)
			}
			m.Frame = []byte(frame)
			c.Messages = append(c.Messages, m)
		}
		msgs.Close()
	}
	return out, nil
}
