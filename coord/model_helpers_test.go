package coord_test

// The shadow model of the machine-checkable model test (model_test.go): the
// model's own account of claims, epochs, leases, checkpoints and waits,
// written from the spec and PROTOCOL.md §2.4-§3.8 rather than from coord's
// code, plus a brute-force scope algebra and event copying for replay.

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/synapse-hub/synapse/coord"
)

// ---- the shadow model ----

// shadow is the model's own account of what the state must hold.
type shadow struct {
	maxClaims   int
	maxRetained int
	now         float64 // the time of the last step or tick
	epoch       int64   // the highest epoch issued
	issued      map[int64]bool
	claims      map[string]*mClaim
	retained    []coord.RetainedCheckpoint // oldest first
	waits       map[string]map[string]bool // waiter → tasks
}

type mClaim struct {
	task, owner, principal, note string
	status, dataRef              string
	worktree                     string
	paths                        []string
	globs                        []string
	files                        []string
	shared                       bool
	pathIdentity                 string
	git                          *coord.Git
	checkpoint                   string
	claimedAt, expiresAt         float64
	epoch, version               int64
}

func (m *shadow) String() string {
	var b strings.Builder
	for _, task := range sortedKeysOf(m.claims) {
		c := m.claims[task]
		fmt.Fprintf(&b, "[%s %s e%d v%d %s exp=%v %q %q %q %q shared=%v] ", task, c.owner, c.epoch, c.version, c.status, c.expiresAt, c.worktree, c.paths, c.globs, c.files, c.shared)
	}
	return b.String()
}

// verdict is the model's answer to a command: the refusal code ("" for a
// grant) and the invariant that decides it.
type verdict struct {
	code coord.Code
	inv  string
}

func granted(inv string) verdict { return verdict{inv: inv} }

func shadowPrincipal(principal, agent string) string {
	if principal == "" {
		return "legacy-agent:" + agent
	}
	return principal
}

// shadowTTL is INV-LL-3: missing or non-finite means the default; everything
// is clamped into [min, max].
func shadowTTL(ttl float64, present bool) float64 {
	if !present || math.IsNaN(ttl) || math.IsInf(ttl, 0) {
		ttl = specDefaultTTL
	}
	switch {
	case ttl < specMinTTL:
		return specMinTTL
	case ttl > specMaxTTL:
		return specMaxTTL
	}
	return ttl
}

var shadowLifecycle = map[string][]string{
	"claimed":        {"working", "done", "failed"},
	"working":        {"input_required", "done", "failed"},
	"input_required": {"working", "done", "failed"},
	"done":           nil,
	"failed":         nil,
}

func shadowTerminal(status string) bool { return status == "done" || status == "failed" }

// due moves the model's clock to now and returns the claims no longer live
// at now: a lease is live strictly before its expiry.
func (m *shadow) due(now float64) map[string]*mClaim {
	m.now = now
	out := make(map[string]*mClaim)
	for task, c := range m.claims {
		if c.expiresAt <= now {
			out[task] = c
		}
	}
	return out
}

// expireClaim drops an expired claim, retaining a non-empty checkpoint and
// waking its waiters, and returns the events the state must emit for it.
func (m *shadow) expireClaim(c *mClaim) []coord.Event {
	delete(m.claims, c.task)
	evs := []coord.Event{coord.ClaimExpired{TaskID: c.task, Epoch: c.epoch, Checkpoint: c.checkpoint}}
	if c.checkpoint != "" {
		m.retain(c.task, c.checkpoint)
	}
	if ws := m.waitersOf(c.task); len(ws) > 0 {
		evs = append(evs, coord.WaitReady{TaskID: c.task, Waiters: ws, Reason: "expiry"})
		m.wake(c.task)
	}
	return evs
}

