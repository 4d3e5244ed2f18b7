package delivery

import (
	"slices"
	"sync/atomic"
)

// Entry is one relayed chat kept for history_request and resume_request.
type Entry struct {
	MsgID  int64
	Seq    int64 // journal seq, 0 without a journal
	Sender string
	Target string
	Public bool   // a broadcast: everyone may read it
	Frame  []byte // as relayed (seq stamped)
}

// History is the chat history: the newest chats relayed, oldest first,
// at most max of them readable, and the last msg_id given. Its entries are
// guarded by Hub.mu (the Locked methods); the msg_id counter is atomic.
type History struct {
	max     int
	entries []Entry
	// msgID is the last chat msg_id. It is atomic because a journalled
	// chat takes its msg_id inside the journal's append, in commit order,
	// which is the order chats are delivered in, without Hub.mu
	// (Receipts.ChatRecords).
	msgID atomic.Int64
}

// NewHistory keeps the newest max chats (max > 0).
func NewHistory(max int) *History { return &History{max: max} }

// NextMsgID takes the next chat msg_id.
func (h *History) NextMsgID() int64 { return h.msgID.Add(1) }

// RaiseMsgID makes every msg_id given from now on greater than id (a
// restart's high-water mark from chats the history does not keep: a
// private channel's).
func (h *History) RaiseMsgID(id int64) {
	for {
		cur := h.msgID.Load()
		if id <= cur || h.msgID.CompareAndSwap(cur, id) {
			return
		}
	}
}

// AppendLocked keeps e, trimming the history back to max entries once it
// has grown a quarter past it (so a trim is not paid per chat).
func (h *History) AppendLocked(e Entry) {
	h.entries = append(h.entries, e)
	if n := len(h.entries); n > h.max+h.max/4 {
		h.entries = slices.Clone(h.entries[n-h.max:])
	}
}

// LenLocked is how many chats are retained.
func (h *History) LenLocked() int { return len(h.entries) }

// NewestLocked returns the frames of the newest chats visible accepts, at
// most limit of them (all when limit < 0), oldest first.
func (h *History) NewestLocked(limit int64, visible func(*Entry) bool) [][]byte {
	var picked [][]byte
	start := max(0, len(h.entries)-h.max)
	for i := len(h.entries) - 1; i >= start && (limit < 0 || int64(len(picked)) < limit); i-- {
		if e := &h.entries[i]; visible(e) {
			picked = append(picked, e.Frame)
		}
	}
	slices.Reverse(picked)
	return picked
}

// SinceLocked returns the frames of the chats after msg_id since that
// visible accepts, in history order. Concurrent senders may commit msg_ids
// slightly out of order: it filters, it does not cut.
func (h *History) SinceLocked(since int64, visible func(*Entry) bool) [][]byte {
	var picked [][]byte
	for i := max(0, len(h.entries)-h.max); i < len(h.entries); i++ {
		if e := &h.entries[i]; e.MsgID > since && visible(e) {
			picked = append(picked, e.Frame)
		}
	}
	return picked
}
