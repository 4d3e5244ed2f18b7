package main

// ns: namespace ownership across federated hubs. Each verb is one entry of
// nsVerbs, which both dispatches and lists it in 'synapse ns --help'.

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/synapse-hub/synapse/client"
)

const nsIntro = `Usage: synapse ns <verb> [flags]

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
	if st.Governed {
		fmt.Fprintf(w, "Hub %s is governed by an ownership map: %d namespaces, %d of %d peers up.\n", st.HubID, len(st.Namespaces), st.PeersUp(), len(st.Peers))
		fmt.Fprintf(w, "\n%-16s %-16s %-12s %s\n", "NAMESPACE", "OWNER", "OUTCOME", "REACHABLE")
		for _, ns := range st.Namespaces {
			fmt.Fprintf(w, "%-16s %-16s %-12s %s\n", nsName(ns.Namespace), orDash(ns.OwnerHubID), ns.Outcome, yesNo(ns.Reachable))
		}
	} else {
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

// nsName shows the namespace of bare names, which is "".
func nsName(ns string) string {
	if ns == "" {
		return "(bare names)"
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
