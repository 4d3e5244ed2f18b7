package main

// identity: the names a hub pinned to keys (issue 23 item 2;
// docs/security.md, "Identity pins"), and this machine's own key.

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/journal"
)

const identityUsage = `Usage: synapse identity list|reclaim|key [flags]

A hub pins each name to the key of its first signed registration and then
refuses the name (close 4013) to any other key, or to none. synapse, its SDK
and 'synapse mcp' sign with this machine's key by default, as the
reference's clients do, so a name stays with the machine that first used it.

  list            the pinned names, their key ids and when they were pinned
  reclaim NAME    forget NAME's pin (its next signed registration pins it
                  anew); a live holder of the name is disconnected
  key             this machine's key: its file, key id and public key

list and reclaim ask the hub at --uri over its socket; a hub with a token
lets its holders reclaim, an open hub does not (any local process could).
With --db PATH they work on a journal file instead: on a stopped hub's, or on
a running hub's (it reads pins from the file at each registration), but a
live holder is then not disconnected.

Run 'synapse identity <verb> --help' for its flags.
`

func runIdentity(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, identityUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, identityUsage)
		return exitOK
	case "list":
		return runIdentityList(args[1:], stdout, stderr)
	case "reclaim":
		return runIdentityReclaim(args[1:], stdout, stderr)
	case "key":
		return runIdentityKey(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "synapse identity: unknown verb %q: say list, reclaim or key.\n", args[0])
	return exitUsage
}

const identityListUsage = `Usage: synapse identity list [--db PATH] [--json]

Lists the names the hub at --uri (or the journal at --db) pinned to a key.
`

func runIdentityList(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("identity list", identityListUsage, "", stderr)
	f.register(fs)
	db := fs.String("db", "", "read the pins of the journal file at `PATH` instead of asking a hub")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "identity list", "unexpected argument %q", pos[0])
	}
	var pins []client.IdentityPin
	if *db != "" {
		st, err := journal.Open(*db, journal.Options{ReadOnly: true})
		if err != nil {
			return openFailure(stderr, "identity list", *db, err)
		}
		defer st.Close()
		list, err := st.IdentityPins()
		if err != nil {
			fmt.Fprintf(stderr, "synapse identity list: %v\n", err)
			return exitRefused
		}
		for _, p := range list {
			pins = append(pins, client.IdentityPin{Name: p.Name, KeyID: p.KeyID, PublicKey: p.PublicKey, PinnedAt: p.PinnedAt})
		}
	} else {
		c, code := f.start(stderr, "identity list", true, false)
		if c == nil {
			return code
		}
		defer c.Close()
		ctx, cancel := f.callCtx()
		defer cancel()
		var err error
		if pins, err = c.IdentityPins(ctx); err != nil {
			return f.failure(stderr, "identity list", err)
		}
	}
	if f.asJSON {
		if pins == nil {
			pins = []client.IdentityPin{}
		}
		printJSON(stdout, pins)
		return exitOK
	}
	if len(pins) == 0 {
		fmt.Fprintln(stdout, "No name is pinned: no client has registered with a signed proof yet.")
		return exitOK
	}
	fmt.Fprintf(stdout, "%-32s %-26s %s\n", "NAME", "KEY ID", "PINNED AT")
	for _, p := range pins {
		fmt.Fprintf(stdout, "%-32s %-26s %s\n", p.Name, p.KeyID, time.Unix(0, int64(p.PinnedAt*1e9)).UTC().Format(time.RFC3339))
	}
	return exitOK
}

const identityReclaimUsage = `Usage: synapse identity reclaim NAME [--expected-key-id ID] [--reason TEXT] [--db PATH] [--json]

Forgets NAME's pin, so its next signed registration pins it to the key it
then presents (a new machine, a lost key). The removal is recorded in the
journal (identity_pin_reclaims) with who asked and when. Over the socket, the
hub also disconnects a live holder of NAME (close 4017); with --db on the
journal file it does not. --expected-key-id refuses the reclaim (and changes
nothing) unless NAME is pinned to that key: pass the id the refusal named.
Over the socket the hub's operator may reclaim (its --token, or a credential
with role synapse/admin), and whom the hub's --acl allows
identity-pin-reclaim on agent:NAME; an open hub refuses (use --db).
`

