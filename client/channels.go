package client

import (
	"context"
	"encoding/json"
	"fmt"
)

// Private channels (additive verbs channel_*, the reference's; welcome
// feature "private_channels"; docs/security.md, "Private channels"). A
// chat to a channel is sent with Send to target "channel:NAME" (or, as
// the reference's clients do, with a "channel" field): only the
// channel's online members receive it, and only members read its history.

// FeaturePrivateChannels is the welcome feature of hubs serving private
// channels.
const FeaturePrivateChannels = "private_channels"

// ChannelTarget is the chat target of channel name.
func ChannelTarget(name string) string { return "channel:" + name }

// ChannelResult is the hub's answer to a channel change. Members is the
// roster, shown only to a member.
type ChannelResult struct {
	Channel   string   `json:"channel"`
	OK        bool     `json:"ok"`
	Members   []string `json:"members"`
	Message   string   `json:"payload"`
	ErrorCode string   `json:"error_code,omitempty"`
}

// ChannelInfo is one channel this agent is a member of.
type ChannelInfo struct {
	Channel  string   `json:"channel"`
	Label    string   `json:"label"`
	Owner    string   `json:"owner"`
	Members  []string `json:"members"`
	Invited  []string `json:"invited,omitempty"`
	Created  float64  `json:"created_at"`
	Retained int      `json:"retained_messages"`
}

// channelOp sends one channel verb and returns its result; a refusal is a
// *Refused carrying the hub's error_code and sentence.
func (c *Client) channelOp(ctx context.Context, typ string, fields map[string]any) (ChannelResult, error) {
	if w := c.Welcome(); !w.HasFeature(FeaturePrivateChannels) {
		return ChannelResult{}, &UnsupportedError{Call: typ, Feature: FeaturePrivateChannels, HubID: w.HubID}
	}
	m := c.envelope(typ, "")
	for k, v := range fields {
		m[k] = v
	}
	f, err := c.reply(ctx, m, "", "channel_result", matchTypes("channel_result", "error"))
	if err != nil {
		return ChannelResult{}, err
	}
	var r ChannelResult
	if err := f.Decode(&r); err != nil {
		return ChannelResult{}, fmt.Errorf("client: decode channel_result: %w", err)
	}
	if !r.OK {
		return r, refusedFrom(f, "")
	}
	return r, nil
}

// CreateChannel makes channel name, owned by this agent (its first member).
func (c *Client) CreateChannel(ctx context.Context, name, label string) (ChannelResult, error) {
	return c.channelOp(ctx, "channel_create", map[string]any{"channel": name, "label": label})
}

// InviteToChannel lets invitee join channel name once (owner only).
func (c *Client) InviteToChannel(ctx context.Context, name, invitee string) (ChannelResult, error) {
	return c.channelOp(ctx, "channel_invite", map[string]any{"channel": name, "invitee": invitee})
}

// JoinChannel joins channel name, spending this agent's invite.
func (c *Client) JoinChannel(ctx context.Context, name string) (ChannelResult, error) {
	return c.channelOp(ctx, "channel_join", map[string]any{"channel": name})
}

// LeaveChannel leaves channel name; the last member's leave drops it.
func (c *Client) LeaveChannel(ctx context.Context, name string) (ChannelResult, error) {
	return c.channelOp(ctx, "channel_leave", map[string]any{"channel": name})
}

// Channels lists the channels this agent is a member of.
func (c *Client) Channels(ctx context.Context) ([]ChannelInfo, error) {
	if w := c.Welcome(); !w.HasFeature(FeaturePrivateChannels) {
		return nil, &UnsupportedError{Call: "Channels", Feature: FeaturePrivateChannels, HubID: w.HubID}
	}
	f, err := c.reply(ctx, c.envelope("channel_list_request", ""), "", "channel_list", matchTypes("channel_list", "error"))
	if err != nil {
		return nil, err
	}
	var list []ChannelInfo
	if err := f.DecodeField("channel_info", &list); err != nil {
		return nil, fmt.Errorf("client: decode channel_list: %w", err)
	}
	return list, nil
}

// ChannelHistory returns the newest limit chats of channel name (members
// only), oldest first, as relayed.
func (c *Client) ChannelHistory(ctx context.Context, name string, limit int) ([]json.RawMessage, error) {
	if w := c.Welcome(); !w.HasFeature(FeaturePrivateChannels) {
		return nil, &UnsupportedError{Call: "ChannelHistory", Feature: FeaturePrivateChannels, HubID: w.HubID}
	}
	m := c.envelope("channel_history_request", "")
	m["channel"], m["limit"] = name, limit
	f, err := c.reply(ctx, m, "", "channel_history", matchTypes("channel_history", "channel_result", "error"))
	if err != nil {
		return nil, err
	}
	var msgs []json.RawMessage
	if err := f.DecodeField("messages", &msgs); err != nil {
		return nil, fmt.Errorf("client: decode channel_history: %w", err)
	}
	return msgs, nil
}
