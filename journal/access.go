package journal

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/synapse-hub/synapse/access"
)

// Credentials and role grants (issue 23; package access). They are not
// events: they are configuration the operator writes (synapse token, synapse
// role), kept in two tables of their own that replay, snapshots and
// compaction never touch. The tables are made on first use with CREATE
// TABLE IF NOT EXISTS, so a file without them is not a different schema
// version: an older synapse opens it and ignores them, and a read-only file
// that never had them reads as having none.
//
// access_credentials holds a credential's digest (SHA-256 of its token),
// never the token. access_grants holds one row per (role, name pattern).
const accessSchema = `
CREATE TABLE IF NOT EXISTS access_credentials (id TEXT PRIMARY KEY, digest TEXT NOT NULL UNIQUE,
  name_pattern TEXT NOT NULL, roles TEXT NOT NULL, created REAL NOT NULL, expires REAL NOT NULL DEFAULT 0,
  note TEXT NOT NULL DEFAULT '', revoked REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS access_grants (role TEXT NOT NULL, grantee TEXT NOT NULL, PRIMARY KEY (role, grantee));
`

// execAccess runs one write on the writer connection, the tables made
// first. It commits on its own at the connection's synchronous level.
func (s *Store) execAccess(query string, args ...any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	ctx := context.Background()
	if _, err := s.wc.ExecContext(ctx, accessSchema); err != nil {
		return classify(err)
	}
	_, err := s.wc.ExecContext(ctx, query, args...)
	return classify(err)
}

// PutCredential inserts or replaces a credential record (access.Backing).
func (s *Store) PutCredential(c access.Credential) error {
	roles, err := json.Marshal(c.Roles)
	if err != nil {
		return fmt.Errorf("journal: put credential: %w", err)
	}
	if err := s.execAccess(`INSERT OR REPLACE INTO access_credentials(id, digest, name_pattern, roles, created, expires, note, revoked)
		VALUES(?, ?, ?, ?, ?, ?, ?, ?)`, c.ID, c.Digest, c.Pattern, string(roles), c.Created, c.Expires, c.Note, c.Revoked); err != nil {
		return fmt.Errorf("journal: put credential: %w", err)
	}
	return nil
}

// PutGrant records or deletes a role grant (access.Backing).
func (s *Store) PutGrant(g access.Grant, granted bool) error {
	q := `INSERT OR IGNORE INTO access_grants(role, grantee) VALUES(?, ?)`
	if !granted {
		q = `DELETE FROM access_grants WHERE role = ? AND grantee = ?`
	}
	if err := s.execAccess(q, g.Role, g.To); err != nil {
		return fmt.Errorf("journal: put grant: %w", err)
	}
	return nil
}

// LoadAccess reads every credential and grant. A file whose tables were
// never made has none.
func (s *Store) LoadAccess() ([]access.Credential, []access.Grant, error) {
	var creds []access.Credential
	err := s.queryAccess(`SELECT id, digest, name_pattern, roles, created, expires, note, revoked FROM access_credentials ORDER BY created, id`,
		func(rows *sql.Rows) error {
			var c access.Credential
			var roles string
			if err := rows.Scan(&c.ID, &c.Digest, &c.Pattern, &roles, &c.Created, &c.Expires, &c.Note, &c.Revoked); err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(roles), &c.Roles); err != nil {
				return fmt.Errorf("credential %s: roles: %w", c.ID, err)
			}
			creds = append(creds, c)
			return nil
		})
	if err != nil {
		return nil, nil, fmt.Errorf("journal: load credentials: %w", err)
	}
	var grants []access.Grant
	err = s.queryAccess(`SELECT role, grantee FROM access_grants ORDER BY role, grantee`, func(rows *sql.Rows) error {
		var g access.Grant
		if err := rows.Scan(&g.Role, &g.To); err != nil {
			return err
		}
		grants = append(grants, g)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("journal: load grants: %w", err)
	}
	return creds, grants, nil
}

func (s *Store) queryAccess(q string, row func(*sql.Rows) error) error {
	rows, err := s.rdb.Query(q)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return nil
		}
		return classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

var _ access.Backing = (*Store)(nil)
