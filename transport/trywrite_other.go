//go:build !unix

package transport

import "syscall"

// tryWrite writes nothing where the socket has no non-blocking write: the
// writer goroutine writes everything.
func tryWrite(syscall.RawConn, []byte) (int, error) { return 0, nil }
