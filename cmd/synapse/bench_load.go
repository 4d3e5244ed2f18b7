package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/bench"
	"github.com/synapse-hub/synapse/internal/hubproc"
)

const benchLoadUsage = `Usage: synapse bench load [--agents 1,8,32] [--idle N] [--fanout full|scoped] [--journal] [--duration 5s] [--hostile N] [--json]

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
	uri := fs.String("uri", "", "measure the hub at this address instead of starting one (its CPU is read with --hub-pid)")
	hubPID := fs.Int("hub-pid", 0, "with --uri: the hub's process id, to read its CPU and memory from /proc")
	asJSON := fs.Bool("json", false, "one JSON object per agent count, one per line")
	hostile := fs.Int("hostile", 0, "sockets that flood malformed frames (garbage, deep nesting, 64 KiB garbage) through the cycling phase, as fast as the hub takes them")
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
			Duration: *duration, Conflict: *conflict, Hostile: *hostile, Progress: func(s string) { fmt.Fprintf(stderr, "\r  %-60s", s) }}
		stop := func() {}
		if *uri == "" {
			h, err := startHubChild(n+*idle, *journalOn)
			if err != nil {
				fmt.Fprintln(stderr, "synapse bench load:", err)
				return 1
			}
			cfg.URI, cfg.HubPID, stop = h.uri, h.pid, h.stop
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
		fmt.Fprintf(stdout, "  claim p50 %.0f µs p99 %.0f µs max %.0f µs; release p50 %.0f µs p99 %.0f µs; refused (conflict) %d\n",
			res.Claim.P50, res.Claim.P99, res.Claim.Max, res.Release.P50, res.Release.P99, res.Conflicts)
		if res.Hostile > 0 {
			fmt.Fprintf(stdout, "  hostile: %d sockets sent %d malformed frames; the hub closed %d of them\n", res.Hostile, res.HostileFrames, res.HostileClosed)
		}
		fmt.Fprintf(stdout, "  hub CPU %.0f µs/cycle, %.0f µs/chat (chat p50 %.0f µs); client CPU %.0f µs/cycle, %.0f µs/chat; hub RSS %d KiB\n",
			res.HubCPUPerCycle, res.HubCPUPerChat, res.Chat.P50, res.ClientCPUPerCycle, res.ClientCPUPerChat, res.HubRSSKB)
	}
	return 0
}

// hubChild is a hub started as a child process by a benchmark.
type hubChild struct {
	uri        string // ws://127.0.0.1:port
	metricsURL string // its /metrics
	dbPath     string // its journal, "" without one
	pid        int
	stop       func() // interrupts it, waits for it, removes its journal
}

// startHubChild runs this binary's hub on a free loopback port with limits
// that fit sockets connections, with a journal in a temporary folder when
// journalOn, given extra flags, and returns once it listens.
func startHubChild(sockets int, journalOn bool, extra ...string) (*hubChild, error) {
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
	cmd.Env = append(os.Environ(), "SYNAPSE_TOKEN=")
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
