package sequencer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/journal"
)

// encode turns an event into its journal record; a variable so tests can
// run before the codec is complete.
var encode = journal.Encode

// pending is one request of the batch being decided (or a timer tick, with
// no call), with what it did and what it will be told.
type pending struct {
	c        *call
	out      coord.Outcome // kept whole: rollback needs its undo record
	applied  bool          // out came from Step or Tick and must be rolled back on failure
	firstRec int           // index in the batch's records of its first record, -1 for none
	replayOf *pending      // an earlier keyed request of the same batch it duplicates
	reply    Reply
	err      error
}

// runBatch decides every call of a batch against the live state at one
// instant, then commits them together.
func (s *Sequencer) runBatch(calls []*call) {
	now := s.now()
	b := &journal.Batch{TS: now}
	ps := make([]*pending, len(calls))
	var keyed map[string]*pending // keys applied in this batch, not yet committed
	for i, c := range calls {
		p := &pending{c: c, firstRec: -1}
		ps[i] = p
		if err := s.Err(); err != nil {
			p.err = err // fail closed: no mutation after a journal fault
			continue
		}
		if c.req.Idem != nil && s.answeredByKey(p, keyed) {
			continue
		}
		if c.req.Cmd == nil { // a journal-only request: its records, nothing to decide
			s.appendRecords(p, b)
			continue
		}
		p.out = s.state.Step(c.req.Cmd, now)
		p.applied = true
		if id := c.req.Idem; id != nil && p.out.Refusal == nil { // refusals are never cached
			if !s.render(p) {
				continue
			}
			b.Operations = append(b.Operations, journal.Operation{Key: id.Key, RequestDigest: id.Digest, Response: p.reply.Response})
			if keyed == nil {
				keyed = make(map[string]*pending)
			}
			keyed[id.Key] = p
		}
		s.encodeInto(p, b)
		if p.out.Refusal == nil {
			s.appendRecords(p, b)
		}
	}
	s.commit(ps, b)
}

// appendRecords adds the request's own records after its events.
func (s *Sequencer) appendRecords(p *pending, b *journal.Batch) {
	if s.j == nil || len(p.c.req.Records) == 0 {
		return
	}
	if p.firstRec < 0 {
		p.firstRec = len(b.Records)
	}
	b.Records = append(b.Records, p.c.req.Records...)
}

// answeredByKey settles a keyed request that needs no decision: a duplicate
// of one applied earlier in this batch or already committed (a replay), or
// a reuse of its key for another request (a conflict). It reports whether p
// is settled.
func (s *Sequencer) answeredByKey(p *pending, keyed map[string]*pending) bool {
	id := p.c.req.Idem
	if q, ok := keyed[id.Key]; ok {
		if q.c.req.Idem.Digest != id.Digest {
			p.err = ErrIdempotencyConflict
		} else {
			p.replayOf = q // answered once q commits
		}
		return true
	}
	op, ok, err := s.lookup(id.Key)
	switch {
	case err != nil:
		p.err = err
	case !ok:
		return false
	case op.RequestDigest != id.Digest:
		p.err = ErrIdempotencyConflict
	default:
		p.reply = Reply{Response: op.Response, Replayed: true}
	}
	return true
}

// render builds the response a keyed request stores. Output that is not
// JSON fails this request alone, not the batch: its outcome is the newest,
// so it is undone at once.
func (s *Sequencer) render(p *pending) bool {
	p.reply.Response = []byte("null")
	if r := p.c.req.Render; r != nil {
		p.reply.Response = r(coord.Outcome{Events: p.out.Events})
	}
	if json.Valid(p.reply.Response) {
		return true
	}
	s.state.Rollback(&p.out)
	p.applied, p.reply, p.err = false, Reply{}, fmt.Errorf("%w: Render output is not JSON", ErrBadRequest)
	return false
}

