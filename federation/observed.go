package federation

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/synapse-hub/synapse/coord"
)

// Journal kinds the fold reads (docs/journal.md, "Event kinds"). A peer's
// log serves every other kind too (chat, idempotency, claim_denial, resource,
// mailbox_watermark, multihub_*); the view has no use for them.
const (
	kindClaim        = "claim"
	kindTaskUpdate   = "task_update"
	kindCheckpoint   = "checkpoint"
	kindHandoff      = "handoff"
	kindRelease      = "release"
	kindClaimExpired = "claim_expired"
	kindLedgerTask   = "ledger_task"
	kindProgress     = "ledger_progress"
)

// ObservedLimits bounds what Observed keeps of each peer, so a peer's log,
// however large or hostile, costs this hub bounded memory. The zero value of
// a field means its default.
type ObservedLimits struct {
	// MaxClaimsPerPeer bounds a peer's observed claims (default 10,000).
	// At the bound, claims already past their lease by the peer's own clock
	// make room; if none is, a new claim is dropped and counted.
	MaxClaimsPerPeer int
	// MaxTasksPerPeer bounds a peer's observed board (default 10,000); a
	// new task past it is dropped and counted.
	MaxTasksPerPeer int
	// MaxNotesPerPeer bounds a peer's progress notes (default 1,000); the
	// oldest is forgotten first.
	MaxNotesPerPeer int
}

func (l ObservedLimits) withDefaults() ObservedLimits {
	set := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	set(&l.MaxClaimsPerPeer, 10000)
	set(&l.MaxTasksPerPeer, 10000)
	set(&l.MaxNotesPerPeer, 1000)
	return l
}

// ObservedClaim is a claim a peer's log says it holds.
type ObservedClaim struct {
	Hub, TaskID, Owner, Worktree string
	Paths                        []string
	Epoch, Version               int64
	Status                       string
	LeaseExpiresAt               float64
	ObservedAt                   float64 // ts of the event that last wrote it
}

// ObservedTask is a task on a peer's board.
type ObservedTask struct {
	Hub, TaskID, Title, Status, SuggestedOwner, Project string
	Version                                             int64
	UpdatedAt                                           float64
}

// ObservedNote is a progress note a peer's board carries.
type ObservedNote struct {
	Hub, TaskID, Author, Kind, Text string
	PostedAt                        float64
	Seq                             int64 // the note's seq in the peer's log
}

// ObservedStats counts what Apply did with the events it was given.
type ObservedStats struct {
	Applied   int // events of a folded kind, folded
	Ignored   int // events of a kind the view does not fold
	Malformed int // events of a folded kind whose payload did not decode, or with no hub id
	Stale     int // events at or below the seq last applied for their peer
	Dropped   int // new claims or tasks refused because their peer was at its bound
}

// Observed is the advisory view of peers' logs: claims they hold, their
// board, grow-only progress. Nothing in it grants or revokes a local lease
// (INV-MH-1, INV-MH-2): it only reports, and the partition check reads
// Asserting. It is not safe for concurrent use; the goroutine that polls the
// peers owns it.
type Observed struct {
	lim   ObservedLimits
	peers map[string]*peerView
	stats ObservedStats
}

// peerView is what Observed holds of one peer.
type peerView struct {
	applied int64 // the highest seq applied: an event at or below it was already folded
	claims  map[string]ObservedClaim
	tasks   map[string]ObservedTask
	notes   []ObservedNote // a ring once full; notes[oldest] is the oldest
	oldest  int
}

// NewObserved returns an empty view bounded by limits.
func NewObserved(limits ObservedLimits) *Observed {
	return &Observed{lim: limits.withDefaults(), peers: map[string]*peerView{}}
}

// Stats returns the counts of what Apply has done so far.
func (o *Observed) Stats() ObservedStats { return o.stats }

// Apply folds one verified event of hubID's log. Events are expected in log
// order (as PeerLog.Accept hands them on); one at or below the last seq
// applied for hubID is skipped, so the fold is a union keyed by (hub, seq)
// and applying a batch twice changes nothing. Unknown kinds and malformed
// payloads are ignored and counted in Stats.
func (o *Observed) Apply(hubID string, e Event) {
	if hubID == "" {
		o.stats.Malformed++
		return
	}
	p := o.peers[hubID]
	if p == nil {
		p = &peerView{claims: map[string]ObservedClaim{}, tasks: map[string]ObservedTask{}}
		o.peers[hubID] = p
	}
	if e.Seq <= p.applied {
		o.stats.Stale++
		return
	}
	p.applied = e.Seq

	var err error
	switch e.Kind {
	case kindClaim, kindTaskUpdate, kindCheckpoint, kindHandoff:
		err = o.applyClaim(hubID, p, e)
	case kindRelease:
		err = applyRelease(p, e)
	case kindClaimExpired:
		err = applyExpiry(p, e)
	case kindLedgerTask:
		err = o.applyTask(hubID, p, e)
	case kindProgress:
		err = o.applyNote(hubID, p, e)
	default:
		o.stats.Ignored++
		return
	}
	switch {
	case err == nil:
		o.stats.Applied++
	case errors.Is(err, errOverBound):
		o.stats.Dropped++
	default:
		o.stats.Malformed++
	}
}

