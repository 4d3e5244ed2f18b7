package main

// token and role: per-agent credentials and role grants (issue 23 items 1
// and 3). Each verb asks the running hub at --uri (admin verbs over the
// WebSocket, authenticated with the shared --token or a credential with
// role synapse/admin), so it takes effect at once; with --db PATH it
// edits a stopped hub's journal instead.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/journal"
)

const tokenIntro = `Usage: synapse token <verb> [flags]

Per-agent credentials. A credential is a token bound to a name pattern and
roles: a socket that presents it may bind only names the pattern matches
('proj/*' matches proj/alice and proj/alice-rx), holds its roles, and is
charged claims as the credential's own quota principal (INV-ME-5), however
many names it uses. The hub keeps only the token's SHA-256. A hub started
with --token accepts credentials beside the shared token; --credentials
secures a hub with credentials alone.

Verbs ask the running hub at --uri, authenticated with the shared --token
or a credential with role synapse/admin, and take effect at once: a
revocation closes the sockets that used the credential (close 4010
"credential revoked"). With --db PATH they edit a stopped hub's journal
instead (read at its next start).

Verbs:
  issue   mint a credential: issue --name 'proj/*' [--roles r1,r2] [--ttl 24h] [--note TEXT]
  list    the credentials (never their tokens)
  revoke  revoke one: revoke ID

Run 'synapse token <verb> --help' for its flags.
`

func runToken(args []string, stdout, stderr io.Writer) int {
	return runVerbs("token", tokenIntro, map[string]func([]string, io.Writer, io.Writer) int{
		"issue": runTokenIssue, "list": runTokenList, "revoke": runTokenRevoke,
	}, args, stdout, stderr)
}

// runVerbs dispatches a command's verb.
func runVerbs(cmd, intro string, verbs map[string]func([]string, io.Writer, io.Writer) int, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, intro)
		return exitUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, intro)
		return exitOK
	}
	if run := verbs[args[0]]; run != nil {
		return run(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "synapse %s: unknown verb %q. Run 'synapse %s --help'.\n", cmd, args[0], cmd)
	return exitUsage
}

// adminFlags are the flags of an admin verb: the hub's, or a stopped
// hub's journal.
type adminFlags struct {
	clientFlags
	db string
}

// register adds the connection flags but --name, which token issue takes
// for the credential's pattern: the admin connects under a throw-away
// name made from SYNAPSE_NAME or the configuration's.
func (f *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.uri, "uri", "", "hub address (env SYNAPSE_URI; default ws://127.0.0.1:8876)")
	fs.StringVar(&f.token, "token", "", "the hub's shared token, or a credential with role "+access.AdminRole+" (env SYNAPSE_TOKEN)")
	fs.DurationVar(&f.timeout, "connect-timeout", 5*time.Second, "how long to wait for the hub to answer")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON for scripts")
	fs.StringVar(&f.db, "db", "", "edit this stopped hub's journal `PATH` instead of asking the running hub (read at its next start)")
}

// registry opens the journal at --db and its credentials and grants. The
// caller closes the store.
func (f *adminFlags) registry(stderr io.Writer, cmd string) (*access.Registry, *journal.Store, int) {
	st, err := journal.Open(f.db, journal.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "synapse %s: cannot open the journal %s: %v. Is the path right? Stop the hub first, or drop --db to ask it.\n", cmd, f.db, err)
		return nil, nil, exitRefused
	}
	creds, grants, err := st.LoadAccess()
	if err != nil {
		st.Close()
		fmt.Fprintf(stderr, "synapse %s: %v\n", cmd, err)
		return nil, nil, exitRefused
	}
	return access.NewRegistry(st, creds, grants), st, exitOK
}

// call runs one admin verb on the hub at --uri.
func (f *adminFlags) call(stderr io.Writer, cmd, typ string, fields map[string]any, okType string) (client.Frame, int) {
	c, code := f.start(stderr, cmd, true, false)
	if c == nil {
		return client.Frame{}, code
	}
	defer c.Close()
	ctx, cancel := f.callCtx()
	defer cancel()
	fr, err := c.Admin(ctx, typ, fields, okType)
	if err != nil {
		return fr, f.failure(stderr, cmd, err)
	}
	return fr, exitOK
}

const tokenIssueUsage = `Usage: synapse token issue --name PATTERN [--roles R1,R2] [--ttl DURATION] [--note TEXT] [--json]

Mints a credential whose sockets may bind only names matching PATTERN
('*' matches any run of characters, '/' included; '?' one character) and
that holds ROLES (patterns too). Prints the token once: give it to the agent
as its --token (or SYNAPSE_TOKEN); the hub keeps only its digest.
`

