package main

// arm: a waiter that never stops. It keeps a durable cursor of its own and
// runs a command for every directed message to the agent, at least once
// from the cursor and never twice across its own restarts (issue 21 item
// 2, INV-DG-1; docs/waking.md).
//
// One goroutine, runArm's, owns the cursor, the connection and the child;
// the client's reader only feeds the wake channel.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/wire"
)

const armUsage = `Usage: synapse arm NAME --exec 'COMMAND' [--ack] [--cursor FILE] [flags]
       synapse arm NAME --exec 'COMMAND' --print-unit | --install-unit [--launchd]

Keeps a waiter for agent NAME running and runs COMMAND (with /bin/sh -c) for
every directed message to NAME — to it, its project or its roles — one at a
time, oldest first. For Codex's notify, a tmux send-keys to an idle pane, a
desktop notification, or anything else. The message reaches COMMAND as
JSON on its standard input (the frame as the hub sent it) and as environment
variables: SYNAPSE_EVENT=message, SYNAPSE_NAME, SYNAPSE_SEQ, SYNAPSE_MSG_ID,
SYNAPSE_SENDER, SYNAPSE_TARGET, SYNAPSE_PAYLOAD (cut at 64 KiB; stdin has
all of it), SYNAPSE_PRIORITY (true or false), SYNAPSE_REPLAYED.

It connects as NAME-rx, a sidecar of NAME's: the agent keeps its own name,
and while arm runs a message to NAME counts as delivered. It keeps its own
cursor (--cursor, the seq of the last message COMMAND ran for), written
after each run, so it runs COMMAND at least once for every message after
the cursor and never twice across its own restarts: a stop (SIGTERM,
Ctrl-C) lets the command in progress finish and writes the cursor first;
only a crash during a command runs that command again. Without --ack the
agent's mailbox is left alone ('synapse inbox' still shows the messages);
with --ack each message is acknowledged once COMMAND exited 0.

A command that fails (non-zero, or killed at --exec-timeout) is run again
after a pause, up to --retries times, then skipped with a warning. A lost
hub is dialled again with backoff from --backoff-min doubling to
--backoff-max, each pause jittered (a random 50-100% of it), so a fleet of
waiters does not reconnect in step.

--print-unit prints a systemd user unit (synapse-arm@.service) and the
instance's environment file, or a launchd plist with --launchd (the default
on macOS); --install-unit writes them and says what to run to start it.

'synapse wait TASK' is another thing: it waits once for a task to be free.
'synapse inbox --wait' waits once for a message and exits.
`

// Limits of arm, each a flag.
const (
	armPayloadEnvMax = 64 << 10 // SYNAPSE_PAYLOAD is cut here; stdin has it all
)

// armCursor is arm's durable cursor: the seq of the last message its
// command ran for.
type armCursor struct {
	Identity  string `json:"identity"`
	Seq       int64  `json:"seq"`
	UpdatedAt string `json:"updated_at"`
}

// defaultArmCursor is $XDG_STATE_HOME/synapse/arm/NAME.cursor (beside the
// hub's default journal), NAME escaped into one file name.
func defaultArmCursor(name string) string {
	return filepath.Join(filepath.Dir(defaultJournalPath()), "arm", url.PathEscape(name)+".cursor")
}

func loadArmCursor(path, name string) (int64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var c armCursor
	if err := json.Unmarshal(b, &c); err != nil {
		return 0, fmt.Errorf("the cursor file %s is damaged (%v): fix it, or delete it to run the command for every message in the mailbox again", path, err)
	}
	if c.Identity != name {
		return 0, fmt.Errorf("the cursor file %s is %s's, not %s's: give each agent its own --cursor", path, c.Identity, name)
	}
	return c.Seq, nil
}

