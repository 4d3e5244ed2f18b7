//go:build !unix

package client

// lockFile is a no-op where flock is missing: concurrent writers of one
// ledger may then lose a record (the next grant or renewal restores it).
func lockFile(string) (func(), error) { return func() {}, nil }
