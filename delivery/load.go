package delivery

import (
	"encoding/json"
	"strings"

	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/wire"
)

// Load rebuilds, from the journal, what a restart must not lose: the chat
// history tail (capped again, INV-RR-2) and the msg_id high-water mark,
// the pending receipts (the newest that fit the window; it returns the
// older ones, for Receipts.ExpireOverflow), the mailbox projection
// (watermarks and counts) and the dead-letter ledger (dead-lettered
// directed chats after their target's watermark). Call it before the hub
// serves: it takes no lock.
func Load(st Journal, now float64, h *History, w *Window, mb *Projection, dead *DeadLetters) (overflow []journal.ReceiptRow, err error) {
	pending, err := st.PendingReceiptRows()
	if err != nil {
		return nil, err
	}
	overflow = w.Load(pending)
	tail, err := st.ChatTail(max(h.max, 1024))
	if err != nil {
		return nil, err
	}
	for _, r := range tail {
		var p struct {
			MsgID   int64  `json:"msg_id"`
			Sender  string `json:"sender"`
			Target  string `json:"target"`
			Channel string `json:"channel"`
		}
		if json.Unmarshal(r.Payload, &p) != nil || p.Channel != "" {
			continue
		}
		h.msgID.Store(max(h.msgID.Load(), p.MsgID))
		t := strings.TrimSpace(p.Target)
		h.entries = append(h.entries, Entry{MsgID: p.MsgID, Seq: r.Seq, Sender: p.Sender, Target: p.Target,
			Public: t == "" || t == "all", Frame: WithSeq(r.Payload, r.Seq)})
	}
	if n := len(h.entries); n > h.max {
		h.entries = h.entries[n-h.max:]
	}
	marks, err := st.Watermarks()
	if err != nil {
		return nil, err
	}
	for id, wm := range marks {
		mb.ids[id] = &mbox{wm: wm, wmKnown: true, valid: true, away: true}
	}
	err = st.ScanDirected(0, func(d journal.DirectedChat) error {
		mb.lastDirected = d.Seq
		for _, part := range strings.Split(d.Target, ",") {
			p := strings.TrimSpace(part)
			if p == "" || strings.ContainsAny(p, "?[") || wire.Identity(d.Sender) == p {
				continue
			}
			e := mb.ids[p]
			if e == nil {
				e = &mbox{wmKnown: true, valid: true, away: true}
				mb.ids[p] = e
			}
			if d.Seq > e.wm {
				e.named++
			}
		}
		if d.Dead && now-d.TS <= deadLetterMaxAge {
			if e := mb.ids[strings.TrimSpace(d.Target)]; e == nil || d.Seq > e.wm {
				dead.CountLocked(strings.TrimSpace(d.Target), d.Sender, d.TS)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	mb.evictLocked()
	return overflow, nil
}
