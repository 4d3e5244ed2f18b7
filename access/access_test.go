package access

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestMatch_Issue23(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"alpha/*", "alpha/x", true},
		{"alpha/*", "alpha/x/y", true},
		{"alpha/*", "alpha/x-rx", true},
		{"alpha/*", "beta/x", false},
		{"alpha/*", "alpha", false},
		{"alpha/x", "alpha/x", true},
		{"alpha/x", "alpha/xy", false},
		{"*", "", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*/reviewer", "proj/reviewer", true},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"**", "x", true},
	} {
		if got := Match(c.pattern, c.s); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

type memBacking struct {
	creds  map[string]Credential
	grants map[Grant]bool
	fail   error
}

func (m *memBacking) PutCredential(c Credential) error {
	if m.fail != nil {
		return m.fail
	}
	m.creds[c.ID] = c
	return nil
}

func (m *memBacking) PutGrant(g Grant, on bool) error {
	if m.fail != nil {
		return m.fail
	}
	if on {
		m.grants[g] = true
	} else {
		delete(m.grants, g)
	}
	return nil
}

func TestRegistry_IssueAuthenticateRevoke_Issue23(t *testing.T) {
	back := &memBacking{creds: map[string]Credential{}, grants: map[Grant]bool{}}
	r := NewRegistry(back, nil, nil)
	tok, c, err := r.Issue(IssueRequest{Pattern: "alpha/*", Roles: []string{"alpha/reviewer"}, TTL: 60, Note: "ci"}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !IsCredentialToken(tok) || strings.Contains(fmt.Sprint(back.creds[c.ID]), tok) {
		t.Fatalf("token %q: the backing must hold only its digest: %+v", tok, back.creds[c.ID])
	}
	got, err := r.Authenticate(tok, 101)
	if err != nil || got.ID != c.ID || !got.AllowsName("alpha/x") || got.AllowsName("beta/x") || !got.HasRole("alpha/reviewer") {
		t.Fatalf("authenticate = %+v, %v", got, err)
	}
	if _, err := r.Authenticate(tok+"x", 101); !errors.Is(err, ErrUnknownCredential) {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := r.Authenticate(tok, 160); !errors.Is(err, ErrExpired) {
		t.Fatalf("after its ttl: %v", err)
	}
	if r.Live() != 1 {
		t.Fatalf("live = %d", r.Live())
	}
	if _, err := r.Revoke(c.ID, 102); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Authenticate(tok, 103); !errors.Is(err, ErrRevoked) {
		t.Fatalf("revoked: %v", err)
	}
	if r.Live() != 0 || back.creds[c.ID].Revoked != 102 {
		t.Fatalf("live = %d, stored %+v", r.Live(), back.creds[c.ID])
	}
	// A reload from the backing knows the same.
	var creds []Credential
	for _, c := range back.creds {
		creds = append(creds, c)
	}
	if _, err := NewRegistry(nil, creds, nil).Authenticate(tok, 103); !errors.Is(err, ErrRevoked) {
		t.Fatalf("reloaded: %v", err)
	}
}

func TestRegistry_BadInputChangesNothing_Issue23(t *testing.T) {
	back := &memBacking{creds: map[string]Credential{}, grants: map[Grant]bool{}}
	r := NewRegistry(back, nil, nil)
	for _, req := range []IssueRequest{{Pattern: ""}, {Pattern: "a b"}, {Pattern: "a/*", Roles: []string{""}}, {Pattern: "a/*", TTL: -1}} {
		if _, _, err := r.Issue(req, 1); err == nil {
			t.Errorf("Issue(%+v) accepted", req)
		}
	}
	back.fail = errors.New("disk full")
	if _, _, err := r.Issue(IssueRequest{Pattern: "a/*"}, 1); err == nil {
		t.Error("a failed write was accepted")
	}
	if err := r.Grant(Grant{Role: "a/r", To: "a/x"}); err == nil {
		t.Error("a failed grant write was accepted")
	}
	if len(r.List()) != 0 || len(back.creds) != 0 || len(r.Grants()) != 0 {
		t.Fatalf("bad input changed something: %v %v", r.List(), r.Grants())
	}
	if _, err := r.Revoke("nope", 1); !errors.Is(err, ErrUnknownCredential) {
		t.Fatal(err)
	}
}

func TestRegistry_Grants_Issue23(t *testing.T) {
	r := NewRegistry(nil, nil, nil)
	for _, g := range []Grant{{"proj/reviewer", "proj/alice"}, {"proj/*", "proj/lead"}, {"ops/oncall", "ops/*"}} {
		if err := r.Grant(g); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, role string
		want       bool
	}{
		{"proj/alice", "proj/reviewer", true},
		{"proj/alice", "proj/admin", false},
		{"proj/bob", "proj/reviewer", false},
		{"proj/lead", "proj/anything", true},
		{"ops/x", "ops/oncall", true},
		{"opsx/x", "ops/oncall", false},
	} {
		if got := r.Granted(c.name, c.role); got != c.want {
			t.Errorf("Granted(%q, %q) = %v", c.name, c.role, got)
		}
	}
	if err := r.RevokeGrant(Grant{"proj/reviewer", "proj/alice"}); err != nil || r.Granted("proj/alice", "proj/reviewer") {
		t.Fatalf("revoke: %v", err)
	}
	if err := r.RevokeGrant(Grant{"proj/reviewer", "proj/alice"}); !errors.Is(err, ErrUnknownGrant) {
		t.Fatal(err)
	}
}