// Outcomes of folding one event that Apply counts. Only the counts leave
// this file, so the texts are never shown.
var (
	errMalformed = errors.New("payload lacks a field the fold needs")
	errOverBound = errors.New("peer is at its bound")
)

// decodeObject decodes a payload that must be a JSON object. It checks
// types, not values: an unknown status from a newer peer is still shown.
func decodeObject(payload []byte, v any) error {
	if trimmed := bytes.TrimLeft(payload, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
		return errMalformed
	}
	return json.Unmarshal(payload, v)
}

func empty(s *string) bool { return s == nil || *s == "" }

// applyClaim upserts the full claim dict that claim, task_update,
// checkpoint and handoff records carry. It requires what the journal's own
// decoder requires of a claim.
func (o *Observed) applyClaim(hub string, p *peerView, e Event) error {
	var c struct {
		TaskID         *string  `json:"task_id"`
		Owner          *string  `json:"owner"`
		Status         *string  `json:"status"`
		Epoch          *int64   `json:"epoch"`
		LeaseExpiresAt *float64 `json:"lease_expires_at"`
		Version        int64    `json:"version"`
		Worktree       string   `json:"worktree"`
		Paths          []string `json:"paths"`
	}
	if err := decodeObject(e.Payload, &c); err != nil {
		return err
	}
	if empty(c.TaskID) || empty(c.Owner) || c.Status == nil || c.Epoch == nil || *c.Epoch < 0 ||
		c.LeaseExpiresAt == nil || c.Version < 0 {
		return errMalformed
	}
	if _, known := p.claims[*c.TaskID]; !known && len(p.claims) >= o.lim.MaxClaimsPerPeer {
		p.dropExpiredClaims(e.TS)
		if len(p.claims) >= o.lim.MaxClaimsPerPeer {
			return errOverBound
		}
	}
	p.claims[*c.TaskID] = ObservedClaim{
		Hub: hub, TaskID: *c.TaskID, Owner: *c.Owner, Worktree: c.Worktree, Paths: c.Paths,
		Epoch: *c.Epoch, Version: c.Version, Status: *c.Status,
		LeaseExpiresAt: *c.LeaseExpiresAt, ObservedAt: e.TS,
	}
	return nil
}

// dropExpiredClaims forgets the claims whose lease had run out when the
// peer wrote the event at ts. The reference never journals expiry, so
// without this a peer's dead claims would fill its bound. It scans, but only
// when the bound is reached.
func (p *peerView) dropExpiredClaims(ts float64) {
	for id, c := range p.claims {
		if c.LeaseExpiresAt <= ts {
			delete(p.claims, id)
		}
	}
}

func applyRelease(p *peerView, e Event) error {
	var r struct {
		TaskID *string `json:"task_id"`
	}
	if err := decodeObject(e.Payload, &r); err != nil {
		return err
	}
	if empty(r.TaskID) {
		return errMalformed
	}
	delete(p.claims, *r.TaskID)
	return nil
}

// applyExpiry removes a claim only if the expiry names the epoch observed:
// a renewal takes a new epoch, so an old lease's expiry arriving after it
// must not remove the renewed claim.
func applyExpiry(p *peerView, e Event) error {
	var x struct {
		TaskID *string `json:"task_id"`
		Epoch  *int64  `json:"epoch"`
	}
	if err := decodeObject(e.Payload, &x); err != nil {
		return err
	}
	if empty(x.TaskID) || x.Epoch == nil {
		return errMalformed
	}
	if c, ok := p.claims[*x.TaskID]; ok && c.Epoch == *x.Epoch {
		delete(p.claims, *x.TaskID)
	}
	return nil
}