// lookup finds the committed operation of an idempotency key: in the cache,
// then in the journal.
func (s *Sequencer) lookup(key string) (journal.Operation, bool, error) {
	if op, ok := s.cache.get(key, s.lastNow); ok {
		return op, true, nil
	}
	if s.j == nil {
		return journal.Operation{}, false, nil
	}
	op, ok, err := s.j.Operation(key)
	if errors.Is(err, journal.ErrIdempotencyExpired) {
		return op, false, fmt.Errorf("%w: %w", ErrIdempotencyExpired, err)
	}
	if err != nil {
		return op, false, fmt.Errorf("%w: read operation: %w", ErrJournal, err)
	}
	if ok {
		s.cache.put(op)
	}
	return op, ok, nil
}

// encodeInto adds the records of p's durable events to b. A memory-only hub
// journals nothing.
func (s *Sequencer) encodeInto(p *pending, b *journal.Batch) {
	if s.j == nil {
		return
	}
	first := len(b.Records)
	for _, ev := range p.out.Events {
		if ev.Durability() == coord.Volatile {
			continue
		}
		if rec, ok := encode(ev); ok {
			b.Records = append(b.Records, rec)
		}
	}
	if len(b.Records) > first {
		p.firstRec = first
	}
}

// commit appends b in one transaction and then publishes and answers ps;
// if the append fails it rolls every outcome back, newest first, and
// answers every request with ErrJournal: nobody saw the provisional state
// (INV-JA-1, INV-JA-2).
func (s *Sequencer) commit(ps []*pending, b *journal.Batch) {
	s.batches.Add(1)
	var first int64
	var err error
	if s.j != nil && (len(b.Records) > 0 || len(b.Operations) > 0) {
		if err = s.Err(); err == nil {
			// Not the callers' context: a cancelled caller must not abort
			// the authoritative commit of the whole batch (INV-JA-3).
			first, err = s.j.Append(context.Background(), b)
			switch {
			case errors.Is(err, ErrRetry):
				// The store refused the batch without failing (a namespace
				// moved): roll back and answer, but stay healthy.
				s.retryAfter = time.Now().Add(retryBackoff)
			case err != nil:
				err = fmt.Errorf("%w: append batch: %w", ErrJournal, err)
				s.degrade(err, len(ps))
			default:
				s.appends.Add(1)
			}
		}
	}
	if err != nil {
		for i := len(ps) - 1; i >= 0; i-- {
			if ps[i].applied {
				s.state.Rollback(&ps[i].out)
			}
		}
		for _, p := range ps {
			if p.c != nil && p.err == nil {
				p.err = err
			}
		}
		s.answer(ps)
		return
	}
	for _, op := range b.Operations {
		op.CommittedAt = b.TS
		s.cache.put(op)
	}
	// Publish in commit order, request by request, so a chat committed
	// between two claims is fanned out between their broadcasts.
	for _, p := range ps {
		switch {
		case p.err != nil:
			continue
		case p.replayOf != nil:
			p.reply = Reply{Response: p.replayOf.reply.Response, Replayed: true}
			continue
		case p.reply.Replayed:
			continue
		}
		if p.firstRec >= 0 {
			p.reply.Seq = first + int64(p.firstRec)
		}
		if p.applied {
			p.reply.Outcome = coord.Outcome{Events: p.out.Events, Refusal: p.out.Refusal}
			if s.opts.OnCommit != nil && len(p.out.Events) > 0 {
				s.opts.OnCommit(p.out.Events)
			}
		}
		if p.c != nil && p.c.req.Committed != nil {
			p.c.req.Committed(p.reply)
		}
	}
	s.answer(ps)
}

func (s *Sequencer) answer(ps []*pending) {
	n := int64(0)
	for _, p := range ps {
		if p.c == nil {
			continue
		}
		n++
		p.c.reply <- result{reply: p.reply, err: p.err}
	}
	s.commands.Add(n)
	if n > s.maxBatch.Load() {
		s.maxBatch.Store(n) // only the leader writes it
	}
}

// degrade puts the sequencer in degraded mode: from now on it refuses every
// mutation with err until the hub restarts and replays the journal. The
// state is left as the journal has it, so nothing granted on a guess.
func (s *Sequencer) degrade(err error, batch int) {
	if s.degraded.CompareAndSwap(nil, &err) {
		s.log.Error("sequencer: journal append failed; refusing mutations until restart",
			"err", err, "batch", batch)
	}
}
