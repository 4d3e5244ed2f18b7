package coord

import (
	"slices"
	"strings"
)

// scopeIndex holds the live claims by worktree in a path trie, so deciding
// whether a new scope conflicts costs O(depth + matches) rather than a scan
// of every live claim (the reference scans: ~0.3 s at 100k claims).
//
// A literal path sits at its node and conflicts with paths at its
// ancestors, with everything at itself, and with everything in its subtree
// (INV-ME-2). A file sits at its node too and covers that node alone: it
// conflicts with paths at its ancestors and with paths and files at itself,
// never with what lies below it. A glob sits at the node of its literal
// prefix (the segments before its first wildcard) as a subtree with a
// filter: everything it matches lies at or below that node, so only entries
// on the path to the node and in its subtree can overlap it, and each of
// those is checked exactly (patternsOverlap, or the glob's automaton read
// along the node's path); a walk of the subtree follows the glob's
// automaton and skips branches it cannot reach. Whole-worktree claims sit
// beside the trie and conflict with everything in their worktree
// (INV-ME-4); worktrees never meet (INV-ME-3). Shared holders never
// conflict with each other: each node counts the exclusive entries below
// it, so a shared request skips branches holding none.
type scopeIndex struct {
	trees map[string]*scopeTree
}

type scopeTree struct {
	whole []*Claim // whole-worktree claims, sorted by task id
	root  scopeNode
	size  int // claims indexed in this worktree
}

type scopeNode struct {
	children map[string]*scopeNode
	holders  []*Claim     // claims declaring exactly this path (and its subtree), sorted by task id
	rare     *rareEntries // files and globs filed here; nil at most nodes, which keeps nodes small
	below    int          // holder, file and glob entries in this subtree, this node included
	belowX   int          // the exclusive ones among them
}

// rareEntries are the entries fewer nodes hold than paths.
type rareEntries struct {
	files []*Claim    // claims declaring exactly this path as a file, sorted by task id
	globs []globEntry // globs whose literal prefix is this path, by task id then pattern
}

func (n *scopeNode) files() []*Claim {
	if n.rare == nil {
		return nil
	}
	return n.rare.files
}

func (n *scopeNode) globs() []globEntry {
	if n.rare == nil {
		return nil
	}
	return n.rare.globs
}

// more returns the node's rare entries, making them.
func (n *scopeNode) more() *rareEntries {
	if n.rare == nil {
		n.rare = &rareEntries{}
	}
	return n.rare
}

// tidy drops the rare entries once the node holds none.
func (n *scopeNode) tidy() {
	if n.rare != nil && len(n.rare.files) == 0 && len(n.rare.globs) == 0 {
		n.rare = nil
	}
}

// entries is how many entries the node itself holds.
func (n *scopeNode) entries() int { return len(n.holders) + len(n.files()) + len(n.globs()) }

// globEntry is one glob of a claim, compiled once on insert.
type globEntry struct {
	c    *Claim
	glob string
	pat  pattern
}

func newScopeIndex() scopeIndex { return scopeIndex{trees: make(map[string]*scopeTree)} }

// segments calls f for each "/"-separated segment of a normalised path.
func segments(p string, f func(seg string) bool) {
	for p != "" {
		i := strings.IndexByte(p, '/')
		if i < 0 {
			f(p)
			return
		}
		if !f(p[:i]) {
			return
		}
		p = p[i+1:]
	}
}

func insertHolder(hs []*Claim, c *Claim) []*Claim {
	i, _ := slices.BinarySearchFunc(hs, c.TaskID, func(h *Claim, t string) int { return strings.Compare(h.TaskID, t) })
	return slices.Insert(hs, i, c)
}

func removeHolder(hs []*Claim, c *Claim) []*Claim {
	i := slices.Index(hs, c)
	if i < 0 {
		panic("coord: scope index lost claim " + c.TaskID)
	}
	hs = slices.Delete(hs, i, i+1)
	if len(hs) == 0 {
		return nil
	}
	return hs
}

