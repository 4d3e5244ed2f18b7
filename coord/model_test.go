package coord_test

// The machine-checkable model of the coordination spec ("The machine-checkable
// model"). A rapid state machine drives a real coord.State through random
// sequences of claim, renewal, takeover, release, task_update, checkpoint,
// handoff, wait, disconnect and time. An independent shadow model, written
// from the spec and PROTOCOL.md §2.4-§3.8 rather than from coord's code,
// predicts every verdict, and after every step the test asserts each
// invariant the spec tags [model], naming its INV id when it fails. Every
// event the state emits is recorded and replayed into a fresh state, and
// commands are randomly run, rolled back and redone (INV-JA-2).

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/synapse-hub/synapse/coord"
)

// modelSequences is how many random sequences each model test runs in a plain
// `go test ./...`.
const modelSequences = 1000

// modelPhases is how many Repeat runs make one sequence.
const modelPhases = 4

// The spec's normative lease constants, restated so the model does not take
// them from the code it checks.
const (
	specMinTTL     = 30.0
	specMaxTTL     = 2592000.0
	specDefaultTTL = 3600.0
	modelStart     = 1_800_000_000.0
)

// A small world so that claims collide often: few agents, tasks and
// worktrees, a path tree with ancestors, a sibling that shares a prefix
// ("src/ab" is not under "src/a") and raw spellings that normalise to the
// same path or to the whole worktree.
var (
	modelAgents     = []string{"a", "b", "c", "d"}
	modelTasks      = []string{"t1", "t2", "t3", "t4", "t5", "t6"}
	modelPrincipals = []string{"pool:1", "", "pool:2", ""} // "" is the agent's own bucket
	modelWorktrees  = []string{"/repo", "", "/repo", "/other"}
	modelPaths      = []string{
		"src/a/x.go", "docs/guide.md", "src/b", "src/ab", "src/a", "docs", "src",
		"./src/a/", "src//b", `src\a\x.go`, " docs ", "/etc/passwd", "src/../x", ".",
	}
	// Globs that meet the paths above and each other in every way: a
	// filter over a subtree, its complement by extension ("src/**/*.go"
	// and "src/**/*.txt" are disjoint), a one-level filter, a suffix
	// anywhere, one character, a "**" in the middle, a prefix within a
	// segment, a subtree named with "**", a glob without a wildcard (one
	// path, like a file), spellings that normalise, and an escape that
	// widens to the whole worktree.
	modelGlobs = []string{
		"src/**/*.go", "src/**/*.txt", "docs/*.md", "src/a/*", "**/*.md", "src/?", "*/b/**", "src/a*", "./docs//**",
		"src/a/x.go", "../*",
	}
	// Files, each covering itself alone: beside a folder that holds it
	// ("src/a"), under globs it matches or not ("src/a/readme.md" against
	// "src/**/*.go"), a folder's own name ("src/a" as a file), spellings
	// that normalise, and an escape that widens to the whole worktree.
	modelFiles = []string{
		"src/a/readme.md", "src/a/x.go", "src/x.txt", "docs/guide.md", "src/a", "./src//b", `src\ab`, "../f",
	}
	modelStatuses    = []string{"", "claimed", "working", "input_required", "done", "failed", "bogus"}
	modelCheckpoints = []string{"", "cp-1", "cp-2", "cp-3"}
	modelGit         = &coord.Git{Branch: "feat", Base: "main", AutoReleaseOn: "merge"}
)

// TestModel_ClaimLeaseFencing_INV_ME_EF_LL_CR is the state machine: after
// every action it asserts INV-ME-1..5, INV-EF-1..3, INV-LL-1..4, INV-CR-2
// and INV-CR-3 against the shadow model, that replaying every recorded event
// and FromImage(Image()) reproduce the state, and (INV-JA-2) that rolled-back
// steps, ticks and batches leave no trace; each sequence ends with every
// lease expired and the registry and wait graph empty.
func TestModel_ClaimLeaseFencing_INV_ME_EF_LL_CR(t *testing.T) {
	tally := make(map[string]int)
	defer logTally(t, tally)
	runSequences(t, modelSequences, func(rt *rapid.T) {
		mc := newMachine(rt)
		mc.tally = tally
		actions := map[string]func(*rapid.T){
			"":           mc.check,
			"claim":      mc.claimAny,
			"renew":      mc.renew,
			"contest":    mc.contest,
			"takeover":   mc.takeover,
			"release":    mc.release,
			"update":     mc.update,
			"checkpoint": mc.checkpoint,
			"handoff":    mc.handoff,
			"wait":       mc.wait,
			"disconnect": mc.disconnect,
			"advance":    mc.advance,
			"abortTick":  mc.abortTick,
			"abortBatch": mc.abortBatch,
		}
		// Repeat averages -rapid.steps (30) actions; a few phases let
		// leases pile up to the cap before time sweeps them away.
		for range modelPhases {
			rt.Repeat(actions)
		}
		mc.expireEverything(rt)
	})
}

func TestModel_ScopesConflictMatchesBruteForce_INV_ME_2_3_4(t *testing.T) {
	scope := func(rt *rapid.T, label string) (string, []string) {
		wt := rapid.SampledFrom(modelWorktrees).Draw(rt, label+"Worktree")
		raw := rapid.SliceOfN(rapid.SampledFrom(modelPaths), 0, 4).Draw(rt, label+"Paths")
		return wt, coord.NormalizePaths(raw, coord.DefaultLimits())
	}
	runSequences(t, modelSequences, func(rt *rapid.T) {
		wa, pa := scope(rt, "a")
		wb, pb := scope(rt, "b")
		got, want := coord.ScopesConflict(wa, pa, wb, pb), shadowConflict(wa, pa, wb, pb)
		if got != want {
			rt.Fatalf("%s: ScopesConflict(%q %q, %q %q) = %v, brute force says %v", scopeInv(wa, pa, wb, pb), wa, pa, wb, pb, got, want)
		}
		if back := coord.ScopesConflict(wb, pb, wa, pa); back != got {
			rt.Fatalf("INV-ME-2: ScopesConflict is not symmetric for %q %q / %q %q", wa, pa, wb, pb)
		}
		if wa != wb && got {
			rt.Fatalf("INV-ME-3: scopes in worktrees %q and %q conflict", wa, wb)
		}
		if !coord.ScopesConflict(wa, pa, wa, pa) {
			rt.Fatalf("INV-ME-2: scope %q %q does not conflict with itself", wa, pa)
		}
	})
}

// TestModel_RolledBackGrantLeavesNoLeaseBehind_INV_JA_2 is the shrunk
// counterexample the state machine finds: a grant rolled back (its journal
// append failed) leaves its deadline in the expiry heap and gives its epoch
// back, the next grant on the task reuses that epoch, and the stale deadline
// then expires a lease that still has an hour to run.
func TestModel_RolledBackGrantLeavesNoLeaseBehind_INV_JA_2(t *testing.T) {
	s := coord.New(coord.Limits{})
	o := s.Step(coord.ClaimRequest{Agent: "a", TaskID: "t1", TTL: 30, HasTTL: true}, modelStart)
	s.Rollback(&o)
	s.Step(coord.ClaimRequest{Agent: "b", TaskID: "t1", TTL: 3600, HasTTL: true}, modelStart)
	if o := s.Tick(modelStart + 30); len(o.Events) != 0 || s.Claim("t1") == nil {
		t.Fatalf("INV-LL-1: b's lease on t1 runs to %v, but Tick(%v) emitted\n%sthe rolled-back grant's deadline outlived its rollback (INV-JA-2)",
			modelStart+3600, modelStart+30, fmtEvents(o.Events))
	}
}

