package main

import (
	"context"
	"crypto/tls"
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
	"github.com/synapse-hub/synapse/certs"
	"github.com/synapse-hub/synapse/internal/hubproc"
)

const benchLoadUsage = `Usage: synapse bench load [--agents 1,8,32] [--idle N] [--rate R] [--fanout full|scoped|own] [--journal] [--duration 5s] [--import N] [--json]
       synapse bench load --uri ws://HOST:PORT --hub-pid PID [--vs ws://HOST:PORT --vs-pid PID] [flags]
       synapse bench load --hostile N [--hostile-kind K,…] [flags]

Measures a hub over real sockets, as users meet it. Without --uri it starts
'synapse hub' as a child process on a free loopback port (memory only, or
with a journal in a temporary folder with --journal), one per agent count,
with its caps lifted (clients, per-host sockets, claims per agent) and, unless
--hostile, its per-socket pacing off. With --uri it measures any hub that
speaks protocol v2, the reference included (start it with
--max-connections-per-host 0 --max-clients 4096, and ulimit -n above the
sockets), reading its CPU and memory from /proc/<--hub-pid>.

For each count: every agent (and --idle more) connects at once (the connect
storm: done when every agent's registration is acknowledged by its own
presence_update joined, which every v2 hub sends, or with --fanout own by
the pong of a ping behind it), each working agent cycles claim → grant →
release → grant on its own files for --duration (a --conflict share of its
claims aims at one contended scope), then one agent sends directed chats to
another. Agent i is named load/aI, or loadI/agent (a namespace of its own)
with --fanout scoped or own. --fanout scoped asks for scoped fan-out (and so
the compact presence); --fanout own registers as the Go SDK does: its own
fan-out and no presence at all (the Synapse-Presence header), the form for a
fleet of our own clients. Each is asked for only if the hub's welcome
announces it (features scoped_fanout; own_fanout and ping), and the report
says which fan-out ran. --sdk makes every agent a Go SDK client (client.Dial
with its defaults) cycling through its Claim and Release calls.

--rate R is the offered load: every agent runs R cycles per second (spread
over each period, catching up at once when behind), so two hubs run at one
--rate get the same load and their CPU per cycle compares like with like.
--rate 0 (the default) is saturation: each agent claims again as soon as
its release is granted, and CPU per cycle falls as the hub batches more.

Prints the connect storm (seconds, hub CPU, hub RSS after it), the offered
and achieved cycles/s, p50/p99/max of claim and release, the hub's CPU per
cycle (read from /proc: the load client shares the machine's cores, so hub
CPU per operation is the figure to compare) and in cores, per directed chat,
the client's CPU, and the hub's RSS at the end. --json prints one object per
agent count, one per line. A progress line goes to stderr.

With --vs URI --vs-pid PID, each agent count is run against --uri (or the
started hub) and then, with the same flags, against the hub at --vs, and a
line gives the ratio of their hub CPU per cycle (--label and --vs-label name
them). docs/benchmarks.md, "Side by side with the reference", gives the
commands.

With --import N, the first agent then declares N tasks on the board, once
waiting for each answer (a script through the SDK) and once pipelined (every
declaration sent before any answer is read), and the time of each is printed.

With --hostile N, the cycling phase is the quiet baseline (each agent at
--rate, 20 cycles/s unless given: agents that think between claims),
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
	fanout := fs.String("fanout", "full", "full: every grant to every socket, the reference's presence; scoped: each agent in its own namespace, scoped fan-out, compact presence; own: as the Go SDK registers, its own fan-out and no presence")
	sdk := fs.Bool("sdk", false, "every agent is a Go SDK client (client.Dial with its defaults: its own fan-out, no presence) cycling through Claim and Release: what a fleet of our own agents costs the hub (no chat or hostile phase)")
	journalOn := fs.Bool("journal", false, "the started hub keeps a journal (synchronous=FULL for claims) in a temporary folder")
	duration := fs.Duration("duration", 5*time.Second, "how long each cycling phase runs")
	conflict := fs.Float64("conflict", 0, "share of claims aimed at one contended scope (0..1)")
	rate := fs.Float64("rate", 0, "claim+release cycles per second each agent offers (an offered load, the same for every hub measured), 0 = saturation: claim again as soon as the release is granted (with --hostile: 20)")
	cycleRate := fs.Float64("cycle-rate", 0, "deprecated: --rate")
	importTasks := fs.Int("import", 0, "after the cycling phases, the first agent declares this many board tasks, waiting for each answer and then pipelined")
	uri := fs.String("uri", "", "measure the hub at this address instead of starting one (its CPU is read with --hub-pid)")
	hubPID := fs.Int("hub-pid", 0, "with --uri: the hub's process id, to read its CPU and memory from /proc")
	vs := fs.String("vs", "", "also measure the open hub at this address, after each run of the first with the same flags, and print the ratio of their hub CPU per cycle")
	vsPID := fs.Int("vs-pid", 0, "with --vs: that hub's process id")
	label := fs.String("label", "hub", "the first hub's name in the output")
	vsLabel := fs.String("vs-label", "vs", "the --vs hub's name in the output")
	asJSON := fs.Bool("json", false, "one JSON object per agent count, one per line")
	hostile := fs.Int("hostile", 0, "hostile sockets: after the quiet cycling phase, one phase per --hostile-kind beside this many attackers")
	hostileKind := fs.String("hostile-kind", "malformed", "attacks, comma-separated, one phase each: "+strings.Join(bench.HostileKinds, ", ")+", or mix (all at once); or "+strings.Join(bench.BaselineKinds, ", ")+" (no attack: the fan-out to as many more bound sockets)")
	token := fs.String("token", "", "with --uri: the hub's connect token, sent by every agent")
	ca := fs.String("ca", "", "with --uri wss://…: PEM `FILE` of the CA that signed the hub's certificate (env SYNAPSE_CA)")
	tlsOn := fs.Bool("tls", false, "the started hub serves TLS (wss://) with a fresh self-signed certificate, to measure what TLS costs; not with --hostile")
	attackersNice := fs.Int("attackers-nice", 0, "with --hostile: run the attackers' process at this nice value (Linux nice, 1..19): 19 leaves them only the CPU the hub and the agents do not use, as attackers on another machine would; 0 = they compete for the cores as the hub does")
	floor := fs.Bool("floor", false, "first measure a bare WebSocket echo server (a child process) with the same client: no hub can cost less CPU per round trip on this machine, and a cycle is two")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *fanout != "full" && *fanout != "scoped" && *fanout != "own" {
		fmt.Fprintln(stderr, "synapse bench load: --fanout is full, scoped or own")
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	offered, err := offeredRate(*rate, *cycleRate, set["rate"], set["cycle-rate"])
	if err != nil {
		fmt.Fprintln(stderr, "synapse bench load:", err)
		return 2
	}
	if *sdk && *hostile > 0 {
		fmt.Fprintln(stderr, "synapse bench load: --sdk measures our own agents; run --hostile with the load client")
		return 2
	}
	if *vs != "" && *hostile > 0 {
		fmt.Fprintln(stderr, "synapse bench load: --vs compares the quiet phase; run --hostile against one hub")
		return 2
	}
	kinds, err := bench.ParseHostileKinds(*hostileKind)
	if err != nil {
		fmt.Fprintln(stderr, "synapse bench load: --hostile-kind:", err)
		return 2
	}
	if *tlsOn && (*uri != "" || *hostile > 0) {
		fmt.Fprintln(stderr, "synapse bench load: --tls starts a TLS hub: drop --uri (give --ca for a wss:// one) and --hostile (attackers dial ws://)")
		return 2
	}
	tlsCfg, hubTLSArgs, cleanTLS, err := benchTLS(*tlsOn, *ca)
	if err != nil {
		fmt.Fprintln(stderr, "synapse bench load:", err)
		return 1
	}
	defer cleanTLS()
	hubToken := *token
	if *uri == "" && *hostile > 0 && slices.ContainsFunc(kinds, func(k []string) bool { return slices.Contains(k, "bruteforce") }) {
		hubToken = "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if *hostile > 0 && offered == 0 {
		// Agents that think between claims, as a fleet's do: agents
		// cycling as fast as the hub answers would measure the hub's
		// throughput, not what the attack costs a waiting agent.
		offered = hostileCycleRate
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
		if err := raiseNoFile(n + *idle + 2**hostile + 64); err != nil {
			fmt.Fprintln(stderr, "synapse bench load:", err)
			return 1
		}
		cfg := bench.LoadConfig{URI: *uri, HubPID: *hubPID, Agents: n, Idle: *idle, Fanout: *fanout, SDK: *sdk,
			Duration: *duration, Conflict: *conflict, Rate: offered, Import: *importTasks, Hostile: *hostile, HostileKinds: kinds, Token: hubToken, TLS: tlsCfg, Progress: func(s string) { fmt.Fprintf(stderr, "\r  %-60s", s) }}
		cfg.Attackers = attackProcess(cfg.URI, hubToken, *hostile, *attackersNice)
		stop := func() {}
		if *uri == "" {
			h, err := startHubChild(n+*idle+2**hostile, hubToken, *hostile > 0, *journalOn, hubTLSArgs...)
			if err != nil {
				fmt.Fprintln(stderr, "synapse bench load:", err)
				return 1
			}
			cfg.URI, cfg.HubPID, stop = h.uri, h.pid, h.stop
			cfg.Attackers = attackProcess(h.uri, hubToken, *hostile, *attackersNice)
		}
		type run struct {
			label string
			cfg   bench.LoadConfig
		}
		runs := []run{{*label, cfg}}
		if *vs != "" { // an open hub, measured the same way right after
			other := cfg
			other.URI, other.HubPID, other.Token, other.Attackers = *vs, *vsPID, "", nil
			runs = append(runs, run{*vsLabel, other})
		}
		var results []bench.LoadResult
		for i, r := range runs {
			hub := r.cfg.URI
			if i == 0 && *uri == "" {
				hub = fmt.Sprintf("a started hub (journal %v)", *journalOn)
			}
			fmt.Fprintf(stderr, "bench load: %s, %s: %d agents (+%d idle) at %s, %s fan-out asked\n", r.label, hub, n, *idle, rateText(offered), *fanout)
			res, err := bench.RunLoad(context.Background(), r.cfg)
			if i == 0 {
				stop()
			}
			fmt.Fprintln(stderr)
			if err != nil {
				fmt.Fprintf(stderr, "synapse bench load: %s: %v\n", r.label, err)
				return 1
			}
			res.FloorUSPerRoundTrip = floorUS
			if *vs != "" {
				res.Label = r.label
			}
			results = append(results, res)
			if *asJSON {
				printJSON(stdout, res)
			} else {
				printLoadResult(stdout, res)
			}
		}
		if len(results) == 2 {
			printComparison(stdout, results[0], results[1], *asJSON)
		}
	}
	return 0
}

// offeredRate reconciles --rate and its deprecated alias --cycle-rate
// (set* say which were given): one rate, or an error when both were given
// different values or it is negative.
func offeredRate(rate, cycleRate float64, setRate, setCycle bool) (float64, error) {
	if setCycle && !setRate {
		rate = cycleRate
	}
	if setRate && setCycle && rate != cycleRate {
		return 0, fmt.Errorf("--rate %g and --cycle-rate %g disagree (--cycle-rate is the old name of --rate)", rate, cycleRate)
	}
	if rate < 0 {
		return 0, fmt.Errorf("--rate %g: want cycles per second per agent, or 0 for saturation", rate)
	}
	return rate, nil
}

// rateText says what --rate offers.
func rateText(rate float64) string {
	if rate <= 0 {
		return "saturation (--rate 0)"
	}
	return strconv.FormatFloat(rate, 'g', -1, 64) + " cycles/s each"
}

// printLoadResult prints one run for people.
func printLoadResult(w io.Writer, res bench.LoadResult) {
	name := ""
	if res.Label != "" {
		name = res.Label + ": "
	}
	fanout := res.Fanout + " fan-out"
	if res.Fanout == "sdk" {
		fanout = "Go SDK agents (own fan-out, no presence)"
	} else if res.Fanout != res.FanoutAsked {
		fanout += ", " + res.FanoutAsked + " asked: the hub does not announce it"
	}
	features := "none"
	if len(res.Hub.Features) > 0 {
		features = strings.Join(res.Hub.Features, ",")
	}
	fmt.Fprintf(w, "%sagents %d (+%d idle, %s), hub %s protocol %d, features %s\n", name, res.Agents, res.Idle, fanout, res.Hub.HubID, res.Hub.ProtocolVersion, features)
	fmt.Fprintf(w, "  connect storm %.2fs (hub CPU %.2fs, client CPU %.2fs; hub RSS after it %d KiB)\n", res.ConnectSeconds, res.HubCPUConnectSeconds, res.ClientCPUConnectSeconds, res.HubRSSConnectKB)
	offered := "saturation"
	if res.OfferedPerSecond > 0 {
		offered = fmt.Sprintf("%.0f/s offered (%g each)", res.OfferedPerSecond, res.Rate)
	}
	fmt.Fprintf(w, "  %s: %d cycles, %.0f cycles/s achieved; hub %.0f µs CPU/cycle (%.2f cores)\n", offered, res.Cycles, res.CyclesPerSecond, res.HubCPUPerCycle, res.HubCores)
	fmt.Fprintf(w, "  claim p50 %.0f µs p99 %.0f µs max %.0f µs; release p50 %.0f µs p99 %.0f µs; refused (conflict or error) %d\n",
		res.Claim.P50, res.Claim.P99, res.Claim.Max, res.Release.P50, res.Release.P99, res.Conflicts)
	for _, h := range res.Hostile {
		fmt.Fprintf(w, "  hostile %s (%d sockets): claim p50 %.0f µs (%.2f× quiet) p99 %.0f µs (%.2f× quiet), %d cycles; %d sent on %d sockets\n",
			h.Kind, h.Sockets, h.Claim.P50, h.P50Ratio, h.Claim.P99, h.P99Ratio, h.Cycles, h.Sent, h.Dials)
		fmt.Fprintf(w, "    hub %.2f cores, agents %.2f cores, attackers %.2f cores; hub RSS %d → peak %d → %d KiB; sockets ended %v; hub counters %v\n",
			h.HubCores, h.ClientCores, h.AttackerCores, h.RSSBeforeKB, h.RSSPeakKB, h.RSSAfterKB, h.Ends, h.Hub)
	}
	if im := res.Import; im != nil {
		fmt.Fprintf(w, "  board import of %d tasks: %.2fs waiting for each answer (%.0f/s), %.2fs pipelined (%.0f/s)\n",
			im.Tasks, im.SequentialSeconds, float64(im.Tasks)/im.SequentialSeconds, im.PipelinedSeconds, float64(im.Tasks)/im.PipelinedSeconds)
	}
	if res.Chat.Count == 0 {
		fmt.Fprintf(w, "  client CPU %.0f µs/cycle; hub RSS at the end %d KiB\n", res.ClientCPUPerCycle, res.HubRSSKB)
		return
	}
	fmt.Fprintf(w, "  hub CPU %.0f µs/chat (chat p50 %.0f µs); client CPU %.0f µs/cycle, %.0f µs/chat; hub RSS at the end %d KiB\n",
		res.HubCPUPerChat, res.Chat.P50, res.ClientCPUPerCycle, res.ClientCPUPerChat, res.HubRSSKB)
}

// comparison is the side by side of one agent count on two hubs (--vs).
type comparison struct {
	Agents int     `json:"agents"`
	Idle   int     `json:"idle"`
	Rate   float64 `json:"rate_per_agent"`
	A      string  `json:"hub"`
	B      string  `json:"vs"`
	// CPURatio is B's hub CPU per cycle over A's; the cycles/s are what
	// each achieved.
	CPURatio     float64 `json:"vs_hub_cpu_per_cycle_ratio"`
	ACyclesPerS  float64 `json:"hub_cycles_per_s"`
	BCyclesPerS  float64 `json:"vs_cycles_per_s"`
	ACPUPerCycle float64 `json:"hub_cpu_us_per_cycle"`
	BCPUPerCycle float64 `json:"vs_cpu_us_per_cycle"`
}

func printComparison(w io.Writer, a, b bench.LoadResult, asJSON bool) {
	c := comparison{Agents: a.Agents, Idle: a.Idle, Rate: a.Rate, A: a.Label, B: b.Label,
		ACyclesPerS: a.CyclesPerSecond, BCyclesPerS: b.CyclesPerSecond, ACPUPerCycle: a.HubCPUPerCycle, BCPUPerCycle: b.HubCPUPerCycle}
	if a.HubCPUPerCycle > 0 {
		c.CPURatio = b.HubCPUPerCycle / a.HubCPUPerCycle
	}
	if asJSON {
		printJSON(w, struct {
			Compare comparison `json:"compare"`
		}{c})
		return
	}
	fmt.Fprintf(w, "side by side, %d agents (+%d idle) at %s: hub CPU/cycle %s %.0f µs, %s %.0f µs (%.2f×); cycles/s %.0f vs %.0f\n",
		c.Agents, c.Idle, rateText(c.Rate), c.A, c.ACPUPerCycle, c.B, c.BCPUPerCycle, c.CPURatio, c.ACyclesPerS, c.BCyclesPerS)
}

// hostileCycleRate is each agent's cycles per second beside hostile
// sockets, unless --rate says otherwise: 40 frames a second, under
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
	ws, web := "ws://", "http://"
	if slices.Contains(extra, "--tls-cert") {
		ws, web = "wss://", "https://"
	}
	return &hubChild{uri: ws + addr, metricsURL: web + addr + "/metrics", dbPath: dbPath, pid: cmd.Process.Pid, stop: stop}, nil
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

// benchTLS is the TLS of a bench load run: with tlsOn a fresh CA and pair
// in a temporary folder for the started hub (its flags in hubArgs), else
// the CA file given (or SYNAPSE_CA) for a wss:// --uri; clean removes
// the folder.
func benchTLS(tlsOn bool, ca string) (cfg *tls.Config, hubArgs []string, clean func(), err error) {
	clean = func() {}
	if ca == "" {
		ca = os.Getenv("SYNAPSE_CA")
	}
	if !tlsOn {
		if ca == "" {
			return nil, nil, clean, nil
		}
		cfg, err = certs.ClientConfig(ca, nil)
		return cfg, nil, clean, err
	}
	dir, err := os.MkdirTemp("", "synapse-bench-tls-")
	if err != nil {
		return nil, nil, clean, err
	}
	clean = func() { os.RemoveAll(dir) }
	w, err := certs.SelfSigned(dir, certs.Options{})
	if err == nil {
		cfg, err = certs.ClientConfig(w.CA, nil)
	}
	return cfg, []string{"--tls-cert", w.Cert, "--tls-key", w.Key}, clean, err
}