func runIdentityReclaim(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newFlagSet("identity reclaim", identityReclaimUsage, "", stderr)
	f.register(fs)
	db := fs.String("db", "", "reclaim in the journal file at `PATH` instead of asking a hub")
	expected := fs.String("expected-key-id", "", "reclaim only if NAME is pinned to key `ID`")
	reason := fs.String("reason", "", "why, for the hub's log")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
		return usageError(stderr, "identity reclaim", "give exactly one NAME to reclaim")
	}
	name := strings.TrimSpace(pos[0])
	var r client.ReclaimResult
	if *db != "" {
		var err error
		if r, err = reclaimOffline(*db, name, *expected); err != nil {
			if errors.Is(err, os.ErrNotExist) || isLocked(err) || errors.Is(err, journal.ErrNotJournal) {
				return openFailure(stderr, "identity reclaim", *db, err)
			}
			fmt.Fprintf(stderr, "synapse identity reclaim: %v\n", err)
			return exitRefused
		}
	} else {
		c, code := f.start(stderr, "identity reclaim", true, false)
		if c == nil {
			return code
		}
		defer c.Close()
		ctx, cancel := f.callCtx()
		defer cancel()
		var err error
		if r, err = c.ReclaimIdentityPin(ctx, name, *expected, *reason); err != nil {
			return f.failure(stderr, "identity reclaim", err)
		}
	}
	if f.asJSON {
		printJSON(stdout, r)
	} else if r.Applied {
		fmt.Fprintln(stdout, r.Detail)
	} else {
		fmt.Fprintf(stderr, "synapse identity reclaim: %s\n", r.Detail)
	}
	if !r.Applied {
		return exitRefused
	}
	return exitOK
}

// reclaimOffline removes name's pin from the journal at path.
func reclaimOffline(path, name, expected string) (client.ReclaimResult, error) {
	ro, err := journal.Open(path, journal.Options{ReadOnly: true}) // refuse a file that is not a journal before writing to it
	if err != nil {
		return client.ReclaimResult{}, err
	}
	ro.Close()
	st, err := journal.Open(path, journal.Options{BusyTimeout: 2 * time.Second})
	if err != nil {
		return client.ReclaimResult{}, err
	}
	defer st.Close()
	pin, found, err := st.LookupIdentityPin(name)
	switch {
	case err != nil:
		return client.ReclaimResult{}, err
	case !found:
		return client.ReclaimResult{Detail: "Name '" + name + "' is not pinned in " + path + ": nothing to reclaim."}, nil
	case expected != "" && expected != pin.KeyID:
		return client.ReclaimResult{PreviousKeyID: pin.KeyID, Detail: "Name '" + name + "' is pinned to key " + pin.KeyID + ", not " + expected + ": nothing changed."}, nil
	}
	by := "synapse identity reclaim --db"
	if u := os.Getenv("USER"); u != "" {
		by += " (" + u + ")"
	}
	removed, found, err := st.ReclaimIdentityPin(name, by, float64(time.Now().UnixNano())/1e9)
	if err != nil || !found {
		return client.ReclaimResult{PreviousKeyID: pin.KeyID, Detail: "the pin changed before the reclaim could be applied"}, err
	}
	return client.ReclaimResult{Applied: true, PreviousKeyID: removed.KeyID,
		Detail: "Identity pin for '" + name + "' (key " + removed.KeyID + ") was reclaimed in " + path + "; its next signed registration pins it anew."}, nil
}

const identityKeyUsage = `Usage: synapse identity key [--json]

Shows this machine's identity key, creating it if it does not exist yet:
its file ($XDG_DATA_HOME/synapse/identity/machine.pem, shared with the
reference's clients), its key id (as hubs pin it) and its public key.
SYNAPSE_NO_IDENTITY=1 makes clients send unsigned registrations instead.
`

func runIdentityKey(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("identity key", identityKeyUsage, "", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object for scripts")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "identity key", "unexpected argument %q", pos[0])
	}
	path, err := client.MachineKeyPath()
	var priv ed25519.PrivateKey
	if err == nil {
		priv, err = client.LoadOrCreateIdentityKey(path)
	}
	if err != nil {
		fmt.Fprintf(stderr, "synapse identity key: %v\n", err)
		return exitRefused
	}
	pub := gate.EncodeIdentityPublicKey(priv.Public().(ed25519.PublicKey))
	out := struct {
		Path      string `json:"path"`
		KeyID     string `json:"key_id"`
		PublicKey string `json:"public_key"`
	}{path, gate.MachineKeyID(pub), pub}
	if *asJSON {
		printJSON(stdout, out)
		return exitOK
	}
	fmt.Fprintf(stdout, "file:       %s\nkey id:     %s\npublic key: %s\n", out.Path, out.KeyID, out.PublicKey)
	return exitOK
}

// identityKeyHint names this machine's key for a refusal's hint.
func identityKeyHint() string {
	path, err := client.MachineKeyPath()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	priv, err := client.LoadOrCreateIdentityKey(path)
	if err != nil {
		return path + " (unreadable: " + err.Error() + ")"
	}
	return gate.MachineKeyID(gate.EncodeIdentityPublicKey(priv.Public().(ed25519.PublicKey))) + " in " + path + " ('synapse identity key')"
}
