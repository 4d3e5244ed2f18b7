package journal

import (
	"path/filepath"
	"testing"

	"github.com/synapse-hub/synapse/access"
)

// TestAccess_CredentialsAndGrantsSurviveReopen_Issue23: the journal keeps
// credentials (as digests) and grants across a restart.
func TestAccess_CredentialsAndGrantsSurviveReopen_Issue23(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hub.db")
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c, g, err := st.LoadAccess(); err != nil || len(c)+len(g) != 0 {
		t.Fatalf("a new file: %v %v %v", c, g, err)
	}
	reg := access.NewRegistry(st, nil, nil)
	tok, c, err := reg.Issue(access.IssueRequest{Pattern: "alpha/*", Roles: []string{"alpha/rev"}, Note: "n"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Grant(access.Grant{Role: "alpha/lead", To: "alpha/x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Revoke(c.ID, 11); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	creds, grants, err := st.LoadAccess()
	if err != nil || len(creds) != 1 || len(grants) != 1 {
		t.Fatalf("reopened: %v %v %v", creds, grants, err)
	}
	if creds[0].Digest != access.Digest(tok) || creds[0].Revoked != 11 || creds[0].Roles[0] != "alpha/rev" {
		t.Fatalf("credential: %+v", creds[0])
	}
	if n := countRows(t, st, `SELECT count(*) FROM access_credentials WHERE digest = '`+tok+`' OR name_pattern = '`+tok+`'`); n != 0 {
		t.Fatal("the token itself was stored")
	}
}
