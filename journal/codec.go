package journal

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

// Journal kinds the codec reads and writes (PROTOCOL.md §4.2).
const (
	KindClaim          = "claim"
	KindTaskUpdate     = "task_update"
	KindCheckpoint     = "checkpoint"
	KindHandoff        = "handoff"
	KindRelease        = "release"
	KindClaimDenial    = "claim_denial"
	KindResource       = "resource"
	KindLedgerTask     = "ledger_task"
	KindLedgerProgress = "ledger_progress"
	KindIdempotency    = "idempotency"
	// KindClaimExpired is an audit record of a lapsed lease, for peers
	// watching the log; replay skips it (expiry is recomputed).
	KindClaimExpired = "claim_expired"
)

// maxClaimantChars is how much of a refused claimant's name the digest-only
// claim_denial record keeps in clear (the reference's 256 characters).
const maxClaimantChars = 256

// ErrBadPayload wraps every Decode failure: the row cannot be the event its
// kind names. Replay quarantines such rows.
var ErrBadPayload = errors.New("journal: bad payload")

// Encode turns a coord event into its journal record, with the reference's
// kind and payload keys (PROTOCOL.md §4.2). Volatile events (waits, offer expiry)
// are not journalled: ok is false for them.
//
// What the payload does not carry, Decode cannot give back: ClaimGranted's
// Renewal, HandedOff's From, Released's Owner, Epoch and Receipt, TaskPosted's
// Update and Redeclared, and a refused claim's task id, worktree and paths
// (kept as digests only). None of them changes what applying the event does.
func Encode(ev coord.Event) (rec Record, ok bool) {
	var p []byte
	switch e := ev.(type) {
	case coord.ClaimGranted:
		p = wire.AppendClaim(nil, e.Claim, true)
	case coord.TaskUpdated:
		p = wire.AppendClaim(nil, e.Claim, true)
	case coord.CheckpointSaved:
		p = wire.AppendClaim(nil, e.Claim, true)
	case coord.HandedOff:
		p = wire.AppendClaim(nil, e.Claim, true)
	case coord.Released:
		p = pyjson.AppendString(append([]byte(nil), `{"task_id":`...), e.TaskID)
		p = append(p, '}')
	case coord.ClaimExpired:
		p = pyjson.AppendString(append([]byte(nil), `{"task_id":`...), e.TaskID)
		p = pyjson.AppendInt(append(p, `,"epoch":`...), e.Epoch)
		if e.Checkpoint != "" {
			p = pyjson.AppendString(append(p, `,"checkpoint":`...), e.Checkpoint)
		}
		p = append(p, '}')
	case coord.ClaimDenied:
		p = appendDenial(nil, e)
	case coord.ResourceOffered:
		p = wire.AppendOffer(nil, e.Offer)
	case coord.TaskPosted:
		p = wire.AppendTask(nil, e.Task, e.CausalParent)
	case coord.ProgressPosted:
		p = wire.AppendNote(nil, e.Note)
	default:
		return Record{}, false
	}
	if ev.Durability() == coord.Volatile {
		return Record{}, false
	}
	return Record{Kind: ev.Kind(), Payload: p, Durable: ev.Durability() == coord.Full}, true
}

// appendDenial writes the reference's digest-only audit form of a refused
// claim: who asked is kept (capped), what they asked for only as digests.
func appendDenial(b []byte, e coord.ClaimDenied) []byte {
	claimant, truncated := e.Claimant, false
	if utf8.RuneCountInString(claimant) > maxClaimantChars {
		runes := []rune(claimant)
		claimant, truncated = string(runes[:maxClaimantChars]), true
	}
	b = append(b, '{')
	b = pyjson.AppendKey(b, "claimant")
	b = pyjson.AppendString(b, claimant)
	b = pyjson.AppendKey(b, "claimant_sha256")
	b = pyjson.AppendString(b, sha256Hex([]byte(e.Claimant)))
	b = pyjson.AppendKey(b, "claimant_truncated")
	b = pyjson.AppendBool(b, truncated)
	b = pyjson.AppendKey(b, "decision")
	b = pyjson.AppendString(b, "deny")
	b = pyjson.AppendKey(b, "path_count")
	b = pyjson.AppendInt(b, int64(len(e.Paths)))
	b = pyjson.AppendKey(b, "reason_code")
	b = pyjson.AppendString(b, string(e.Code))
	b = pyjson.AppendKey(b, "scope_sha256")
	b = pyjson.AppendString(b, sha256Hex(ScopeDigestText(e.Worktree, e.Paths)))
	b = pyjson.AppendKey(b, "task_id_sha256")
	b = pyjson.AppendString(b, sha256Hex([]byte(e.TaskID)))
	return append(b, '}')
}