// TestModel_ConfiguredLeaseWindowBoundsEveryLease_INV_LL_3: Limits may move
// the TTL window and the default; whatever they are, every lease a claim, a
// renewal or a handoff grants lies inside [MinTTL, MaxTTL], the default
// included ("every requested and default TTL MUST be clamped").
func TestModel_ConfiguredLeaseWindowBoundsEveryLease_INV_LL_3(t *testing.T) {
	runSequences(t, modelSequences, func(rt *rapid.T) {
		lo := rapid.Float64Range(1, 600).Draw(rt, "minTTL")
		lim := coord.Limits{
			MinTTL:     lo,
			MaxTTL:     lo + rapid.Float64Range(0, 1e6).Draw(rt, "window"),
			DefaultTTL: rapid.Float64Range(1, 2e6).Draw(rt, "defaultTTL"),
		}
		s := coord.New(lim)
		now := modelStart
		inWindow := func(what string) {
			c := s.Claim("t1")
			if c == nil {
				rt.Fatalf("INV-LL-3: the %s left no claim on t1", what)
			}
			if c.ExpiresAt < now+lim.MinTTL || c.ExpiresAt > now+lim.MaxTTL {
				rt.Fatalf("INV-LL-3: with MinTTL %v, MaxTTL %v and DefaultTTL %v a %s granted a lease of %v s", lim.MinTTL, lim.MaxTTL, lim.DefaultTTL, what, c.ExpiresAt-now)
			}
		}
		for _, step := range []struct {
			what string
			cmd  func() coord.Command
		}{
			{"claim", func() coord.Command {
				ttl, has := drawTTL(rt)
				return coord.ClaimRequest{Agent: "a", TaskID: "t1", TTL: ttl, HasTTL: has}
			}},
			{"renewal", func() coord.Command {
				ttl, has := drawTTL(rt)
				return coord.ClaimRequest{Agent: "a", TaskID: "t1", TTL: ttl, HasTTL: has}
			}},
			{"handoff", func() coord.Command {
				return coord.HandoffRequest{Agent: "a", TaskID: "t1", To: "b", ToOnline: true}
			}},
		} {
			now += rapid.Float64Range(0, lim.MinTTL/2).Draw(rt, "dt")
			if o := s.Step(step.cmd(), now); o.Refusal != nil {
				rt.Fatalf("%s refused: %v", step.what, o.Refusal)
			}
			inWindow(step.what)
		}
	})
}

// runSequences runs prop as a rapid property until at least n cases have
// run. rapid runs -rapid.checks cases per Check (100 by default, a fifth of
// that under -short), so the floor is met by repeating Check with fresh
// seeds instead of overriding rapid's flags for the whole package. When a
// seed or fail file is given, to reproduce a failure, it runs once.
func runSequences(t *testing.T, n int, prop func(*rapid.T)) {
	t.Helper()
	ran := 0
	counted := func(rt *rapid.T) {
		ran++
		prop(rt)
	}
	for round := 0; ran < n && round < n && !t.Failed(); round++ {
		rapid.Check(t, counted)
		if reproducing() {
			break
		}
	}
	t.Logf("%d random sequences", ran)
}

func reproducing() bool {
	seed, file := flag.Lookup("rapid.seed"), flag.Lookup("rapid.failfile")
	return (seed != nil && seed.Value.String() != "0") || (file != nil && file.Value.String() != "")
}

// machine is the state under test, its replay and the shadow model.
type machine struct {
	lim     coord.Limits
	live    *coord.State
	replica *coord.State  // every recorded event applied in order
	log     []coord.Event // every event every outcome carried, refusals' audit records included
	m       *shadow
	now     float64        // the clock; it runs ahead of m.now until the next step or tick
	tally   map[string]int // what the sequences exercised, logged with -v
	redo    *redo          // a command run, rolled back and run again, checked after the action's own checks
}

// redo is the events of a command's rolled-back run and of its run again.
type redo struct {
	cmd          coord.Command
	first, again []coord.Event
}

// logTally shows which verdicts and paths the random sequences reached, so
// a generator that stops reaching a rule is noticed.
func logTally(t *testing.T, tally map[string]int) {
	var b strings.Builder
	for _, k := range sortedKeysOf(tally) {
		fmt.Fprintf(&b, "\n  %-40s %d", k, tally[k])
	}
	t.Logf("exercised:%s", b.String())
}

func newMachine(t *rapid.T) *machine {
	lim := coord.Limits{
		MaxClaimsPerPrincipal:  rapid.IntRange(1, 3).Draw(t, "maxClaims"),
		MaxRetainedCheckpoints: rapid.SampledFrom([]int{2, 3, 10000}).Draw(t, "maxRetained"),
	}
	return &machine{
		lim:     lim,
		live:    coord.New(lim),
		replica: coord.New(lim),
		m: &shadow{
			maxClaims:   lim.MaxClaimsPerPrincipal,
			maxRetained: lim.MaxRetainedCheckpoints,
			now:         modelStart,
			issued:      make(map[int64]bool),
			claims:      make(map[string]*mClaim),
			waits:       make(map[string]map[string]bool),
		},
		now: modelStart,
	}
}

// ---- running commands ----

// exec runs cmd on the live state at the clock. It may first run it, roll it
// back and check nothing changed (INV-JA-2), or first tick so the command
// meets no due lease. It records the outcome's events and returns them
// without the expirations due first, and the image the state had between
// expiry and the command.
func (mc *machine) exec(t *rapid.T, cmd coord.Command) (coord.Outcome, []coord.Event, coord.Image) {
	var probe []coord.Event
	probed := rapid.IntRange(0, 3).Draw(t, "rollbackProbe") == 0
	if probed {
		probe = mc.probeRollback(t, cmd)
	} else if rapid.Bool().Draw(t, "tickFirst") {
		mc.tick(t)
	}
	pre := coord.FromImage(mc.lim, mc.live.Image())
	pre.Tick(mc.now)
	preImg := pre.Image()
	o := mc.live.Step(cmd, mc.now)
	if probed {
		mc.redo = &redo{cmd: cmd, first: probe, again: copyEvents(o.Events)}
	}
	rest := mc.expectExpiry(t, o.Events)
	mc.record(o.Events)
	return o, rest, preImg
}

// tick expires what is due at the clock, on the state and the model.
func (mc *machine) tick(t *rapid.T) {
	o := mc.live.Tick(mc.now)
	if rest := mc.expectExpiry(t, o.Events); len(rest) != 0 {
		t.Fatalf("INV-LL-2: Tick(%v) emitted more than expirations:\n%s", mc.now, fmtEvents(o.Events))
	}
	mc.record(o.Events)
}

// probeRollback steps cmd (ticks when cmd is nil), rolls the outcome back
// and checks the image is as before: a batch whose append failed leaves no
// trace (INV-JA-2). It returns the events the rolled-back run emitted.
func (mc *machine) probeRollback(t *rapid.T, cmd coord.Command) []coord.Event {
	before := mc.live.Image()
	var o coord.Outcome
	if cmd == nil {
		o = mc.live.Tick(mc.now)
	} else {
		o = mc.live.Step(cmd, mc.now)
	}
	evs := copyEvents(o.Events)
	mc.tally[fmt.Sprintf("~ rollback of %T", cmd)]++
	mc.live.Rollback(&o)
	if after := mc.live.Image(); !reflect.DeepEqual(before, after) {
		t.Fatalf("INV-JA-2: rolling back %T at %v (events %s) left the state changed:\nbefore %+v\nafter  %+v", cmd, mc.now, fmtEvents(evs), before, after)
	}
	return evs
}

