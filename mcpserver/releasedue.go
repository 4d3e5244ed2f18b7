package mcpserver

import (
	"context"
	"errors"
	"time"

	"github.com/synapse-hub/synapse/client"
)

// Release on commit for an agent whose name this server holds (issue 21
// item 4): the post-commit and post-merge hooks of `synapse git-hook`
// release a claim as its owner, but while this server is online under that
// name the hub refuses them a second connection, so they mark the record
// due in the checkout's lease ledger (client.Ledger.MarkReleaseDue) and
// this loop releases it, fenced on the recorded epoch, with the hook's
// evidence.

// releaseDueEvery is how often the server reads its ledger for claims due;
// a variable so tests can shorten it.
var releaseDueEvery = 2 * time.Second

// releaseDueLoop runs while the server does, when it has a ledger.
func (s *Server) releaseDueLoop() {
	defer s.wg.Done()
	t := time.NewTicker(releaseDueEvery)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.releaseDue()
	}
}

// releaseDue releases every claim of this agent the ledger marks due. A
// release the hub refuses because the claim moved on (no longer claimed,
// not the owner's, a newer epoch) drops the record; any other failure (the
// hub down) is tried again next round.
func (s *Server) releaseDue() {
	recs, err := s.ledger.Records()
	if err != nil {
		return
	}
	for _, r := range recs {
		if r.Agent != s.c.Name() || r.ReleaseDue == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(s.ctx, mailboxTimeout)
		s.unkeep(r.TaskID) // stop renewing it: it is done
		_, err := s.c.Release(ctx, r.TaskID, client.ReleaseOptions{Epoch: r.Epoch, Evidence: []string{"git: " + r.ReleaseDue}, ChangedFiles: r.DueFiles})
		cancel()
		var ref *client.Refused
		switch {
		case err == nil:
			s.log.Info("synapse mcp: released on commit", "task", r.TaskID, "epoch", r.Epoch, "evidence", r.ReleaseDue)
			s.forget(r.TaskID)
			s.notify(ClaimsURI)
		case errors.As(err, &ref) && (ref.Code == "NOT_CLAIMED" || ref.Code == "NOT_OWNER" || ref.Code == "EPOCH_STALE"):
			s.log.Warn("synapse mcp: a claim due for release moved on; its record is dropped", "task", r.TaskID, "code", ref.Code)
			s.forget(r.TaskID)
		default:
			s.log.Warn("synapse mcp: release on commit failed; retrying", "task", r.TaskID, "err", err)
		}
	}
}
