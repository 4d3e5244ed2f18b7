package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/hub"
)

const aclIntro = `Usage: synapse acl check --as NAME PERMISSION KIND:VALUE [--acl FILE] [--json]

Access rules (synapse hub --acl FILE) are deny by default: a frame is
allowed only when a rule allows its principal (the agent's name) the
permission on the target, and no deny rule matches. The file is JSON, the
reference's form with three additive fields:

  {"rules": [
    {"id": "alpha-paths", "principal": "alpha/*", "permission": "claim",
     "target_kind": "path", "target_pattern": "src/alpha/*"},
    {"id": "no-secrets", "effect": "deny", "permission": "claim",
     "target_kind": "path", "target_pattern": "*secret*", "reason": "ask the lead"}
  ]}

id names the rule in every refusal (default rule-<index>); principal is a
name pattern (default "*"); effect is allow (default) or deny; namespace,
when given, is the principal's namespace the rule is limited to.
Permissions and targets (PROTOCOL.md §5.6): chat → message agent:<target>
or channel:<c>; claim, update, handoff → claim claim:<task> and
claim path:<p> per path; checkpoint → claim claim:<task>; release →
release claim:<task>; board writes → board board:<task>; resources → board
resource:<name>; advertise → board capability:<agent>; history and resume →
recall history:global; ns move/drain → namespace namespace:<ns>; role
assertions → role-claim role:<role>; reads (state, board, who) show only
what observe on claim:<task>, board:<task>, resource:<name> or agent:<name>
allows, besides the viewer's own.

check prints the decision and the rule that made it, from FILE (--acl) or
from the rules the running hub at --uri has in force. Exit 0 when allowed,
1 when denied.
`

func runACL(args []string, stdout, stderr io.Writer) int {
	return runVerbs("acl", aclIntro, map[string]func([]string, io.Writer, io.Writer) int{"check": runACLCheck}, args, stdout, stderr)
}

func runACLCheck(args []string, stdout, stderr io.Writer) int {
	var f adminFlags
	fs := newFlagSet("acl check", aclIntro, "", stderr)
	f.register(fs)
	as := fs.String("as", "", "the principal `NAME` to decide for, e.g. proj/alice (required)")
	file := fs.String("acl", "", "decide from this policy `FILE` instead of asking the running hub")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 2 || *as == "" {
		return usageError(stderr, "acl check", "give --as NAME, a PERMISSION and a KIND:VALUE target")
	}
	kind, value, found := strings.Cut(pos[1], ":")
	if !found || kind == "" {
		return usageError(stderr, "acl check", "target %q: give KIND:VALUE, e.g. path:src/a.go", pos[1])
	}
	q := access.Request{Principal: *as, Permission: pos[0], Kind: kind, Value: value}
	var d access.Decision
	inForce := true
	if *file != "" {
		p, err := hub.LoadACL(*file)
		if err != nil {
			fmt.Fprintf(stderr, "synapse acl check: %v\n", err)
			return exitUsage
		}
		d = p.Decide(q)
	} else {
		fr, code := f.call(stderr, "acl check", "acl_check", map[string]any{"as": q.Principal, "permission": q.Permission,
			"target_kind": q.Kind, "target_value": q.Value}, "acl_decision")
		if code != exitOK {
			return code
		}
		d = access.Decision{Allow: fr.String("decision") == "allow", Rule: fr.String("rule"), Reason: fr.String("reason")}
		inForce = string(fr.Field("acl_in_force")) == "true"
	}
	verdict := "deny"
	if d.Allow {
		verdict = "allow"
	}
	if f.asJSON {
		b, _ := json.Marshal(map[string]any{"as": q.Principal, "permission": q.Permission, "target": q.Kind + ":" + q.Value,
			"decision": verdict, "rule": d.Rule, "reason": d.Reason, "acl_in_force": inForce})
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		rule := d.Rule
		if rule == "" {
			rule = "none"
		}
		fmt.Fprintf(stdout, "%s: %s %s (rule %s: %s)\n", verdict, q.Principal, q.String(), rule, d.Reason)
	}
	if !d.Allow {
		return exitRefused
	}
	return exitOK
}
