package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/synapse-hub/synapse/pyjson"
)

// ChatStore keeps a fleet's chats that are not directed letters —
// broadcasts, lists, globs, roles, projects, bare names — so that every
// hub fans them out and keeps them in its history (package cluster: etcd).
// hub.Config.Chats turns it on. The store sees opaque records
// (EncodeFleetChat); its revisions are the chats' msg_ids.
type ChatStore interface {
	// PostChat stores rec and returns the revision that wrote it: unique
	// and increasing across the fleet, and greater than the revision of
	// every chat posted before PostChat was called.
	PostChat(ctx context.Context, rec []byte) (int64, error)
	// FollowChats calls fn with the newest tail chats kept, oldest first,
	// before it returns, and then, from a goroutine of its own until ctx
	// ends, with every chat written after them, each once, in revision
	// order.
	FollowChats(ctx context.Context, tail int, fn func(rev int64, rec []byte)) error
}

// FleetChat is one chat as the fleet carries it.
type FleetChat struct {
	MsgID     int64  `json:"-"` // the revision that stored it
	Sender    string `json:"s"`
	Target    string `json:"t"`
	Broadcast bool   `json:"b,omitempty"`
	Directed  bool   `json:"d,omitempty"` // journal.IsDirected: it dead-letters (at the sender's hub)
	Frame     []byte `json:"-"`           // as relayed, msg_id stamped
}

// EncodeFleetChat is the record of c, whose frame build encodes with a
// msg_id: a JSON header line, then the frame with msg_id 0 and the offset
// of that 0, so a reader stamps the revision without re-encoding.
func EncodeFleetChat(c FleetChat, build func(msgID int64) []byte) []byte {
	f0, f1 := build(0), build(1)
	at := 0
	for at < len(f0) && f0[at] == f1[at] {
		at++
	}
	h, _ := json.Marshal(struct {
		FleetChat
		At int `json:"o"`
	}{c, at})
	return append(append(h, '\n'), f0...)
}

// errFleetChat is a record that is not one EncodeFleetChat wrote.
var errFleetChat = errors.New("delivery: malformed fleet chat record")

// DecodeFleetChat reads a record stored at revision rev, its frame
// stamped with msg_id rev.
func DecodeFleetChat(rev int64, rec []byte) (FleetChat, error) {
	var h struct {
		FleetChat
		At int `json:"o"`
	}
	i := bytes.IndexByte(rec, '\n')
	if i < 0 || json.Unmarshal(rec[:i], &h) != nil {
		return FleetChat{}, errFleetChat
	}
	f := rec[i+1:]
	if h.At < 0 || h.At >= len(f) || f[h.At] != '0' {
		return FleetChat{}, errFleetChat
	}
	c := h.FleetChat
	c.MsgID = rev
	b := make([]byte, 0, len(f)+20)
	b = append(b, f[:h.At]...)
	b = pyjson.AppendInt(b, rev)
	c.Frame = append(b, f[h.At+1:]...)
	return c, nil
}