func runTokenIssue(args []string, stdout, stderr io.Writer) int {
	var f adminFlags
	fs := newFlagSet("token issue", tokenIssueUsage, "", stderr)
	f.register(fs)
	pattern := fs.String("name", "", "name `PATTERN` the credential may bind, e.g. 'proj/*' (required; not the client's --name: the admin connects under a throw-away one)")
	roles := fs.String("roles", "", "comma-separated roles it grants, e.g. proj/reviewer,proj/lead")
	ttl := fs.Duration("ttl", 0, "lifetime, e.g. 24h; 0 = until revoked")
	note := fs.String("note", "", "free text shown by 'token list' (who it is for)")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "token issue", "unexpected argument %q", pos[0])
	}
	if *pattern == "" {
		return usageError(stderr, "token issue", "give the names it may bind: --name 'proj/*'")
	}
	req := access.IssueRequest{Pattern: *pattern, Roles: splitList(*roles), TTL: ttl.Seconds(), Note: *note}
	var tok string
	var cred access.Credential
	if f.db != "" {
		reg, st, code := f.registry(stderr, "token issue")
		if reg == nil {
			return code
		}
		defer st.Close()
		var err error
		if tok, cred, err = reg.Issue(req, float64(time.Now().UnixNano())/1e9); err != nil {
			fmt.Fprintf(stderr, "synapse token issue: %v\n", err)
			return exitUsage
		}
	} else {
		fr, code := f.call(stderr, "token issue", "token_issue", map[string]any{"name_pattern": req.Pattern, "roles": req.Roles,
			"ttl_seconds": req.TTL, "note": req.Note}, "token_issued")
		if code != exitOK {
			return code
		}
		tok = fr.String("token")
		if err := fr.DecodeField("credential", &cred); err != nil {
			fmt.Fprintf(stderr, "synapse token issue: the hub's answer: %v\n", err)
			return exitRefused
		}
	}
	if f.asJSON {
		b, _ := json.Marshal(map[string]any{"token": tok, "credential": cred})
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	fmt.Fprintf(stdout, "%s\n", tok)
	fmt.Fprintf(stderr, "credential %s: names %s, roles %s%s. The token above is shown once; the hub keeps only its digest.\n",
		cred.ID, cred.Pattern, orDash(strings.Join(cred.Roles, ",")), expiresText(cred))
	return exitOK
}

func expiresText(c access.Credential) string {
	if c.Expires == 0 {
		return ", no expiry"
	}
	return ", expires " + fmtTime(c.Expires)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

const tokenListUsage = `Usage: synapse token list [--json]

Lists the credentials: id, name pattern, roles, created, expiry, note, and
whether revoked. Never the tokens: the hub does not have them.
`

func runTokenList(args []string, stdout, stderr io.Writer) int {
	var f adminFlags
	fs := newFlagSet("token list", tokenListUsage, "", stderr)
	f.register(fs)
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "token list", "unexpected argument %q", pos[0])
	}
	var list []access.Credential
	if f.db != "" {
		reg, st, code := f.registry(stderr, "token list")
		if reg == nil {
			return code
		}
		st.Close()
		list = reg.List()
	} else {
		fr, code := f.call(stderr, "token list", "token_list", nil, "token_list")
		if code != exitOK {
			return code
		}
		if err := fr.DecodeField("credentials", &list); err != nil {
			fmt.Fprintf(stderr, "synapse token list: the hub's answer: %v\n", err)
			return exitRefused
		}
	}
	if f.asJSON {
		if list == nil {
			list = []access.Credential{}
		}
		b, _ := json.Marshal(list)
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	if len(list) == 0 {
		fmt.Fprintln(stdout, "No credentials. Mint one with 'synapse token issue --name PATTERN'.")
		return exitOK
	}
	fmt.Fprintf(stdout, "%-14s %-20s %-24s %-8s %-22s %s\n", "ID", "NAMES", "ROLES", "STATE", "EXPIRES", "NOTE")
	for _, c := range list {
		state, exp := "live", "-"
		if c.Revoked > 0 {
			state = "revoked"
		}
		if c.Expires > 0 {
			exp = fmtTime(c.Expires)
		}
		fmt.Fprintf(stdout, "%-14s %-20s %-24s %-8s %-22s %s\n", c.ID, c.Pattern, orDash(strings.Join(c.Roles, ",")), state, exp, c.Note)
	}
	return exitOK
}

const tokenRevokeUsage = `Usage: synapse token revoke ID [--json]

Revokes credential ID ('synapse token list' shows the ids). The running hub
closes every socket that used it at once (auth_denied, then close 4010
"credential revoked") and refuses the token from then on.
`

func runTokenRevoke(args []string, stdout, stderr io.Writer) int {
	var f adminFlags
	fs := newFlagSet("token revoke", tokenRevokeUsage, "", stderr)
	f.register(fs)
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, "token revoke", "give one credential id")
	}
	var cred access.Credential
	closed := int64(0)
	if f.db != "" {
		reg, st, code := f.registry(stderr, "token revoke")
		if reg == nil {
			return code
		}
		defer st.Close()
		var err error
		if cred, err = reg.Revoke(pos[0], float64(time.Now().UnixNano())/1e9); err != nil {
			fmt.Fprintf(stderr, "synapse token revoke: %v\n", err)
			return exitRefused
		}
	} else {
		fr, code := f.call(stderr, "token revoke", "token_revoke", map[string]any{"credential_id": pos[0]}, "token_revoked")
		if code != exitOK {
			return code
		}
		_ = fr.DecodeField("credential", &cred)
		closed = fr.Int("sockets_closed")
	}
	if f.asJSON {
		b, _ := json.Marshal(map[string]any{"credential": cred, "sockets_closed": closed})
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	fmt.Fprintf(stdout, "Credential %s (%s) revoked; %d live sockets closed.\n", cred.ID, cred.Pattern, closed)
	return exitOK
}
