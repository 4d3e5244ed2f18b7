package hub

// The hub's side of package dashboard: dashHost is the hub as
// dashboard.Backend, and State gathers GET /api/state in one Query on the
// sequencer's leader: pointers to the immutable claims and board tasks,
// and, under Hub.mu, the registry's small maps and the feed's event
// counter and refusals (Feed.Mark), so every part is of one instant.
// Sorting and encoding happen afterwards, on the request's goroutine, as
// state_request does; each claim's and task's encoding is kept by its
// pointer (Hub.apiClaims, Hub.apiTasks: encodings.go), so a read encodes
// only the claims and tasks that changed since the last. The routes,
// sign-in and the event stream live in package dashboard; the hub
// publishes to its Feed (Hub.feed).

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/dashboard"
	"github.com/synapse-hub/synapse/transport"
)

// dashHost is the hub as dashboard.Backend.
type dashHost struct{ h *Hub }

// Mailbox is the mailbox backlog (a hub with a journal keeps one) and the
// dead letters, worst first.
func (d dashHost) Mailbox() (map[string]int64, []dashboard.APIDeadLetter) {
	h := d.h
	m := map[string]int64(nil)
	if h.cfg.Journal != nil {
		m = mailboxView{h}.counts()
	}
	h.mu.Lock()
	dead := d.deadLettersLocked()
	h.mu.Unlock()
	sortDeadLetters(dead)
	return m, dead
}

// LockedOut asks the failed-first-frame buckets the sockets share
// (Config.AuthFailuresPerMinute); it spends nothing.
func (d dashHost) LockedOut(r *http.Request) bool {
	h := d.h
	if !h.authFails.Empty(transport.RemoteHost(r), h.now()) {
		return false
	}
	h.m.authLockouts.Inc()
	return true
}

// AuthFailed spends from the same buckets when a wrong token was shown.
func (d dashHost) AuthFailed(r *http.Request, wrong bool) {
	h := d.h
	h.m.dashboardAuthFailed.Inc()
	if wrong {
		h.authFails.Allow(transport.RemoteHost(r), h.now())
	}
}

// Board returns the task board and its ready set (GET /api/board).
func (d dashHost) Board(ctx context.Context) (dashboard.APIBoard, error) {
	var tasks []*coord.BoardTask
	if d.h.cfg.Fleet != nil { // the fleet's board, from etcd (fleetview.go)
		snap, err := d.h.fleetRead(ctx)
		if err != nil {
			return dashboard.APIBoard{}, err
		}
		tasks = snap.Tasks
	} else {
		v, err := d.h.seq.Query(ctx, func(st *coord.State) any { return st.BoardTaskPointers() })
		if err != nil {
			return dashboard.APIBoard{}, err
		}
		tasks = v.([]*coord.BoardTask)
	}
	return d.board(tasks), nil
}

// board sorts tasks, fresh pointers to immutable tasks, by id and lists
// them, encoded from the hub's cache, with their ready set.
func (d dashHost) board(tasks []*coord.BoardTask) dashboard.APIBoard {
	slices.SortFunc(tasks, func(a, b *coord.BoardTask) int { return strings.Compare(a.TaskID, b.TaskID) })
	b := dashboard.APIBoard{TasksJSON: d.h.apiTasks.list(tasks), Ready: coord.ReadyOf(tasks)}
	if b.Ready == nil {
		b.Ready = []string{}
	}
	return b
}

// deadLettersLocked copies the dead-letter ledger (at most maxDeadLetters
// entries), unsorted.
func (d dashHost) deadLettersLocked() []dashboard.APIDeadLetter {
	dls := d.h.dead.ListLocked()
	out := make([]dashboard.APIDeadLetter, 0, len(dls))
	for _, d := range dls {
		out = append(out, dashboard.APIDeadLetter{Target: d.Target, Count: d.Count, LastTS: d.LastTS, LastSender: d.LastSender})
	}
	return out
}

func sortDeadLetters(d []dashboard.APIDeadLetter) {
	slices.SortFunc(d, func(a, b dashboard.APIDeadLetter) int {
		if a.Count != b.Count {
			return cmp.Compare(b.Count, a.Count)
		}
		return strings.Compare(a.Target, b.Target)
	})
}

