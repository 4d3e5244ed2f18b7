package hub

// Drift guard for the normative constants the hub owns (the core's are
// checked in coord/spec_test.go): it fails when the spec's table and the
// code disagree.

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/wire"
)

func TestSpecConstants_MatchTheHub_DriftGuard(t *testing.T) {
	raw, err := os.ReadFile("../docs/spec/coordination-spec.txt")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "Normative constants")
	if !ok {
		t.Fatal("the spec has no Normative constants table")
	}
	consts := map[string]float64{}
	for _, m := range regexp.MustCompile("(?m)^`([A-Z_]+)`\t`([0-9.]+)`").FindAllStringSubmatch(table, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("%s: %v", m[1], err)
		}
		consts[m[1]] = v
	}
	owned := map[string]float64{
		"DEFAULT_LEASE_OFFLINE_TTL":                DefaultLeaseOfflineTTL.Seconds(), // namelease.go
		"NAME_OWNED_CLOSE_CODE":                    NameOwnedCloseCode,
		"WIRE_PROTOCOL_VERSION":                    wire.ProtocolVersion,
		"DEFAULT_MESSAGE_AUTH_WINDOW_SECONDS":      gate.MessageAuthWindow, // INV-CK-2
		"DEFAULT_MESSAGE_AUTH_FUTURE_SKEW_SECONDS": gate.MessageAuthFutureSkew,
	}
	for name, code := range owned {
		spec, ok := consts[name]
		if !ok {
			t.Errorf("the spec's constants table has no row %s", name)
			continue
		}
		if spec != code {
			t.Errorf("%s: spec says %v, the hub uses %v", name, spec, code)
		}
	}
}
