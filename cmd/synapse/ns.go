package main

// ns: namespace ownership across federated hubs. Each verb is one entry of
// nsVerbs, which both dispatches and lists it in 'synapse ns --help'.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/client"
)

const nsIntro = `Usage: synapse ns <verb> [flags]

On a fleet of hubs on etcd (synapse hub --etcd) a namespace belongs to the
hub that first served it, moves to another hub when its owner dies, and can
be moved on purpose with 'ns move' or 'ns drain'; meanwhile its requests
wait instead of failing. On hubs with a static map:

Each namespace (the part of an agent's name before its first '/', e.g. proj
in proj/alice) is owned by exactly one hub, named in every hub's
--namespace-owner map. Only the owner grants claims in it: the other hubs
forward claim, release, handoff, update, checkpoint and wait to it, and
refuse them when it cannot be reached. A namespace the map does not list, or
that another hub asserts too, grants nothing anywhere, and a hub with no map
grants every claim itself, with no mutual exclusion across hubs.

Verbs:
`

// nsVerb is one verb of synapse ns.
type nsVerb struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) int
}

func nsVerbs() []nsVerb {
	return []nsVerb{
		{"list", "the ownership map as the hub at --uri resolves it, and its peers", runNSList},
		{"move", "hand a namespace to another hub of a fleet on etcd (ns move NS|--default --to HUB)", runNSMove},
		{"drain", "move every namespace of a hub elsewhere, before maintenance (ns drain HUB)", runNSDrain},
	}
}

func nsUsage() string {
	var b strings.Builder
	b.WriteString(nsIntro)
	for _, v := range nsVerbs() {
		fmt.Fprintf(&b, "  %-6s %s\n", v.name, v.summary)
	}
	b.WriteString("\nRun 'synapse ns <verb> --help' for its flags.\n")
	return b.String()
}

func runNS(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, nsUsage())
		return exitUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, nsUsage())
		return exitOK
	}
	var names []string
	for _, v := range nsVerbs() {
		if v.name == args[0] {
			return v.run(args[1:], stdout, stderr)
		}
		names = append(names, v.name)
	}
	fmt.Fprintf(stderr, "synapse ns: unknown verb %q: say %s.\n", args[0], strings.Join(names, ", "))
	return exitUsage
}

const nsListUsage = `Usage: synapse ns list [--json]

Shows namespace ownership as the hub at --uri resolves it now: every
namespace its map names or its online agents use, with the owner, the
outcome (local: decided by this hub; remote: forwarded to the owner;
ungoverned or partitioned: refused) and whether the owner is reachable.
Then the hub's peers and their links, the contested namespaces, the
quarantined peers and any warning. --json prints the hub's whole snapshot.
`

func runNSList(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("ns list", nsListUsage, "", stderr)
	f.register(fs)
	c, code := f.startQuery(fs, "ns list", args, stderr)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	st, err := c.Namespaces(ctx)
	if err != nil {
		return f.failure(stderr, "ns list", err)
	}
	if f.asJSON {
		fmt.Fprintf(stdout, "%s\n", st.Raw)
		return exitOK
	}
	printNamespaces(stdout, st)
	return exitOK
}