// expectExpiry checks evs start with the expiry of exactly the claims the
// model says are due at the clock, in deadline order (the order of equal
// deadlines is the state's to choose), each followed by the wake-up of its
// waiters (INV-LL-2). It expires them in the model and returns the rest.
func (mc *machine) expectExpiry(t *rapid.T, evs []coord.Event) []coord.Event {
	due := mc.m.due(mc.now)
	all := slices.Clone(evs)
	last := math.Inf(-1)
	for len(due) > 0 {
		var e coord.ClaimExpired
		ok := len(evs) > 0
		if ok {
			e, ok = evs[0].(coord.ClaimExpired)
		}
		if !ok {
			t.Fatalf("INV-LL-2: at %v the claims %v are due, but the outcome is\n%s", mc.now, sortedKeysOf(due), fmtEvents(all))
		}
		c := due[e.TaskID]
		if c == nil || c.epoch != e.Epoch {
			t.Fatalf("INV-LL-1: at %v the state expired %s epoch %d, which the model holds live (%v)", mc.now, e.TaskID, e.Epoch, mc.m)
		}
		if c.expiresAt < last {
			t.Fatalf("INV-LL-2: %s (due %v) expired after a claim due at %v", c.task, c.expiresAt, last)
		}
		last = c.expiresAt
		delete(due, c.task)
		want := mc.m.expireClaim(c)
		mc.tally[fmt.Sprintf("~ expiry (+%d wake-ups)", len(want)-1)]++
		if len(evs) < len(want) || !sameEvents(evs[:len(want)], want) {
			t.Fatalf("INV-LL-2: expiring %s at %v the outcome is\n%s\nthe model expected\n%s", c.task, mc.now, fmtEvents(all), fmtEvents(want))
		}
		evs = evs[len(want):]
	}
	rest := evs
	for _, ev := range rest {
		if e, ok := ev.(coord.ClaimExpired); ok {
			t.Fatalf("INV-LL-1: claim %s epoch %d expired at %v though the model holds it live", e.TaskID, e.Epoch, mc.now)
		}
	}
	return rest
}

func (mc *machine) record(evs []coord.Event) {
	for _, ev := range evs {
		c := copyEvent(ev)
		mc.log = append(mc.log, c)
		mc.replica.Apply(copyEvent(c))
	}
}

// refusalCode is the outcome's refusal code, "" when granted.
func refusalCode(o coord.Outcome) coord.Code {
	if o.Refusal == nil {
		return ""
	}
	return o.Refusal.Code
}

// expectVerdict checks the state decided cmd as the model did, and that a
// refusal left the state as it was after expiry.
func (mc *machine) expectVerdict(t *rapid.T, cmd coord.Command, o coord.Outcome, want verdict, pre coord.Image) {
	name := strings.TrimPrefix(fmt.Sprintf("%T", cmd), "coord.")
	if want.code == "" {
		mc.tally[name+" granted"]++
	} else {
		mc.tally[name+" "+string(want.code)]++
	}
	if got := refusalCode(o); got != want.code {
		t.Fatalf("%s: %T %+v at %v: the state answered %q (%v), the model expects %q", want.inv, cmd, cmd, mc.now, got, o.Refusal, want.code)
	}
	if want.code == "" {
		return
	}
	if img := mc.live.Image(); !reflect.DeepEqual(pre, img) {
		t.Fatalf("%s: %T refused with %s changed the state:\nbefore %+v\nafter  %+v", want.inv, cmd, want.code, pre, img)
	}
}

// ---- claim family ----

// drawTask is any task id, now and then blank or needing a strip.
func (mc *machine) drawTask(t *rapid.T) string {
	switch rapid.IntRange(0, 24).Draw(t, "taskSpelling") {
	case 23:
		return ""
	case 24:
		return " t2\t" // stripped to t2
	}
	return rapid.SampledFrom(modelTasks).Draw(t, "task")
}

// drawHeldTask is usually a task the model holds a claim on.
func (mc *machine) drawHeldTask(t *rapid.T) string {
	held := sortedKeysOf(mc.m.claims)
	if len(held) == 0 || rapid.IntRange(0, 3).Draw(t, "anyTask") == 3 {
		return mc.drawTask(t)
	}
	return rapid.SampledFrom(held).Draw(t, "heldTask")
}

func drawTTL(t *rapid.T) (float64, bool) {
	switch rapid.IntRange(0, 9).Draw(t, "ttlKind") {
	case 6:
		return 0, false
	case 7:
		return rapid.SampledFrom([]float64{math.NaN(), math.Inf(1), math.Inf(-1)}).Draw(t, "ttlNonFinite"), true
	case 8:
		return rapid.SampledFrom([]float64{0, -1, 1e-9, 29.999, 30, 30.5}).Draw(t, "ttlTiny"), true
	case 9:
		return rapid.SampledFrom([]float64{specMaxTTL, specMaxTTL + 0.5, 1e12, math.MaxFloat64}).Draw(t, "ttlHuge"), true
	}
	return rapid.Float64Range(0, 4000).Draw(t, "ttl"), true
}

// drawScope is a worktree, raw paths, raw globs and raw files; now and
// then the whole worktree, often one kind only, sometimes a mix.
func drawScope(t *rapid.T) (wt string, paths, globs, files []string) {
	wt = rapid.SampledFrom(modelWorktrees).Draw(t, "worktree")
	if rapid.IntRange(0, 5).Draw(t, "wholeWorktree") == 5 {
		return wt, nil, nil, nil
	}
	switch rapid.IntRange(0, 4).Draw(t, "scopeKind") {
	case 0:
		return wt, rapid.SliceOfN(rapid.SampledFrom(modelPaths), 1, 3).Draw(t, "paths"), nil, nil
	case 1:
		return wt, nil, rapid.SliceOfN(rapid.SampledFrom(modelGlobs), 1, 2).Draw(t, "globs"), nil
	case 2:
		return wt, nil, nil, rapid.SliceOfN(rapid.SampledFrom(modelFiles), 1, 3).Draw(t, "files")
	case 3:
		return wt, rapid.SliceOfN(rapid.SampledFrom(modelPaths), 1, 2).Draw(t, "paths"),
			rapid.SliceOfN(rapid.SampledFrom(modelGlobs), 1, 2).Draw(t, "globs"), nil
	}
	return wt, rapid.SliceOfN(rapid.SampledFrom(modelPaths), 0, 1).Draw(t, "paths"),
		rapid.SliceOfN(rapid.SampledFrom(modelGlobs), 0, 1).Draw(t, "globs"),
		rapid.SliceOfN(rapid.SampledFrom(modelFiles), 1, 2).Draw(t, "files")
}

func (mc *machine) drawClaim(t *rapid.T, agent, task string) coord.ClaimRequest {
	ttl, hasTTL := drawTTL(t)
	wt, paths, globs, files := drawScope(t)
	return coord.ClaimRequest{
		Agent:        agent,
		Principal:    rapid.SampledFrom(modelPrincipals).Draw(t, "principal"),
		TaskID:       task,
		Note:         rapid.SampledFrom([]string{"", " fixing ", "n"}).Draw(t, "note"),
		TTL:          ttl,
		HasTTL:       hasTTL,
		Worktree:     wt,
		Paths:        paths,
		Globs:        globs,
		Files:        files,
		Shared:       rapid.IntRange(0, 2).Draw(t, "shared") == 0,
		PathIdentity: rapid.SampledFrom([]string{"", `{"version":1}`}).Draw(t, "pathIdentity"),
		Git:          rapid.SampledFrom([]*coord.Git{nil, modelGit}).Draw(t, "git"),
	}
}

