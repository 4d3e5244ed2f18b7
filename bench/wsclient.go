package bench

// wsclient.go is the load client's end of a WebSocket, on gobwas/ws like the
// hub's own sockets (package transport). The client shares two cores with
// the hub it measures, so it must cost less than the hub: frames are read
// from a 64 KiB buffer, many per read call; a frame nobody waits for is
// skipped without being copied (most frames are broadcasts to idle agents);
// a frame somebody waits for is matched where it lies in the buffer; each
// request is one masked frame and one write.
//
// Who owns what:
//
//   - The reader goroutine (started by dialWS) owns br, hdr, ctl and frag. It
//     reads every frame, answers pings and the hub's close, and wakes the
//     waiter whose match accepts a frame.
//   - Writes come from the agent's worker (requests) and from the reader
//     (pongs, close replies); wmu serialises them and guards wbuf and
//     closeSent.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
)

// readBufSize is a working socket's read buffer: a burst of broadcasts is
// taken in one read call, and a frame that fits is matched in place.
const readBufSize = 64 << 10

// idleReadBufSize is an idle agent's: it skips nearly every frame, and ten
// thousand of them at 64 KiB would hold 640 MiB of the client's memory.
const idleReadBufSize = 4 << 10

// maxFrameBytes bounds a frame from the hub (the hub's own limit is 1 MiB
// by default); a larger one ends the connection.
const maxFrameBytes = 64 << 20

// closeWait is how long close waits for the hub's close frame before it
// drops the connection.
const closeWait = 2 * time.Second

// errClosed ends the reader at the hub's close frame.
var errClosed = errors.New("bench: websocket closed by the hub")

// wsConn is one client WebSocket to a hub.
type wsConn struct {
	nc   net.Conn
	br   *bufio.Reader
	hdr  [ws.MaxHeaderSize - 2]byte          // header scratch for ws.ReadHeaderBuffer
	ctl  [ws.MaxControlFramePayloadSize]byte // a ping's or close's payload
	frag []byte                              // a message larger than br, or fragmented, gathered
	want atomic.Pointer[waiter]              // the frame a caller waits for, if any
	done chan struct{}                       // closed when the reader has ended
	err  error                               // why the reader ended; set before done is closed
	code ws.StatusCode                       // the hub's close code, if it sent a close; set before done is closed

	wmu       sync.Mutex
	wbuf      []byte
	closeSent bool
}

// A waiter is a frame a caller waits for. While it is set, the reader
// tests each text frame with match (which may record what it saw: the
// reader's writes happen before ch is closed) and closes ch at the first
// frame match accepts. match must not keep the slice.
type waiter struct {
	match func([]byte) bool
	ch    chan struct{}
}

func newWaiter(match func([]byte) bool) *waiter {
	return &waiter{match: match, ch: make(chan struct{})}
}

// dialWS opens a WebSocket to uri with d (its read buffer is
// d.ReadBufferSize, readBufSize if 0) and starts its reader.
func dialWS(ctx context.Context, d ws.Dialer, uri string) (*wsConn, error) {
	return dialWSAwaiting(ctx, d, uri, nil)
}

// dialWSAwaiting is dialWS with w awaited from the first frame on (a frame
// the hub sends unasked, such as its welcome), if w is not nil.
func dialWSAwaiting(ctx context.Context, d ws.Dialer, uri string, w *waiter) (*wsConn, error) {
	if d.ReadBufferSize <= 0 {
		d.ReadBufferSize = readBufSize
	}
	nc, br, _, err := d.Dial(ctx, uri)
	if err != nil {
		return nil, err
	}
	if br == nil { // nil unless the hub wrote right after its handshake
		br = bufio.NewReaderSize(nc, d.ReadBufferSize)
	}
	c := &wsConn{nc: nc, br: br, done: make(chan struct{})}
	if w != nil {
		c.await(w)
	}
	go c.readLoop()
	return c, nil
}

// await sets the frame to wait for; call it before sending the request
// whose answer w matches.
func (c *wsConn) await(w *waiter) { c.want.Store(w) }

