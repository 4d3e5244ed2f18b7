package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// Identity pins (issue 23 item 2; docs/security.md, "Identity pins"): the
// key each name was first registered with, so a restart keeps refusing a
// name to every other key. Two tables of ours, outside SchemaVersion: they
// are created with CREATE TABLE IF NOT EXISTS by the first write that
// needs them, and a file without them reads as holding no pin, so a file
// written by an older synapse, or the reference, opens unchanged.
//
// Writes go through the writer connection under Store.mu, like MarkOutbox:
// a pin and a nonce at synchronous=NORMAL (they survive the process being
// killed; a pin lost to a power cut is made again, to the same key, by the
// name's next registration), a reclaim at FULL; reads through the read
// pool. Neither is on a frame's path: a pin is read once
// per socket, on the frame that binds its name.

const pinSchema = `
CREATE TABLE IF NOT EXISTS identity_pins (name TEXT PRIMARY KEY, key_id TEXT NOT NULL,
                     public_key TEXT NOT NULL, pinned_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS identity_pin_reclaims (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL,
                     key_id TEXT NOT NULL, public_key TEXT NOT NULL, pinned_at REAL NOT NULL,
                     reclaimed_at REAL NOT NULL, reclaimed_by TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS identity_nonces (key_id TEXT NOT NULL, name TEXT NOT NULL, nonce TEXT NOT NULL,
                     signed_at REAL NOT NULL, PRIMARY KEY(key_id, name, nonce));
`

// IdentityPin is one name pinned to the key it first proved.
type IdentityPin struct {
	Name      string  `json:"name"`
	KeyID     string  `json:"key_id"`
	PublicKey string  `json:"public_key"` // base64 raw Ed25519, as identity_public_key
	PinnedAt  float64 `json:"pinned_at"`  // unix seconds, hub clock
}

// PinIdentity pins p.Name to p's key unless the name is pinned already. It
// returns the pin in force afterwards and whether this call made it: two
// first registrations of one name with different keys race to one winner,
// and the loser learns the winner's key.
func (s *Store) PinIdentity(p IdentityPin) (IdentityPin, bool, error) {
	var got IdentityPin
	var made bool
	err := s.writeExtraAt(false, pinSchema, func(ctx context.Context, c *sql.Conn) error {
		res, err := c.ExecContext(ctx, `INSERT OR IGNORE INTO identity_pins(name, key_id, public_key, pinned_at) VALUES(?, ?, ?, ?)`,
			p.Name, p.KeyID, p.PublicKey, p.PinnedAt)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		made = n == 1
		return c.QueryRowContext(ctx, `SELECT name, key_id, public_key, pinned_at FROM identity_pins WHERE name = ?`, p.Name).
			Scan(&got.Name, &got.KeyID, &got.PublicKey, &got.PinnedAt)
	})
	if err != nil {
		return IdentityPin{}, false, fmt.Errorf("journal: pin identity %q: %w", p.Name, err)
	}
	return got, made, nil
}

// LookupIdentityPin returns the pin of name, if it has one.
func (s *Store) LookupIdentityPin(name string) (IdentityPin, bool, error) {
	var p IdentityPin
	err := s.rdb.QueryRow(`SELECT name, key_id, public_key, pinned_at FROM identity_pins WHERE name = ?`, name).
		Scan(&p.Name, &p.KeyID, &p.PublicKey, &p.PinnedAt)
	switch {
	case errors.Is(err, sql.ErrNoRows) || noTable(err):
		return IdentityPin{}, false, nil
	case err != nil:
		return IdentityPin{}, false, fmt.Errorf("journal: identity pin %q: %w", name, err)
	}
	return p, true, nil
}

