package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/bench"
	"github.com/synapse-hub/synapse/internal/hubproc"
)

const benchLoadUsage = `Usage: synapse bench load [--agents 1,8,32] [--idle N] [--fanout full|scoped] [--journal] [--duration 5s] [--import N] [--hostile N [--hostile-kind K,…]] [--json]

Measures a hub over real sockets, as users meet it. Without --uri it starts
'synapse hub' as a child process on a free loopback port (memory only, or
with a journal in a temporary folder with --journal), one per agent count.
For each count: every agent (and --idle more) connects at once (the connect
storm), each working agent cycles claim → grant → release → grant on its own
files for --duration (a --conflict share of its claims aims at one contended
scope), then one agent sends directed chats to another.

Prints cycles/s, p50/p99/max of claim and release, the hub's CPU µs per cycle
and per chat (read from /proc: the load client shares the machine's cores, so
hub CPU per operation is the figure to compare), the client's CPU µs per cycle
and per chat, and the hub's resident memory. --json prints one object per
agent count, one per line. A progress line goes to stderr.

With --import N, the first agent then declares N tasks on the board, once
waiting for each answer (a script through the SDK) and once pipelined (every
declaration sent before any answer is read), and the time of each is printed.

With --hostile N, the cycling phase is the quiet baseline (each agent at
--cycle-rate, 20 cycles/s unless given: agents that think between claims),
and one more cycling phase follows per --hostile-kind, beside N sockets
attacking the hub that way: malformed (garbage, deep nesting, 64 KiB garbage), oversized
(frames over the hub's limit), nested (100,000 open arrays), halfopen (TCP
connections that never upgrade, and bound sockets that never read),
slowreader (bound, reading a byte a second), bruteforce (wrong tokens, from
127.0.0.2), takeover (eight sockets per name taking it over in turn),
validflood (who_request, chat to self and heartbeats as fast as the hub
takes them), or mix (all at once, the sockets shared); or bound, which
attacks nothing (bound sockets that read everything and send nothing: what
a fleet that much larger costs, which the attacks by bound sockets pay
besides their own). Each phase prints
the good agents' claim p50/p99 against the quiet phase, the hub's RSS
before, at its peak and after, how the hub ended the attackers' sockets and
the hub counters (/metrics) that moved. A started hub keeps its default
pacing (a throughput run turns the hard cap per socket off), and gets a
token when a kind needs one (bruteforce, mix), which turns that cap on.

Flags:
`

