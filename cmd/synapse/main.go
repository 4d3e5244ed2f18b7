// Command synapse is the Synapse coordination hub and its client.
//
// One file per command family: version.go, bench.go, journal.go, ...
package main

import (
	"fmt"
	"io"
	"os"
)

// command is one sub-command of the synapse binary.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// group is a heading of `synapse help` and the commands under it.
type group struct {
	title    string
	commands []command
}

func groups() []group {
	return []group{
		{"Start here", []command{
			{"demo", "play a three-agent scene on an ephemeral hub and print success", runDemo},
			{"hub", "run the coordination hub (WebSocket + /health + /metrics on 127.0.0.1:8876)", runHub},
			{"service", "run the hub as a user service, always there: service install|uninstall|status", runService},
		}},
		{"Claims", []command{
			{"claim", "claim a task and its files (refused: says who holds what)", runClaim},
			{"renew", "renew a claim you hold", runRenew},
			{"release", "release a claim, with evidence for its receipt", runRelease},
			{"handoff", "pass a claim you hold to another online agent", runHandoff},
			{"update", "change a claim's status, note or data_ref", runUpdate},
			{"checkpoint", "save a resume point on a claim you hold", runCheckpoint},
			{"wait", "block until a task is free (woken by the hub)", runWait},
			{"lock", "hold a claim while a command runs: lock ID -- CMD", runLock},
		}},
		{"Messages", []command{
			{"send", "send a message to an agent, a project, a role or all", runSend},
			{"inbox", "show (and --ack) the directed messages waiting for --name; --wait blocks until one is there", runInbox},
			{"listen", "print what the hub sends --name as it arrives (mailbox first)", runListen},
			{"arm", "keep a waiter running: a command for every message to an agent (for agents without channels)", runArm},
			{"channel", "private channels: create, invite, join, leave, list, history, send", runChannel},
		}},
		{"Looking around", []command{
			{"who", "list the agents online", runWho},
			{"status", "hub health, and the claims you hold", runStatus},
			{"state", "list the live claims", runState},
			{"board", "show the task board", runBoard},
			{"task", "plan on the board: task declare|update|progress", runTask},
		}},
		{"Agent integrations", []command{
			{"mcp", "serve the hub to Claude Code, Codex or Cursor as an MCP server (stdio or --http)", runMCP},
			{"init", "write Claude Code, Codex or Cursor's MCP configuration for this project", runInit},
			{"guard", "agent CLIs' pre-edit hook: deny writing a file you have not claimed", runGuard},
			{"git-hook", "git hooks: refuse files claimed by others, release claims on commit or merge", runGitHook},
			{"doctor", "check the hub, journal, port and this project's agent integrations", runDoctor},
		}},
		{"Operating a hub", []command{
			{"ns", "which hub owns each namespace, and the links to peer hubs: ns list", runNS},
			{"token", "per-agent credentials bound to a name pattern and roles: token issue|list|revoke", runToken},
			{"role", "roles are granted, not claimed, with credentials or an ACL: role grant|revoke|list", runRole},
			{"acl", "access rules (hub --acl FILE): acl check --as NAME PERMISSION KIND:VALUE", runACL},
			{"journal", "check, compact or show stats of a journal file", runJournal},
			{"tls", "make a test CA and certificates for a TLS hub: tls selfsigned --out DIR", runTLS},
			{"identity", "names pinned to keys: identity list|reclaim NAME|key", runIdentity},
			{"bench", "measure the core (bench core) or the durable journal (bench journal)", runBench},
		}},
		{"Other", []command{
			{"completion", "print a bash, zsh or fish completion script", runCompletion},
			{"version", "print the version and wire protocol", runVersion},
			{"help", "show this help", runHelp},
		}},
	}
}

// commands lists every command, in help order.
func commands() []command {
	var all []command
	for _, g := range groups() {
		all = append(all, g.commands...)
	}
	return all
}

const usageHeader = `synapse — a coordination hub for fleets of AI coding agents.

Agents claim tasks and files with leases (epoch-fenced, expiring), plan on a
shared task board, and message each other; the hub decides who holds what.

Usage:
  synapse <command> [flags]
`

const usageFooter = `
Client commands reach the hub at --uri, act as --name and present --token.
Each comes from its flag, else the environment (SYNAPSE_URI, SYNAPSE_NAME,
SYNAPSE_TOKEN), else ~/.config/synapse/config.json ({"uri","name","token"};
SYNAPSE_CONFIG names another file), else the defaults: ws://127.0.0.1:8876,
your login name, no token.

Exit codes: 0 ok, 1 the hub said no, 2 usage error, 3 no hub answered,
4 a wait timed out. Every query takes --json.

Run 'synapse <command> --help' for a command's flags.
`

func runHelp(_ []string, stdout, _ io.Writer) int {
	fmt.Fprint(stdout, usageHeader)
	for _, g := range groups() {
		fmt.Fprintf(stdout, "\n%s:\n", g.title)
		for _, c := range g.commands {
			fmt.Fprintf(stdout, "  %-11s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprint(stdout, usageFooter)
	return 0
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		return runHelp(nil, stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "synapse: unknown command %q. Run 'synapse help' for the list.\n", args[0])
	return 2
}