// liveTasks are the model's claims still live at the clock, by task id.
func (mc *machine) liveTasks() []string {
	var out []string
	for task, c := range mc.m.claims {
		if c.expiresAt > mc.now {
			out = append(out, task)
		}
	}
	sort.Strings(out)
	return out
}

func otherAgent(t *rapid.T, not string) string {
	var others []string
	for _, a := range modelAgents {
		if a != not {
			others = append(others, a)
		}
	}
	return rapid.SampledFrom(others).Draw(t, "otherAgent")
}

// claimAny is a claim by anyone, usually on a task nobody holds so that
// leases pile up towards the cap.
func (mc *machine) claimAny(t *rapid.T) {
	agent := rapid.SampledFrom(modelAgents).Draw(t, "agent")
	var free []string
	for _, task := range modelTasks {
		if mc.m.claims[task] == nil {
			free = append(free, task)
		}
	}
	task := ""
	if len(free) > 0 && rapid.IntRange(0, 3).Draw(t, "freeTask") > 0 {
		task = rapid.SampledFrom(free).Draw(t, "task")
	} else {
		task = mc.drawTask(t)
	}
	mc.claim(t, mc.drawClaim(t, agent, task))
}

// renew re-claims a live claim as its owner, usually from the same
// principal and often with the same scope (INV-LL-4).
func (mc *machine) renew(t *rapid.T) {
	tasks := mc.liveTasks()
	if len(tasks) == 0 {
		mc.claimAny(t)
		return
	}
	c := mc.m.claims[rapid.SampledFrom(tasks).Draw(t, "renewTask")]
	req := mc.drawClaim(t, c.owner, c.task)
	if rapid.IntRange(0, 3).Draw(t, "samePrincipal") > 0 {
		req.Principal = strings.TrimPrefix(c.principal, "legacy-agent:"+c.owner)
	}
	if rapid.Bool().Draw(t, "sameScope") {
		req.Worktree, req.Paths, req.Globs, req.Files, req.Shared = c.worktree, slices.Clone(c.paths), slices.Clone(c.globs), slices.Clone(c.files), c.shared
	}
	mc.claim(t, req)
}

// contest claims a live task as another agent: LEASE_LIVE (INV-ME-1).
func (mc *machine) contest(t *rapid.T) {
	tasks := mc.liveTasks()
	if len(tasks) == 0 {
		mc.claimAny(t)
		return
	}
	c := mc.m.claims[rapid.SampledFrom(tasks).Draw(t, "contestTask")]
	mc.claim(t, mc.drawClaim(t, otherAgent(t, c.owner), c.task))
}

// takeover moves the clock exactly onto a lease's expiry and claims the task
// as another agent, usually with the same scope (INV-LL-2, INV-CR-3).
func (mc *machine) takeover(t *rapid.T) {
	var tasks []string
	for task, c := range mc.m.claims {
		if c.expiresAt >= mc.now {
			tasks = append(tasks, task)
		}
	}
	if len(tasks) == 0 {
		mc.claimAny(t)
		return
	}
	sort.Strings(tasks)
	c := mc.m.claims[rapid.SampledFrom(tasks).Draw(t, "takeoverTask")]
	mc.now = c.expiresAt
	req := mc.drawClaim(t, otherAgent(t, c.owner), c.task)
	if rapid.IntRange(0, 3).Draw(t, "sameScope") > 0 {
		req.Worktree, req.Paths, req.Globs, req.Files, req.Shared = c.worktree, slices.Clone(c.paths), slices.Clone(c.globs), slices.Clone(c.files), c.shared
	}
	o, _ := mc.claim(t, req)
	if o.Refusal != nil && o.Refusal.Code == coord.CodeLeaseLive {
		t.Fatalf("INV-LL-2: claim %s at its expiry %v was refused LEASE_LIVE", c.task, mc.now)
	}
}

// claim runs a claim request and checks it against the model: LEASE_LIVE
// (INV-ME-1), SCOPE_CONFLICT (INV-ME-2..4), the cap (INV-ME-5) and the
// renewal exemption (INV-LL-4), the fresh epoch (INV-EF-1), the clamped
// lease (INV-LL-3), the version (INV-EF-3) and the inherited checkpoint
// (INV-CR-3).
func (mc *machine) claim(t *rapid.T, req coord.ClaimRequest) (coord.Outcome, verdict) {
	o, evs, pre := mc.exec(t, req)
	task := strings.TrimSpace(req.TaskID)
	want := mc.m.decideClaim(req)
	mc.expectVerdict(t, req, o, want, pre)
	if sc := requestScope(req); len(sc.files) > 0 {
		mc.tally["~ claim naming files, "+cmp.Or(string(want.code), "granted")]++
	}
	if want.code != "" {
		audit := coord.ClaimDenied{Claimant: req.Agent, TaskID: task, Code: want.code, Worktree: req.Worktree, Paths: requestScope(req).paths}
		if len(evs) != 1 || !claimDeniedEqual(evs[0], audit) {
			t.Fatalf("INV-RR-3: a refused claim must leave exactly its audit record %+v, got\n%s", audit, fmtEvents(evs))
		}
		return o, want
	}
	if len(evs) != 1 {
		t.Fatalf("INV-ME-1: a granted claim must be one event, got\n%s", fmtEvents(evs))
	}
	g, ok := evs[0].(coord.ClaimGranted)
	if !ok {
		t.Fatalf("INV-ME-1: a granted claim emitted %s", fmtEvents(evs))
	}
	got := mc.live.Claim(task)
	if got == nil || got.Owner != req.Agent {
		t.Fatalf("INV-ME-1: granted %s to %s, the state holds %+v", task, req.Agent, got)
	}
	if want := mc.now + shadowTTL(req.TTL, req.HasTTL); got.ExpiresAt != want {
		t.Fatalf("INV-LL-3: claim %s with ttl %v (given %v) expires at %v, want %v", task, req.TTL, req.HasTTL, got.ExpiresAt, want)
	}
	if !reflect.DeepEqual(*got, *g.Claim) {
		t.Fatalf("INV-ME-1: the state holds %+v, the grant said %+v", got, g.Claim)
	}
	principal := shadowPrincipal(req.Principal, req.Agent)
	ex := mc.m.claims[task]
	renewal := ex != nil && ex.principal == principal
	atCap := mc.m.count(principal) >= mc.m.maxClaims
	if g.Renewal != (ex != nil) {
		t.Fatalf("INV-LL-4: grant of %s says renewal=%v, but the same owner held it live: %v", task, g.Renewal, ex != nil)
	}
	if got.Epoch <= mc.m.epoch || mc.m.issued[got.Epoch] {
		t.Fatalf("INV-EF-1: claim %s was granted epoch %d, not above every epoch issued (highest %d)", task, got.Epoch, mc.m.epoch)
	}
	count := len(mc.m.claims)
	switch {
	case renewal && atCap:
		mc.tally["~ renewal at the cap"]++
	case ex != nil && shadowTerminal(ex.status):
		mc.tally["~ renewal of a finished claim"]++
	case ex != nil:
		mc.tally["~ renewal keeping the version"]++
	case got.Checkpoint != "":
		mc.tally["~ claim inheriting a checkpoint"]++
	}
	mc.m.grantClaim(req, got.Epoch)
	mc.compareClaim(t, mc.m.claims[task], got)
	if renewal && atCap {
		if mc.live.ClaimCount() != count || mc.live.PrincipalClaims(principal) != mc.m.count(principal) {
			t.Fatalf("INV-LL-4: renewing %s at the cap changed the claim count: %d claims, model %d", task, mc.live.ClaimCount(), count)
		}
	}
	return o, want
}

