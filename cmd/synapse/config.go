package main

// The connection flags every client command shares, where their defaults
// come from, and how client errors become exit codes.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/certs"
	"github.com/synapse-hub/synapse/client"
)

// Exit codes of the client commands.
const (
	exitOK          = 0
	exitRefused     = 1 // the hub said no: refused, not delivered, not held
	exitUsage       = 2
	exitUnreachable = 3 // no hub answered
	exitTimeout     = 4 // wait / lock: the task did not become free in time
)

const clientHelp = `
Connection: each value comes from the flag, else the environment, else the
config file, else the default.
  --uri     SYNAPSE_URI     "uri"    default ws://127.0.0.1:8876
  --token   SYNAPSE_TOKEN   "token"  default none (an open hub)
  --name    SYNAPSE_NAME    "name"   default your login name
  --ca      SYNAPSE_CA      "ca"     default the system's roots (wss:// hubs)
The config file is %s (SYNAPSE_CONFIG names another), e.g.
  {"uri": "ws://127.0.0.1:8876", "token": "", "name": "myproject/claude-1"}
Claims belong to the name: release and renew with the name that claimed.

Exit codes: 0 ok, 1 the hub said no (refused, not held, not delivered),
2 usage error, 3 cannot reach the hub%s.
`

// clientFlags are the connection flags of a client command.
type clientFlags struct {
	uri, token, name string
	ca               string // the CA file a wss:// hub's certificate is checked against
	timeout          time.Duration
	asJSON           bool
	// fanout is the broadcasts the command's socket asks for (set by the
	// command, not a flag): the SDK's own fan-out unless it shows more.
	fanout client.Fanout
}

// register adds the connection flags (and --json) to fs.
func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.uri, "uri", "", "hub address (env SYNAPSE_URI; default ws://127.0.0.1:8876); hubs of a fleet comma-separated: ws://a:8876,ws://b:8876 (the first that answers is used)")
	fs.StringVar(&f.token, "token", "", "connect token of a secured hub (env SYNAPSE_TOKEN)")
	fs.StringVar(&f.name, "name", "", "agent name, e.g. myproject/claude-1 (env SYNAPSE_NAME; default your login name)")
	fs.StringVar(&f.ca, "ca", "", "PEM `FILE` of the CA that signed a wss:// hub's certificate (env SYNAPSE_CA; default the system's roots; 'synapse tls selfsigned' writes one)")
	fs.DurationVar(&f.timeout, "connect-timeout", 5*time.Second, "how long to wait for the hub to answer")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON for scripts")
}

// fileConfig is ~/.config/synapse/config.json.
type fileConfig struct {
	URI   string `json:"uri"`
	Token string `json:"token"`
	Name  string `json:"name"`
	CA    string `json:"ca"`
}

// configPath is $SYNAPSE_CONFIG, else <user config dir>/synapse/config.json.
func configPath() string {
	if p := os.Getenv("SYNAPSE_CONFIG"); p != "" {
		return p
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return filepath.Join("~", ".config", "synapse", "config.json")
	}
	return filepath.Join(dir, "synapse", "config.json")
}

// resolve fills the unset values from the environment, the config file
// and the defaults, in that order.
func (f *clientFlags) resolve() error {
	var cfg fileConfig
	path := configPath()
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &cfg); err != nil {
			return fmt.Errorf("the config file %s is not valid JSON (%v): fix it, or point SYNAPSE_CONFIG elsewhere", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot read the config file %s: %v", path, err)
	}
	pick := func(v *string, env, file, def string) {
		for _, c := range []string{*v, os.Getenv(env), file, def} {
			if strings.TrimSpace(c) != "" {
				*v = strings.TrimSpace(c)
				return
			}
		}
	}
	pick(&f.uri, "SYNAPSE_URI", cfg.URI, client.DefaultURI)
	pick(&f.token, "SYNAPSE_TOKEN", cfg.Token, "")
	pick(&f.name, "SYNAPSE_NAME", cfg.Name, loginName())
	pick(&f.ca, "SYNAPSE_CA", cfg.CA, "")
	return nil
}

func loginName() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if n := os.Getenv("USER"); n != "" {
		return n
	}
	return "agent"
}

// dial connects as name (the resolved --name, or an ephemeral query name).
// One-shot commands do not reconnect; lock does.
//
// A name conflict is retried for a moment: the hub frees a name only after
// it has acknowledged the previous socket's close, so the command run just
// before this one under the same name may still hold it.
func (f *clientFlags) dial(ctx context.Context, name string, reconnect bool) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	deadline := time.Now().Add(nameRetry)
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		o := f.options(name)
		// A throw-away query name is not signed: each would be pinned for good.
		o.NoReconnect, o.Fanout, o.NoIdentity = !reconnect, f.fanout, name != f.name
		c, err := client.Dial(ctx, o)
		var rej *client.RejectedError
		if err == nil || !errors.As(err, &rej) || rej.Reason != "name conflict" || time.Now().Add(delay).After(deadline) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
	}
}

// options are the client options of the connection flags, for name:
// every command that dials a hub starts from them, so each takes --uri,
// --token, --ca and --connect-timeout alike.
func (f *clientFlags) options(name string) client.Options {
	return client.Options{URI: f.uri, Token: f.token, CA: f.ca, Name: name, HandshakeTimeout: f.timeout}
}

// absPath is path made absolute, for a file named in a unit or a hook
// that runs in another folder (path itself if that fails).
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// nameRetry is how long dial retries a name conflict.
const nameRetry = 2 * time.Second

