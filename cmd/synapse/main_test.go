package main

import (
	"strings"
	"testing"
)

func TestHelp_ListsEveryCommand(t *testing.T) {
	code, out, _ := runCmd("help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, c := range commands() {
		if !strings.Contains(out, "  "+c.name+" ") {
			t.Errorf("help does not list %q:\n%s", c.name, out)
		}
	}
	for _, want := range []string{"journal", "bench journal"} {
		if !strings.Contains(out, want) {
			t.Errorf("help does not mention %q:\n%s", want, out)
		}
	}
}

func TestUnknownCommand_ExitsTwo(t *testing.T) {
	if code, _, errOut := runCmd("frobnicate"); code != 2 || !strings.Contains(errOut, "synapse help") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