// saveArmCursor replaces the cursor file (temporary file, fsync, rename),
// so a crash leaves the old cursor or the new one, never half of one.
func saveArmCursor(path, name string, seq int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(armCursor{Identity: name, Seq: seq, UpdatedAt: time.Now().UTC().Format(time.RFC3339)})
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// armConfig is arm's flags.
type armConfig struct {
	name, exec, cursor string
	ack                bool
	retries            int
	execTimeout        time.Duration
	backoffMin         time.Duration
	backoffMax         time.Duration
	maxEvents          int
}

func runArm(args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	var cfg armConfig
	fs := newFlagSet("arm", armUsage, "", stderr)
	f.register(fs)
	fs.StringVar(&cfg.exec, "exec", os.Getenv("SYNAPSE_ARM_EXEC"), "the command to run for each message, with /bin/sh -c (env SYNAPSE_ARM_EXEC)")
	fs.StringVar(&cfg.cursor, "cursor", "", "the cursor file (default $XDG_STATE_HOME/synapse/arm/NAME.cursor)")
	fs.BoolVar(&cfg.ack, "ack", false, "acknowledge each message once the command exited 0 (it leaves NAME's mailbox)")
	fs.IntVar(&cfg.retries, "retries", 3, "runs again of a failing command before its message is skipped (0..100)")
	fs.DurationVar(&cfg.execTimeout, "exec-timeout", time.Minute, "kill a command still running after this long (a failure); 1s..24h")
	fs.DurationVar(&cfg.backoffMin, "backoff-min", 500*time.Millisecond, "first pause before dialling a lost hub again (10ms..1h)")
	fs.DurationVar(&cfg.backoffMax, "backoff-max", 30*time.Second, "longest pause between dials (at least --backoff-min, at most 1h)")
	fs.IntVar(&cfg.maxEvents, "max-events", 0, "exit 0 after running the command for this many messages (0: never)")
	printUnit := fs.Bool("print-unit", false, "print the service unit for this waiter and exit")
	installUnit := fs.Bool("install-unit", false, "write the service unit for this waiter and say how to start it")
	launchd := fs.Bool("launchd", isDarwin(), "the unit is a launchd plist (macOS), not systemd")
	command := fs.String("command", "", "with --print-unit/--install-unit: the synapse binary the unit runs (default: this one)")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, "arm", "give the agent's name: synapse arm NAME --exec 'COMMAND'")
	}
	cfg.name = pos[0]
	if err := cfg.check(); err != nil {
		return usageError(stderr, "arm", "%v", err)
	}
	if err := f.resolve(); err != nil {
		fmt.Fprintf(stderr, "synapse arm: %v\n", err)
		return exitUsage
	}
	if *printUnit || *installUnit {
		bin := *command
		if bin == "" {
			bin = thisBinary()
		}
		return armUnit(&f, cfg, bin, *launchd, *installUnit, stdout, stderr)
	}
	if cfg.cursor == "" {
		cfg.cursor = defaultArmCursor(cfg.name)
	}
	cursor, err := loadArmCursor(cfg.cursor, cfg.name)
	if err != nil {
		fmt.Fprintf(stderr, "synapse arm: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &armer{f: &f, cfg: cfg, cursor: cursor, stderr: stderr}
	return a.run(ctx)
}

// check refuses flags out of their bounds; nothing has happened yet.
func (c *armConfig) check() error {
	switch {
	case wire.Identity(c.name) != c.name:
		return fmt.Errorf("%q is a sidecar's name: arm the agent's own name, %q", c.name, wire.Identity(c.name))
	case c.exec == "":
		return errors.New("--exec 'COMMAND' is required: what to run for each message")
	case c.retries < 0 || c.retries > 100:
		return fmt.Errorf("--retries %d is outside 0..100", c.retries)
	case c.execTimeout < time.Second || c.execTimeout > 24*time.Hour:
		return fmt.Errorf("--exec-timeout %s is outside 1s..24h", c.execTimeout)
	case c.backoffMin < 10*time.Millisecond || c.backoffMin > time.Hour:
		return fmt.Errorf("--backoff-min %s is outside 10ms..1h", c.backoffMin)
	case c.backoffMax < c.backoffMin || c.backoffMax > time.Hour:
		return fmt.Errorf("--backoff-max %s is outside --backoff-min..1h", c.backoffMax)
	case c.maxEvents < 0:
		return fmt.Errorf("--max-events %d is negative", c.maxEvents)
	}
	return nil
}

// armer is one arm process's state, owned by its run goroutine.
type armer struct {
	f      *clientFlags
	cfg    armConfig
	cursor int64 // the seq of the last message the command ran for (saved)
	events int
	stderr io.Writer
}

// errArmDone ends run: --max-events reached.
var errArmDone = errors.New("arm: --max-events reached")

func (a *armer) run(ctx context.Context) int {
	sidecar := wire.Sidecars(a.cfg.name)[0]
	fmt.Fprintf(a.stderr, "synapse arm: waiting for messages to %s as %s at %s; cursor %s at #%d.\n", a.cfg.name, sidecar, a.f.uri, a.cfg.cursor, a.cursor)
	backoff := a.cfg.backoffMin
	for {
		dctx, cancel := context.WithTimeout(ctx, a.f.timeout)
		o := a.f.options(sidecar)
		o.MailboxFor, o.NoReconnect = a.cfg.name, true
		c, err := client.Dial(dctx, o)
		cancel()
		var rej *client.RejectedError
		switch {
		case ctx.Err() != nil:
			return exitOK
		case errors.As(err, &rej) && rej.AuthFailed():
			return a.f.failure(a.stderr, "arm", err) // no pause mends a wrong token
		case err != nil:
			fmt.Fprintf(a.stderr, "synapse arm: cannot connect (%v); again in %s.\n", err, backoff)
		default:
			backoff = a.cfg.backoffMin
			err = a.serve(ctx, c)
			c.Close()
			switch {
			case errors.Is(err, errArmDone), ctx.Err() != nil:
				return exitOK
			case err != nil:
				fmt.Fprintf(a.stderr, "synapse arm: %v\n", err)
				var ce *cursorError
				if errors.As(err, &ce) {
					return exitRefused // a cursor that cannot be written would run commands twice
				}
			}
			fmt.Fprintf(a.stderr, "synapse arm: lost the hub; dialling again in %s.\n", backoff)
		}
		if !sleepCtx(ctx, jitter(backoff)) {
			return exitOK
		}
		backoff = min(2*backoff, a.cfg.backoffMax)
	}
}

// jitter is a random 50-100% of d.
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// cursorError is a cursor that could not be written.
type cursorError struct{ err error }

func (e *cursorError) Error() string {
	return fmt.Sprintf("cannot write the cursor (%v); stopping, so no command runs twice", e.err)
}
func (e *cursorError) Unwrap() error { return e.err }

// serve runs the command for what the mailbox holds after the cursor,
// then again each time a message arrives, until the connection ends. The
// mailbox replay is the source of truth (seq order, durable); a live frame
// only says "read it again", so none is lost to a full subscription.
func (a *armer) serve(ctx context.Context, c *client.Client) error {
	wake := c.Subscribe(ctx, func(fr client.Frame) bool { return wakeFrame(fr, a.cfg.name, true) })
	for {
		cctx, cancel := a.f.callCtx()
		msgs, err := c.Inbox(cctx)
		cancel()
		if err != nil {
			return err
		}
		slices.SortFunc(msgs, func(x, y client.Frame) int { return int(x.Seq() - y.Seq()) })
		for _, m := range msgs {
			if m.Seq() <= a.cursor {
				continue // ran before (this process or an earlier one)
			}
			if !a.runCommand(ctx, m) {
				return ctx.Err() // stopped during a failed run: the next start runs it again
			}
			if err := saveArmCursor(a.cfg.cursor, a.cfg.name, m.Seq()); err != nil {
				return &cursorError{err}
			}
			a.cursor = m.Seq()
			if a.cfg.ack {
				actx, cancel := a.f.callCtx()
				_ = c.Ack(actx, m.Seq()) // a lost ack is acked again after the next replay: at least once
				cancel()
			}
			a.events++
			if a.cfg.maxEvents > 0 && a.events >= a.cfg.maxEvents {
				return errArmDone
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-wake:
			if !ok {
				return errors.New("the connection ended")
			}
			for drained := false; !drained; { // one read serves every frame already here
				select {
				case _, ok := <-wake:
					drained = !ok
				default:
					drained = true
				}
			}
		}
	}
}

// runCommand runs the command for m, again after a failure up to
// --retries times, and reports whether m is done with (run, or skipped).
// A stop does not cancel it: the command in progress finishes (or reaches
// --exec-timeout) so the cursor can be written; but a run that failed
// after a stop (Ctrl-C reaches the child too) is not done, nor run again.
func (a *armer) runCommand(stop context.Context, m client.Frame) bool {
	env := append(os.Environ(),
		"SYNAPSE_EVENT=message",
		"SYNAPSE_NAME="+a.cfg.name,
		"SYNAPSE_SEQ="+strconv.FormatInt(m.Seq(), 10),
		"SYNAPSE_MSG_ID="+string(m.Field("msg_id")),
		"SYNAPSE_SENDER="+m.Sender,
		"SYNAPSE_TARGET="+m.Target,
		"SYNAPSE_PAYLOAD="+cutUTF8(m.Payload, armPayloadEnvMax),
		"SYNAPSE_PRIORITY="+strconv.FormatBool(string(m.Field("priority")) == "true"),
		"SYNAPSE_REPLAYED="+strconv.FormatBool(m.Replayed()),
	)
	pause := time.Second
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.execTimeout)
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", a.cfg.exec)
		cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, bytes.NewReader(append(slices.Clone(m.Raw), '\n')), a.stderr, a.stderr
		err := cmd.Run()
		cancel()
		switch {
		case err == nil:
			return true
		case stop.Err() != nil:
			return false
		case try >= a.cfg.retries:
			fmt.Fprintf(a.stderr, "synapse arm: the command failed for message #%d from %s (%v) %d time(s); skipping it.\n", m.Seq(), m.Sender, err, try+1)
			return true
		}
		fmt.Fprintf(a.stderr, "synapse arm: the command failed for message #%d (%v); again in %s.\n", m.Seq(), err, pause)
		if !sleepCtx(stop, pause) {
			return false
		}
		pause = min(2*pause, 30*time.Second)
	}
}

// cutUTF8 is s cut to at most n bytes, on a rune boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
