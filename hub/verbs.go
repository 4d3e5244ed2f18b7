package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/dashboard"
	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/sequencer"
	"github.com/synapse-hub/synapse/wire"
)

// refused sends a coord refusal as the verb's denial frame (or a plain
// error for verbs the reference refuses with one), with error_code.
func (s *session) refused(sender, denialType string, ref *coord.Refusal, task string) {
	if ref.TaskID != "" {
		task = ref.TaskID
	}
	verb, holder := denialType, ref.Holder
	if verb == "" {
		verb = "error"
	}
	if holder == "" {
		holder = ref.Owner // a fenced verb's other party
	}
	s.h.feed.Refusal(dashboard.APIRefusal{At: s.h.now(), Verb: verb, Code: string(ref.Code), Agent: sender, TaskID: task,
		Holder: holder, ConflictTask: ref.ConflictTask, Message: ref.Message})
	if denialType == "" || denialType == "error" {
		f := s.frame("error", sender, ref.Message).Str("error_code", string(ref.Code))
		if task != "" {
			f.Str("task_id", task) // additive: lets a client match the refusal to its request
		}
		s.h.m.framesOut.WithLabelValues("error").Inc()
		s.reply(f.Bytes())
		return
	}
	f := s.frame(denialType, sender, ref.Message).Str("task_id", task)
	if denialType == "claim_denied" {
		f.Str("reason_code", string(ref.Code))
	}
	if ref.Holder != "" { // wait_denied's field in the reference; additive elsewhere
		f.Str("holder", ref.Holder)
	}
	if ref.ConflictTask != "" {
		f.Str("conflict_task", ref.ConflictTask) // additive
	}
	if ref.ConflictMode != "" { // additive: only when a glob, a file or a shared claim is involved
		f.Str("conflict_pattern", ref.ConflictPattern).Str("conflict_mode", ref.ConflictMode)
	}
	if len(ref.Pending) > 0 {
		f.Strs("pending", ref.Pending) // additive: BOARD_TASK_NOT_READY's undone dependencies
	}
	s.h.m.framesOut.WithLabelValues(denialType).Inc()
	s.reply(f.Str("error_code", string(ref.Code)).Bytes())
}

// submit runs a mutation through the sequencer with the frame's idempotency
// key, and settles everything but the outcome: replays (the stored frame,
// to the requester only), idempotency conflicts, journal failures and
// shutdown. ok means Outcome is there to read.
func (s *session) submit(sender, typ, task string, in *wire.Inbound, cmd coord.Command) (sequencer.Reply, bool) {
	h := s.h
	req := sequencer.Request{Cmd: cmd, Render: h.render}
	if key, _ := in.Value("idem_key").(string); key != "" && verbs[typ].idempotent {
		digest, err := requestDigest(in)
		if err != nil {
			s.fail(sender, "invalid_idempotency_request", "Idempotency request could not be canonicalised.")
			return sequencer.Reply{}, false
		}
		req.Idem = &sequencer.Idem{Key: sender + "\x00" + typ + "\x00" + key, Digest: digest}
	}
	if !h.beginSubmit() {
		s.fail(sender, "shutting_down", "Hub is shutting down.")
		return sequencer.Reply{}, false
	}
	ns := coord.NamespaceOf(identity(sender))
	h.nsBusy.enter(ns)
	t0 := time.Now()
	reply, err := h.seq.Submit(context.Background(), req)
	h.m.submitSeconds.Observe(time.Since(t0).Seconds())
	h.nsBusy.leave(ns)
	h.submits.Done()
	switch {
	case errors.Is(err, sequencer.ErrUncertain):
		// Not "nothing was decided": the store may have kept it. A retry
		// with the same idem_key is answered once (INV-CR-1).
		h.m.fedRefused.WithLabelValues("uncertain").Inc()
		s.refuseCode(sender, verbs[typ].denial, in, "OUTCOME_UNKNOWN", "The store did not confirm in time whether it kept this ("+err.Error()+"): it may or may not have been applied. Retry with the same idem_key (answered once), or read the state first.", func(f *wire.Frame) {
			f.Str("namespace", coord.NamespaceOf(identity(sender))).Str("ownership", "moving").Int("retry_after_ms", 250)
		})
		return reply, false
	case errors.Is(err, sequencer.ErrRetry):
		h.m.fedRefused.WithLabelValues("moving").Inc()
		s.refuseCode(sender, verbs[typ].denial, in, "NAMESPACE_MOVING", "Nothing was decided: the namespace is changing hands or its store did not answer ("+err.Error()+"). Retry in 250ms.", func(f *wire.Frame) {
			f.Str("namespace", coord.NamespaceOf(identity(sender))).Str("ownership", "moving").Int("retry_after_ms", 250)
		})
		return reply, false
	case errors.Is(err, sequencer.ErrIdempotencyConflict):
		h.m.idemConflicts.Inc()
		s.fail(sender, "idempotency_conflict", "Idempotency key was already used for a different request.")
		return reply, false
	case errors.Is(err, sequencer.ErrIdempotencyExpired):
		s.fail(sender, "idempotency_expired", "Idempotency key was first used longer ago than the hub keeps its answer (--idempotency-window), so nothing was applied: read the state to see whether the first request took effect, then send it again without the key or with a new one.")
		return reply, false
	case errors.Is(err, sequencer.ErrJournal):
		what := "The " + typ
		if task != "" {
			what += " of task '" + task + "'"
		}
		s.fail(sender, "journal_unavailable", journalRefusal(h.journalName(), what, err))
		return reply, false
	case errors.Is(err, sequencer.ErrClosed):
		s.fail(sender, "shutting_down", "Hub is shutting down.")
		return reply, false
	case err != nil:
		s.fail(sender, "internal_error", "Request failed: "+err.Error())
		return reply, false
	}
	if reply.Replayed {
		h.m.idemReplays.Inc()
		if len(reply.Response) > 0 && string(reply.Response) != "null" {
			s.reply(reply.Response)
		}
		return reply, false
	}
	return reply, true
}