// applyTask upserts a board task. The log is applied in order, so the last
// record of a task is its current state.
func (o *Observed) applyTask(hub string, p *peerView, e Event) error {
	var t struct {
		TaskID         *string `json:"task_id"`
		Title          *string `json:"title"`
		Version        *int64  `json:"version"`
		Status         string  `json:"status"`
		SuggestedOwner string  `json:"suggested_owner"`
		Project        string  `json:"project"`
		UpdatedAt      float64 `json:"updated_at"`
	}
	if err := decodeObject(e.Payload, &t); err != nil {
		return err
	}
	if empty(t.TaskID) || t.Title == nil || t.Version == nil || *t.Version < 0 {
		return errMalformed
	}
	if _, known := p.tasks[*t.TaskID]; !known && len(p.tasks) >= o.lim.MaxTasksPerPeer {
		return errOverBound
	}
	p.tasks[*t.TaskID] = ObservedTask{
		Hub: hub, TaskID: *t.TaskID, Title: *t.Title, Status: t.Status,
		SuggestedOwner: t.SuggestedOwner, Project: t.Project, Version: *t.Version, UpdatedAt: t.UpdatedAt,
	}
	return nil
}

// applyNote adds a progress note; notes are never replaced, only forgotten
// oldest first once the peer's bound is reached.
func (o *Observed) applyNote(hub string, p *peerView, e Event) error {
	var n struct {
		TaskID   *string `json:"task_id"`
		Author   *string `json:"author"`
		Text     *string `json:"text"`
		Kind     string  `json:"kind"`
		PostedAt float64 `json:"posted_at"`
	}
	if err := decodeObject(e.Payload, &n); err != nil {
		return err
	}
	if empty(n.TaskID) || n.Author == nil || n.Text == nil {
		return errMalformed
	}
	note := ObservedNote{Hub: hub, TaskID: *n.TaskID, Author: *n.Author, Kind: n.Kind, Text: *n.Text,
		PostedAt: n.PostedAt, Seq: e.Seq}
	if len(p.notes) < o.lim.MaxNotesPerPeer {
		p.notes = append(p.notes, note)
		return nil
	}
	p.notes[p.oldest] = note
	p.oldest = (p.oldest + 1) % len(p.notes)
	return nil
}

// Forget drops everything observed of hubID, as when the peer is
// quarantined. Its next event, whatever its seq, is applied afresh.
func (o *Observed) Forget(hubID string) { delete(o.peers, hubID) }

// Claims returns the observed claims still live at now (lease_expires_at >
// now), sorted by hub then task. A claim past its lease stops counting even
// with no release or expiry record: the reference never journals expiry,
// and trusting its log alone would keep a dead claim asserting forever.
func (o *Observed) Claims(now float64) []ObservedClaim {
	var out []ObservedClaim
	for _, p := range o.peers {
		for _, c := range p.claims {
			if c.LeaseExpiresAt > now {
				c.Paths = slices.Clone(c.Paths)
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, func(a, b ObservedClaim) int {
		return cmp.Or(strings.Compare(a.Hub, b.Hub), strings.Compare(a.TaskID, b.TaskID))
	})
	return out
}

// Board returns every observed task, sorted by hub then task.
func (o *Observed) Board() []ObservedTask {
	var out []ObservedTask
	for _, p := range o.peers {
		for _, t := range p.tasks {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b ObservedTask) int {
		return cmp.Or(strings.Compare(a.Hub, b.Hub), strings.Compare(a.TaskID, b.TaskID))
	})
	return out
}

// Notes returns the progress notes kept, by hub, each hub's in log order.
func (o *Observed) Notes() []ObservedNote {
	hubs := make([]string, 0, len(o.peers))
	for h := range o.peers {
		hubs = append(hubs, h)
	}
	slices.Sort(hubs)
	var out []ObservedNote
	for _, h := range hubs {
		p := o.peers[h]
		out = append(out, p.notes[p.oldest:]...)
		out = append(out, p.notes[:p.oldest]...)
	}
	return out
}

// Asserting returns, for each namespace, the sorted ids of the hubs holding
// a live observed claim whose owner is in that namespace (the owner's name
// before the first '/', "" for a bare name). It is the feed of the partition
// check (PROTOCOL.md §6.1, §6.4): an input to a refusal, never a grant.
func (o *Observed) Asserting(now float64) map[string][]string {
	out := map[string][]string{}
	for hub, p := range o.peers {
		seen := map[string]bool{}
		for _, c := range p.claims {
			ns := coord.NamespaceOf(c.Owner)
			if c.LeaseExpiresAt > now && !seen[ns] {
				seen[ns] = true
				out[ns] = append(out[ns], hub)
			}
		}
	}
	for _, hubs := range out {
		slices.Sort(hubs)
	}
	return out
}
