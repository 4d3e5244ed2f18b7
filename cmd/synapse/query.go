package main

// Read-only commands: who, status, state, board. They connect with a
// throw-away name (<name>-q<hex>) so they never collide with a running
// agent that owns --name.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/client"
)

const whoUsage = `Usage: synapse who [--project P]

Lists the agents online, with their roles.
`

func runWho(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("who", whoUsage, "", stderr)
	f.register(fs)
	project := fs.String("project", "", "only agents of this project")
	c, code := f.startQuery(fs, "who", args, stderr)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	w, err := c.Who(ctx)
	if err != nil {
		return f.failure(stderr, "who", err)
	}
	agents := make([]string, 0, len(w.OnlineAgents))
	for _, a := range w.OnlineAgents {
		if a == c.Name() || (*project != "" && !strings.HasPrefix(a, *project+"/")) {
			continue
		}
		agents = append(agents, a)
	}
	if f.asJSON {
		roles := map[string][]string{}
		for _, a := range agents {
			if r := w.AgentRoles[a]; len(r) > 0 {
				roles[a] = r
			}
		}
		printJSON(stdout, map[string]any{"hub_id": c.Welcome().HubID, "online_agents": agents, "agent_roles": roles, "hub_version": w.HubVersion, "observed_agents": w.ObservedAgents})
		return exitOK
	}
	defer printObservedAgents(stdout, w.ObservedAgents)
	if len(agents) == 0 {
		fmt.Fprintf(stdout, "No agent is online at %s.\n", c.Welcome().HubID)
		return exitOK
	}
	fmt.Fprintf(stdout, "%d online at %s:\n", len(agents), c.Welcome().HubID)
	for _, a := range agents {
		line := "  " + a
		if r := w.AgentRoles[a]; len(r) > 0 {
			line += "  (roles: " + strings.Join(r, ", ") + ")"
		}
		fmt.Fprintln(stdout, line)
	}
	return exitOK
}

const stateUsage = `Usage: synapse state [--owner NAME]

Lists the live claims: task, owner, epoch, status, lease and paths.
`

func runState(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("state", stateUsage, "", stderr)
	f.register(fs)
	owner := fs.String("owner", "", "only claims held by this agent")
	c, code := f.startQuery(fs, "state", args, stderr)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	st, err := c.State(ctx)
	if err != nil {
		return f.failure(stderr, "state", err)
	}
	claims := filterClaims(st.ActiveClaims, *owner)
	if f.asJSON {
		printJSON(stdout, map[string]any{"active_claims": claims, "generated_at": st.GeneratedAt, "dead_letters": st.DeadLetters, "observed_claims": st.ObservedClaims})
		return exitOK
	}
	printClaims(stdout, claims, st.GeneratedAt)
	if len(st.ObservedClaims) > 0 {
		fmt.Fprintln(stdout, "\nObserved on peer hubs (advisory: they grant nothing here):")
		for _, o := range st.ObservedClaims {
			fmt.Fprintf(stdout, "  %-16s %-28s %6d %-14s %s\n", o.TaskID, o.ObservedAs, o.Epoch, o.Status, fmtIn(o.LeaseExpiresAt, st.GeneratedAt))
		}
	}
	return exitOK
}

// printObservedAgents lists agents seen in peers' logs, as name@HUB.
func printObservedAgents(w io.Writer, observed []string) {
	if len(observed) > 0 {
		fmt.Fprintf(w, "Observed on peer hubs (advisory): %s\n", strings.Join(observed, ", "))
	}
}

func filterClaims(all []client.Claim, owner string) []client.Claim {
	out := []client.Claim{}
	for _, cl := range all {
		if owner == "" || cl.Owner == owner {
			out = append(out, cl)
		}
	}
	return out
}

func printClaims(w io.Writer, claims []client.Claim, now float64) {
	if len(claims) == 0 {
		fmt.Fprintln(w, "No live claims.")
		return
	}
	fmt.Fprintf(w, "%-16s %-20s %6s %-14s %-14s %s\n", "TASK", "OWNER", "EPOCH", "STATUS", "EXPIRES", "PATHS")
	for _, cl := range claims {
		paths := "(whole worktree)"
		entries := append(append([]string(nil), cl.Paths...), cl.Globs...)
		for _, f := range cl.Files {
			entries = append(entries, f+" (file)") // a file covers itself alone, a path its subtree too
		}
		if len(entries) > 0 {
			paths = strings.Join(entries, ",")
		}
		if cl.Shared() {
			paths += " (shared)"
		}
		if cl.Worktree != "" {
			paths = cl.Worktree + ": " + paths
		}
		fmt.Fprintf(w, "%-16s %-20s %6d %-14s %-14s %s\n", cl.TaskID, cl.Owner, cl.Epoch, cl.Status, fmtIn(cl.LeaseExpiresAt, now), paths)
	}
}

const statusUsage = `Usage: synapse status

One look at the hub and at you: is the hub up (its /health), who is online,
how many claims are live, and the claims --name holds. A hub with peers or
an ownership map adds a federation line: governed or not, peers up, contested
namespaces ('synapse ns list' shows them). Exits 3 when the hub cannot be
reached.
`

