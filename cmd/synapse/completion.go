package main

import (
	"fmt"
	"io"
	"strings"
)

const completionUsage = `Usage: synapse completion bash|zsh|fish

Prints a shell completion script for the synapse commands. Install it with:

  bash:  synapse completion bash > ~/.local/share/bash-completion/completions/synapse
  zsh:   synapse completion zsh > "${fpath[1]}/_synapse"
  fish:  synapse completion fish > ~/.config/fish/completions/synapse.fish
`

func runCompletion(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, completionUsage)
		if len(args) == 1 {
			return exitOK
		}
		return exitUsage
	}
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	words := strings.Join(names, " ")
	switch args[0] {
	case "bash":
		fmt.Fprintf(stdout, "# bash completion for synapse\n_synapse() {\n  if [ \"$COMP_CWORD\" -eq 1 ]; then\n    COMPREPLY=($(compgen -W %q -- \"${COMP_WORDS[1]}\"))\n  else\n    COMPREPLY=($(compgen -f -- \"${COMP_WORDS[COMP_CWORD]}\"))\n  fi\n}\ncomplete -F _synapse synapse\n", words)
	case "zsh":
		fmt.Fprintf(stdout, "#compdef synapse\n_synapse() {\n  if (( CURRENT == 2 )); then\n    compadd %s\n  else\n    _files\n  fi\n}\ncompdef _synapse synapse\n", words)
	case "fish":
		for _, c := range commands() {
			fmt.Fprintf(stdout, "complete -c synapse -n __fish_use_subcommand -f -a %s -d %q\n", c.name, c.summary)
		}
	default:
		return usageError(stderr, "completion", "unknown shell %q (bash, zsh or fish)", args[0])
	}
	return exitOK
}