// printNamespaces renders a hub's namespace snapshot for people.
func printNamespaces(w io.Writer, st *client.NamespaceStatus) {
	switch {
	case len(st.Members) > 0:
		fmt.Fprintf(w, "Hub %s is a member of a fleet on etcd: %d live hubs (%s); its lease runs until %s.\n",
			st.HubID, len(st.Members), strings.Join(st.Members, ", "), time.Unix(0, int64(st.LeaseDeadline*1e9)).UTC().Format("15:04:05.000Z"))
		fmt.Fprintf(w, "\n%-16s %-16s %-12s %-10s %-10s %s\n", "NAMESPACE", "OWNER", "OUTCOME", "EPOCH", "PHASE", "REACHABLE")
		bare := false
		for _, ns := range st.Namespaces {
			fmt.Fprintf(w, "%-16s %-16s %-12s %-10s %-10s %s\n", nsName(ns.Namespace), orDash(ns.OwnerHubID), ns.Outcome, orDash(epochText(ns.Epoch)), orDash(ns.Phase), yesNo(ns.Reachable))
			bare = bare || ns.Namespace == ""
		}
		if bare {
			fmt.Fprintf(w, "\n%s is the namespace of bare names (no PROJECT/): 'synapse ns move --default --to HUB_ID' moves it.\n", defaultNS)
		}
	case st.Governed:
		fmt.Fprintf(w, "Hub %s is governed by an ownership map: %d namespaces, %d of %d peers up.\n", st.HubID, len(st.Namespaces), st.PeersUp(), len(st.Peers))
		fmt.Fprintf(w, "\n%-16s %-16s %-12s %s\n", "NAMESPACE", "OWNER", "OUTCOME", "REACHABLE")
		for _, ns := range st.Namespaces {
			fmt.Fprintf(w, "%-16s %-16s %-12s %s\n", nsName(ns.Namespace), orDash(ns.OwnerHubID), ns.Outcome, yesNo(ns.Reachable))
		}
	default:
		fmt.Fprintf(w, "Hub %s is not governed: it has no --namespace-owner map and grants every claim itself.\n", st.HubID)
	}
	if len(st.Peers) == 0 {
		fmt.Fprintln(w, "\nNo peers.")
	} else {
		fmt.Fprintf(w, "\n%-16s %-28s %-12s %-4s %s\n", "PEER", "URI", "MODE", "UP", "LAST ERROR")
		for _, p := range st.Peers {
			fmt.Fprintf(w, "%-16s %-28s %-12s %-4s %s\n", p.Peer, p.URI, p.Mode, yesNo(p.Reachable), orDash(p.LastError))
		}
	}
	if st.Governed {
		if len(st.Contested) == 0 {
			fmt.Fprintln(w, "\nNo namespace is contested.")
		} else {
			fmt.Fprintln(w, "\nContested (every grant in them is refused until the hubs' maps agree):")
			for _, r := range st.Contested {
				fmt.Fprintf(w, "  %s: owner %s, also asserted by %s\n", nsName(r.Namespace), orDash(r.OwnerHubID), strings.Join(r.Contesting, ", "))
			}
		}
	}
	if len(st.Quarantined) > 0 {
		fmt.Fprintln(w, "\nQuarantined peers (their logs changed under the watch; no longer pulled):")
		peers := make([]string, 0, len(st.Quarantined))
		for p := range st.Quarantined {
			peers = append(peers, p)
		}
		sort.Strings(peers)
		for _, p := range peers {
			fmt.Fprintf(w, "  %s: %s\n", p, st.Quarantined[p])
		}
	}
	if st.Warning != "" {
		fmt.Fprintf(w, "\nWarning: %s\n", st.Warning)
	}
}

// fedSummary is the federation line of synapse status.
type fedSummary struct {
	HubID     string `json:"hub_id"`
	Governed  bool   `json:"governed"`
	PeersUp   int    `json:"peers_up"`
	Peers     int    `json:"peers"`
	Contested int    `json:"contested"`
	Warning   string `json:"warning,omitempty"`
}

func summarize(st *client.NamespaceStatus) fedSummary {
	return fedSummary{HubID: st.HubID, Governed: st.Governed, PeersUp: st.PeersUp(), Peers: len(st.Peers), Contested: len(st.Contested), Warning: st.Warning}
}

// federated says the hub takes part in a federation worth showing: it
// has an ownership map or peers.
func (s fedSummary) federated() bool { return s.Governed || s.Peers > 0 }

func (s fedSummary) String() string {
	return fmt.Sprintf("Federation: hub %s, governed %s, %d/%d peers up, %d contested namespaces.", s.HubID, yesNo(s.Governed), s.PeersUp, s.Peers, s.Contested)
}

// defaultNS is how the CLI shows the default namespace, that of bare
// names, whose name is "": 'ns move --default' moves it.
const defaultNS = "(default)"

