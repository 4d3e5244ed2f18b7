package main

// doctor: checks the hub, the journal, the port and this project's agent
// integrations, and says how to fix what is wrong.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/client"
)

const doctorUsage = `Usage: synapse doctor [--json] [--db PATH]

Checks, each on one line with how to fix it:
  hub          reachable at --uri, its /health status, protocol v2
  port         what listens on the hub's port when the hub does not answer
  federation   a hub with peers has an ownership map (without one there is
               no mutual exclusion across hubs, INV-MH-4), every namespace
               its online agents use has an owner, and none is contested
  journal      the default journal (or --db): present, mode 0600, sound
               (the quick check of 'synapse journal check')
  claude, codex, cursor
               this project's MCP configuration (synapse init): present
               and pointing at an existing synapse binary
  claude-hook  the guard hook in .claude/settings.json
  git-hook     the pre-commit hook (synapse git-hook install)

✓ is fine, ! is a warning, ✗ is wrong, - is not set up (not an error).
Exit 1 when anything is wrong; warnings do not change the exit code.
`

// check is one line of the report.
type check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok | warn | fail | skip
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

func runDoctor(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("doctor", doctorUsage, "", stderr)
	f.register(fs)
	db := fs.String("db", defaultJournalPath(), "the journal to check")
	dir := fs.String("dir", "", "project folder (default: the current git repository's root)")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "doctor", "unexpected argument %q", pos[0])
	}
	if err := f.resolve(); err != nil {
		fmt.Fprintf(stderr, "synapse doctor: %v\n", err)
		return exitUsage
	}
	root := *dir
	if root == "" {
		wd, _ := os.Getwd()
		root = projectRoot(wd)
	}
	checks := checkHub(&f)
	checks = append(checks, checkJournal(*db))
	checks = append(checks, checkIntegrations(root)...)
	bad := false
	for _, c := range checks {
		bad = bad || c.Status == "fail"
	}
	if f.asJSON {
		printJSON(stdout, map[string]any{"ok": !bad, "uri": f.uri, "project": root, "checks": checks})
	} else {
		for _, c := range checks {
			mark := map[string]string{"ok": "✓", "warn": "!", "fail": "✗", "skip": "-"}[c.Status]
			fmt.Fprintf(stdout, "%s %-12s %s\n", mark, c.Name, c.Detail)
			if c.Fix != "" {
				fmt.Fprintf(stdout, "  %-12s fix: %s\n", "", c.Fix)
			}
		}
	}
	if bad {
		return exitRefused
	}
	return exitOK
}

// checkHub checks the hub and, when it does not answer, its port.
func checkHub(f *clientFlags) []check {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	c, err := f.dial(ctx, queryName(f.name), false)
	if err != nil {
		out := []check{{Name: "hub", Status: "fail", Detail: fmt.Sprintf("cannot reach %s: %v", f.uri, err),
			Fix: "start it with 'synapse hub', or point --uri / SYNAPSE_URI at it"}}
		return append(out, checkPort(f.uri))
	}
	defer c.Close()
	wel := c.Welcome()
	out := []check{{Name: "hub", Status: "ok", Detail: fmt.Sprintf("%s answers (hub %s, protocol v%d)", f.uri, wel.HubID, wel.ProtocolVersion)}}
	if wel.ProtocolVersion != WireProtocolVersion {
		out[0].Status = "fail"
		out[0].Fix = fmt.Sprintf("this binary speaks protocol v%d: run a matching hub and binary", WireProtocolVersion)
	}
	hctx, hcancel := context.WithTimeout(context.Background(), f.timeout)
	defer hcancel()
	switch h := fetchHealth(hctx, f); {
	case h == nil:
		out = append(out, check{Name: "health", Status: "fail", Detail: "no /health on " + f.uri, Fix: "is this a Synapse hub? restart it with 'synapse hub'"})
	case h.Status != "ok":
		out = append(out, check{Name: "health", Status: "fail", Detail: "the hub says " + h.Status, Fix: "read the hub's log; run 'synapse journal check' on its journal"})
	default:
		out = append(out, check{Name: "health", Status: "ok", Detail: "status ok"})
	}
	out = append(out, check{Name: "port", Status: "ok", Detail: "served by the hub"})
	fctx, fcancel := f.callCtx()
	defer fcancel()
	return append(out, checkFederation(fctx, c)...)
}