// retain keeps an expired claim's checkpoint, forgetting the oldest past the cap.
func (m *shadow) retain(task, checkpoint string) {
	m.dropRetained(task)
	m.retained = append(m.retained, coord.RetainedCheckpoint{TaskID: task, Checkpoint: checkpoint})
	if n := len(m.retained) - m.maxRetained; n > 0 {
		m.retained = slices.Clone(m.retained[n:])
	}
}

func (m *shadow) dropRetained(task string) string {
	var cp string
	m.retained = slices.DeleteFunc(m.retained, func(r coord.RetainedCheckpoint) bool {
		if r.TaskID == task {
			cp = r.Checkpoint
			return true
		}
		return false
	})
	return cp
}

func (m *shadow) retainedImage() []coord.RetainedCheckpoint {
	if len(m.retained) == 0 {
		return nil
	}
	return m.retained
}

func (m *shadow) count(principal string) int {
	n := 0
	for _, c := range m.claims {
		if c.principal == principal {
			n++
		}
	}
	return n
}

func (m *shadow) issue(epoch int64) {
	m.epoch = max(m.epoch, epoch)
	m.issued[epoch] = true
}

// conflictWith returns a claim, other than on task and not held by owner,
// whose scope conflicts with sc: they overlap and they are not both shared.
func (m *shadow) conflictWith(sc mScope, owner, task string) *mClaim {
	for _, id := range sortedKeysOf(m.claims) {
		c := m.claims[id]
		if id != task && c.owner != owner && !(sc.shared && c.shared) && shadowScopesOverlap(sc, c.scope()) {
			return c
		}
	}
	return nil
}

// decideClaim is PROTOCOL.md §3.3 after expiry.
func (m *shadow) decideClaim(r coord.ClaimRequest) verdict {
	task := strings.TrimSpace(r.TaskID)
	if task == "" {
		return verdict{coord.CodeTaskIDRequired, "INV-ME-1"}
	}
	ex := m.claims[task]
	if ex != nil && ex.owner != r.Agent {
		return verdict{coord.CodeLeaseLive, "INV-ME-1"}
	}
	sc := requestScope(r)
	if c := m.conflictWith(sc, r.Agent, task); c != nil {
		return verdict{coord.CodeScopeConflict, scopeInv(r.Worktree, sc.paths, c.worktree, c.paths)}
	}
	principal := shadowPrincipal(r.Principal, r.Agent)
	renewal := ex != nil && ex.principal == principal
	if !renewal && m.count(principal) >= m.maxClaims {
		return verdict{coord.CodeQuotaExceeded, "INV-ME-5"}
	}
	if renewal {
		return granted("INV-LL-4")
	}
	return granted("INV-LL-2")
}

// grantClaim is a granted claim. A same-owner renewal keeps the checkpoint
// and, unless the claim had finished, its status, data_ref and version (our
// deliberate departure from the reference); anything else starts at version
// 0 from the retained checkpoint (INV-CR-3).
func (m *shadow) grantClaim(r coord.ClaimRequest, epoch int64) {
	task := strings.TrimSpace(r.TaskID)
	ex := m.claims[task]
	n := &mClaim{
		task: task, owner: r.Agent, principal: shadowPrincipal(r.Principal, r.Agent), note: strings.TrimSpace(r.Note),
		status: "claimed", worktree: r.Worktree, pathIdentity: r.PathIdentity, git: r.Git,
		claimedAt: m.now, expiresAt: m.now + shadowTTL(r.TTL, r.HasTTL), epoch: epoch,
	}
	sc := requestScope(r)
	n.paths, n.globs, n.files, n.shared = sc.paths, sc.globs, sc.files, sc.shared
	retained := m.dropRetained(task)
	if ex != nil {
		n.checkpoint = ex.checkpoint
		if !shadowTerminal(ex.status) {
			n.status, n.dataRef, n.version = ex.status, ex.dataRef, ex.version
		}
	} else {
		n.checkpoint = retained
	}
	m.claims[task] = n
	m.issue(epoch)
	m.removeWait(r.Agent, task)
}

