package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"

	"github.com/synapse-hub/synapse/hub"
)

// WireProtocolVersion is the SYNAPSE CHANNEL protocol this hub speaks.
const WireProtocolVersion = 2

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *asJSON {
		fmt.Fprintf(stdout, `{"version":%q,"protocol_version":%d,"go":%q}`+"\n", hub.Version, WireProtocolVersion, runtime.Version())
		return 0
	}
	fmt.Fprintf(stdout, "synapse %s (protocol v%d, %s)\n", hub.Version, WireProtocolVersion, runtime.Version())
	return 0
}