func (mc *machine) drawEpoch(t *rapid.T, task string) (int64, bool) {
	cur := int64(0)
	if c := mc.m.claims[task]; c != nil {
		cur = c.epoch
	}
	switch rapid.IntRange(0, 2).Draw(t, "epochKind") {
	case 0:
		return 0, false
	case 1:
		return cur, true
	}
	return rapid.SampledFrom([]int64{cur - 1, cur + 1, 0, mc.m.epoch + 1}).Draw(t, "staleEpoch"), true
}

// drawActor is the claim's owner most of the time, anyone otherwise.
func (mc *machine) drawActor(t *rapid.T, task string) string {
	if c := mc.m.claims[strings.TrimSpace(task)]; c != nil && rapid.IntRange(0, 3).Draw(t, "asOwner") > 0 {
		return c.owner
	}
	return rapid.SampledFrom(modelAgents).Draw(t, "agent")
}

func (mc *machine) drawRelease(t *rapid.T) coord.ReleaseRequest {
	task := mc.drawHeldTask(t)
	req := coord.ReleaseRequest{Agent: mc.drawActor(t, task), TaskID: task}
	req.Epoch, req.HasEpoch = mc.drawEpoch(t, strings.TrimSpace(task))
	if rapid.IntRange(0, 3).Draw(t, "evidence") == 0 {
		req.Evidence = &coord.Evidence{Evidence: []string{"go test ./..."}}
	}
	return req
}

// release drops a claim and its checkpoint, fenced by the epoch (INV-EF-2,
// INV-CR-3).
func (mc *machine) release(t *rapid.T) {
	req := mc.drawRelease(t)
	o, evs, pre := mc.exec(t, req)
	task := strings.TrimSpace(req.TaskID)
	want := mc.m.decideRelease(req)
	mc.expectVerdict(t, req, o, want, pre)
	if want.code != "" {
		if len(evs) != 0 {
			t.Fatalf("%s: refused release emitted\n%s", want.inv, fmtEvents(evs))
		}
		return
	}
	c := mc.m.claims[task]
	waiters := mc.m.waitersOf(task)
	kinds := []string{"release"}
	if req.Evidence != nil {
		kinds = append(kinds, "ledger_progress")
	}
	if len(waiters) > 0 {
		kinds = append(kinds, "wait_ready")
	}
	if got := eventKinds(evs); !slices.Equal(got, kinds) {
		t.Fatalf("INV-CR-3: release of %s emitted %v, want %v", task, got, kinds)
	}
	if r := evs[0].(coord.Released); r.TaskID != task || r.Owner != c.owner || r.Epoch != c.epoch {
		t.Fatalf("INV-EF-2: release of %s epoch %d by %s emitted %+v", task, c.epoch, c.owner, r)
	}
	if len(waiters) > 0 {
		if w := evs[len(evs)-1].(coord.WaitReady); !slices.Equal(w.Waiters, waiters) || w.TaskID != task {
			t.Fatalf("wait graph: release of %s woke %+v, want %v", task, w, waiters)
		}
	}
	mc.m.release(task)
	if mc.live.Claim(task) != nil {
		t.Fatalf("INV-CR-3: %s is still claimed after its release", task)
	}
	if cp, ok := mc.live.RetainedCheckpoint(task); ok {
		t.Fatalf("INV-CR-3: release of %s kept the checkpoint %q", task, cp)
	}
}

func (mc *machine) drawUpdate(t *rapid.T) coord.UpdateRequest {
	task := mc.drawHeldTask(t)
	req := coord.UpdateRequest{
		Agent:   mc.drawActor(t, task),
		TaskID:  task,
		Status:  rapid.SampledFrom(modelStatuses).Draw(t, "status"),
		Note:    rapid.SampledFrom([]string{"", "progress", "  "}).Draw(t, "note"),
		DataRef: rapid.SampledFrom([]string{"", "ref-1", "ref-2"}).Draw(t, "dataRef"),
	}
	req.Epoch, req.HasEpoch = mc.drawEpoch(t, strings.TrimSpace(task))
	if c := mc.m.claims[strings.TrimSpace(task)]; c != nil {
		switch rapid.IntRange(0, 2).Draw(t, "versionKind") {
		case 1:
			req.ExpectedVersion, req.HasExpectedVersion = c.version, true
		case 2:
			req.ExpectedVersion, req.HasExpectedVersion = c.version+rapid.SampledFrom([]int64{-1, 1, 2}).Draw(t, "staleVersion"), true
		}
	} else if rapid.Bool().Draw(t, "versionOnNothing") {
		req.HasExpectedVersion = true
	}
	return req
}

// update moves a claim through its lifecycle under the version CAS
// (INV-EF-3) and the epoch fence (INV-EF-2).
func (mc *machine) update(t *rapid.T) {
	req := mc.drawUpdate(t)
	o, evs, pre := mc.exec(t, req)
	task := strings.TrimSpace(req.TaskID)
	want := mc.m.decideUpdate(req)
	mc.expectVerdict(t, req, o, want, pre)
	if want.code != "" {
		return
	}
	version := mc.m.claims[task].version
	mc.m.update(req)
	mc.expectClaimEvent(t, evs, "task_update", task)
	if got := mc.live.Claim(task).Version; got != version+1 {
		t.Fatalf("INV-EF-3: task_update moved %s from version %d to %d, want %d", task, version, got, version+1)
	}
}

func (mc *machine) drawCheckpoint(t *rapid.T) coord.CheckpointRequest {
	task := mc.drawHeldTask(t)
	req := coord.CheckpointRequest{
		Agent:      mc.drawActor(t, task),
		TaskID:     task,
		Checkpoint: rapid.SampledFrom(modelCheckpoints).Draw(t, "checkpoint"),
	}
	req.Epoch, req.HasEpoch = mc.drawEpoch(t, strings.TrimSpace(task))
	return req
}

// checkpoint stores a resume token, bumping the version (INV-EF-3).
func (mc *machine) checkpoint(t *rapid.T) {
	req := mc.drawCheckpoint(t)
	o, evs, pre := mc.exec(t, req)
	task := strings.TrimSpace(req.TaskID)
	want := mc.m.decideCheckpoint(req)
	mc.expectVerdict(t, req, o, want, pre)
	if want.code != "" {
		return
	}
	version := mc.m.claims[task].version
	mc.m.checkpoint(req)
	mc.expectClaimEvent(t, evs, "checkpoint", task)
	if got := mc.live.Claim(task).Version; got != version+1 {
		t.Fatalf("INV-EF-3: checkpoint moved %s from version %d to %d, want %d", task, version, got, version+1)
	}
}

// expectClaimEvent checks evs is the one claim-carrying event of kind for
// task and that it matches the model's claim.
func (mc *machine) expectClaimEvent(t *rapid.T, evs []coord.Event, kind, task string) {
	if got := eventKinds(evs); !slices.Equal(got, []string{kind}) {
		t.Fatalf("INV-EF-3: %s of %s emitted %v", kind, task, got)
	}
	got := mc.live.Claim(task)
	mc.compareClaim(t, mc.m.claims[task], got)
	var c *coord.Claim
	switch e := evs[0].(type) {
	case coord.TaskUpdated:
		c = e.Claim
	case coord.CheckpointSaved:
		c = e.Claim
	}
	if !reflect.DeepEqual(*c, *got) {
		t.Fatalf("INV-EF-3: %s event carries %+v, the state holds %+v", kind, c, got)
	}
}

