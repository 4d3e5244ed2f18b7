package testbin

import (
	"net"
	"testing"
)

// A port handed out is below the ephemeral range (where outgoing
// connections take their local ports), is not handed out twice by one
// process, and was free when handed out.
func TestFreePort_BelowTheEphemeralRangeAndNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if p < portLow || p >= portHigh {
			t.Fatalf("port %d outside %d-%d", p, portLow, portHigh-1)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = net.Listen("tcp", ln.Addr().String())
	if !AddrInUse(err) {
		t.Fatalf("AddrInUse(%v) = false for a second bind", err)
	}
}