// State gathers the dashboard's state (GET /api/state). It holds the
// sequencer for a pointer copy per claim and task, and Hub.mu (then the
// feed's lock) for a copy of the registry's bounded maps and the feed's
// mark; the rest runs on the caller's goroutine.
func (d dashHost) State(ctx context.Context) (dashboard.APIState, error) {
	h := d.h
	type refs struct {
		claims   []*coord.Claim
		tasks    []*coord.BoardTask
		epoch    int64
		at       float64
		agents   []dashboard.APIAgent
		dead     []dashboard.APIDeadLetter
		refusals []dashboard.APIRefusal
		eventID  uint64
		clients  int
		online   int
	}
	fleet := h.cfg.Fleet != nil // the fleet's claims and board, from etcd (fleetview.go)
	v, err := h.seq.Query(ctx, func(st *coord.State) any {
		r := refs{epoch: st.Epoch()}
		if !fleet {
			r.claims, r.tasks = st.ClaimPointers(), st.BoardTaskPointers()
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		r.at = h.now()
		r.agents = make([]dashboard.APIAgent, 0, len(h.reg.lastSeen))
		elsewhere := map[string]bool{}
		for _, a := range h.remoteAgentsLocked() {
			elsewhere[a.Name] = true
			r.agents = append(r.agents, dashboard.APIAgent{Name: a.Name, LastSeen: a.LastSeen, Online: true, Roles: a.Roles, Hub: a.Hub})
		}
		for n, seen := range h.reg.lastSeen {
			if elsewhere[n] {
				continue // offline here, bound on another hub now
			}
			a := dashboard.APIAgent{Name: n, LastSeen: seen}
			if fleet {
				a.Hub = h.cfg.HubID
			}
			if s := h.reg.byName[n]; s != nil {
				a.Online, a.Roles, a.LastReaction = true, s.roles, s.lastReaction
				a.HasLiveWaiter = h.reg.hasLiveSidecar(n)
				a.ProvenLive = r.at-s.lastReaction <= livenessWindow || a.HasLiveWaiter
			}
			r.agents = append(r.agents, a)
		}
		r.dead = d.deadLettersLocked()
		r.clients, r.online = int(h.liveSockets.Load()), len(h.reg.byName)
		r.eventID, r.refusals = h.feed.Mark()
		return r
	})
	if err != nil {
		return dashboard.APIState{}, err
	}
	r := v.(refs)
	if fleet {
		snap, err := h.fleetRead(ctx)
		if err != nil {
			return dashboard.APIState{}, err
		}
		r.claims, r.tasks = snap.Claims, snap.Tasks
	}
	out := dashboard.APIState{HubID: h.cfg.HubID, Version: h.cfg.Version, GeneratedAt: r.at, Secured: h.secured(),
		EventID: r.eventID, Refusals: r.refusals}

	// A lapsed lease the next tick will expire is no longer held.
	live := slices.DeleteFunc(r.claims, func(c *coord.Claim) bool { return !c.Live(r.at) })
	slices.SortFunc(live, func(a, b *coord.Claim) int { // by task, then owner: one order on every hub of a fleet
		return cmp.Or(strings.Compare(a.TaskID, b.TaskID), strings.Compare(a.Owner, b.Owner))
	})
	owned := map[string]int{}
	for _, c := range live {
		owned[c.Owner]++
	}
	out.ClaimsJSON = h.apiClaims.list(live)
	out.Board = d.board(r.tasks)

	for i := range r.agents {
		r.agents[i].Claims = owned[r.agents[i].Name]
	}
	sort.Slice(r.agents, func(i, j int) bool { return r.agents[i].Name < r.agents[j].Name })
	out.Agents = r.agents
	sortDeadLetters(r.dead) // worst first, as state_snapshot
	out.DeadLetters = r.dead

	out.Health = d.health(r.at, r.online, r.clients)
	out.Health.ActiveClaims, out.Health.BoardTasks, out.Health.Epoch = len(live), len(r.tasks), r.epoch

	if h.cfg.Journal != nil {
		out.Mailbox = mailboxView{h}.counts()
	}
	if h.fed.Governed() || len(h.fed.Peers()) > 0 {
		used := map[string]bool{}
		for _, a := range out.Agents {
			if a.Online {
				used[coord.NamespaceOf(identity(a.Name))] = true
			}
		}
		extra := make([]string, 0, len(used))
		for ns := range used {
			extra = append(extra, ns)
		}
		st := h.fed.Status(extra)
		out.Federation = &st
	}
	return out, nil
}

// health is /health's verdict with the sequencer's counters.
func (d dashHost) health(now float64, online, clients int) dashboard.APIHealth {
	h := d.h
	hl := dashboard.APIHealth{UptimeSeconds: now - h.started, OnlineAgents: online, ConnectedClients: clients, EventStreams: h.feed.Streams()}
	hl.Status, hl.Reason, hl.Journal = h.health()
	st := h.seq.Stats()
	hl.Commands, hl.Appends, hl.Snapshots, hl.SnapshotErrors = st.Commands, st.Appends, st.Snapshots, st.SnapshotErrors
	return hl
}
