package client

import (
	"errors"
	"strings"
	"testing"

	"github.com/synapse-hub/synapse/hub"
)

func TestRefused_ErrorNamesTheCodeAndTheOwner(t *testing.T) {
	for _, tc := range []struct {
		ref  Refused
		want string
	}{
		{Refused{Message: "No."}, "No."},
		{Refused{Message: "No.", Code: "LEASE_LIVE"}, "No. (LEASE_LIVE)"},
		{Refused{Message: "No.", Code: "OWNER_UNREACHABLE", OwnerHubID: "syn-a"}, "No. (OWNER_UNREACHABLE, owner syn-a)"},
		{Refused{Message: "No.", OwnerHubID: "syn-a"}, "No. (owner syn-a)"},
	} {
		if got := tc.ref.Error(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.ref, got, tc.want)
		}
	}
}

// A hub that does not announce "namespaces" is not sent ns_request: the
// call fails at once with a typed error saying the hub is too old.
func TestNamespaces_HubWithoutTheFeatureIsTooOld(t *testing.T) {
	th := startHub(t, hub.Config{HubID: "syn-old"}, false)
	c := th.dial(t, "p/alpha")
	c.mu.Lock()
	c.welcome.Features = []string{"wait_ready"}
	c.mu.Unlock()
	_, err := c.Namespaces(testCtx(t))
	var unsup *UnsupportedError
	if !errors.Is(err, ErrUnsupported) || !errors.As(err, &unsup) || unsup.Feature != "namespaces" || unsup.HubID != "syn-old" {
		t.Fatalf("err = %v, want an *UnsupportedError for namespaces", err)
	}
	if !strings.Contains(err.Error(), "too old") {
		t.Fatalf("error %q does not say the hub is too old", err)
	}
}