// checkFederation warns about what makes claims unsafe or impossible
// across hubs: peers without an ownership map (no cross-host exclusion,
// INV-MH-4), online agents in a namespace the map gives no owner (all
// their claims are refused), and contested namespaces.
func checkFederation(ctx context.Context, c *client.Client) []check {
	const name = "federation"
	if !c.HasFeature(client.FeatureNamespaces) {
		return []check{{Name: name, Status: "skip", Detail: "the hub does not report namespace ownership (it predates ns_request)"}}
	}
	st, err := c.Namespaces(ctx)
	if err != nil {
		return []check{{Name: name, Status: "fail", Detail: "ns_request: " + err.Error(), Fix: "read the hub's log"}}
	}
	if !st.Governed && len(st.Peers) == 0 {
		return []check{{Name: name, Status: "skip", Detail: "a single hub: no peers, no ownership map"}}
	}
	var out []check
	if st.Warning != "" {
		out = append(out, check{Name: name, Status: "warn", Detail: st.Warning,
			Fix: "give every hub the same --namespace-owner map (NS=HUB_ID, or '*=HUB_ID'), or drop the peers if the hubs are meant to be independent"})
	}
	if st.Governed {
		w, err := c.Who(ctx)
		if err != nil {
			return append(out, check{Name: name, Status: "fail", Detail: "who_request: " + err.Error()})
		}
		out = append(out, ungovernedInUse(st, w.OnlineAgents, c.Name())...)
		for _, r := range st.Contested {
			out = append(out, check{Name: name, Status: "warn",
				Detail: fmt.Sprintf("namespace %s is contested: owner %s, also asserted by %s; every claim in it is refused", nsName(r.Namespace), orDash(r.OwnerHubID), strings.Join(r.Contesting, ", ")),
				Fix:    "make every hub's --namespace-owner map agree on " + nsName(r.Namespace)})
		}
	}
	if len(out) == 0 {
		out = append(out, check{Name: name, Status: "ok", Detail: fmt.Sprintf("hub %s is governed: %d namespaces, %d of %d peers up, none contested", st.HubID, len(st.Namespaces), st.PeersUp(), len(st.Peers))})
	}
	return out
}