func runBenchLoad(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchLoadUsage); fs.PrintDefaults() }
	agentsFlag := fs.String("agents", "1,8,32", "agent counts to run, comma-separated")
	idle := fs.Int("idle", 0, "agents that connect and stay idle while the others work")
	fanout := fs.String("fanout", "full", "full: every grant to every socket; scoped: each agent in its own namespace, scoped fan-out")
	journalOn := fs.Bool("journal", false, "the started hub keeps a journal (synchronous=FULL for claims) in a temporary folder")
	duration := fs.Duration("duration", 5*time.Second, "how long each cycling phase runs")
	conflict := fs.Float64("conflict", 0, "share of claims aimed at one contended scope (0..1)")
	cycleRate := fs.Float64("cycle-rate", 0, "most claim+release cycles per second per agent (agents that think between claims), 0 = as fast as the hub answers (with --hostile: 20)")
	importTasks := fs.Int("import", 0, "after the cycling phases, the first agent declares this many board tasks, waiting for each answer and then pipelined")
	uri := fs.String("uri", "", "measure the hub at this address instead of starting one (its CPU is read with --hub-pid)")
	hubPID := fs.Int("hub-pid", 0, "with --uri: the hub's process id, to read its CPU and memory from /proc")
	asJSON := fs.Bool("json", false, "one JSON object per agent count, one per line")
	hostile := fs.Int("hostile", 0, "hostile sockets: after the quiet cycling phase, one phase per --hostile-kind beside this many attackers")
	hostileKind := fs.String("hostile-kind", "malformed", "attacks, comma-separated, one phase each: "+strings.Join(bench.HostileKinds, ", ")+", or mix (all at once); or "+strings.Join(bench.BaselineKinds, ", ")+" (no attack: the fan-out to as many more bound sockets)")
	token := fs.String("token", "", "with --uri: the hub's connect token, sent by every agent")
	attackersNice := fs.Int("attackers-nice", 0, "with --hostile: run the attackers' process at this nice value (Linux nice, 1..19): 19 leaves them only the CPU the hub and the agents do not use, as attackers on another machine would; 0 = they compete for the cores as the hub does")
	floor := fs.Bool("floor", false, "first measure a bare WebSocket echo server (a child process) with the same client: no hub can cost less CPU per round trip on this machine, and a cycle is two")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *fanout != "full" && *fanout != "scoped" {
		fmt.Fprintln(stderr, "synapse bench load: --fanout is full or scoped")
		return 2
	}
	kinds, err := bench.ParseHostileKinds(*hostileKind)
	if err != nil {
		fmt.Fprintln(stderr, "synapse bench load: --hostile-kind:", err)
		return 2
	}
	hubToken := *token
	if *uri == "" && *hostile > 0 && slices.ContainsFunc(kinds, func(k []string) bool { return slices.Contains(k, "bruteforce") }) {
		hubToken = "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if *hostile > 0 && *cycleRate == 0 {
		// Agents that think between claims, as a fleet's do: agents
		// cycling as fast as the hub answers would measure the hub's
		// throughput, not what the attack costs a waiting agent.
		*cycleRate = hostileCycleRate
	}
	var counts []int
	for _, s := range strings.Split(*agentsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "synapse bench load: --agents %q: want counts like 1,8,32\n", *agentsFlag)
			return 2
		}
		counts = append(counts, n)
	}
	var floorUS float64
	if *floor {
		us, perS, err := measureFloor()
		if err != nil {
			fmt.Fprintln(stderr, "synapse bench load: --floor:", err)
			return 1
		}
		floorUS = us
		if !*asJSON {
			fmt.Fprintf(stdout, "floor: a bare WebSocket echo costs %.1f µs of server CPU per round trip (%.0f round trips/s); a cycle is two: %.0f µs\n", us, perS, 2*us)
		}
	}
	for _, n := range counts {
		cfg := bench.LoadConfig{URI: *uri, HubPID: *hubPID, Agents: n, Idle: *idle, Scoped: *fanout == "scoped",
			Duration: *duration, Conflict: *conflict, CycleRate: *cycleRate, Import: *importTasks, Hostile: *hostile, HostileKinds: kinds, Token: hubToken, Progress: func(s string) { fmt.Fprintf(stderr, "\r  %-60s", s) }}
		cfg.Attackers = attackProcess(cfg.URI, hubToken, *hostile, *attackersNice)
		stop := func() {}
		if *uri == "" {
			h, err := startHubChild(n+*idle+2**hostile, hubToken, *hostile > 0, *journalOn)
			if err != nil {
				fmt.Fprintln(stderr, "synapse bench load:", err)
				return 1
			}
			cfg.URI, cfg.HubPID, stop = h.uri, h.pid, h.stop
			cfg.Attackers = attackProcess(h.uri, hubToken, *hostile, *attackersNice)
		}
		fmt.Fprintf(stderr, "bench load: %d agents (+%d idle), %s fan-out, journal %v\n", n, *idle, *fanout, *journalOn)
		res, err := bench.RunLoad(context.Background(), cfg)
		stop()
		fmt.Fprintln(stderr)
		if err != nil {
			fmt.Fprintln(stderr, "synapse bench load:", err)
			return 1
		}
		res.FloorUSPerRoundTrip = floorUS
		if *asJSON {
			printJSON(stdout, res)
			continue
		}
		fmt.Fprintf(stdout, "agents %d (+%d idle, %s): connect %.2fs, %d cycles, %.0f cycles/s\n", res.Agents, res.Idle, res.Fanout, res.ConnectSeconds, res.Cycles, res.CyclesPerSecond)
		fmt.Fprintf(stdout, "  claim p50 %.0f µs p99 %.0f µs max %.0f µs; release p50 %.0f µs p99 %.0f µs; refused (conflict or error) %d\n",
			res.Claim.P50, res.Claim.P99, res.Claim.Max, res.Release.P50, res.Release.P99, res.Conflicts)
		for _, h := range res.Hostile {
			fmt.Fprintf(stdout, "  hostile %s (%d sockets): claim p50 %.0f µs (%.2f× quiet) p99 %.0f µs (%.2f× quiet), %d cycles; %d sent on %d sockets\n",
				h.Kind, h.Sockets, h.Claim.P50, h.P50Ratio, h.Claim.P99, h.P99Ratio, h.Cycles, h.Sent, h.Dials)
			fmt.Fprintf(stdout, "    hub %.2f cores, agents %.2f cores, attackers %.2f cores; hub RSS %d → peak %d → %d KiB; sockets ended %v; hub counters %v\n",
				h.HubCores, h.ClientCores, h.AttackerCores, h.RSSBeforeKB, h.RSSPeakKB, h.RSSAfterKB, h.Ends, h.Hub)
		}
		if im := res.Import; im != nil {
			fmt.Fprintf(stdout, "  board import of %d tasks: %.2fs waiting for each answer (%.0f/s), %.2fs pipelined (%.0f/s)\n",
				im.Tasks, im.SequentialSeconds, float64(im.Tasks)/im.SequentialSeconds, im.PipelinedSeconds, float64(im.Tasks)/im.PipelinedSeconds)
		}
		fmt.Fprintf(stdout, "  hub CPU %.0f µs/cycle, %.0f µs/chat (chat p50 %.0f µs); client CPU %.0f µs/cycle, %.0f µs/chat; hub RSS %d KiB\n",
			res.HubCPUPerCycle, res.HubCPUPerChat, res.Chat.P50, res.ClientCPUPerCycle, res.ClientCPUPerChat, res.HubRSSKB)
	}
	return 0
}