// queryName is the throw-away name a read-only command connects with, so
// it never collides with the agent that owns --name.
func queryName(name string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return name + "-q" + hex.EncodeToString(b[:])
}

// parseArgs parses flags that may come before, between or after the
// positional arguments. It returns the positional arguments, or an exit
// code: 0 after --help, 2 for a usage error.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
			return nil, exitOK, false
		} else if err != nil {
			return nil, exitUsage, false
		}
		if fs.NArg() == 0 {
			return pos, 0, true
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// newFlagSet makes a command's flag set whose --help prints usage, the
// flags and the connection help (extraExit describes any extra exit code).
func newFlagSet(name, usage, extraExit string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
		fmt.Fprintf(stderr, clientHelp, configPath(), extraExit)
	}
	return fs
}

// failure prints what went wrong and what to do, and returns the exit code.
func (f *clientFlags) failure(stderr io.Writer, cmd string, err error) int {
	var ref *client.Refused
	var rej *client.RejectedError
	var unsup *client.UnsupportedError
	switch {
	case errors.As(err, &ref):
		fmt.Fprintf(stderr, "synapse %s: %s\n", cmd, ref.Error())
		return exitRefused
	case errors.As(err, &unsup):
		fmt.Fprintf(stderr, "synapse %s: the hub at %s (%s) is too old for this: its welcome does not announce %q. Upgrade it.\n", cmd, f.uri, unsup.HubID, unsup.Feature)
		return exitRefused
	case errors.As(err, &rej):
		hint := ""
		switch {
		case rej.Code == 4009 || rej.Code == 4016:
			hint = " Another session uses this name: pass a unique --name (or SYNAPSE_NAME)."
		case rej.AuthFailed() && strings.Contains(rej.Message, "is not authorised for agent"):
			hint = " Your token may bind only the names its credential names (synapse token list shows them): use one of those with --name, or ask the operator for a token for this name."
		case rej.AuthFailed() && strings.Contains(rej.Message, "Credential '"):
			hint = "" // the hub's sentence says what to do
		case rej.AuthFailed():
			hint = " Pass the hub's token with --token or SYNAPSE_TOKEN."
		case rej.IdentityRefused():
			hint = " This machine's identity key is " + identityKeyHint() + "."
		}
		fmt.Fprintf(stderr, "synapse %s: %v.%s\n", cmd, err, hint)
		return exitRefused
	case errors.Is(err, client.ErrUnreachable), errors.Is(err, context.DeadlineExceeded):
		why := strings.TrimPrefix(err.Error(), client.ErrUnreachable.Error()+" at "+f.uri+": ")
		if hint := certs.Explain(f.uri, err.Error(), err); hint != "" { // the hub answered: its TLS, or ours, is the matter
			fmt.Fprintf(stderr, "synapse %s: cannot connect to the hub at %s: %s.\n(%s)\n", cmd, f.uri, hint, strings.Replace(why, " ("+hint+")", "", 1))
			return exitUnreachable
		}
		fmt.Fprintf(stderr, "synapse %s: cannot reach the hub at %s (%s).\nIs `synapse hub` running? Set --uri or SYNAPSE_URI to its address.\n", cmd, f.uri, why)
		return exitUnreachable
	case errors.Is(err, client.ErrDisconnected), errors.Is(err, client.ErrClosed):
		fmt.Fprintf(stderr, "synapse %s: lost the connection to the hub at %s: %v. Check that `synapse hub` is still running, then retry.\n", cmd, f.uri, err)
		return exitUnreachable
	}
	fmt.Fprintf(stderr, "synapse %s: %v\n", cmd, err)
	return exitRefused
}

// usageError reports a usage mistake and returns exit code 2.
func usageError(stderr io.Writer, cmd, format string, args ...any) int {
	fmt.Fprintf(stderr, "synapse %s: %s. Run 'synapse %s --help'.\n", cmd, fmt.Sprintf(format, args...), strings.Fields(cmd)[0])
	return exitUsage
}

// printJSON writes v as one line of JSON.
func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// start resolves the flags and connects: as --name, or with a throw-away
// name for read-only commands (ephemeral). It returns the exit code when
// it could not connect.
func (f *clientFlags) start(stderr io.Writer, cmd string, ephemeral, reconnect bool) (*client.Client, int) {
	if err := f.resolve(); err != nil {
		fmt.Fprintf(stderr, "synapse %s: %v\n", cmd, err)
		return nil, exitUsage
	}
	name := f.name
	if ephemeral {
		name = queryName(f.name)
	}
	c, err := f.dial(context.Background(), name, reconnect)
	if err != nil {
		return nil, f.failure(stderr, cmd, err)
	}
	return c, exitOK
}

// startQuery parses a read-only command's flags (it takes no positional
// argument) and connects under a throw-away name. c is nil when the command
// must exit with code.
func (f *clientFlags) startQuery(fs *flag.FlagSet, cmd string, args []string, stderr io.Writer) (c *client.Client, code int) {
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return nil, code
	}
	if len(pos) != 0 {
		return nil, usageError(stderr, cmd, "unexpected argument %q", pos[0])
	}
	return f.start(stderr, cmd, true, false)
}

// callCtx bounds one request to the hub.
func (f *clientFlags) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), max(f.timeout, 10*time.Second))
}

// fmtTime prints a hub time in UTC.
func fmtTime(s float64) string {
	return time.Unix(0, int64(s*1e9)).UTC().Format(time.RFC3339)
}

// fmtIn prints how far away a hub time is from another hub time.
func fmtIn(at, now float64) string {
	d := time.Duration((at - now) * float64(time.Second)).Round(time.Second)
	if d < 0 {
		return "expired"
	}
	return "in " + d.String()
}