func compareGlobEntry(a globEntry, task, glob string) int {
	if c := strings.Compare(a.c.TaskID, task); c != 0 {
		return c
	}
	return strings.Compare(a.glob, glob)
}

func exclusiveCount(c *Claim) int {
	if c.Mode == ModeShared {
		return 0
	}
	return 1
}

// descend walks from the tree's root to the node for the segments of p,
// creating nodes and counting one more entry of c on the way.
func (t *scopeTree) descend(segs []string, c *Claim) *scopeNode {
	x := exclusiveCount(c)
	n := t.root.enter(x)
	for _, seg := range segs {
		n = n.child(seg).enter(x)
	}
	return n
}

// descendPath is descend over the segments of path p, without the slice
// splitPath would allocate (the restart of a large state inserts every
// claim's paths: FromImage).
func (t *scopeTree) descendPath(p string, c *Claim) *scopeNode {
	x := exclusiveCount(c)
	n := t.root.enter(x)
	segments(p, func(seg string) bool {
		n = n.child(seg).enter(x)
		return true
	})
	return n
}

// enter counts a claim of exclusive weight x below n and returns n.
func (n *scopeNode) enter(x int) *scopeNode {
	n.below++
	n.belowX += x
	return n
}

// child returns n's child for seg, making it when missing.
func (n *scopeNode) child(seg string) *scopeNode {
	next := n.children[seg]
	if next == nil {
		if n.children == nil {
			n.children = make(map[string]*scopeNode, 1)
		}
		next = &scopeNode{}
		n.children[seg] = next
	}
	return next
}

func splitPath(p string) []string {
	var out []string
	segments(p, func(seg string) bool { out = append(out, seg); return true })
	return out
}

func (x *scopeIndex) insert(c *Claim) {
	t := x.trees[c.Worktree]
	if t == nil {
		t = &scopeTree{}
		x.trees[c.Worktree] = t
	}
	t.size++
	if c.WholeWorktree() {
		t.whole = insertHolder(t.whole, c)
		return
	}
	for _, p := range c.Paths {
		n := t.descendPath(p, c)
		n.holders = insertHolder(n.holders, c)
	}
	for _, f := range c.Files {
		n := t.descendPath(f, c)
		m := n.more()
		m.files = insertHolder(m.files, c)
	}
	for _, g := range c.Globs {
		pat := compileGlob(g)
		n := t.descend(pat.prefix(), c)
		m := n.more()
		i, _ := slices.BinarySearchFunc(m.globs, c, func(e globEntry, c *Claim) int { return compareGlobEntry(e, c.TaskID, g) })
		m.globs = slices.Insert(m.globs, i, globEntry{c: c, glob: g, pat: pat})
	}
}

func (x *scopeIndex) remove(c *Claim) {
	t := x.trees[c.Worktree]
	t.size--
	if c.WholeWorktree() {
		t.whole = removeHolder(t.whole, c)
	} else {
		xc := exclusiveCount(c)
		for _, p := range c.Paths {
			t.root.below--
			t.root.belowX -= xc
			removeEntry(&t.root, splitPath(p), c, xc, func(n *scopeNode) { n.holders = removeHolder(n.holders, c) })
		}
		for _, f := range c.Files {
			t.root.below--
			t.root.belowX -= xc
			removeEntry(&t.root, splitPath(f), c, xc, func(n *scopeNode) {
				n.rare.files = removeHolder(n.files(), c)
				n.tidy()
			})
		}
		for _, g := range c.Globs {
			t.root.below--
			t.root.belowX -= xc
			removeEntry(&t.root, compileGlob(g).prefix(), c, xc, func(n *scopeNode) {
				i := slices.IndexFunc(n.globs(), func(e globEntry) bool { return e.c == c && e.glob == g })
				if i < 0 {
					panic("coord: scope index lost glob of " + c.TaskID)
				}
				n.rare.globs = slices.Delete(n.rare.globs, i, i+1)
				if len(n.rare.globs) == 0 {
					n.rare.globs = nil
				}
				n.tidy()
			})
		}
	}
	if t.size == 0 {
		delete(x.trees, c.Worktree)
	}
}