// owned is the shared guard of release, task_update and checkpoint.
func (m *shadow) owned(task, agent string, hasEpoch bool, epoch int64, missing coord.Code) (*mClaim, verdict) {
	if task == "" {
		return nil, verdict{coord.CodeTaskIDRequired, "INV-EF-2"}
	}
	c := m.claims[task]
	if c == nil {
		return nil, verdict{missing, "INV-LL-2"}
	}
	if c.owner != agent {
		return nil, verdict{coord.CodeNotOwner, "INV-ME-1"}
	}
	if hasEpoch && epoch != c.epoch {
		return nil, verdict{coord.CodeEpochStale, "INV-EF-2"}
	}
	return c, granted("INV-EF-2")
}

func (m *shadow) decideRelease(r coord.ReleaseRequest) verdict {
	_, v := m.owned(strings.TrimSpace(r.TaskID), r.Agent, r.HasEpoch, r.Epoch, coord.CodeNotClaimed)
	return v
}

func (m *shadow) release(task string) {
	delete(m.claims, task)
	m.dropRetained(task)
	m.wake(task)
}

func (m *shadow) decideUpdate(r coord.UpdateRequest) verdict {
	c, v := m.owned(strings.TrimSpace(r.TaskID), r.Agent, r.HasEpoch, r.Epoch, coord.CodeTaskNotFound)
	if v.code != "" {
		return v
	}
	if r.HasExpectedVersion && r.ExpectedVersion != c.version {
		return verdict{coord.CodeVersionConflict, "INV-EF-3"}
	}
	if r.Status != "" {
		if _, known := shadowLifecycle[r.Status]; !known {
			return verdict{coord.CodeUnknownStatus, "INV-EF-3"}
		}
		if r.Status != c.status && !slices.Contains(shadowLifecycle[c.status], r.Status) {
			return verdict{coord.CodeIllegalTransition, "INV-EF-3"}
		}
	}
	return granted("INV-EF-3")
}

func (m *shadow) update(r coord.UpdateRequest) {
	old := m.claims[strings.TrimSpace(r.TaskID)]
	n := *old
	if r.Status != "" {
		n.status = r.Status
	}
	if note := strings.TrimSpace(r.Note); note != "" {
		n.note = note
	}
	if r.DataRef != "" {
		n.dataRef = r.DataRef
	}
	n.version++
	m.claims[n.task] = &n
}

func (m *shadow) decideCheckpoint(r coord.CheckpointRequest) verdict {
	_, v := m.owned(strings.TrimSpace(r.TaskID), r.Agent, r.HasEpoch, r.Epoch, coord.CodeTaskNotFound)
	return v
}

func (m *shadow) checkpoint(r coord.CheckpointRequest) {
	n := *m.claims[strings.TrimSpace(r.TaskID)]
	n.checkpoint = r.Checkpoint
	n.version++
	m.claims[n.task] = &n
}

// decideHandoff is PROTOCOL.md §2.7, with the recipient's cap (INV-ME-5)
// and scope exclusion against third parties (INV-CR-2).
func (m *shadow) decideHandoff(r coord.HandoffRequest) verdict {
	task, to := strings.TrimSpace(r.TaskID), strings.TrimSpace(r.To)
	switch {
	case task == "":
		return verdict{coord.CodeTaskIDRequired, "INV-CR-2"}
	case to == "":
		return verdict{coord.CodeTargetRequired, "INV-CR-2"}
	}
	c := m.claims[task]
	switch {
	case c == nil:
		return verdict{coord.CodeNotClaimed, "INV-CR-2"}
	case c.owner != r.Agent:
		return verdict{coord.CodeNotOwner, "INV-ME-1"}
	case to == r.Agent:
		return verdict{coord.CodeAlreadyOwner, "INV-CR-2"}
	case r.HasEpoch && r.Epoch != c.epoch:
		return verdict{coord.CodeEpochStale, "INV-EF-2"}
	case !r.ToOnline:
		return verdict{coord.CodeTargetOffline, "INV-CR-2"}
	}
	if p := shadowPrincipal(r.ToPrincipal, to); p != c.principal && m.count(p) >= m.maxClaims {
		return verdict{coord.CodeQuotaExceeded, "INV-ME-5"}
	}
	if m.conflictWith(c.scope(), to, task) != nil {
		return verdict{coord.CodeScopeConflict, "INV-CR-2"}
	}
	return granted("INV-CR-2")
}

