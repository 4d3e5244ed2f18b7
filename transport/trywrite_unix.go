//go:build unix

package transport

import (
	"errors"
	"os"
	"syscall"
)

// tryWrite writes b to a non-blocking socket without waiting: it returns
// how many bytes the kernel took. A full socket buffer is not an error
// (n < len(b)); neither is a lapsed write deadline (n is 0, and a writer
// goroutine with a fresh deadline takes over).
func tryWrite(raw syscall.RawConn, b []byte) (int, error) {
	n := 0
	var werr error
	err := raw.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, e := syscall.Write(int(fd), b[n:])
			if m > 0 {
				n += m
			}
			switch {
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN:
				return true
			case e != nil:
				werr = e
				return true
			case m <= 0:
				return true
			}
		}
		return true // never wait for the socket to drain
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, nil
	}
	if err == nil {
		err = werr
	}
	return n, err
}
