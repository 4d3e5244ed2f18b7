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

func commands() []command {
	return []command{
		{"demo", "play a three-agent scene on an ephemeral hub and print success", runDemo},
		{"inbox", "show (and --ack) the directed messages waiting for --name", runInbox},
		{"listen", "print what the hub sends --name as it arrives (mailbox first)", runListen},
		{"completion", "print a bash, zsh or fish completion script", runCompletion},
		{"hub", "run the coordination hub (WebSocket + /health + /metrics on 127.0.0.1:8876)", runHub},
		{"bench", "measure the core (bench core) or the durable journal (bench journal)", runBench},
		{"journal", "check, compact or show stats of a journal file", runJournal},
		{"claim", "claim a task and its files (refused: says who holds what)", runClaim},
		{"renew", "renew a claim you hold", runRenew},
		{"release", "release a claim, with evidence for its receipt", runRelease},
		{"handoff", "pass a claim you hold to another online agent", runHandoff},
		{"update", "change a claim's status, note or data_ref", runUpdate},
		{"checkpoint", "save a resume point on a claim you hold", runCheckpoint},
		{"wait", "block until a task is free (woken by the hub)", runWait},
		{"lock", "hold a claim while a command runs: lock ID -- CMD", runLock},
		{"send", "send a message to an agent, a project, a role or all", runSend},
		{"who", "list the agents online", runWho},
		{"status", "hub health, and the claims you hold", runStatus},
		{"state", "list the live claims", runState},
		{"board", "show the task board", runBoard},
		{"task", "plan on the board: task declare|update|progress", runTask},
		{"mcp", "serve the hub to Claude Code, Codex or Cursor as an MCP server (stdio or --http)", runMCP},
		{"init", "write Claude Code, Codex or Cursor's MCP configuration for this project", runInit},
		{"guard", "Claude Code pre-edit hook: deny editing a file you have not claimed", runGuard},
		{"git-hook", "pre-commit check refusing files claimed by others: git-hook install|check", runGitHook},
		{"doctor", "check the hub, journal, port and this project's agent integrations", runDoctor},
		{"version", "print the version and wire protocol", runVersion},
		{"help", "show this help", runHelp},
	}
}

const usageHeader = `synapse — a coordination hub for fleets of AI coding agents.

Agents claim tasks and files with leases (epoch-fenced, expiring), plan on a
shared task board, and message each other; the hub decides who holds what.

Usage:
  synapse <command> [flags]

Commands:
`

func runHelp(_ []string, stdout, _ io.Writer) int {
	fmt.Fprint(stdout, usageHeader)
	for _, c := range commands() {
		fmt.Fprintf(stdout, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(stdout, "\nRun 'synapse <command> --help' for a command's flags.\n")
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