func (mc *machine) drawHandoff(t *rapid.T) coord.HandoffRequest {
	task := mc.drawHeldTask(t)
	giver := mc.drawActor(t, task)
	req := coord.HandoffRequest{
		Agent:       giver,
		TaskID:      task,
		To:          rapid.SampledFrom(append(slices.Clone(modelAgents), " b ", giver, "")).Draw(t, "to"),
		ToOnline:    rapid.IntRange(0, 4).Draw(t, "toOnline") > 0,
		ToPrincipal: rapid.SampledFrom(modelPrincipals).Draw(t, "toPrincipal"),
		Note:        rapid.SampledFrom([]string{"", "over to you"}).Draw(t, "note"),
	}
	req.Epoch, req.HasEpoch = mc.drawEpoch(t, strings.TrimSpace(task))
	return req
}

// handoff moves a claim; it must be atomic, keep the work and fence the
// giver out (INV-CR-2).
func (mc *machine) handoff(t *rapid.T) {
	req := mc.drawHandoff(t)
	o, evs, pre := mc.exec(t, req)
	task, giver, to := strings.TrimSpace(req.TaskID), req.Agent, strings.TrimSpace(req.To)
	want := mc.m.decideHandoff(req)
	mc.expectVerdict(t, req, o, want, pre)
	if want.code != "" {
		if len(evs) != 0 {
			t.Fatalf("%s: refused handoff emitted\n%s", want.inv, fmtEvents(evs))
		}
		return
	}
	old := *mc.m.claims[task]
	kinds := []string{"ledger_progress", "handoff"}
	if mc.m.waits[to][task] {
		kinds = append(kinds, "wait_ready")
	}
	if got := eventKinds(evs); !slices.Equal(got, kinds) {
		t.Fatalf("INV-CR-2: handoff of %s emitted %v, want %v (no release, no re-claim)", task, got, kinds)
	}
	if h := evs[1].(coord.HandedOff); h.From != giver || h.Claim.Owner != to {
		t.Fatalf("INV-CR-2: handoff event %+v, want from %s to %s", h, giver, to)
	}
	// Replay the outcome one event at a time: the task is held throughout.
	r := coord.FromImage(mc.lim, pre)
	for _, ev := range evs {
		r.Apply(copyEvent(ev))
		if c := r.Claim(task); c == nil || (c.Owner != giver && c.Owner != to) {
			t.Fatalf("INV-CR-2: after %s the task %s is held by %+v, not by %s or %s", ev.Kind(), task, c, giver, to)
		}
	}
	got := mc.live.Claim(task)
	if got.Owner != to || got.Worktree != old.worktree || !slices.Equal(got.Paths, old.paths) ||
		!slices.Equal(got.Globs, old.globs) || !slices.Equal(got.Files, old.files) || (got.Mode == coord.ModeShared) != old.shared ||
		got.Status.String() != old.status || got.DataRef != old.dataRef || got.Checkpoint != old.checkpoint {
		t.Fatalf("INV-CR-2: handoff of %+v to %s produced %+v: it must keep scope, status and checkpoint", old, to, got)
	}
	if got.Epoch <= mc.m.epoch || mc.m.issued[got.Epoch] || got.Version != 0 {
		t.Fatalf("INV-CR-2: handoff of %s gave epoch %d (highest issued %d) version %d: want a fresh epoch and version 0", task, got.Epoch, mc.m.epoch, got.Version)
	}
	mc.m.handoff(req, got.Epoch)
	mc.compareClaim(t, mc.m.claims[task], got)
	if !reflect.DeepEqual(r.Image(), mc.live.Image()) {
		t.Fatalf("INV-CR-2: replaying the handoff outcome gives\n%+v\nthe state is\n%+v", r.Image(), mc.live.Image())
	}
}

func (mc *machine) drawWait(t *rapid.T) coord.WaitRequest {
	return coord.WaitRequest{Agent: rapid.SampledFrom(modelAgents).Draw(t, "agent"), TaskID: mc.drawHeldTask(t)}
}

// wait adds an edge to the advisory wait graph unless it would close a
// cycle.
func (mc *machine) wait(t *rapid.T) {
	req := mc.drawWait(t)
	o, evs, pre := mc.exec(t, req)
	task := strings.TrimSpace(req.TaskID)
	want := mc.m.decideWait(req)
	mc.expectVerdict(t, req, o, want, pre)
	if want.code != "" {
		return
	}
	wantEv := coord.WaitAdded{Waiter: req.Agent, TaskID: task, Holder: mc.m.claims[task].owner}
	if len(evs) != 1 || !reflect.DeepEqual(evs[0], wantEv) {
		t.Fatalf("wait graph: wait emitted\n%s\nwant %+v", fmtEvents(evs), wantEv)
	}
	mc.m.addWait(req.Agent, task)
}

func drawDisconnect(t *rapid.T) coord.Disconnect {
	return coord.Disconnect{Agent: rapid.SampledFrom(modelAgents).Draw(t, "agent")}
}

// disconnect ends every wait of an agent.
func (mc *machine) disconnect(t *rapid.T) {
	req := drawDisconnect(t)
	o, evs, _ := mc.exec(t, req)
	if o.Refusal != nil {
		t.Fatalf("wait graph: disconnect refused: %v", o.Refusal)
	}
	var want []coord.Event
	if tasks := sortedKeysOf(mc.m.waits[req.Agent]); len(tasks) > 0 {
		want = append(want, coord.WaitsDropped{Waiter: req.Agent, Tasks: tasks})
	}
	if !sameEvents(evs, want) {
		t.Fatalf("wait graph: disconnect of %s emitted\n%s\nwant\n%s", req.Agent, fmtEvents(evs), fmtEvents(want))
	}
	delete(mc.m.waits, req.Agent)
}

// ---- time ----

// advance moves the clock by a small or a large jump, a little back, or
// exactly onto (or just before) a lease's expiry, and sometimes ticks there.
func (mc *machine) advance(t *rapid.T) {
	switch rapid.IntRange(0, 6).Draw(t, "jumpKind") {
	case 0, 1, 2:
		mc.now += rapid.Float64Range(0, 60).Draw(t, "smallJump")
	case 6:
		mc.now -= rapid.Float64Range(0, 5).Draw(t, "clockStepsBack") // a wall clock may step back
	case 3:
		mc.now += rapid.Float64Range(60, 1800).Draw(t, "mediumJump")
	case 4:
		mc.now += rapid.SampledFrom([]float64{3600, 86400, specMaxTTL, specMaxTTL + 1}).Draw(t, "largeJump")
	case 5:
		var at []float64
		for _, c := range mc.m.claims {
			if c.expiresAt >= mc.now {
				at = append(at, c.expiresAt)
			}
		}
		if len(at) == 0 {
			break
		}
		slices.Sort(at)
		next := rapid.SampledFrom(at).Draw(t, "expiry")
		if rapid.Bool().Draw(t, "justBefore") {
			next = max(mc.now, math.Nextafter(next, math.Inf(-1)))
		}
		mc.now = next
	}
	if rapid.Bool().Draw(t, "tick") {
		if rapid.IntRange(0, 3).Draw(t, "rollbackProbe") == 0 {
			mc.probeRollback(t, nil)
		}
		mc.tick(t)
	}
}