// hostileCycleRate is each agent's cycles per second beside hostile
// sockets, unless --cycle-rate says otherwise: 40 frames a second, under
// the hard cap per socket (--frames-per-socket 100) a hub off loopback
// keeps.
const hostileCycleRate = 20

// hubChild is a hub started as a child process by a benchmark.
type hubChild struct {
	uri        string // ws://127.0.0.1:port
	metricsURL string // its /metrics
	dbPath     string // its journal, "" without one
	pid        int
	stop       func() // interrupts it, waits for it, removes its journal
}

// startHubChild runs this binary's hub on a free loopback port with limits
// that fit sockets connections, its token set to token, its per-socket
// pacing of frames kept when paced (else off, for throughput), with a
// journal in a temporary folder when journalOn, given extra flags, and
// returns once it listens.
func startHubChild(sockets int, token string, paced, journalOn bool, extra ...string) (*hubChild, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := []string{"hub", "--port", strconv.Itoa(port), "--no-mcp", "--max-clients", strconv.Itoa(sockets + 16),
		"--max-connections-per-host", "0", "--max-claims-per-agent", "1000000"}
	if !paced {
		// Throughput: agents that cycle as fast as the hub answers are
		// not paced (a hub under attack keeps its default pacing).
		args = append(args, "--frames-per-socket", "0")
	}
	dir, dbPath := "", ""
	if journalOn {
		if dir, err = os.MkdirTemp("", "synapse-bench-"); err != nil {
			return nil, err
		}
		dbPath = filepath.Join(dir, "hub.db")
		args = append(args, "--db", dbPath)
	} else {
		args = append(args, "--no-db")
	}
	cmd := exec.Command(self, append(args, extra...)...)
	cmd.Env = append(os.Environ(), "SYNAPSE_TOKEN="+token)
	hubproc.DieWithParent(cmd) // a crashed or killed bench leaves no hub behind
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	up := hubproc.Listening(out)
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	select {
	case <-up:
	case <-time.After(30 * time.Second):
		stop()
		return nil, errors.New("the hub did not start within 30 s")
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	return &hubChild{uri: "ws://" + addr, metricsURL: "http://" + addr + "/metrics", dbPath: dbPath, pid: cmd.Process.Pid, stop: stop}, nil
}

// attackProcess starts a hostile phase's attackers as a child process
// ('synapse bench attack'), so that they do not share a Go scheduler with
// the good agents measured beside them, at nice value nice when it is not
// 0 (through nice(1), so that every thread of the child has it); its stop
// interrupts the child and reads what it did from its stdout.
//
// On one machine the attackers' own CPU is part of what the agents meet:
// 200 sockets flooding valid frames spend more than a core writing into
// their kernel send buffers, whatever the hub reads (docs/benchmarks.md,
// "Hostile clients"). A nice of 19 leaves them the cores the hub and the
// agents do not use, which separates what the hub can isolate from what
// sharing the machine with the attacker costs.
func attackProcess(uri, token string, n, nice int) func(kinds []string, maxMsg int) (func() (bench.AttackStats, error), error) {
	return func(kinds []string, maxMsg int) (func() (bench.AttackStats, error), error) {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		args := attackCommand(self, uri, kinds, n, maxMsg, nice)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "SYNAPSE_TOKEN="+token)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		hubproc.DieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return func() (bench.AttackStats, error) {
			_ = cmd.Process.Signal(os.Interrupt)
			var st bench.AttackStats
			if err := cmd.Wait(); err != nil {
				return st, fmt.Errorf("attackers: %w", err)
			}
			if err := json.Unmarshal([]byte(out.String()), &st); err != nil {
				return st, fmt.Errorf("attackers: %w", err)
			}
			return st, nil
		}, nil
	}
}