// handoff moves the claim in place: same scope, status, data_ref and
// checkpoint; fresh epoch, version 0 and a default lease for the recipient.
func (m *shadow) handoff(r coord.HandoffRequest, epoch int64) {
	task, to := strings.TrimSpace(r.TaskID), strings.TrimSpace(r.To)
	n := *m.claims[task]
	n.owner, n.principal = to, shadowPrincipal(r.ToPrincipal, to)
	if note := strings.TrimSpace(r.Note); note != "" {
		n.note = note
	}
	n.epoch, n.version = epoch, 0
	n.claimedAt, n.expiresAt = m.now, m.now+specDefaultTTL
	m.claims[task] = &n
	m.issue(epoch)
	m.removeWait(to, task)
}

// decideWait is PROTOCOL.md §2.9: advisory deadlock detection.
func (m *shadow) decideWait(r coord.WaitRequest) verdict {
	task := strings.TrimSpace(r.TaskID)
	if task == "" {
		return verdict{coord.CodeTaskIDRequired, "wait graph"}
	}
	c := m.claims[task]
	switch {
	case c == nil:
		return verdict{coord.CodeNotClaimed, "wait graph"}
	case c.owner == r.Agent:
		return verdict{coord.CodeAlreadyHolder, "wait graph"}
	case m.reaches(c.owner, r.Agent):
		return verdict{coord.CodeDeadlock, "wait graph"}
	}
	return granted("wait graph")
}

// reaches reports whether from waits, through a chain of holders, on a task
// target holds.
func (m *shadow) reaches(from, target string) bool {
	seen := map[string]bool{from: true}
	queue := []string{from}
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		for task := range m.waits[a] {
			c := m.claims[task]
			switch {
			case c == nil:
			case c.owner == target:
				return true
			case !seen[c.owner]:
				seen[c.owner] = true
				queue = append(queue, c.owner)
			}
		}
	}
	return false
}

func (m *shadow) addWait(waiter, task string) {
	if m.waits[waiter] == nil {
		m.waits[waiter] = make(map[string]bool)
	}
	m.waits[waiter][task] = true
}

func (m *shadow) removeWait(waiter, task string) {
	delete(m.waits[waiter], task)
	if len(m.waits[waiter]) == 0 {
		delete(m.waits, waiter)
	}
}

func (m *shadow) waitersOf(task string) []string {
	var out []string
	for w, tasks := range m.waits {
		if tasks[task] {
			out = append(out, w)
		}
	}
	sort.Strings(out)
	return out
}

// wake ends every wait on task: it was released or expired.
func (m *shadow) wake(task string) {
	for _, w := range m.waitersOf(task) {
		m.removeWait(w, task)
	}
}

func (m *shadow) waitImage() []coord.Wait {
	var out []coord.Wait
	for _, w := range sortedKeysOf(m.waits) {
		for _, task := range sortedKeysOf(m.waits[w]) {
			out = append(out, coord.Wait{Waiter: w, TaskID: task})
		}
	}
	return out
}

// ---- scopes, written independently of coord's trie and string tricks ----