// abortTick ticks far ahead and rolls it back: a mass expiry whose append
// failed leaves no trace, and the clock stays where it was (INV-JA-2).
func (mc *machine) abortTick(t *rapid.T) {
	saved := mc.now
	mc.now += rapid.Float64Range(0, 2*specMaxTTL).Draw(t, "abortJump")
	mc.probeRollback(t, nil)
	mc.now = saved
}

// drawCommand is any command the machine issues.
func (mc *machine) drawCommand(t *rapid.T) coord.Command {
	switch rapid.IntRange(0, 6).Draw(t, "commandKind") {
	case 0:
		return mc.drawClaim(t, rapid.SampledFrom(modelAgents).Draw(t, "agent"), mc.drawHeldTask(t))
	case 1:
		return mc.drawRelease(t)
	case 2:
		return mc.drawUpdate(t)
	case 3:
		return mc.drawCheckpoint(t)
	case 4:
		return mc.drawHandoff(t)
	case 5:
		return mc.drawWait(t)
	}
	return drawDisconnect(t)
}

// abortBatch runs a few commands, with time moving between them, as one
// journal batch whose append failed: rolled back newest first they leave no
// trace, and the clock stays where it was (INV-JA-2).
func (mc *machine) abortBatch(t *rapid.T) {
	before := mc.live.Image()
	at := mc.now
	var outs []coord.Outcome
	var cmds []string
	for range rapid.IntRange(1, 4).Draw(t, "batchSize") {
		if rapid.Bool().Draw(t, "batchJump") {
			at += rapid.Float64Range(0, 4000).Draw(t, "batchJumpBy")
		}
		cmd := mc.drawCommand(t)
		outs = append(outs, mc.live.Step(cmd, at))
		cmds = append(cmds, fmt.Sprintf("%T", cmd))
	}
	for i := len(outs) - 1; i >= 0; i-- {
		mc.live.Rollback(&outs[i])
	}
	if after := mc.live.Image(); !reflect.DeepEqual(before, after) {
		t.Fatalf("INV-JA-2: rolling back the batch %v left the state changed:\nbefore %+v\nafter  %+v", cmds, before, after)
	}
	mc.tally["~ rollback of a batch"]++
}

// expireEverything lets every lease lapse: the registry empties and no wait
// edge is left behind (INV-LL-2), and the whole run replays to the same
// state.
func (mc *machine) expireEverything(t *rapid.T) {
	mc.now = max(mc.now, mc.m.now) + specMaxTTL + specDefaultTTL + 1
	mc.tick(t)
	mc.check(t)
	if n := mc.live.ClaimCount(); n != 0 {
		t.Fatalf("INV-LL-2: %d claims outlived every lease: %v", n, mc.live.Claims())
	}
	img := mc.live.Image()
	if len(img.Waits) != 0 {
		t.Fatalf("INV-LL-2: wait edges %v remain after every lease expired", img.Waits)
	}
	for _, task := range modelTasks {
		if ws := mc.live.Waiters(task); len(ws) != 0 {
			t.Fatalf("INV-LL-2: %v still wait on unclaimed %s", ws, task)
		}
	}
	replayed := coord.New(mc.lim)
	for _, ev := range mc.log {
		replayed.Apply(copyEvent(ev))
	}
	if got := replayed.Image(); !reflect.DeepEqual(img, got) {
		t.Fatalf("replay: applying the %d recorded events to a fresh state gives\n%+v\nthe live state is\n%+v", len(mc.log), got, img)
	}
}

// ---- invariants after every step ----

// check compares the state with the model and asserts every [model]
// invariant. It runs after every action.
func (mc *machine) check(t *rapid.T) {
	if r := mc.redo; r != nil {
		mc.redo = nil
		if !sameEvents(r.first, r.again) {
			t.Fatalf("INV-JA-2: %T redone after a rollback emitted\n%s\nthe rolled-back run emitted\n%s", r.cmd, fmtEvents(r.again), fmtEvents(r.first))
		}
	}
	now := mc.m.now
	claims := mc.live.Claims()
	if len(claims) != len(mc.m.claims) || mc.live.ClaimCount() != len(claims) {
		t.Fatalf("INV-ME-1: the state holds %d claims (count %d) %v, the model %d %v", len(claims), mc.live.ClaimCount(), claims, len(mc.m.claims), mc.m)
	}
	epochs := make(map[int64]string)
	principals := make(map[string]int)
	for _, c := range claims {
		if mc.live.Claim(c.TaskID) != c {
			t.Fatalf("INV-ME-1: Claim(%s) and Claims() disagree", c.TaskID)
		}
		if c.ExpiresAt <= now || !c.Live(now) || c.Live(c.ExpiresAt) {
			t.Fatalf("INV-LL-1: claim %s held after the step at %v expires at %v: live is strictly before expiry", c.TaskID, now, c.ExpiresAt)
		}
		w := mc.m.claims[c.TaskID]
		if w == nil {
			t.Fatalf("INV-ME-1: the state holds %+v, the model has no claim on %s", c, c.TaskID)
		}
		mc.compareClaim(t, w, c)
		if other, dup := epochs[c.Epoch]; dup {
			t.Fatalf("INV-EF-1: claims %s and %s share epoch %d", other, c.TaskID, c.Epoch)
		}
		epochs[c.Epoch] = c.TaskID
		if c.Epoch > mc.live.Epoch() {
			t.Fatalf("INV-EF-1: claim %s has epoch %d above the highest issued %d", c.TaskID, c.Epoch, mc.live.Epoch())
		}
		principals[c.QuotaPrincipal]++
	}
	if mc.live.Epoch() != mc.m.epoch {
		t.Fatalf("INV-EF-1: the state's highest epoch is %d, the model's %d", mc.live.Epoch(), mc.m.epoch)
	}
	for p, n := range principals {
		if n > mc.lim.MaxClaimsPerPrincipal {
			t.Fatalf("INV-ME-5: principal %s holds %d live claims, cap %d", p, n, mc.lim.MaxClaimsPerPrincipal)
		}
		if got := mc.live.PrincipalClaims(p); got != n {
			t.Fatalf("INV-ME-5: PrincipalClaims(%s) = %d, the registry holds %d", p, got, n)
		}
	}
	for i, a := range claims {
		for _, b := range claims[i+1:] {
			oracle := coord.ScopesOverlap(a.Scope(), b.Scope())
			brute := shadowScopesOverlap(mc.m.claims[a.TaskID].scope(), mc.m.claims[b.TaskID].scope())
			inv := scopeInv(a.Worktree, a.Paths, b.Worktree, b.Paths)
			if oracle != brute {
				t.Fatalf("%s: ScopesOverlap(%s, %s) = %v, brute force says %v", inv, a, b, oracle, brute)
			}
			readers := a.Mode == coord.ModeShared && b.Mode == coord.ModeShared
			if a.Owner != b.Owner && (oracle || brute) && !readers {
				t.Fatalf("%s: different owners hold conflicting live scopes: %s and %s", inv, a, b)
			}
			if a.Owner != b.Owner && (oracle || brute) && readers {
				mc.tally["~ shared readers overlapping"]++
			}
		}
	}
	mc.checkWriters(t, claims)
	img := mc.live.Image()
	if want := mc.m.retainedImage(); !slices.Equal(img.Retained, want) {
		t.Fatalf("INV-CR-3: retained checkpoints %v, the model %v", img.Retained, want)
	}
	if want := mc.m.waitImage(); !slices.Equal(img.Waits, want) {
		t.Fatalf("wait graph: waits %v, the model %v", img.Waits, want)
	}
	for _, w := range img.Waits {
		if c := mc.live.Claim(w.TaskID); c == nil || c.Owner == w.Waiter {
			t.Fatalf("wait graph: %s waits on %s, held by %v", w.Waiter, w.TaskID, c)
		}
	}
	if got := mc.replica.Image(); !reflect.DeepEqual(img, got) {
		t.Fatalf("replay: applying the %d recorded events gives\n%+v\nthe live state is\n%+v", len(mc.log), got, img)
	}
	if got := coord.FromImage(mc.lim, img).Image(); !reflect.DeepEqual(img, got) {
		t.Fatalf("replay: FromImage(Image()).Image() is\n%+v\nnot\n%+v", got, img)
	}
}

