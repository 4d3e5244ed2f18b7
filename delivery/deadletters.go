package delivery

import (
	"math"

	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/pyjson"
)

const (
	// maxDeadLetters bounds the ledger's targets; the stalest is evicted
	// (PROTOCOL.md §4.6).
	maxDeadLetters = 200
	// deadLetterMaxAge: dead-letter entries older than this are forgotten
	// when the ledger is rebuilt (PROTOCOL.md §4.6: 7 days).
	deadLetterMaxAge = 7 * 24 * 3600.0
)

// DeadLetter is a target whose directed chats reached no live recipient.
type DeadLetter struct {
	Target     string
	Count      int64
	LastTS     float64
	LastSender string
}

// DeadLetters is the dead-letter ledger (PROTOCOL.md §4.6): per target,
// how many directed chats reached no live recipient, and the last one. The
// chats themselves are in the journal, when there is one, and the ledger is
// rebuilt from it on restart (Load). Guarded by Hub.mu.
type DeadLetters struct {
	byTarget map[string]*DeadLetter
	events   Events
}

// NewDeadLetters is an empty ledger that tells events of every change.
func NewDeadLetters(events Events) *DeadLetters {
	return &DeadLetters{byTarget: make(map[string]*DeadLetter), events: events}
}

// CountLocked counts a dead letter for target (bounded: the stalest
// target is evicted beyond maxDeadLetters).
func (l *DeadLetters) CountLocked(target, sender string, now float64) {
	d := l.byTarget[target]
	if d == nil {
		if len(l.byTarget) >= maxDeadLetters {
			stalest, at := "", math.Inf(1)
			for k, v := range l.byTarget {
				if v.LastTS < at {
					stalest, at = k, v.LastTS
				}
			}
			delete(l.byTarget, stalest)
		}
		d = &DeadLetter{Target: target}
		l.byTarget[target] = d
	}
	d.Count++
	d.LastTS, d.LastSender = now, sender
	if l.events.Listening() {
		l.events.DeadLettered(*d)
	}
}

// ClearLocked forgets target's dead letters (it is back) and reports
// whether it had any.
func (l *DeadLetters) ClearLocked(target string, now float64) bool {
	if _, ok := l.byTarget[target]; !ok {
		return false
	}
	delete(l.byTarget, target)
	if l.events.Listening() { // count 0: the target is back, its dead letters forgotten
		l.events.DeadLettered(DeadLetter{Target: target, LastTS: now})
	}
	return true
}

// ListLocked copies the ledger, unsorted.
func (l *DeadLetters) ListLocked() []DeadLetter {
	out := make([]DeadLetter, 0, len(l.byTarget))
	for _, d := range l.byTarget {
		out = append(out, *d)
	}
	return out
}

// LenLocked is how many targets have dead letters.
func (l *DeadLetters) LenLocked() int { return len(l.byTarget) }

// SumLocked is how many dead letters the ledger counts over all targets.
func (l *DeadLetters) SumLocked() int64 {
	n := int64(0)
	for _, d := range l.byTarget {
		n += d.Count
	}
	return n
}

// ClearedRecord makes a dead letter cleared by target's frame stay
// cleared after a restart (Load rebuilds the ledger from the directed
// chats still marked dead): a dead_letter_cleared row, whose transaction
// unmarks the target's dead chats up to through, the newest directed chat
// the ledger had counted when it was cleared.
func ClearedRecord(target string, through int64) journal.Record {
	p, _ := pyjson.AppendValue(nil, map[string]any{"target": target, "through_seq": through})
	return journal.Record{Kind: journal.KindDeadLetterCleared, Payload: p,
		Stamp: func(int64) ([]byte, []journal.Statement) {
			return nil, []journal.Statement{journal.ClearDeadLetters(target, through)}
		}}
}