// requestDigest is the idempotency digest of a routed frame: sha256 of its
// canonical JSON without the clock and signature fields (PROTOCOL.md §4.3).
func requestDigest(in *wire.Inbound) (string, error) {
	m := in.Map()
	c := make(map[string]any, len(m))
	for k, v := range m {
		switch k {
		case "timestamp", "client_timestamp", "auth", "signature", "token":
			continue
		}
		c[k] = v
	}
	b, err := pyjson.AppendValue(nil, c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// fence reads a fencing integer (epoch, expected_version) of a claim-family
// verb; ok is false when it was refused. A present non-number is a
// malformed frame; a number that is not an integer lexeme (7.5, and 7.0
// too) is the verb's own refusal with EPOCH_INVALID or VERSION_INVALID,
// shaped like EPOCH_STALE, and changes nothing (INV-EF-2, INV-EF-3).
func (s *session) fence(sender, denialType, task, key string, in *wire.Inbound) (v int64, present, ok bool) {
	v, present, err := in.StrictInt(key)
	switch {
	case errors.Is(err, wire.ErrNotInteger):
		code := coord.CodeEpochInvalid
		if key != "epoch" {
			code = coord.CodeVersionInvalid
		}
		msg := "Task '" + task + "' " + key + " " + in.Text(key) + " is not an integer."
		s.refused(sender, denialType, &coord.Refusal{Code: code, TaskID: task, Message: msg}, task)
		return 0, false, false
	case err != nil:
		s.fail(sender, "malformed_frame", "Malformed frame: '"+key+"' must be a number.")
		return 0, false, false
	}
	return v, present, true
}

func (s *session) claim(sender string, in *wire.Inbound) {
	task := taskID(in)
	cmd := coord.ClaimRequest{
		Agent:     sender,
		Principal: s.principal(),
		TaskID:    task,
		Note:      strings.TrimSpace(in.Text("note")),
		Worktree:  in.Str("worktree"),
		Paths:     in.Strings("paths"),
		Globs:     in.Strings("globs"), // additive (feature glob_scopes)
		Files:     in.Strings("files"), // additive (feature file_scopes)
		Git:       parseGit(in),
		BoardTask: strings.TrimSpace(in.Str("board_task")), // additive: a task-bound claim
	}
	if cmd.Paths == nil {
		cmd.Paths = []string{}
	}
	switch mode := in.Value("mode"); mode { // additive (feature shared_claims)
	case nil, "exclusive":
	case "shared":
		cmd.Shared = true
	default:
		s.fail(sender, "malformed_frame", "Malformed frame: 'mode' must be 'exclusive' or 'shared'.")
		return
	}
	cmd.TTL, cmd.HasTTL = in.LenientFloat("ttl_seconds")
	if _, ok := in.Value("path_identity").(map[string]any); ok {
		cmd.PathIdentity = in.RawJSON("path_identity")
	}
	var ok bool
	if cmd.DepsElsewhere, ok = s.depsElsewhere(sender, cmd.BoardTask); !ok { // on a fleet (fleetdeps.go)
		return
	}
	reply, ok := s.submit(sender, "claim", task, in, cmd)
	if !ok {
		return
	}
	if ref := reply.Outcome.Refusal; ref != nil {
		s.h.m.claimsDenied.WithLabelValues(string(ref.Code)).Inc()
		s.refused(sender, "claim_denied", ref, task)
	}
}

func parseGit(in *wire.Inbound) *coord.Git {
	m, ok := in.Value("git").(map[string]any)
	if !ok {
		return nil
	}
	g := &coord.Git{Base: "main", AutoReleaseOn: "merge"}
	if v, ok := m["branch"].(string); ok {
		g.Branch = v
	}
	if v, ok := m["base"].(string); ok && v != "" {
		g.Base = v
	}
	if v, present := m["auto_release_on"]; present {
		switch v {
		case "manual", "commit", "merge":
			g.AutoReleaseOn = v.(string)
		default:
			g.AutoReleaseOn = "manual"
		}
	}
	return g
}

var evidenceKeys = []string{"evidence", "artifacts", "known_failures", "changed_files", "generated_artifacts", "approvals", "confidence", "freshness_seconds"}

func (s *session) release(sender string, in *wire.Inbound) {
	task := taskID(in)
	epoch, hasEpoch, ok := s.fence(sender, "release_denied", task, "epoch", in)
	if !ok {
		return
	}
	cmd := coord.ReleaseRequest{Agent: sender, TaskID: task, Epoch: epoch, HasEpoch: hasEpoch,
		Outcome: strings.TrimSpace(in.Str("outcome"))} // additive: moves a task-bound claim's board task
	for _, k := range evidenceKeys {
		if in.Has(k) {
			e := &coord.Evidence{
				Evidence:           in.StringOrList("evidence"),
				Artifacts:          in.StringOrList("artifacts"),
				KnownFailures:      in.StringOrList("known_failures"),
				ChangedFiles:       in.StringOrList("changed_files"),
				GeneratedArtifacts: in.StringOrList("generated_artifacts"),
				Approvals:          in.StringOrList("approvals"),
				Confidence:         in.Str("confidence"),
			}
			e.Freshness, e.HasFreshness = in.LenientFloat("freshness_seconds")
			cmd.Evidence = e
			break
		}
	}
	if reply, ok := s.submit(sender, "release", task, in, cmd); ok && reply.Outcome.Refusal != nil {
		s.refused(sender, "release_denied", reply.Outcome.Refusal, task)
	}
}

func (s *session) taskUpdate(sender string, in *wire.Inbound) {
	task := taskID(in, "id")
	if t := strings.TrimSpace(in.Text("task_id")); t != "" {
		task = t
	}
	epoch, hasEpoch, ok := s.fence(sender, "error", task, "epoch", in)
	if !ok {
		return
	}
	ev, hasEV, ok := s.fence(sender, "error", task, "expected_version", in)
	if !ok {
		return
	}
	cmd := coord.UpdateRequest{
		Agent: sender, TaskID: task,
		Status:  strings.TrimSpace(in.Text("status")),
		Note:    strings.TrimSpace(in.Text("note")),
		DataRef: in.Text("data_ref"),
		Epoch:   epoch, HasEpoch: hasEpoch,
		ExpectedVersion: ev, HasExpectedVersion: hasEV,
	}
	if reply, ok := s.submit(sender, "task_update", task, in, cmd); ok && reply.Outcome.Refusal != nil {
		s.refused(sender, "error", reply.Outcome.Refusal, task)
	}
}

func (s *session) handoff(sender string, in *wire.Inbound) {
	task := taskID(in)
	to := handoffTarget(in)
	epoch, hasEpoch, ok := s.fence(sender, "handoff_denied", task, "epoch", in)
	if !ok {
		return
	}
	s.h.mu.Lock()
	recipient := s.h.reg.byName[to]
	s.h.mu.Unlock()
	cmd := coord.HandoffRequest{
		Agent: sender, TaskID: task, To: to, ToOnline: recipient != nil,
		Note:  strings.TrimSpace(in.Text("note")),
		Epoch: epoch, HasEpoch: hasEpoch,
	}
	switch peer := s.h.fed.RemotePeer(to); {
	case recipient != nil:
		cmd.ToPrincipal = recipient.principal() // INV-ME-5: the cap gates the recipient's principal
	case s.recipientViaPeer: // forwarded: the recipient is an agent of the forwarding hub
		cmd.ToOnline, cmd.ToPrincipal = true, "federation-peer:"+s.viaPeer
	case peer != "": // an agent of a peer that forwarded for it
		cmd.ToOnline, cmd.ToPrincipal = true, "federation-peer:"+peer
	}
	if reply, ok := s.submit(sender, "handoff", task, in, cmd); ok && reply.Outcome.Refusal != nil {
		s.refused(sender, "handoff_denied", reply.Outcome.Refusal, task)
	}
}

func (s *session) checkpoint(sender string, in *wire.Inbound) {
	task := strings.TrimSpace(in.Text("task_id"))
	cp := in.Text("checkpoint")
	if !in.Has("checkpoint") {
		cp = in.Text("payload")
	}
	epoch, hasEpoch, ok := s.fence(sender, "checkpoint_denied", task, "epoch", in)
	if !ok {
		return
	}
	cmd := coord.CheckpointRequest{Agent: sender, TaskID: task, Checkpoint: cp, Epoch: epoch, HasEpoch: hasEpoch}
	if reply, ok := s.submit(sender, "checkpoint", task, in, cmd); ok && reply.Outcome.Refusal != nil {
		s.refused(sender, "checkpoint_denied", reply.Outcome.Refusal, task)
	}
}

func (s *session) waitRequest(sender string, in *wire.Inbound) {
	task := taskID(in)
	if reply, ok := s.submit(sender, "wait_request", task, in, coord.WaitRequest{Agent: sender, TaskID: task}); ok && reply.Outcome.Refusal != nil {
		s.refused(sender, "wait_denied", reply.Outcome.Refusal, task)
	}
}

func (s *session) resource(sender, typ string, in *wire.Inbound) {
	kind := strings.TrimSpace(in.Str("kind"))
	if kind == "" {
		kind = strings.TrimSpace(in.Str("resource_kind"))
	}
	name := strings.TrimSpace(in.Str("name"))
	if name == "" {
		name = strings.TrimSpace(in.Str("resource_name"))
	}
	capacity, ok := in.LenientInt("capacity")
	if !ok || capacity < 1 {
		capacity = 1
	}
	meta := ""
	if _, ok := in.Value("meta").(map[string]any); ok {
		meta = in.RawJSON("meta")
	}
	cmd := coord.OfferResource{Agent: sender, Kind: kind, Name: name, Capacity: int(min(capacity, 1<<31-1)), Meta: meta}
	if reply, ok := s.submit(sender, typ, "", in, cmd); ok && reply.Outcome.Refusal != nil {
		s.refused(sender, "error", reply.Outcome.Refusal, "")
	}
}

var fingerprintRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// causalParent validates causal_parent (PROTOCOL.md §2.11): "" when absent,
// else its canonical JSON, or why it is malformed.
func causalParent(in *wire.Inbound) (string, string) {
	v := in.Value("causal_parent")
	if v == nil {
		return "", ""
	}
	m, ok := v.(map[string]any)
	if !ok {
		return "", "'causal_parent' must be an object."
	}
	hub, _ := m["hub_id"].(string)
	if hub == "" || len(hub) > 512 {
		return "", "'causal_parent.hub_id' must be a non-empty string of at most 512 bytes."
	}
	seq, ok := jsonInt(m["seq"])
	if !ok || seq < 1 {
		return "", "'causal_parent.seq' must be a positive integer."
	}
	fp, _ := m["event_fingerprint"].(string)
	if !fingerprintRE.MatchString(fp) {
		return "", "'causal_parent.event_fingerprint' must be a lowercase sha256 hex digest."
	}
	return in.RawJSON("causal_parent"), ""
}

// boardFields reads what both board writes carry: the task id, the
// expected_version CAS and the causal_parent; ok is false when a malformed
// field was refused.
func (s *session) boardFields(sender string, in *wire.Inbound) (task string, ev int64, hasEV bool, causal string, ok bool) {
	task = strings.TrimSpace(in.Text("task_id"))
	if ev, hasEV, ok = s.boardVersion(sender, in); !ok {
		return
	}
	causal, why := causalParent(in)
	if why != "" {
		s.fail(sender, "malformed_frame", "Malformed frame: "+why)
		return task, 0, false, "", false
	}
	return task, ev, hasEV, causal, true
}

func (s *session) boardVersion(sender string, in *wire.Inbound) (int64, bool, bool) {
	v, present, err := in.StrictInt("expected_version")
	if err != nil {
		s.fail(sender, "malformed_frame", "Malformed frame: 'expected_version' must be an integer.")
		return 0, false, false
	}
	return v, present, true
}

func (s *session) ledgerTask(sender string, in *wire.Inbound) {
	task, ev, hasEV, cp, ok := s.boardFields(sender, in)
	if !ok {
		return
	}
	cmd := coord.DeclareTask{
		Agent: sender, TaskID: task,
		Title:           strings.TrimSpace(in.Text("title")),
		Description:     in.Text("description"),
		DependsOn:       in.Strings("depends_on"),
		SuggestedOwner:  strings.TrimSpace(in.Str("suggested_owner")),
		Project:         strings.TrimSpace(in.Str("project")),
		ExpectedVersion: ev, HasExpectedVersion: hasEV,
		CausalParent: cp,
	}
	if reply, ok := s.submit(sender, "ledger_task", task, in, cmd); ok && reply.Outcome.Refusal != nil {
		s.refused(sender, "error", reply.Outcome.Refusal, task)
	}
}

func (s *session) ledgerTaskUpdate(sender string, in *wire.Inbound) {
	task, ev, hasEV, cp, ok := s.boardFields(sender, in)
	if !ok {
		return
	}
	opt := func(k string) *string {
		if v, ok := in.Value(k).(string); ok {
			v = strings.TrimSpace(v)
			return &v
		}
		return nil
	}
	cmd := coord.UpdateBoardTask{
		Agent: sender, TaskID: task,
		Status: opt("status"), SuggestedOwner: opt("suggested_owner"), Project: opt("project"),
		ExpectedVersion: ev, HasExpectedVersion: hasEV, CausalParent: cp,
	}
	if cmd.Status != nil && *cmd.Status == "" {
		cmd.Status = nil // a blank status leaves it alone
	}
	if reply, ok := s.submit(sender, "ledger_task_update", task, in, cmd); ok && reply.Outcome.Refusal != nil {
		s.refused(sender, "error", reply.Outcome.Refusal, task)
	}
}

func (s *session) ledgerProgress(sender string, in *wire.Inbound) {
	task := strings.TrimSpace(in.Text("task_id"))
	text := in.Text("text")
	if text == "" {
		text = in.Text("payload")
	}
	cmd := coord.PostProgress{Agent: sender, TaskID: task, Kind: strings.TrimSpace(in.Str("kind")), Text: text}
	if reply, ok := s.submit(sender, "ledger_progress", task, in, cmd); ok && reply.Outcome.Refusal != nil {
		s.refused(sender, "error", reply.Outcome.Refusal, task)
	}
}

func itoa(n int64) string { return string(pyjson.AppendInt(nil, n)) }

// jsonInt reads a decoded JSON integer (not a float lexeme, not a bool).
func jsonInt(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok || strings.ContainsAny(string(n), ".eE") {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

// verb is one row of the verb table: how a frame of its type is handled
// once it passed every gate, and the rules it is under.
type verb struct {
	handle func(s *session, sender, typ string, in *wire.Inbound)
	// idempotent verbs accept idem_key (PROTOCOL.md §4.3; never chat) and
	// are the mutations refused while the journal needs recovery or
	// cannot be written (§1.4 step 14).
	idempotent bool
	// signed verbs are covered by per-message authentication (§5.2):
	// chat, heartbeat, queries and board verbs are not.
	signed bool
	// denial is the verb's refusal frame (§2.4–2.9); "" is a plain error.
	denial string
}

// verbs is every verb this hub serves; their names also label the frame
// metrics (anything else is counted as "other", so labels stay bounded).
// Claim-family and board verbs are routed to their namespace's owner
// first (federation.ClaimFamily, BoardFamily; routeClaimFamily). It is
// filled in init: a forwarded verb runs through dispatch again, on the
// owner, so the handlers refer back to the table.
var verbs map[string]verb

func init() {
	verbs = map[string]verb{
		"heartbeat": {handle: (*session).heartbeat},
		"ack":       {handle: (*session).ack},
		"leave":     {handle: noArgs((*session).leaveVerb)},
		"ping":      {handle: withFrame((*session).ping)},
		"chat":      {handle: withFrame((*session).chat)},

		"claim":          {handle: withFrame((*session).claim), idempotent: true, signed: true, denial: "claim_denied"},
		"release":        {handle: withFrame((*session).release), idempotent: true, signed: true, denial: "release_denied"},
		"task_update":    {handle: withFrame((*session).taskUpdate), idempotent: true, signed: true, denial: "error"},
		"handoff":        {handle: withFrame((*session).handoff), idempotent: true, signed: true, denial: "handoff_denied"},
		"checkpoint":     {handle: withFrame((*session).checkpoint), idempotent: true, signed: true, denial: "checkpoint_denied"},
		"wait_request":   {handle: withFrame((*session).waitRequest), denial: "wait_denied"},
		"resource":       {handle: (*session).resource, idempotent: true, signed: true},
		"resource_offer": {handle: (*session).resource, idempotent: true, signed: true},
		"offer_resource": {handle: (*session).resource, idempotent: true, signed: true},

		"ledger_task":        {handle: withFrame((*session).ledgerTask), idempotent: true},
		"ledger_task_update": {handle: withFrame((*session).ledgerTaskUpdate), idempotent: true},
		"ledger_progress":    {handle: withFrame((*session).ledgerProgress), idempotent: true},
		"board_request":      {handle: noArgs((*session).boardRequest)},

		"advertise":        {handle: withFrame((*session).advertise)},
		"manifest_request": {handle: noArgs((*session).manifestRequest)},
		"state_request":    {handle: noArgs((*session).stateRequest)},
		"who_request":      {handle: noArgs((*session).whoRequest)},
		"history_request":  {handle: withFrame((*session).historyRequest)},
		"resume_request":   {handle: withFrame((*session).resumeRequest)},

		"ns_request": {handle: noArgs((*session).nsRequest)},
		"ns_move":    {handle: (*session).nsMove},
		"ns_drain":   {handle: (*session).nsMove},

		// Identity pins and private channels (identity.go, channels.go; issue 23 items 2, 5).
		"identity_pin_list":       {handle: noArgs((*session).identityPinList)},
		"identity_pin_reclaim":    {handle: withFrame((*session).identityPinReclaim)},
		"channel_create":          {handle: withFrame((*session).channelCreate)},
		"channel_invite":          {handle: withFrame((*session).channelInvite)},
		"channel_join":            {handle: withFrame((*session).channelJoin)},
		"channel_leave":           {handle: withFrame((*session).channelLeave)},
		"channel_list_request":    {handle: noArgs((*session).channelList)},
		"channel_history_request": {handle: withFrame((*session).channelHistory)},
	}
	addAccessVerbs(verbs) // token, role and acl admin verbs (verbs_access.go)
}

// withFrame adapts a handler of the sender and the frame.
func withFrame(f func(*session, string, *wire.Inbound)) func(*session, string, string, *wire.Inbound) {
	return func(s *session, sender, _ string, in *wire.Inbound) { f(s, sender, in) }
}

// noArgs adapts a handler of the sender alone.
func noArgs(f func(*session, string)) func(*session, string, string, *wire.Inbound) {
	return func(s *session, sender, _ string, _ *wire.Inbound) { f(s, sender) }
}

// mutation reports whether typ is refused while the journal needs
// recovery or cannot be written (§1.4 step 14).
func mutation(typ string) bool { return verbs[typ].idempotent }

// handoffTarget reads a handoff's recipient as the verb does.
func handoffTarget(in *wire.Inbound) string {
	to := strings.TrimSpace(in.Str("to_agent"))
	if to == "" {
		to = strings.TrimSpace(in.Str("target"))
		if !in.Has("target") {
			to = "all"
		}
	}
	return to
}