// compareClaim checks a claim of the state field by field against the
// model's, naming the invariant each field carries.
func (mc *machine) compareClaim(t *rapid.T, w *mClaim, c *coord.Claim) {
	fail := func(inv, field string, got, want any) {
		t.Fatalf("%s: claim %s has %s %v, the model says %v\nstate %+v\nmodel %+v", inv, c.TaskID, field, got, want, c, w)
	}
	switch {
	case c.Owner != w.owner:
		fail("INV-ME-1", "owner", c.Owner, w.owner)
	case c.Epoch != w.epoch:
		fail("INV-EF-1", "epoch", c.Epoch, w.epoch)
	case c.Version != w.version:
		fail("INV-EF-3", "version", c.Version, w.version)
	case c.Status.String() != w.status:
		fail("INV-EF-3", "status", c.Status, w.status)
	case c.DataRef != w.dataRef:
		fail("INV-EF-3", "data_ref", c.DataRef, w.dataRef)
	case c.ExpiresAt != w.expiresAt:
		fail("INV-LL-3", "lease_expires_at", c.ExpiresAt, w.expiresAt)
	case c.ClaimedAt != w.claimedAt:
		fail("INV-LL-3", "claimed_at", c.ClaimedAt, w.claimedAt)
	case c.Checkpoint != w.checkpoint:
		fail("INV-CR-3", "checkpoint", c.Checkpoint, w.checkpoint)
	case c.Worktree != w.worktree || !slices.Equal(c.Paths, w.paths) || !slices.Equal(c.Globs, w.globs) || !slices.Equal(c.Files, w.files) ||
		(c.Mode == coord.ModeShared) != w.shared:
		fail("INV-ME-2", "scope", fmt.Sprintf("%q %q %q %q %s", c.Worktree, c.Paths, c.Globs, c.Files, c.Mode),
			fmt.Sprintf("%q %q %q %q shared=%v", w.worktree, w.paths, w.globs, w.files, w.shared))
	case c.QuotaPrincipal != w.principal:
		fail("INV-ME-5", "quota principal", c.QuotaPrincipal, w.principal)
	case c.Note != w.note || c.PathIdentity != w.pathIdentity || !reflect.DeepEqual(c.Git, w.git):
		fail("INV-CR-2", "note/path_identity/git", fmt.Sprintf("%q %q %v", c.Note, c.PathIdentity, c.Git), fmt.Sprintf("%q %q %v", w.note, w.pathIdentity, w.git))
	}
}

// checkWriters checks the modes on concrete paths: for every witness path,
// the live claims covering it (by the independent oracle) have at most one
// owner among the exclusive ones, and when there is one, no other owner
// holds it shared: single writer per path, readers never beside a writer.
func (mc *machine) checkWriters(t *rapid.T, claims []*coord.Claim) {
	if len(claims) < 2 {
		return
	}
	for _, p := range writerSample() {
		for _, wt := range []string{"/repo", "", "/other"} {
			writer, reader := "", ""
			for _, c := range claims {
				if c.Worktree != wt || !oracleScopeCovers(c.Paths, c.Globs, c.Files, p) {
					continue
				}
				if c.Mode == coord.ModeShared {
					if writer != "" && writer != c.Owner {
						t.Fatalf("INV-ME-2: %s reads %q in %q while %s writes it (%v)", c.Owner, p, wt, writer, claims)
					}
					reader = c.Owner
					continue
				}
				if writer != "" && writer != c.Owner {
					t.Fatalf("INV-ME-2: %s and %s both write %q in %q (%v)", writer, c.Owner, p, wt, claims)
				}
				writer = c.Owner
			}
			if writer != "" && reader != "" {
				for _, c := range claims {
					if c.Worktree == wt && c.Mode == coord.ModeShared && c.Owner != writer && oracleScopeCovers(c.Paths, c.Globs, c.Files, p) {
						t.Fatalf("INV-ME-2: %s reads %q in %q while %s writes it", c.Owner, p, wt, writer)
					}
				}
			}
		}
	}
}

// writerSample is the concrete paths the mode invariant is checked on: the
// model's own paths and files and a few the globs reach.
func writerSample() []string {
	return []string{
		"src/a/x.go", "docs/guide.md", "src/b", "src/ab", "src/a", "docs", "src", "src/x.go", "src/a/b/x.go",
		"docs/q.md", "a/b/c", "src/b/x.go", "etc/passwd", "x", "src/a/q.md",
		"src/a/readme.md", "src/x.txt", "src/a/b/x.txt", "src/a/readme.md/x.go",
	}
}

// TestModel_WitnessesDecideOverlap: the model decides overlap on witness
// paths (two entries overlap iff some witness path is in both); for every
// pair of entries its vocabulary can produce — literal paths, globs and
// files — the witnesses agree with coord's exact check, so the model
// predicts verdicts exactly (and coord's check is sound on them).
func TestModel_WitnessesDecideOverlap(t *testing.T) {
	var entries []oracleEntry
	for _, set := range []struct {
		raw  []string
		kind entryKind
	}{{modelPaths, kindPath}, {modelGlobs, kindGlob}, {modelFiles, kindFile}} {
		for _, e := range set.raw {
			if n := shadowPath(e); n != "" {
				entries = append(entries, oracleEntry{n, set.kind})
			}
		}
	}
	scope := func(e oracleEntry) coord.Scope {
		sc := coord.Scope{Worktree: "/repo"}
		switch e.kind {
		case kindGlob:
			sc.Globs = []string{e.e}
		case kindFile:
			sc.Files = []string{e.e}
		default:
			sc.Paths = []string{e.e}
		}
		return sc
	}
	// The witnesses are enough: their alphabet spells a segment for every
	// pair of the vocabulary's segments that meet, and no pair needs a
	// common path deeper than witnessDepth (a deeper search, bounded by
	// witnessBound, finds nothing more).
	var segs []string
	for _, e := range entries {
		for _, s := range splitSegs(e.e) {
			if !slices.Contains(segs, s) {
				segs = append(segs, s)
			}
		}
	}
	checkSegmentAlphabet(t, segs, witnessSegs, 5)
	for _, a := range entries {
		for _, b := range entries {
			want := entriesOverlap(a, b)
			if d := witnessBound(a, b); d > witnessDepth && oracleOverlap(a, b, witnessSegs, d) != want {
				t.Fatalf("the %s %q and the %s %q meet only deeper than the witnesses reach", a.kind, a.e, b.kind, b.e)
			}
			if got := coord.ScopesOverlap(scope(a), scope(b)); got != want {
				t.Errorf("ScopesOverlap(the %s %q, the %s %q) = %v, the witness paths say %v", a.kind, a.e, b.kind, b.e, got, want)
			}
		}
	}
}