// wait waits until w has matched, the connection ended or ctx is done.
func (c *wsConn) wait(ctx context.Context, w *waiter) error {
	select {
	case <-w.ch:
		return nil
	case <-c.done:
		return fmt.Errorf("connection ended: %w", c.err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendText writes p as one masked text frame.
func (c *wsConn) sendText(p []byte) error {
	c.wmu.Lock()
	err := c.writeFrame(ws.OpText, p)
	c.wmu.Unlock()
	if err != nil {
		select {
		case <-c.done: // the hub closed the socket: say how
			return fmt.Errorf("connection ended: %w", c.err)
		default:
		}
	}
	return err
}

// writeFrame frames p (a client frame: masked, RFC 6455 §5.2) in wbuf and
// writes it with one call. The caller holds wmu.
func (c *wsConn) writeFrame(op ws.OpCode, p []byte) error {
	mask := [4]byte{}
	binary.LittleEndian.PutUint32(mask[:], rand.Uint32())
	b := append(c.wbuf[:0], 0x80|byte(op)) // FIN: the client never fragments
	switch n := len(p); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xffff:
		b = binary.BigEndian.AppendUint16(append(b, 0x80|126), uint16(n))
	default:
		b = binary.BigEndian.AppendUint64(append(b, 0x80|127), uint64(n))
	}
	b = append(b, mask[:]...)
	start := len(b)
	b = append(b, p...)
	ws.Cipher(b[start:], mask, 0)
	c.wbuf = b
	_, err := c.nc.Write(b)
	return err
}

// writeClose sends a close frame with code, once.
func (c *wsConn) writeClose(code ws.StatusCode) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent {
		return nil
	}
	c.closeSent = true
	var body []byte
	if code != 0 {
		body = ws.NewCloseFrameBody(code, "")
	}
	return c.writeFrame(ws.OpClose, body)
}

// close starts the closing handshake and drops the connection when the hub
// has answered, or after closeWait.
func (c *wsConn) close() {
	if c.writeClose(ws.StatusNormalClosure) == nil {
		select {
		case <-c.done:
		case <-time.After(closeWait):
		}
	}
	c.nc.Close()
}

func (c *wsConn) readLoop() {
	c.err = c.read()
	close(c.done) // before the close, so a write it fails can say why
	c.nc.Close()
}

// read reads frames until the connection ends.
func (c *wsConn) read() error {
	skipping := false // the current message is not kept: nobody waited when it began
	for {
		h, err := ws.ReadHeaderBuffer(c.br, c.hdr[:])
		if err != nil {
			return err
		}
		if h.Masked || h.Length > maxFrameBytes || h.OpCode.IsControl() && h.Length > ws.MaxControlFramePayloadSize {
			c.writeClose(ws.StatusProtocolError)
			return fmt.Errorf("bench: websocket: bad frame from the hub (op %d, %d bytes, masked %v)", h.OpCode, h.Length, h.Masked)
		}
		n := int(h.Length)
		switch h.OpCode {
		case ws.OpText, ws.OpBinary, ws.OpContinuation:
			if h.OpCode != ws.OpContinuation {
				skipping, c.frag = c.want.Load() == nil, nil
			}
			switch {
			case skipping:
				_, err = c.br.Discard(n)
			case h.Fin && h.OpCode != ws.OpContinuation && n <= c.br.Size():
				// The common case: the whole message fits in the buffer.
				var p []byte
				if p, err = c.br.Peek(n); err == nil {
					c.offer(p)
					_, err = c.br.Discard(n)
				}
			default:
				start := len(c.frag)
				c.frag = slices.Grow(c.frag, n)[:start+n]
				if _, err = io.ReadFull(c.br, c.frag[start:]); err == nil && h.Fin {
					c.offer(c.frag)
					c.frag = nil
				}
			}
		case ws.OpPing:
			p := c.ctl[:n]
			if _, err = io.ReadFull(c.br, p); err == nil {
				c.wmu.Lock()
				err = c.writeFrame(ws.OpPong, p)
				c.wmu.Unlock()
			}
		case ws.OpPong:
			_, err = c.br.Discard(n)
		case ws.OpClose:
			p := c.ctl[:n]
			if _, err = io.ReadFull(c.br, p); err != nil {
				return err
			}
			code, reason := ws.ParseCloseFrameData(p)
			c.code = code
			c.writeClose(code)
			return fmt.Errorf("%w: %d %s", errClosed, code, reason)
		default:
			c.writeClose(ws.StatusProtocolError)
			return fmt.Errorf("bench: websocket: unknown opcode %d from the hub", h.OpCode)
		}
		if err != nil {
			return err
		}
	}
}

// offer wakes the waiter, if any, whose match accepts msg.
func (c *wsConn) offer(msg []byte) {
	if w := c.want.Load(); w != nil && w.match(msg) && c.want.CompareAndSwap(w, nil) {
		close(w.ch)
	}
}
