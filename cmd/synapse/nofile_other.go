//go:build !unix

package main

// raiseNoFile does nothing where there is no RLIMIT_NOFILE.
func raiseNoFile(need int) error { return nil }