// ScopeDigestText is the text a claim_denial's scope_sha256 digests: the
// canonical JSON {"paths":[...],"worktree":"..."} (sorted keys, compact,
// ASCII-escaped).
func ScopeDigestText(worktree string, paths []string) []byte {
	b := append([]byte(nil), `{"paths":`...)
	b = pyjson.AppendStrings(b, paths)
	b = append(b, `,"worktree":`...)
	b = pyjson.AppendString(b, worktree)
	return append(b, '}')
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Decode turns a journal row back into the coord event it records. A kind
// the core does not replay (chat, mailbox, audit kinds other than
// claim_denial, unknown kinds) gives ok=false and no error; a row that
// cannot be a valid event gives an error and is quarantined by replay.
//
// Decode is strict: the payload must be a JSON object with the kind's
// required keys at their JSON types (ints as integers, times as finite
// numbers) and valid values (a known status, a non-negative epoch). Unknown
// keys are ignored so later writers may add fields. Decode never panics.
func Decode(kind string, payload []byte) (ev coord.Event, ok bool, err error) {
	switch kind {
	case KindClaim, KindTaskUpdate, KindCheckpoint, KindHandoff:
		c, err := decodeClaim(payload)
		if err != nil {
			return nil, false, badPayload(kind, err)
		}
		switch kind {
		case KindClaim:
			return coord.ClaimGranted{Claim: c}, true, nil
		case KindTaskUpdate:
			return coord.TaskUpdated{Claim: c}, true, nil
		case KindCheckpoint:
			return coord.CheckpointSaved{Claim: c}, true, nil
		default:
			return coord.HandedOff{Claim: c}, true, nil
		}
	case KindRelease:
		var p struct {
			TaskID *string `json:"task_id"`
		}
		if err := unmarshalObject(payload, &p); err != nil {
			return nil, false, badPayload(kind, err)
		}
		if p.TaskID == nil || *p.TaskID == "" {
			return nil, false, badPayload(kind, errMissing("task_id"))
		}
		return coord.Released{TaskID: *p.TaskID}, true, nil
	case KindClaimDenial:
		ev, err := decodeDenial(payload)
		if err != nil {
			return nil, false, badPayload(kind, err)
		}
		return ev, true, nil
	case KindResource:
		o, err := decodeOffer(payload)
		if err != nil {
			return nil, false, badPayload(kind, err)
		}
		return coord.ResourceOffered{Offer: o}, true, nil
	case KindLedgerTask:
		t, parent, err := decodeTask(payload)
		if err != nil {
			return nil, false, badPayload(kind, err)
		}
		return coord.TaskPosted{Task: t, CausalParent: parent}, true, nil
	case KindLedgerProgress:
		n, err := decodeNote(payload)
		if err != nil {
			return nil, false, badPayload(kind, err)
		}
		return coord.ProgressPosted{Note: n}, true, nil
	}
	return nil, false, nil
}

func badPayload(kind string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrBadPayload, kind, err)
}

func errMissing(key string) error { return fmt.Errorf("missing %q", key) }

// unmarshalObject decodes a payload that must be one JSON object. NaN and
// Infinity are not JSON, so they fail here.
func unmarshalObject(payload []byte, v any) error {
	i := 0
	for i < len(payload) && (payload[i] == ' ' || payload[i] == '\t' || payload[i] == '\n' || payload[i] == '\r') {
		i++
	}
	if i == len(payload) || payload[i] != '{' {
		return errors.New("not a JSON object")
	}
	return json.Unmarshal(payload, v)
}