// IdentityPins lists every pin, by name.
func (s *Store) IdentityPins() ([]IdentityPin, error) {
	rows, err := s.rdb.Query(`SELECT name, key_id, public_key, pinned_at FROM identity_pins ORDER BY name`)
	if noTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: identity pins: %w", err)
	}
	defer rows.Close()
	var out []IdentityPin
	for rows.Next() {
		var p IdentityPin
		if err := rows.Scan(&p.Name, &p.KeyID, &p.PublicKey, &p.PinnedAt); err != nil {
			return nil, fmt.Errorf("journal: identity pins: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// ReclaimIdentityPin removes the pin of name, recording it, who asked and
// when in identity_pin_reclaims (the audit), in one transaction. It
// returns the pin removed; false (and no change) if there was none. The
// name's next signed registration pins it anew.
func (s *Store) ReclaimIdentityPin(name, by string, at float64) (IdentityPin, bool, error) {
	var p IdentityPin
	found := false
	err := s.writeExtra(pinSchema, func(ctx context.Context, c *sql.Conn) error {
		err := c.QueryRowContext(ctx, `SELECT name, key_id, public_key, pinned_at FROM identity_pins WHERE name = ?`, name).
			Scan(&p.Name, &p.KeyID, &p.PublicKey, &p.PinnedAt)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		if _, err := c.ExecContext(ctx, `INSERT INTO identity_pin_reclaims(name, key_id, public_key, pinned_at, reclaimed_at, reclaimed_by)
			VALUES(?, ?, ?, ?, ?, ?)`, p.Name, p.KeyID, p.PublicKey, p.PinnedAt, at, by); err != nil {
			return err
		}
		_, err = c.ExecContext(ctx, `DELETE FROM identity_pins WHERE name = ?`, name)
		return err
	})
	if err != nil {
		return IdentityPin{}, false, fmt.Errorf("journal: reclaim identity pin %q: %w", name, err)
	}
	return p, found, nil
}

// IdentityNonce is the nonce of a registration proof the hub admitted.
type IdentityNonce struct {
	KeyID, Name, Nonce string
	SignedAt           float64
}

// RecordIdentityNonce writes down an admitted proof's nonce, so a hub
// started after this one refuses its replay (gate.IdentityVerifier
// Remember), and forgets those signed before forgetBefore. It commits at
// synchronous=NORMAL: it survives the process being killed, and a power
// cut outlasts the 10 s a nonce lives.
func (s *Store) RecordIdentityNonce(n IdentityNonce, forgetBefore float64) error {
	err := s.writeExtraAt(false, pinSchema, func(ctx context.Context, c *sql.Conn) error {
		if _, err := c.ExecContext(ctx, `INSERT OR IGNORE INTO identity_nonces(key_id, name, nonce, signed_at) VALUES(?, ?, ?, ?)`,
			n.KeyID, n.Name, n.Nonce, n.SignedAt); err != nil {
			return err
		}
		_, err := c.ExecContext(ctx, `DELETE FROM identity_nonces WHERE signed_at < ?`, forgetBefore)
		return err
	})
	if err != nil {
		return fmt.Errorf("journal: record identity nonce: %w", err)
	}
	return nil
}

// IdentityNonces lists the admitted nonces signed at or after since.
func (s *Store) IdentityNonces(since float64) ([]IdentityNonce, error) {
	rows, err := s.rdb.Query(`SELECT key_id, name, nonce, signed_at FROM identity_nonces WHERE signed_at >= ?`, since)
	if noTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: identity nonces: %w", err)
	}
	defer rows.Close()
	var out []IdentityNonce
	for rows.Next() {
		var n IdentityNonce
		if err := rows.Scan(&n.KeyID, &n.Name, &n.Nonce, &n.SignedAt); err != nil {
			return nil, fmt.Errorf("journal: identity nonces: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// writeExtra runs fn in one IMMEDIATE transaction on the writer
// connection at synchronous=FULL, after creating the tables of schema if
// they are missing: the tables of ours outside SchemaVersion (pins.go,
// channels.go).
func (s *Store) writeExtra(schema string, fn func(ctx context.Context, c *sql.Conn) error) error {
	return s.writeExtraAt(true, schema, fn)
}

// writeExtraAt is writeExtra at synchronous=FULL if full, else NORMAL.
func (s *Store) writeExtraAt(full bool, schema string, fn func(ctx context.Context, c *sql.Conn) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	ctx := context.Background()
	if full {
		if _, err := s.wc.ExecContext(ctx, "PRAGMA synchronous = FULL"); err != nil {
			return err
		}
		defer s.wc.ExecContext(ctx, "PRAGMA synchronous = NORMAL")
	}
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	_, err := s.wc.ExecContext(ctx, schema)
	if err == nil {
		err = fn(ctx, s.wc)
	}
	if err == nil {
		if _, err = s.wc.ExecContext(ctx, "COMMIT"); err == nil {
			return nil
		}
	}
	if _, rbErr := s.wc.ExecContext(ctx, "ROLLBACK"); rbErr != nil {
		err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
	}
	return err
}

// noTable reports whether err is SQLite's "no such table": a file that
// never held a pin or a channel reads as holding none.
func noTable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such table")
}
