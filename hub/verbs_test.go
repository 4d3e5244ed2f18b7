package hub

import (
	"testing"

	"github.com/synapse-hub/synapse/federation"
)

// Every verb the federation routes to a namespace's owner is one the owner
// serves (INV-CR-4: the owner decides it through the same table), and every
// claim-family verb has its refusal frame: a denial of its own, or for
// task_update the reference's plain error (PROTOCOL.md §2.4–2.9).
func TestVerbs_RoutedVerbsAreServedAndClaimFamilyHasDenials_INV_CR_4(t *testing.T) {
	for _, fam := range []map[string]bool{federation.ClaimFamily, federation.BoardFamily} {
		for typ := range fam {
			if _, ok := verbs[typ]; !ok {
				t.Errorf("%s is routed to its owner but not in the verb table", typ)
			}
		}
	}
	for typ := range federation.ClaimFamily {
		if verbs[typ].denial == "" {
			t.Errorf("claim-family verb %s has no refusal frame", typ)
		}
	}
	for typ, v := range verbs {
		if v.handle == nil {
			t.Errorf("%s has no handler", typ)
		}
	}
}