type gitJSON struct {
	Branch        *string `json:"branch"`
	Base          *string `json:"base"`
	AutoReleaseOn *string `json:"auto_release_on"`
}

type claimJSON struct {
	TaskID         *string         `json:"task_id"`
	Owner          *string         `json:"owner"`
	Note           *string         `json:"note"`
	ClaimedAt      *float64        `json:"claimed_at"`
	ExpiresAt      *float64        `json:"lease_expires_at"`
	Status         *string         `json:"status"`
	DataRef        *string         `json:"data_ref"`
	Worktree       *string         `json:"worktree"`
	Paths          []*string       `json:"paths"`
	Globs          []*string       `json:"globs"`
	Files          []*string       `json:"files"`
	Mode           *string         `json:"mode"`
	PathIdentity   json.RawMessage `json:"path_identity"`
	Epoch          *int64          `json:"epoch"`
	Version        *int64          `json:"version"`
	Checkpoint     *string         `json:"checkpoint"`
	Git            *gitJSON        `json:"git"`
	QuotaPrincipal *string         `json:"quota_principal"`
	BoardTask      *string         `json:"board_task"`
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func finite(name string, f *float64) error {
	if f == nil {
		return errMissing(name)
	}
	if math.IsNaN(*f) || math.IsInf(*f, 0) {
		return fmt.Errorf("%q is not finite", name)
	}
	return nil
}

// decodeClaim reads the full claim dict. task_id, owner, status, epoch and
// lease_expires_at are required (a claim without them cannot be placed or
// expired); the rest default as the reference's reader does, and a missing
// quota_principal falls back to "legacy-agent:<owner>".
func decodeClaim(payload []byte) (*coord.Claim, error) {
	var p claimJSON
	if !scanClaim(payload, &p) {
		p = claimJSON{}
		if err := unmarshalObject(payload, &p); err != nil {
			return nil, err
		}
	}
	switch {
	case p.TaskID == nil || *p.TaskID == "":
		return nil, errMissing("task_id")
	case p.Owner == nil || *p.Owner == "":
		return nil, errMissing("owner")
	case p.Status == nil:
		return nil, errMissing("status")
	case p.Epoch == nil:
		return nil, errMissing("epoch")
	}
	if err := finite("lease_expires_at", p.ExpiresAt); err != nil {
		return nil, err
	}
	if p.ClaimedAt != nil {
		if err := finite("claimed_at", p.ClaimedAt); err != nil {
			return nil, err
		}
	}
	st, ok := coord.ParseStatus(*p.Status)
	if !ok {
		return nil, fmt.Errorf("unknown status %q", *p.Status)
	}
	if *p.Epoch < 0 {
		return nil, fmt.Errorf("negative epoch %d", *p.Epoch)
	}
	c := &coord.Claim{
		TaskID: *p.TaskID, Owner: *p.Owner, Note: str(p.Note), Status: st,
		DataRef: str(p.DataRef), Worktree: str(p.Worktree), Checkpoint: str(p.Checkpoint),
		ExpiresAt: *p.ExpiresAt, Epoch: *p.Epoch, QuotaPrincipal: str(p.QuotaPrincipal),
		BoardTask: str(p.BoardTask),
	}
	if p.ClaimedAt != nil {
		c.ClaimedAt = *p.ClaimedAt
	}
	if p.Version != nil {
		if *p.Version < 0 {
			return nil, fmt.Errorf("negative version %d", *p.Version)
		}
		c.Version = *p.Version
	}
	if p.QuotaPrincipal == nil {
		c.QuotaPrincipal = "legacy-agent:" + c.Owner
	}
	// [] and [""] both mean the whole worktree, which the core holds as nil
	// (beside globs or files, a root "" is kept: applying the claim widens it).
	if !(len(p.Paths) == 0 || len(p.Globs) == 0 && len(p.Files) == 0 && len(p.Paths) == 1 && p.Paths[0] != nil && *p.Paths[0] == "") {
		c.Paths = make([]string, len(p.Paths))
		for i, s := range p.Paths {
			if s == nil {
				return nil, errors.New("null in paths")
			}
			c.Paths[i] = *s
		}
	}
	var err error
	if c.Globs, err = strs("globs", p.Globs); err != nil {
		return nil, err
	}
	if c.Files, err = strs("files", p.Files); err != nil {
		return nil, err
	}
	if p.Mode != nil {
		m, ok := coord.ParseMode(*p.Mode)
		if !ok {
			return nil, fmt.Errorf("unknown mode %q", *p.Mode)
		}
		c.Mode = m
	}
	if len(p.PathIdentity) > 0 && string(p.PathIdentity) != "null" {
		if p.PathIdentity[0] != '{' {
			return nil, errors.New("path_identity is not an object")
		}
		raw, _ := pyjson.CanonicalRaw(p.PathIdentity)
		c.PathIdentity = string(raw)
	}
	if p.Git != nil {
		c.Git = &coord.Git{Branch: str(p.Git.Branch), Base: str(p.Git.Base), AutoReleaseOn: str(p.Git.AutoReleaseOn)}
	}
	return c, nil
}

// strs reads an optional list of strings (globs, files): nil when empty.
func strs(name string, list []*string) ([]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := make([]string, len(list))
	for i, s := range list {
		if s == nil {
			return nil, fmt.Errorf("null in %s", name)
		}
		out[i] = *s
	}
	return out, nil
}

// decodeDenial recovers what the digest-only record keeps: the claimant (as
// far as it was kept in clear) and the reason. Applying it does nothing.
func decodeDenial(payload []byte) (coord.ClaimDenied, error) {
	var p struct {
		Claimant   *string `json:"claimant"`
		Decision   *string `json:"decision"`
		ReasonCode *string `json:"reason_code"`
		PathCount  *int64  `json:"path_count"`
	}
	if err := unmarshalObject(payload, &p); err != nil {
		return coord.ClaimDenied{}, err
	}
	switch {
	case p.Claimant == nil:
		return coord.ClaimDenied{}, errMissing("claimant")
	case p.ReasonCode == nil || *p.ReasonCode == "":
		return coord.ClaimDenied{}, errMissing("reason_code")
	case p.Decision != nil && *p.Decision != "deny":
		return coord.ClaimDenied{}, fmt.Errorf("decision %q is not deny", *p.Decision)
	case p.PathCount != nil && *p.PathCount < 0:
		return coord.ClaimDenied{}, fmt.Errorf("negative path_count %d", *p.PathCount)
	}
	return coord.ClaimDenied{Claimant: *p.Claimant, Code: coord.Code(*p.ReasonCode)}, nil
}

func decodeOffer(payload []byte) (*coord.Offer, error) {
	var p struct {
		Agent     *string         `json:"agent"`
		Kind      *string         `json:"kind"`
		Name      *string         `json:"name"`
		Capacity  *int            `json:"capacity"`
		Meta      json.RawMessage `json:"meta"`
		OfferedAt *float64        `json:"offered_at"`
	}
	if err := unmarshalObject(payload, &p); err != nil {
		return nil, err
	}
	switch {
	case p.Agent == nil || *p.Agent == "":
		return nil, errMissing("agent")
	case p.Kind == nil || *p.Kind == "":
		return nil, errMissing("kind")
	case p.Name == nil || *p.Name == "":
		return nil, errMissing("name")
	}
	if err := finite("offered_at", p.OfferedAt); err != nil {
		return nil, err
	}
	o := &coord.Offer{Agent: *p.Agent, Kind: *p.Kind, Name: *p.Name, Capacity: 1, OfferedAt: *p.OfferedAt}
	if p.Capacity != nil {
		o.Capacity = *p.Capacity
	}
	if len(p.Meta) > 0 && string(p.Meta) != "null" {
		if p.Meta[0] != '{' {
			return nil, errors.New("meta is not an object")
		}
		// {} is the reference's "no meta"; the core holds that as "".
		if raw, _ := pyjson.CanonicalRaw(p.Meta); string(raw) != "{}" {
			o.Meta = string(raw)
		}
	}
	return o, nil
}

var ledgerStatuses = []string{"open", "in_progress", "blocked", "done", "cancelled"}

var progressKinds = []string{"note", "blocked", "assessment", "usage", "approval"}

func decodeTask(payload []byte) (*coord.BoardTask, string, error) {
	var p struct {
		TaskID         *string         `json:"task_id"`
		Title          *string         `json:"title"`
		Description    *string         `json:"description"`
		DependsOn      []*string       `json:"depends_on"`
		Status         *string         `json:"status"`
		SuggestedOwner *string         `json:"suggested_owner"`
		Project        *string         `json:"project"`
		Version        *int64          `json:"version"`
		CreatedBy      *string         `json:"created_by"`
		CreatedAt      *float64        `json:"created_at"`
		UpdatedAt      *float64        `json:"updated_at"`
		Owner          *string         `json:"owner"`
		OwnerClaim     *string         `json:"owner_claim"`
		CausalParent   json.RawMessage `json:"causal_parent"`
	}
	if err := unmarshalObject(payload, &p); err != nil {
		return nil, "", err
	}
	switch {
	case p.TaskID == nil || *p.TaskID == "":
		return nil, "", errMissing("task_id")
	case p.Title == nil:
		return nil, "", errMissing("title")
	case p.Version == nil:
		return nil, "", errMissing("version")
	case *p.Version < 0:
		return nil, "", fmt.Errorf("negative version %d", *p.Version)
	}
	status := "open"
	if p.Status != nil {
		status = *p.Status
	}
	if !slices.Contains(ledgerStatuses, status) {
		return nil, "", fmt.Errorf("unknown ledger status %q", status)
	}
	if err := finite("created_at", p.CreatedAt); err != nil {
		return nil, "", err
	}
	if err := finite("updated_at", p.UpdatedAt); err != nil {
		return nil, "", err
	}
	t := &coord.BoardTask{
		TaskID: *p.TaskID, Title: *p.Title, Description: str(p.Description),
		DependsOn: make([]string, len(p.DependsOn)), Status: status,
		SuggestedOwner: str(p.SuggestedOwner), Project: str(p.Project), Version: *p.Version,
		CreatedBy: str(p.CreatedBy), CreatedAt: *p.CreatedAt, UpdatedAt: *p.UpdatedAt,
		Owner: str(p.Owner), OwnerClaim: str(p.OwnerClaim),
	}
	for i, d := range p.DependsOn {
		if d == nil {
			return nil, "", errors.New("null in depends_on")
		}
		t.DependsOn[i] = *d
	}
	var parent string
	if len(p.CausalParent) > 0 && string(p.CausalParent) != "null" {
		raw, _ := pyjson.CanonicalRaw(p.CausalParent)
		parent = string(raw)
	}
	return t, parent, nil
}

func decodeNote(payload []byte) (*coord.Note, error) {
	var p struct {
		TaskID   *string  `json:"task_id"`
		Author   *string  `json:"author"`
		Kind     *string  `json:"kind"`
		Text     *string  `json:"text"`
		PostedAt *float64 `json:"posted_at"`
	}
	if err := unmarshalObject(payload, &p); err != nil {
		return nil, err
	}
	switch {
	case p.TaskID == nil || *p.TaskID == "":
		return nil, errMissing("task_id")
	case p.Author == nil:
		return nil, errMissing("author")
	case p.Text == nil:
		return nil, errMissing("text")
	}
	kind := "note"
	if p.Kind != nil {
		kind = *p.Kind
	}
	if !slices.Contains(progressKinds, kind) {
		return nil, fmt.Errorf("unknown progress kind %q", kind)
	}
	if err := finite("posted_at", p.PostedAt); err != nil {
		return nil, err
	}
	return &coord.Note{TaskID: *p.TaskID, Author: *p.Author, Kind: kind, Text: *p.Text, PostedAt: *p.PostedAt}, nil
}