// health is the part of the hub's /health this command shows.
type health struct {
	Status          string  `json:"status"`
	ProtocolVersion int     `json:"protocol_version"`
	HubID           string  `json:"hub_id"`
	Uptime          float64 `json:"uptime"`
	Journal         any     `json:"journal"`
}

func runStatus(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("status", statusUsage, "", stderr)
	f.register(fs)
	c, code := f.startQuery(fs, "status", args, stderr)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	w, err := c.Who(ctx)
	if err != nil {
		return f.failure(stderr, "status", err)
	}
	st, err := c.State(ctx)
	if err != nil {
		return f.failure(stderr, "status", err)
	}
	// A hub older than ns_request is simply not asked: it has no federation.
	var fed *fedSummary
	if c.HasFeature(client.FeatureNamespaces) {
		ns, err := c.Namespaces(ctx)
		if err != nil {
			return f.failure(stderr, "status", err)
		}
		s := summarize(ns)
		fed = &s
	}
	h := fetchHealth(ctx, &f)
	online := slices.DeleteFunc(slices.Clone(w.OnlineAgents), func(a string) bool { return a == c.Name() })
	mine := filterClaims(st.ActiveClaims, f.name)
	wel := c.Welcome()
	if f.asJSON {
		out := map[string]any{
			"uri": f.uri, "hub_id": wel.HubID, "protocol_version": wel.ProtocolVersion, "features": wel.Features,
			"hub_version": w.HubVersion, "health": h, "online_agents": online,
			"active_claims": len(st.ActiveClaims), "name": f.name, "my_claims": mine,
		}
		if fed != nil {
			out["federation"] = fed
		}
		printJSON(stdout, out)
		return exitOK
	}
	state := "up"
	if h != nil {
		state = h.Status
		if h.Uptime > 0 {
			state += ", up " + time.Duration(h.Uptime*float64(time.Second)).Round(time.Second).String()
		}
	}
	fmt.Fprintf(stdout, "Hub %s at %s: %s (protocol v%d, %s).\n", wel.HubID, f.uri, state, wel.ProtocolVersion, w.HubVersion)
	if fed != nil && fed.federated() {
		fmt.Fprintln(stdout, fed)
		if fed.Warning != "" {
			fmt.Fprintln(stdout, "Warning: "+fed.Warning)
		}
	}
	fmt.Fprintf(stdout, "%d agents online, %d live claims.\n", len(online), len(st.ActiveClaims))
	fmt.Fprintf(stdout, "You (%s) hold %d:\n", f.name, len(mine))
	if len(mine) > 0 {
		printClaims(stdout, mine, st.GeneratedAt)
	}
	return exitOK
}

// fetchHealth reads the hub's /health on the same port; nil when it has
// none (the reference serves it only with --metrics).
func fetchHealth(ctx context.Context, f *clientFlags) *health {
	uri := f.uri
	u := strings.Replace(strings.Replace(uri, "wss://", "https://", 1), "ws://", "http://", 1)
	u = strings.TrimRight(u, "/") + "/health"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil
	}
	hc, err := f.options("").HTTPClient()
	if err != nil {
		return nil
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var h health
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&h) != nil {
		return nil
	}
	return &h
}

const boardUsage = `Usage: synapse board [--notes N]

Shows the task board: every task with its status and dependencies, the
ready list (open tasks whose dependencies are done), and the latest
progress notes.
`

func runBoard(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("board", boardUsage, "", stderr)
	f.register(fs)
	notes := fs.Int("notes", 10, "how many recent progress notes to show")
	c, code := f.startQuery(fs, "board", args, stderr)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	b, err := c.Board(ctx)
	if err != nil {
		return f.failure(stderr, "board", err)
	}
	if f.asJSON {
		printJSON(stdout, b)
		return exitOK
	}
	if len(b.Tasks) == 0 {
		fmt.Fprintln(stdout, "The board is empty. Declare a task with 'synapse task declare ID --title TEXT'.")
		return exitOK
	}
	fmt.Fprintf(stdout, "%-16s %-12s %-20s %s\n", "TASK", "STATUS", "OWNER", "TITLE")
	for _, t := range b.Tasks {
		title := t.Title
		if len(t.DependsOn) > 0 {
			title += "  (after " + strings.Join(t.DependsOn, ", ") + ")"
		}
		owner := t.SuggestedOwner
		if t.Owner != "" { // held by a task-bound claim: who really has it
			owner = t.Owner
		}
		fmt.Fprintf(stdout, "%-16s %-12s %-20s %s\n", t.TaskID, t.Status, owner, title)
	}
	fmt.Fprintf(stdout, "Ready: %s\n", strings.Join(append([]string{}, b.Ready...), ", "))
	if n := min(*notes, len(b.Progress)); n > 0 {
		fmt.Fprintln(stdout, "Progress:")
		for _, p := range b.Progress[len(b.Progress)-n:] {
			fmt.Fprintf(stdout, "  %s %s [%s] %s: %s\n", fmtTime(p.PostedAt), p.TaskID, p.Kind, p.Author, p.Text)
		}
	}
	return exitOK
}
