package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/synapse-hub/synapse/access"
)

const roleIntro = `Usage: synapse role <verb> [flags]

Roles are granted, not claimed, once credentials or access rules are in
force (a hub with credentials, --credentials or --acl): a role an agent
asserts in its heartbeat sticks only if its credential carries it, a grant
here gives it to the agent's name, or an ACL role-claim rule allows
role:<role>. Others are ignored and the agent is told which (a private
"notice" frame, error_code role_not_granted), so mail to a role reaches
only its holders. With only the shared token roles stay as agents claim
them, as with the reference hub.

Verbs ask the running hub at --uri (shared --token or a credential with
role synapse/admin) and take effect on the agent's next heartbeat; with
--db PATH they edit a stopped hub's journal.

Verbs:
  grant   grant ROLE --to NAME (NAME may be a pattern: 'proj/*')
  revoke  revoke ROLE --to NAME
  list    the grants
`

func runRole(args []string, stdout, stderr io.Writer) int {
	return runVerbs("role", roleIntro, map[string]func([]string, io.Writer, io.Writer) int{
		"grant":  func(a []string, o, e io.Writer) int { return runRoleChange(a, o, e, true) },
		"revoke": func(a []string, o, e io.Writer) int { return runRoleChange(a, o, e, false) },
		"list":   runRoleList,
	}, args, stdout, stderr)
}

const roleGrantUsage = `Usage: synapse role grant|revoke ROLE --to NAME [--json]

Grants ROLE (e.g. proj/reviewer) to the agents named NAME (a name or a
pattern such as 'proj/*'), or revokes that grant.
`

func runRoleChange(args []string, stdout, stderr io.Writer, grant bool) int {
	cmd := "role revoke"
	if grant {
		cmd = "role grant"
	}
	var f adminFlags
	fs := newFlagSet(cmd, roleGrantUsage, "", stderr)
	f.register(fs)
	to := fs.String("to", "", "the `NAME` (or name pattern) the role is granted to (required)")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || *to == "" {
		return usageError(stderr, cmd, "give one ROLE and --to NAME")
	}
	g := access.Grant{Role: pos[0], To: *to}
	if f.db != "" {
		reg, st, code := f.registry(stderr, cmd)
		if reg == nil {
			return code
		}
		defer st.Close()
		err := reg.RevokeGrant(g)
		if grant {
			err = reg.Grant(g)
		}
		if err != nil {
			fmt.Fprintf(stderr, "synapse %s: %v\n", cmd, err)
			return exitRefused
		}
	} else {
		typ, ok := "role_revoke", "role_revoked"
		if grant {
			typ, ok = "role_grant", "role_granted"
		}
		if _, code := f.call(stderr, cmd, typ, map[string]any{"role": g.Role, "to": g.To}, ok); code != exitOK {
			return code
		}
	}
	if f.asJSON {
		b, _ := json.Marshal(map[string]any{"grant": g, "granted": grant})
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	if grant {
		fmt.Fprintf(stdout, "Role %s granted to %s.\n", g.Role, g.To)
	} else {
		fmt.Fprintf(stdout, "Role %s no longer granted to %s.\n", g.Role, g.To)
	}
	return exitOK
}

const roleListUsage = `Usage: synapse role list [--json]

Lists the role grants (credentials' own roles are in 'synapse token list').
`

func runRoleList(args []string, stdout, stderr io.Writer) int {
	var f adminFlags
	fs := newFlagSet("role list", roleListUsage, "", stderr)
	f.register(fs)
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "role list", "unexpected argument %q", pos[0])
	}
	var grants []access.Grant
	if f.db != "" {
		reg, st, code := f.registry(stderr, "role list")
		if reg == nil {
			return code
		}
		st.Close()
		grants = reg.Grants()
	} else {
		fr, code := f.call(stderr, "role list", "role_list", nil, "role_list")
		if code != exitOK {
			return code
		}
		if err := fr.DecodeField("grants", &grants); err != nil {
			fmt.Fprintf(stderr, "synapse role list: the hub's answer: %v\n", err)
			return exitRefused
		}
	}
	if f.asJSON {
		if grants == nil {
			grants = []access.Grant{}
		}
		b, _ := json.Marshal(grants)
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	if len(grants) == 0 {
		fmt.Fprintln(stdout, "No role grants. Add one with 'synapse role grant ROLE --to NAME'.")
		return exitOK
	}
	fmt.Fprintf(stdout, "%-28s %s\n", "ROLE", "GRANTED TO")
	for _, g := range grants {
		fmt.Fprintf(stdout, "%-28s %s\n", g.Role, g.To)
	}
	return exitOK
}