// shadowPath is PROTOCOL.md §3.4 normalize_path.
func shadowPath(p string) string {
	p = strings.ReplaceAll(strings.TrimSpace(p), `\`, "/")
	if strings.HasPrefix(p, "/") {
		return ""
	}
	var segs []string
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "", ".":
			continue
		case "..":
			return ""
		}
		segs = append(segs, s)
	}
	return strings.Join(segs, "/")
}

// shadowPaths normalises a declared set; the root anywhere means the whole
// worktree (nil).
func shadowPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		n := shadowPath(p)
		if n == "" {
			return nil
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// shadowOverlap compares path segments: one path's segments are a prefix of the
// other's, or either is the root.
func shadowOverlap(a, b string) bool {
	if a == "" || b == "" {
		return true
	}
	sa, sb := strings.Split(a, "/"), strings.Split(b, "/")
	n := min(len(sa), len(sb))
	return slices.Equal(sa[:n], sb[:n])
}

func shadowConflict(wa string, pa []string, wb string, pb []string) bool {
	if wa != wb {
		return false
	}
	if len(pa) == 0 || len(pb) == 0 {
		return true
	}
	for _, a := range pa {
		for _, b := range pb {
			if shadowOverlap(a, b) {
				return true
			}
		}
	}
	return false
}

// scopeInv names the scope invariant a pair of scopes falls under.
func scopeInv(wa string, pa []string, wb string, pb []string) string {
	switch {
	case wa != wb:
		return "INV-ME-3"
	case len(pa) == 0 || len(pb) == 0:
		return "INV-ME-4"
	}
	return "INV-ME-2"
}

// ---- events ----

func copyClaim(c *coord.Claim) *coord.Claim {
	n := *c
	n.Paths = slices.Clone(c.Paths)
	n.Globs = slices.Clone(c.Globs)
	n.Files = slices.Clone(c.Files)
	if c.Git != nil {
		g := *c.Git
		n.Git = &g
	}
	return &n
}

// copyEvent deep-copies an event, so the log holds what was emitted even if
// the state later changed something it shares.
func copyEvent(ev coord.Event) coord.Event {
	switch e := ev.(type) {
	case coord.ClaimGranted:
		e.Claim = copyClaim(e.Claim)
		return e
	case coord.TaskUpdated:
		e.Claim = copyClaim(e.Claim)
		return e
	case coord.CheckpointSaved:
		e.Claim = copyClaim(e.Claim)
		return e
	case coord.HandedOff:
		e.Claim = copyClaim(e.Claim)
		return e
	case coord.ProgressPosted:
		n := *e.Note
		e.Note = &n
		return e
	case coord.WaitReady:
		e.Waiters = slices.Clone(e.Waiters)
		return e
	case coord.WaitsDropped:
		e.Tasks = slices.Clone(e.Tasks)
		return e
	case coord.ClaimDenied:
		e.Paths = slices.Clone(e.Paths)
		return e
	}
	return ev
}

func copyEvents(evs []coord.Event) []coord.Event {
	out := make([]coord.Event, len(evs))
	for i, ev := range evs {
		out[i] = copyEvent(ev)
	}
	return out
}

func sameEvents(a, b []coord.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

func claimDeniedEqual(ev coord.Event, want coord.ClaimDenied) bool {
	got, ok := ev.(coord.ClaimDenied)
	return ok && got.Claimant == want.Claimant && got.TaskID == want.TaskID && got.Code == want.Code &&
		got.Worktree == want.Worktree && slices.Equal(got.Paths, want.Paths)
}

func eventKinds(evs []coord.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Kind()
	}
	return out
}

func fmtEvents(evs []coord.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		switch e := ev.(type) {
		case coord.ClaimGranted:
			fmt.Fprintf(&b, "  %s %+v renewal=%v\n", ev.Kind(), *e.Claim, e.Renewal)
		case coord.HandedOff:
			fmt.Fprintf(&b, "  %s %+v from=%s\n", ev.Kind(), *e.Claim, e.From)
		default:
			fmt.Fprintf(&b, "  %s %+v\n", ev.Kind(), ev)
		}
	}
	if b.Len() == 0 {
		return "  (none)"
	}
	return b.String()
}

func sortedKeysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ---- scopes as sets of files, decided on concrete paths ----

// mScope is the model's scope: normalised paths, globs and files (none:
// the whole worktree) and whether it is held shared.
type mScope struct {
	worktree            string
	paths, globs, files []string
	shared              bool
}

func (c *mClaim) scope() mScope {
	return mScope{worktree: c.worktree, paths: c.paths, globs: c.globs, files: c.files, shared: c.shared}
}

// requestScope normalises a claim request's scope as the spec reads it:
// paths, globs and files each as a path; the root or an escape among any
// of them widens the claim to the whole worktree.
func requestScope(r coord.ClaimRequest) mScope {
	sc := mScope{worktree: r.Worktree, shared: r.Shared}
	for _, set := range []struct {
		raw []string
		out *[]string
	}{{r.Paths, &sc.paths}, {r.Globs, &sc.globs}, {r.Files, &sc.files}} {
		for _, p := range set.raw {
			n := shadowPath(p)
			if n == "" {
				return mScope{worktree: r.Worktree, shared: r.Shared}
			}
			if !slices.Contains(*set.out, n) {
				*set.out = append(*set.out, n)
			}
		}
	}
	return sc
}

// witnessSegs spells a segment for every pair of the model's segments that
// some segment matches both, plus a stranger; witnessPaths are all their
// paths up to witnessDepth segments. Two scope entries from the model's
// vocabulary overlap exactly when some witness path is covered by both
// (TestModel_WitnessesDecideOverlap checks the alphabet and the depth are
// enough for that).
var witnessSegs = []string{"src", "a", "b", "ab", "x.go", "a.go", "docs", "guide.md", "q.md", "a.md", "c", "readme.md", "x.txt", "a.txt"}

const witnessDepth = 4

var (
	witnessOnce  sync.Once
	witnessPaths []string
	coverCache   = map[oracleEntry][]uint64{} // entry → the witnesses it covers, a bit each
	overlapCache = map[[2]oracleEntry]bool{}
	coverMu      sync.Mutex
)

func witnesses() []string {
	witnessOnce.Do(func() {
		level := []string{""}
		for range witnessDepth {
			var next []string
			for _, base := range level {
				for _, s := range witnessSegs {
					p := s
					if base != "" {
						p = base + "/" + s
					}
					next = append(next, p)
				}
			}
			witnessPaths = append(witnessPaths, next...)
			level = next
		}
	})
	return witnessPaths
}

// covered is the set of witness paths the entry covers, by the oracle.
// The caller holds coverMu.
func covered(e oracleEntry) []uint64 {
	if c, ok := coverCache[e]; ok {
		return c
	}
	ws := witnesses()
	c := make([]uint64, (len(ws)+63)/64)
	for i, p := range ws {
		if oracleCovers(e.e, e.kind, p) {
			c[i/64] |= 1 << (i % 64)
		}
	}
	coverCache[e] = c
	return c
}

// entriesOverlap reports whether some witness path is covered by both
// entries.
func entriesOverlap(a, b oracleEntry) bool {
	coverMu.Lock()
	defer coverMu.Unlock()
	if o, ok := overlapCache[[2]oracleEntry{a, b}]; ok {
		return o
	}
	ca, cb := covered(a), covered(b)
	o := false
	for i := range ca {
		if ca[i]&cb[i] != 0 {
			o = true
			break
		}
	}
	overlapCache[[2]oracleEntry{a, b}] = o
	return o
}

// shadowScopesOverlap: never across worktrees, always with a whole
// worktree, else some pair of entries covers a common witness path.
func shadowScopesOverlap(a, b mScope) bool {
	if a.worktree != b.worktree {
		return false
	}
	ea, eb := scopeEntries(a.paths, a.globs, a.files), scopeEntries(b.paths, b.globs, b.files)
	if len(ea) == 0 || len(eb) == 0 {
		return true
	}
	for _, x := range ea {
		for _, y := range eb {
			if entriesOverlap(x, y) {
				return true
			}
		}
	}
	return false
}
