package federation

import (
	"errors"
	"reflect"
	"testing"
)

// Resolution is deny-by-default: an unlisted namespace is ungoverned, a
// hub other than the owner asserting a namespace contests it, and only the
// owner's own resolution grants (INV-CR-4, INV-MH-1, INV-MH-3; PROTOCOL.md
// §6.1).
func TestResolve_DenyByDefaultAndContest_INV_CR_4_INV_MH_3(t *testing.T) {
	own, err := NewOwnership("syn-b", []string{"proj=syn-a", "ops=syn-b", "proj=syn-a"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		ns        string
		asserting []string
		want      Resolution
	}{
		{"proj", nil, Resolution{Namespace: "proj", Outcome: Remote, Owner: "syn-a"}},
		{"ops", nil, Resolution{Namespace: "ops", Outcome: Local, Owner: "syn-b"}},
		{"other", nil, Resolution{Namespace: "other", Outcome: Ungoverned}},
		{"", nil, Resolution{Namespace: "", Outcome: Ungoverned}},
		// The owner and this hub asserting are no contest.
		{"proj", []string{"syn-a", "syn-b"}, Resolution{Namespace: "proj", Outcome: Remote, Owner: "syn-a"}},
		// Any third hub contests, sorted and deduplicated.
		{"ops", []string{"syn-z", "syn-c", "syn-z"}, Resolution{Namespace: "ops", Outcome: Partitioned, Owner: "syn-b", Contesting: []string{"syn-c", "syn-z"}}},
		{"proj", []string{"syn-c"}, Resolution{Namespace: "proj", Outcome: Partitioned, Owner: "syn-a", Contesting: []string{"syn-c"}}},
	}
	for _, c := range cases {
		got := own.Resolve(c.ns, c.asserting)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Resolve(%q, %v) = %+v; want %+v", c.ns, c.asserting, got, c.want)
		}
		if got.Grants() != (c.want.Outcome == Local) {
			t.Errorf("Resolve(%q).Grants() = %v", c.ns, got.Grants())
		}
	}
}

// The wildcard owns what the map does not list; without it nothing
// unlisted is governed.
func TestResolve_WildcardOwnsTheRest(t *testing.T) {
	own, _ := NewOwnership("syn-a", []string{"*=syn-a", "ops=syn-b"})
	if r := own.Resolve("anything", nil); r.Outcome != Local {
		t.Fatalf("wildcard: %+v", r)
	}
	if r := own.Resolve("ops", nil); r.Outcome != Remote || r.Owner != "syn-b" {
		t.Fatalf("listed beats wildcard: %+v", r)
	}
	if got := own.Owned(); !reflect.DeepEqual(got, []string{"*"}) {
		t.Fatalf("owned %v", got)
	}
}

// A bad map is refused with a sentence that says what is wrong.
func TestNewOwnership_RefusesBadMaps(t *testing.T) {
	for _, specs := range [][]string{{"proj"}, {"=syn-a"}, {"proj="}, {"pr/oj=syn-a"}, {"proj=syn a"}, {"proj=syn-a", "proj=syn-b"}} {
		if _, err := NewOwnership("syn-a", specs); !errors.Is(err, ErrBadOwnerSpec) {
			t.Errorf("%v: %v; want ErrBadOwnerSpec", specs, err)
		}
	}
	if _, err := NewOwnership("", []string{"proj=syn-a"}); !errors.Is(err, ErrNoHubID) {
		t.Errorf("no hub id: %v", err)
	}
}

// A peer declaring itself owner of a namespace our map gives elsewhere
// asserts it (its wildcard too, unless it lists the namespace); a peer
// declaring another owner does not.
func TestAsserting_PeerDeclarations_INV_CR_4(t *testing.T) {
	f := &Federation{declared: map[string]map[string]string{
		"syn-c": {"proj": "syn-c"},
		"syn-d": {"proj": "syn-a"},
		"syn-e": {"*": "syn-e"},
	}}
	if got := f.asserting("proj"); !reflect.DeepEqual(got, []string{"syn-c", "syn-e"}) {
		t.Fatalf("asserting proj: %v", got)
	}
	if got := f.asserting("ops"); !reflect.DeepEqual(got, []string{"syn-e"}) {
		t.Fatalf("asserting ops (wildcard): %v", got)
	}
}
