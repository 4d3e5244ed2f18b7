package main

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"
)

var updateCLIDoc = flag.Bool("update-cli-doc", false, "rewrite docs/cli.md's command sections from the binary's help")

// subcommands are the commands whose sub-commands have help of their own.
var subcommands = map[string][]string{
	"journal":  {"check", "compact", "stats"},
	"task":     {"declare", "update", "progress"},
	"git-hook": {"install", "uninstall", "check", "post-commit", "post-merge"},
	"ns":       {"list", "move", "drain"},
	"tls":      {"selfsigned"},
	"bench":    {"load", "soak", "crashloop"},
	"token":    {"issue", "list", "revoke"},
	"role":     {"grant", "list"},
	"acl":      {"check"},
	"identity": {"list", "reclaim", "key"},
}

// docs/cli.md reproduces every command's --help: this test keeps it true.
// After changing a command, regenerate it with
//
//	go test ./cmd/synapse -run TestCLIDoc -update-cli-doc
func TestCLIDoc_MatchesEveryCommandsHelp(t *testing.T) {
	// Help texts name paths under the home folder and this binary: fix them
	// to the values the document shows.
	for k, v := range map[string]string{"HOME": "/home/user", "XDG_STATE_HOME": "", "XDG_CONFIG_HOME": "",
		"SYNAPSE_CONFIG": "", "SYNAPSE_URI": "", "SYNAPSE_NAME": "", "SYNAPSE_TOKEN": "", "SYNAPSE_CA": "", "PATH": ""} {
		t.Setenv(k, v)
	}
	var b strings.Builder
	b.WriteString("## Commands\n")
	for _, g := range groups() {
		b.WriteString("\n**" + g.title + "**\n\n| Command | What it does |\n|---|---|\n")
		for _, c := range g.commands {
			b.WriteString("| `" + c.name + "` | " + strings.ReplaceAll(c.summary, "|", "\\|") + " |\n")
		}
	}
	help := func(heading string, args ...string) {
		var out, errb bytes.Buffer
		run(append(args, "--help"), &out, &errb)
		b.WriteString("\n" + heading + " synapse " + strings.Join(args, " ") + "\n\n```text\n" + strings.TrimRight(out.String()+errb.String(), "\n") + "\n```\n")
	}
	for _, c := range commands() {
		help("###", c.name)
		for _, sub := range subcommands[c.name] {
			help("####", c.name, sub)
		}
	}
	want := b.String()
	raw, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	head, _, ok := strings.Cut(string(raw), "## Commands\n")
	if !ok {
		t.Fatal(`docs/cli.md has no "## Commands" section`)
	}
	if *updateCLIDoc {
		if err := os.WriteFile("../../docs/cli.md", []byte(head+want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := string(raw)[len(head):]; got != want {
		t.Fatalf("docs/cli.md does not match the commands' --help; regenerate it with\n  go test ./cmd/synapse -run TestCLIDoc -update-cli-doc")
	}
}