// removeAll takes every claim of cs off the index. A worktree whose claims
// all go at once — a restart after downtime, a fleet whose leases lapse
// together — is dropped whole instead of path by path.
func (x *scopeIndex) removeAll(cs []*Claim) {
	going := make(map[string]int) // worktree → claims leaving it
	for _, c := range cs {
		going[c.Worktree]++
	}
	for wt, n := range going {
		if x.trees[wt].size == n {
			delete(x.trees, wt)
			delete(going, wt)
		}
	}
	for _, c := range cs {
		if _, partial := going[c.Worktree]; partial {
			x.remove(c)
		}
	}
}

// removeEntry takes one entry of c off the node at segs below n (drop does
// it there), uncounting it on the way and pruning emptied nodes. The
// caller has uncounted it at n.
func removeEntry(n *scopeNode, segs []string, c *Claim, xc int, drop func(*scopeNode)) {
	if len(segs) == 0 {
		drop(n)
		return
	}
	child := n.children[segs[0]]
	child.below--
	child.belowX -= xc
	removeEntry(child, segs[1:], c, xc, drop)
	if child.below == 0 {
		delete(n.children, segs[0])
	}
}

// scopeQuery is a scope being checked: its entries compiled, and the
// holders that block it.
type scopeQuery struct {
	blocks func(*Claim) bool
	shared bool // only exclusive holders can block
}

// first returns the first of hs that blocks the query, or nil.
func (q *scopeQuery) first(hs []*Claim) *Claim {
	for _, h := range hs {
		if q.blocks(h) {
			return h
		}
	}
	return nil
}

// live reports whether the subtree at n may hold a blocking entry.
func (q *scopeQuery) live(n *scopeNode) bool {
	if q.shared {
		return n.belowX > 0
	}
	return n.below > 0
}

// conflict returns the first live claim in the scope's worktree whose scope
// conflicts with sc, ignoring claims of owner and the claim on task itself
// (a claimant never conflicts with itself), or nil. The choice is
// deterministic: whole-worktree claims first, then per declared path its
// ancestors top-down (at a node: paths, files, globs), the path itself, and
// its subtree in lexical order; then per declared glob the same along its
// literal prefix and below it; then per declared file its ancestors and
// itself.
func (x *scopeIndex) conflict(sc Scope, owner, task string, now float64) *Claim {
	t := x.trees[sc.Worktree]
	if t == nil {
		return nil
	}
	q := &scopeQuery{
		shared: sc.Mode == ModeShared,
		blocks: func(h *Claim) bool {
			return h.Owner != owner && h.TaskID != task && h.Live(now) && !sc.Mode.Compatible(h.Mode)
		},
	}
	if h := q.first(t.whole); h != nil {
		return h
	}
	if sc.Whole() {
		return q.firstInSubtree(&t.root)
	}
	for _, p := range sc.Paths {
		if h := q.literal(&t.root, p); h != nil {
			return h
		}
	}
	for _, g := range sc.Globs {
		if h := q.glob(&t.root, compileGlob(g)); h != nil {
			return h
		}
	}
	for _, f := range sc.Files {
		if h := q.file(&t.root, f); h != nil {
			return h
		}
	}
	return nil
}

// literal checks the literal path p: paths at its strict ancestors (files
// there lie above p), globs there that reach p, and everything at p and in
// its subtree (all of which p covers).
func (q *scopeQuery) literal(root *scopeNode, p string) *Claim {
	segs := splitPath(p)
	n := root
	for depth := range segs {
		if h := q.first(n.holders); h != nil {
			return h
		}
		for _, e := range n.globs() {
			// e is filed at depth: it overlaps p when it matches p or
			// something below it, i.e. its automaton survives the rest of
			// p's segments.
			if e.pat.reaches(depth, segs[depth:]) && q.blocks(e.c) {
				return e.c
			}
		}
		n = n.children[segs[depth]]
		if n == nil || !q.live(n) {
			return nil
		}
	}
	return q.firstInSubtree(n)
}