// attackCommand is the attackers' command line: 'synapse bench attack',
// under nice(1) when nice is not 0.
func attackCommand(self, uri string, kinds []string, n, maxMsg, nice int) []string {
	args := []string{self, "bench", "attack", "--uri", uri, "--kinds", strings.Join(kinds, ","),
		"--sockets", strconv.Itoa(n), "--max-msg-bytes", strconv.Itoa(maxMsg)}
	if nice != 0 {
		args = append([]string{"nice", "-n", strconv.Itoa(nice)}, args...)
	}
	return args
}

// runAttack is 'synapse bench attack' (bench load --hostile's child): the
// attackers of one hostile phase, until interrupted; then what they did,
// as JSON on stdout. The hub's token, if any, is in SYNAPSE_TOKEN.
func runAttack(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench attack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	uri := fs.String("uri", "", "the hub")
	kinds := fs.String("kinds", "malformed", "attacks, comma-separated")
	n := fs.Int("sockets", 1, "attackers")
	maxMsg := fs.Int("max-msg-bytes", 1<<20, "the hub's frame limit")
	if err := fs.Parse(args); err != nil || *uri == "" {
		fmt.Fprintln(stderr, "synapse bench attack --uri URI --kinds K --sockets N: bench load --hostile's attackers")
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	st, err := bench.RunAttack(ctx, *uri, os.Getenv("SYNAPSE_TOKEN"), *maxMsg, strings.Split(*kinds, ","), *n)
	if err != nil {
		fmt.Fprintln(stderr, "synapse bench attack:", err)
		return 1
	}
	printJSON(stdout, st)
	return 0
}

// measureFloor runs this binary's bare echo server as a child process and
// measures it with the load client.
func measureFloor() (usPerRoundTrip, perSecond float64, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(self, "bench", "echo-server", "--port", strconv.Itoa(port))
	hubproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	uri := "ws://127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for { // until the child listens
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
			break
		}
		if ctx.Err() != nil {
			return 0, 0, errors.New("the echo server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return bench.MeasureEcho(ctx, uri, cmd.Process.Pid, 20000)
}

// runEchoServer is 'synapse bench echo-server --port P' (bench load
// --floor's child): a bare WebSocket echo on loopback.
func runEchoServer(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench echo-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 0, "loopback port to listen on")
	if err := fs.Parse(args); err != nil || *port <= 0 {
		fmt.Fprintln(stderr, "synapse bench echo-server --port P: the bare echo bench load --floor measures")
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(*port))
	if err != nil {
		fmt.Fprintln(stderr, "synapse bench echo-server:", err)
		return 1
	}
	if err := bench.ServeEcho(ln); err != nil {
		fmt.Fprintln(stderr, "synapse bench echo-server:", err)
		return 1
	}
	return 0
}
