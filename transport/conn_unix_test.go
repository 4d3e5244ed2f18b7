//go:build unix

package transport

import (
	"syscall"
	"testing"
)

// LimitReceiveBuffer caps the kernel's receive buffer (SO_RCVBUF, which
// Linux reports doubled).
func TestConn_LimitReceiveBuffer(t *testing.T) {
	conns := make(chan *Conn, 1)
	url := serve(t, testOpts, func(c *Conn) {
		conns <- c
		readToEnd(c)
	})
	dial(t, url)
	c := <-conns
	c.LimitReceiveBuffer(64 << 10)
	var got int
	var gerr error
	if err := c.raw.Control(func(fd uintptr) { got, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if got < 64<<10 || got > 2*(64<<10) {
		t.Fatalf("SO_RCVBUF %d after a cap of 64 KiB", got)
	}
}