// file checks the file f, which covers itself alone: paths at its strict
// ancestors and at f, files at f, and the globs along the way that match f
// exactly. Nothing below f's node holds f.
func (q *scopeQuery) file(root *scopeNode, f string) *Claim {
	segs := splitPath(f)
	n := root
	for depth := 0; ; depth++ {
		if h := q.first(n.holders); h != nil {
			return h
		}
		if depth == len(segs) {
			if h := q.first(n.files()); h != nil {
				return h
			}
		}
		for _, e := range n.globs() {
			if e.pat.accepts(depth, segs[depth:]) && q.blocks(e.c) {
				return e.c
			}
		}
		if depth == len(segs) {
			return nil
		}
		n = n.children[segs[depth]]
		if n == nil || !q.live(n) {
			return nil
		}
	}
}

// glob checks the glob pat, whose matches all lie at or below its literal
// prefix: paths on the way to the prefix (they cover all it matches), files
// at the prefix when pat matches it, globs on the way (compared exactly),
// then the subtree of the prefix, walked along the glob's automaton.
func (q *scopeQuery) glob(root *scopeNode, pat pattern) *Claim {
	prefix := pat.prefix()
	n := root
	for depth := 0; ; depth++ {
		if h := q.first(n.holders); h != nil {
			return h
		}
		if depth == len(prefix) && len(n.files()) > 0 && pat.accepts(depth, nil) {
			if h := q.first(n.files()); h != nil {
				return h
			}
		}
		for _, e := range n.globs() {
			if patternsOverlap(pat, e.pat) && q.blocks(e.c) {
				return e.c
			}
		}
		if depth == len(prefix) {
			break
		}
		n = n.children[prefix[depth]]
		if n == nil || !q.live(n) {
			return nil
		}
	}
	return q.walk(n, pat, pat.startStates(len(prefix)))
}

// walk searches the subtree below n (n itself done) for an entry the glob
// pat overlaps, pat being at states on n's path.
func (q *scopeQuery) walk(n *scopeNode, pat pattern, states patternStates) *Claim {
	if n.below == n.entries() {
		return nil
	}
	// Filter the children first and sort only those pat reaches: a glob
	// over a wide directory usually reaches few of its entries.
	type reached struct {
		seg   string
		child *scopeNode
		next  patternStates
	}
	var alive []reached
	for seg, child := range n.children {
		// Else nothing pat matches lies at or below child. The segment is
		// tried before the child is read: most are refused on the key alone.
		if next := pat.step(states, seg); len(next) > 0 && q.live(child) {
			alive = append(alive, reached{seg, child, next})
		}
	}
	slices.SortFunc(alive, func(a, b reached) int { return strings.Compare(a.seg, b.seg) })
	for _, r := range alive {
		child, next := r.child, r.next
		if h := q.first(child.holders); h != nil {
			return h // pat reaches child: it matches child or a path below it
		}
		if next.accepting(pat) {
			if h := q.first(child.files()); h != nil {
				return h // pat matches child itself
			}
		}
		for _, e := range child.globs() {
			if patternsOverlap(pat, e.pat) && q.blocks(e.c) {
				return e.c
			}
		}
		if h := q.walk(child, pat, next); h != nil {
			return h
		}
	}
	return nil
}

// below returns the first blocking entry strictly below n.
func (q *scopeQuery) below(n *scopeNode) *Claim {
	if n.below == n.entries() {
		return nil
	}
	for _, seg := range sortedKeys(n.children) {
		if h := q.firstInSubtree(n.children[seg]); h != nil {
			return h
		}
	}
	return nil
}

// firstInSubtree returns the first blocking entry at or below n: all of
// them are covered by a scope that covers n.
func (q *scopeQuery) firstInSubtree(n *scopeNode) *Claim {
	if !q.live(n) {
		return nil
	}
	if h := q.first(n.holders); h != nil {
		return h
	}
	if h := q.first(n.files()); h != nil {
		return h
	}
	for _, e := range n.globs() {
		if q.blocks(e.c) {
			return e.c
		}
	}
	return q.below(n)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