// ungovernedInUse warns once per namespace whose online agents (self
// aside) the governed hub resolves ungoverned: every claim they make is
// refused (NAMESPACE_UNGOVERNED).
func ungovernedInUse(st *client.NamespaceStatus, online []string, self string) []check {
	agents := map[string][]string{}
	for _, a := range online {
		if a == self {
			continue
		}
		ns, _, found := strings.Cut(a, "/")
		if !found {
			ns = "" // a bare name
		}
		if r := st.Route(ns); r != nil && r.Outcome == client.OwnershipUngoverned {
			agents[ns] = append(agents[ns], a)
		}
	}
	nss := make([]string, 0, len(agents))
	for ns := range agents {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	var out []check
	for _, ns := range nss {
		c := check{Name: "federation", Status: "warn",
			Detail: fmt.Sprintf("namespace %s has no owner in the map, yet %s online; every claim there is refused (NAMESPACE_UNGOVERNED)", nsName(ns), agentsText(agents[ns])),
			Fix:    fmt.Sprintf("add --namespace-owner %s=HUB_ID on every hub", ns)}
		if ns == "" {
			c.Detail = fmt.Sprintf("%s online with a bare name (no PROJECT/ prefix); a governed hub refuses all its claims (NAMESPACE_UNGOVERNED)", agentsText(agents[ns]))
			c.Fix = "reconnect those agents as PROJECT/NAME"
		}
		out = append(out, c)
	}
	return out
}

// agentsText is "a/x is" or "a/x, a/y are", shortened past three names.
func agentsText(agents []string) string {
	sort.Strings(agents)
	if len(agents) == 1 {
		return agents[0] + " is"
	}
	shown := agents
	if len(shown) > 3 {
		shown = shown[:3]
	}
	s := strings.Join(shown, ", ")
	if len(agents) > 3 {
		s += fmt.Sprintf(" and %d more", len(agents)-3)
	}
	return s + " are"
}

// checkPort says what holds the hub's port when no hub answers there.
func checkPort(uri string) check {
	u, err := url.Parse(uri)
	if err != nil || u.Host == "" {
		return check{Name: "port", Status: "fail", Detail: fmt.Sprintf("%q is not a ws:// address", uri), Fix: "set --uri to ws://HOST:PORT"}
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	conn, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return check{Name: "port", Status: "skip", Detail: "nothing listens on " + host, Fix: "start the hub there with 'synapse hub --port " + portOf(host) + "'"}
	}
	conn.Close()
	return check{Name: "port", Status: "fail", Detail: "something that is not a Synapse hub listens on " + host,
		Fix: "stop it, or run the hub on another port ('synapse hub --port N') and set SYNAPSE_URI"}
}

func portOf(hostport string) string {
	_, p, _ := net.SplitHostPort(hostport)
	return p
}

// checkJournal checks the journal file's presence, mode and soundness.
func checkJournal(path string) check {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return check{Name: "journal", Status: "skip", Detail: "no journal at " + path + " (the hub has not run with it, or uses --no-db / --db elsewhere)"}
	}
	if err != nil {
		return check{Name: "journal", Status: "fail", Detail: err.Error(), Fix: "check the file's permissions"}
	}
	if mode := fi.Mode().Perm(); mode&0o077 != 0 {
		return check{Name: "journal", Status: "fail", Detail: fmt.Sprintf("%s is mode %04o: others can read the claims and messages", path, mode), Fix: "chmod 600 " + path}
	}
	var out strings.Builder
	if code := runJournalCheck([]string{path}, io.Discard, &out); code != 0 {
		return check{Name: "journal", Status: "fail", Detail: path + ": " + firstLine(out.String()), Fix: "run 'synapse journal check " + path + "' for the details"}
	}
	return check{Name: "journal", Status: "ok", Detail: path + " (mode 0600, sound)"}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// checkIntegrations checks the project's agent host configurations.
func checkIntegrations(root string) []check {
	var out []check
	for _, in := range integrations {
		out = append(out, checkIntegration(root, in))
	}
	out = append(out, checkClaudeHook(root), checkGitHook(root))
	return out
}

func checkIntegration(root string, in integration) check {
	path := filepath.Join(root, in.file)
	fix := "run 'synapse init " + in.host + " --name PROJECT/AGENT'"
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return check{Name: in.host, Status: "skip", Detail: in.file + " not set up", Fix: fix}
	}
	if err != nil {
		return check{Name: in.host, Status: "fail", Detail: err.Error()}
	}
	var command string
	var args []string
	if in.host == "codex" {
		command, args = codexServer(string(b))
	} else {
		var m struct {
			MCPServers map[string]struct {
				Command string   `json:"command"`
				Args    []string `json:"args"`
			} `json:"mcpServers"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return check{Name: in.host, Status: "fail", Detail: in.file + " is not valid JSON: " + err.Error(), Fix: "fix the file, then " + fix}
		}
		if s, ok := m.MCPServers["synapse"]; ok {
			command, args = s.Command, s.Args
		}
	}
	if command == "" {
		return check{Name: in.host, Status: "skip", Detail: in.file + " has no synapse server", Fix: fix}
	}
	if err := binaryOK(command); err != nil {
		return check{Name: in.host, Status: "fail", Detail: fmt.Sprintf("%s runs %s: %v", in.file, command, err), Fix: fix + " to point it at " + thisBinary()}
	}
	detail := fmt.Sprintf("%s runs %s", in.file, shellJoin(append([]string{command}, args...)))
	if !sameFile(command, thisBinary()) {
		detail += " (not this binary, " + thisBinary() + ")"
	}
	return check{Name: in.host, Status: "ok", Detail: detail}
}

// codexServer reads command and args of [mcp_servers.synapse] (the form
// init writes: one key per line, args a one-line array of strings).
func codexServer(toml string) (string, []string) {
	in := false
	var command string
	var args []string
	for _, l := range strings.Split(toml, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") {
			in = t == codexSection
			continue
		}
		if !in {
			continue
		}
		k, v, ok := strings.Cut(t, "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "command":
			_ = json.Unmarshal([]byte(strings.TrimSpace(v)), &command)
		case "args":
			_ = json.Unmarshal([]byte(strings.TrimSpace(v)), &args)
		}
	}
	return command, args
}

// binaryOK checks that command is an executable file (or on PATH).
func binaryOK(command string) error {
	if !strings.Contains(command, string(filepath.Separator)) {
		if _, err := lookPath(command); err != nil {
			return fmt.Errorf("not on PATH")
		}
		return nil
	}
	fi, err := os.Stat(command)
	if err != nil {
		return fmt.Errorf("no such file")
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}

func sameFile(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

func checkClaudeHook(root string) check {
	path := filepath.Join(root, claudeSettings)
	fix := "run 'synapse init claude --name PROJECT/AGENT'"
	m, created, err := readJSONObject(path)
	if err != nil {
		return check{Name: "claude-hook", Status: "fail", Detail: err.Error(), Fix: fix}
	}
	if created {
		return check{Name: "claude-hook", Status: "skip", Detail: claudeSettings + " not set up", Fix: fix}
	}
	hooks, _ := m["hooks"].(map[string]any)
	pre, _ := hooks["PreToolUse"].([]any)
	for _, e := range pre {
		if !isGuardEntry(e) {
			continue
		}
		em := e.(map[string]any)
		if mt, _ := em["matcher"].(string); !strings.Contains(mt, "Edit") || !strings.Contains(mt, "Write") {
			return check{Name: "claude-hook", Status: "fail", Detail: fmt.Sprintf("the guard's matcher %q misses Edit or Write", mt), Fix: fix}
		}
		for _, h := range em["hooks"].([]any) {
			c, _ := h.(map[string]any)["command"].(string)
			if bin := firstWord(c); bin != "" && isGuardCommand(c) {
				if err := binaryOK(bin); err != nil {
					return check{Name: "claude-hook", Status: "fail", Detail: fmt.Sprintf("the guard runs %s: %v", bin, err), Fix: fix}
				}
			}
		}
		return check{Name: "claude-hook", Status: "ok", Detail: "PreToolUse " + guardMatcher + " runs synapse guard"}
	}
	return check{Name: "claude-hook", Status: "skip", Detail: "no synapse guard hook in " + claudeSettings, Fix: fix}
}

// firstWord is the command word of a hook command line (quotes removed).
func firstWord(cmd string) string {
	cmd = strings.TrimSpace(cmd)
	if strings.HasPrefix(cmd, "'") {
		if end := strings.Index(cmd[1:], "'"); end >= 0 {
			return cmd[1 : 1+end]
		}
	}
	w, _, _ := strings.Cut(cmd, " ")
	return w
}

func checkGitHook(root string) check {
	path, err := preCommitPath(root)
	if err != nil {
		return check{Name: "git-hook", Status: "skip", Detail: "not a git repository"}
	}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return check{Name: "git-hook", Status: "skip", Detail: "no pre-commit hook", Fix: "run 'synapse git-hook install --name PROJECT/AGENT'"}
	case err != nil:
		return check{Name: "git-hook", Status: "fail", Detail: err.Error()}
	case !strings.Contains(string(b), gitHookMarker):
		return check{Name: "git-hook", Status: "skip", Detail: "the pre-commit hook is not Synapse's"}
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "exec "); ok {
			if bin := firstWord(rest); binaryOK(bin) != nil {
				return check{Name: "git-hook", Status: "fail", Detail: "the pre-commit hook runs " + bin + ", which is missing", Fix: "run 'synapse git-hook install --force'"}
			}
		}
	}
	return check{Name: "git-hook", Status: "ok", Detail: path + " runs synapse git-hook check"}
}

// lookPath is exec.LookPath, a variable so tests can fake PATH.
var lookPath = exec.LookPath
