package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"

	"github.com/synapse-hub/synapse/wire"
)

// version is the release of the synapse binary, reported as the hub's
// hub_version, in /health and by `synapse version`; a release build sets it
// with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

// WireProtocolVersion is the SYNAPSE CHANNEL protocol this hub speaks.
const WireProtocolVersion = wire.ProtocolVersion

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *asJSON {
		fmt.Fprintf(stdout, `{"version":%q,"protocol_version":%d,"go":%q}`+"\n", version, WireProtocolVersion, runtime.Version())
		return 0
	}
	fmt.Fprintf(stdout, "synapse %s (protocol v%d, %s)\n", version, WireProtocolVersion, runtime.Version())
	return 0
}