// nsName shows a namespace, the default one as defaultNS.
func nsName(ns string) string {
	if ns == "" {
		return defaultNS
	}
	return ns
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

const nsMoveUsage = `Usage: synapse ns move NAMESPACE --to HUB_ID [--json]
       synapse ns move --default --to HUB_ID [--json]

Hands NAMESPACE to hub HUB_ID (fleet on etcd only) and returns once HUB_ID
serves it: the owner stops admitting, finishes what is in flight and lets go;
the new owner reads the namespace from etcd and starts serving. Requests in
NAMESPACE wait meanwhile (clients are told to retry within milliseconds);
nothing acknowledged is lost. --default moves the default namespace, that of
bare names (no PROJECT/), which 'ns list' shows as (default).
`

const nsDrainUsage = `Usage: synapse ns drain HUB_ID [--json]

Moves every namespace HUB_ID owns to the other hubs of the fleet, one after
another, so HUB_ID can be stopped for maintenance without a failover.
`

func runNSMove(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("ns move", nsMoveUsage, "", stderr)
	f.register(fs)
	to := fs.String("to", "", "the hub id that is to own the namespace")
	def := fs.Bool("default", false, "move the default namespace, that of bare names (shown as "+defaultNS+" by ns list), instead of a named one")
	return runMove(&f, fs, "ns move", args, stdout, stderr, func(rest []string) error {
		switch {
		case *def && len(rest) != 0:
			return errUsage("say one namespace: a NAMESPACE or --default, not both")
		case !*def && len(rest) != 1 || *to == "":
			return errUsage("say which namespace and where: synapse ns move NAMESPACE --to HUB_ID (or --default for that of bare names)")
		case !*def && strings.TrimSpace(rest[0]) == "":
			return errUsage("an empty NAMESPACE: say --default to move that of bare names")
		}
		return nil
	}, func(ctx context.Context, c *client.Client, rest []string) (*client.Moved, error) {
		if *def {
			return c.Move(ctx, "", *to)
		}
		return c.Move(ctx, rest[0], *to)
	})
}

func runNSDrain(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("ns drain", nsDrainUsage, "", stderr)
	f.register(fs)
	return runMove(&f, fs, "ns drain", args, stdout, stderr, func(rest []string) error {
		if len(rest) != 1 {
			return errUsage("say which hub to drain: synapse ns drain HUB_ID")
		}
		return nil
	}, func(ctx context.Context, c *client.Client, rest []string) (*client.Moved, error) {
		return c.Drain(ctx, rest[0])
	})
}

// errUsage is a command line that cannot be run.
type errUsage string

func (e errUsage) Error() string { return string(e) }

func runMove(f *clientFlags, fs *flag.FlagSet, cmd string, args []string, stdout, stderr io.Writer,
	check func([]string) error, do func(context.Context, *client.Client, []string) (*client.Moved, error)) int {
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if err := check(pos); err != nil {
		fmt.Fprintf(stderr, "synapse %s: %v\n", cmd, err)
		return exitUsage
	}
	c, code := f.start(stderr, cmd, true, false)
	if c == nil {
		return code
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), max(f.timeout, 70*time.Second))
	defer cancel()
	mv, err := do(ctx, c, pos)
	if err != nil {
		return f.failure(stderr, cmd, err)
	}
	if f.asJSON {
		b, _ := json.Marshal(map[string]any{"moves": mv.Moves, "elapsed_ms": mv.Elapsed.Milliseconds()})
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	if len(mv.Moves) == 0 {
		fmt.Fprintln(stdout, "Nothing to move.")
		return exitOK
	}
	nss := make([]string, 0, len(mv.Moves))
	for ns := range mv.Moves {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		fmt.Fprintf(stdout, "Moved %s to %s.\n", nsName(ns), mv.Moves[ns])
	}
	fmt.Fprintf(stdout, "Done in %s.\n", mv.Elapsed)
	return exitOK
}

func epochText(e int64) string {
	if e == 0 {
		return ""
	}
	return fmt.Sprint(e)
}
