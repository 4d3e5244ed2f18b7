// Package transport is the hub's server side of a WebSocket: the upgrade,
// a bounded frame reader, and one writer per socket that sends everything
// queued for it with one flush. It moves bytes; the protocol is package hub.
//
// Who owns what:
//
//   - One goroutine reads (the caller of Read, in the hub the HTTP
//     handler's). It answers pings and close frames by handing frames to
//     the writer; it never writes itself.
//   - The writer goroutine (started by Accept) owns every write: it takes
//     what Send queued, writes up to maxBatch frames into a buffer under one
//     write deadline and flushes once when the queue is empty, so a burst
//     of broadcasts costs one system call, not one per frame.
//   - Send, Close, Kill and Ping are safe from any goroutine.
package transport

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
)

// Close codes the transport itself sends.
const (
	StatusNormalClosure   = 1000
	StatusGoingAway       = 1001
	StatusProtocolError   = 1002
	StatusPolicyViolation = 1008
	StatusMessageTooBig   = 1009
)

var (
	// ErrClosed is returned once the socket is closing or closed.
	ErrClosed = errors.New("transport: socket closed")
	// ErrQueueFull is returned by Send when the peer has not taken the
	// frames already queued for it.
	ErrQueueFull = errors.New("transport: send queue full")
	// ErrPongTimeout is returned by Ping when no pong came back in time.
	ErrPongTimeout = errors.New("transport: no pong")
	// errPeerClose ends a read at the peer's close frame.
	errPeerClose = errors.New("transport: peer sent close")
)

// maxBatch caps the frames written between two flushes, so one busy socket
// still flushes (and frees its buffer) regularly.
const maxBatch = 256

// closeTimeout is how long the writer waits, after its close frame, for
// the peer's close before dropping the connection (as coder/websocket did).
var closeTimeout = 5 * time.Second

// writeBufSize is the writer's buffer. Buffers are pooled and held only
// while a batch is written, so idle sockets keep none.
const writeBufSize = 32 << 10

var writeBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufSize) }}

// Options configure a socket. Every field must be set.
type Options struct {
	// MaxMessageBytes bounds a message (all its fragments); a larger one
	// closes the socket with 1009, refused from its frame header.
	MaxMessageBytes int
	// QueueLen is how many frames Send may queue before ErrQueueFull.
	QueueLen int
	// WriteTimeout bounds one batch's write: a peer that accepts nothing
	// for this long is dropped even if its queue never fills.
	WriteTimeout time.Duration
}

// Conn is one upgraded server-side WebSocket.
type Conn struct {
	nc   net.Conn
	rd   wsutil.Reader
	opts Options

	out  chan []byte   // queued text frames; never closed (senders may race with the end)
	ctrl chan ws.Frame // pings and pongs for the writer

	closeOnce   sync.Once
	closing     chan struct{} // closed when a close was asked for
	closeCode   int
	closeReason string
	peerClosed  bool // the close answers the peer's: skip the queue (set before closing)
	killed      atomic.Bool

	readOnce sync.Once
	readDone chan struct{} // closed when Read has returned its final error
	readErr  error         // set before readDone is closed
	ctlBuf   [ws.MaxControlFramePayloadSize]byte

	pingSeq  atomic.Uint64
	pingWant atomic.Uint64 // payload of the outstanding ping
	pongs    chan struct{}

	done   chan struct{} // closed when the writer has ended and the connection is closed
	hdrBuf [ws.MaxHeaderSize]byte
}

// Accept checks a WebSocket handshake, upgrades the connection and starts
// its writer. On a refused handshake it has written the HTTP error.
// Compression is never negotiated. The Origin, when present, must name the
// request's Host (as coder/websocket's default).
func Accept(w http.ResponseWriter, r *http.Request, opts Options) (*Conn, error) {
	if code, err := checkHandshake(r); err != nil {
		if code == http.StatusUpgradeRequired || code == http.StatusBadRequest {
			w.Header().Set("Sec-WebSocket-Version", "13")
		}
		http.Error(w, err.Error(), code)
		return nil, err
	}
	nc, rw, _, err := ws.UpgradeHTTP(r, w)
	if err != nil {
		if nc != nil {
			_ = nc.Close()
		}
		return nil, fmt.Errorf("transport: upgrade: %w", err)
	}
	c := &Conn{
		nc:       nc,
		opts:     opts,
		out:      make(chan []byte, opts.QueueLen),
		ctrl:     make(chan ws.Frame, 4),
		closing:  make(chan struct{}),
		readDone: make(chan struct{}),
		pongs:    make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	// The buffered reader may already hold the client's first frames.
	c.rd = wsutil.Reader{
		Source:         rw.Reader,
		State:          ws.StateServerSide,
		MaxFrameSize:   int64(opts.MaxMessageBytes),
		MaxMessageSize: int64(opts.MaxMessageBytes),
		// Text is not checked for UTF-8: bad bytes reach the protocol's
		// decoder, which answers "Malformed JSON." and keeps the socket.
		CheckUTF8:      false,
		OnIntermediate: c.intermediate,
	}
	go c.writeLoop()
	return c, nil
}

// checkHandshake refuses what coder/websocket refused, with its statuses.
func checkHandshake(r *http.Request) (int, error) {
	if r.Method != http.MethodGet {
		return http.StatusMethodNotAllowed, fmt.Errorf("WebSocket protocol violation: handshake request method is not GET but %q", r.Method)
	}
	if !r.ProtoAtLeast(1, 1) {
		return http.StatusUpgradeRequired, fmt.Errorf("WebSocket protocol violation: handshake request must be at least HTTP/1.1: %q", r.Proto)
	}
	if v := r.Header.Get("Sec-WebSocket-Version"); v != "13" {
		return http.StatusBadRequest, fmt.Errorf("unsupported WebSocket protocol version (only 13 is supported): %q", v)
	}
	keys := r.Header.Values("Sec-WebSocket-Key")
	if len(keys) != 1 {
		return http.StatusBadRequest, errors.New("WebSocket protocol violation: one Sec-WebSocket-Key is required")
	}
	if v, err := base64.StdEncoding.DecodeString(strings.TrimSpace(keys[0])); err != nil || len(v) != 16 {
		return http.StatusBadRequest, fmt.Errorf("WebSocket protocol violation: invalid Sec-WebSocket-Key %q", keys[0])
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return http.StatusForbidden, fmt.Errorf("request Origin %q is not authorized for Host %q", origin, r.Host)
		}
	}
	return 0, nil
}

// Read returns the next text or binary message, whole. It answers pings and
// the peer's close itself. A message above MaxMessageBytes closes the
// socket with 1009 and a protocol violation with 1002. Once Read returns an
// error it returns that error for good. One goroutine reads.
func (c *Conn) Read() ([]byte, error) {
	select {
	case <-c.readDone:
		return nil, c.readErr
	default:
	}
	b, err := c.readMessage()
	if err != nil {
		c.endRead(err)
		return nil, c.readErr
	}
	return b, nil
}

func (c *Conn) readMessage() ([]byte, error) {
	for {
		hdr, err := c.rd.NextFrame()
		if err != nil {
			return nil, c.readFailed(err, hdr.Length)
		}
		if hdr.OpCode.IsControl() {
			if err := c.control(hdr, &c.rd); err != nil {
				return nil, c.readFailed(err, -1)
			}
			continue
		}
		// A whole message is read into a fresh slice: the hub may keep it.
		buf := make([]byte, 0, hdr.Length)
		for {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			n, err := c.rd.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if err == io.EOF {
				return buf, nil
			}
			if err != nil {
				// A later fragment failed: where its payload ends is
				// not known, so there is no lingering for the close.
				return nil, c.readFailed(err, -1)
			}
		}
	}
}

// intermediate handles a control frame inside a fragmented message.
func (c *Conn) intermediate(hdr ws.Header, body io.Reader) error {
	return c.control(hdr, body)
}

// control answers a ping, notes a pong, and at the peer's close frame asks
// the writer to echo it and ends reading.
func (c *Conn) control(hdr ws.Header, body io.Reader) error {
	p := c.ctlBuf[:hdr.Length]
	if _, err := io.ReadFull(body, p); err != nil {
		return err
	}
	switch hdr.OpCode {
	case ws.OpPing:
		// A pong we cannot queue at once is dropped: RFC 6455 §5.5.3 lets
		// a peer answer only the latest of several pings.
		select {
		case c.ctrl <- ws.NewPongFrame(append([]byte(nil), p...)):
		default:
		}
	case ws.OpPong:
		if len(p) == 8 && binary.BigEndian.Uint64(p) == c.pingWant.Load() {
			select {
			case c.pongs <- struct{}{}:
			default:
			}
		}
	case ws.OpClose:
		code, reason := ws.ParseCloseFrameData(p)
		c.closeOnce.Do(func() {
			c.closeCode, c.closeReason, c.peerClosed = int(code), reason, true
			close(c.closing)
		})
		return errPeerClose
	}
	return nil
}

// readFailed turns a read error into the close it calls for. skip is the
// unread payload of the refused frame, or -1 if it is not known.
func (c *Conn) readFailed(err error, skip int64) error {
	switch {
	case errors.Is(err, errPeerClose):
		return fmt.Errorf("%w: peer closed", ErrClosed)
	case errors.Is(err, wsutil.ErrFrameTooLarge), errors.Is(err, wsutil.ErrMessageTooLarge):
		c.Close(StatusMessageTooBig, fmt.Sprintf("read limited at %d bytes", c.opts.MaxMessageBytes+1))
		c.lingerAfter(skip)
		return fmt.Errorf("transport: message too big: %w", err)
	}
	var pe ws.ProtocolError
	if errors.As(err, &pe) {
		c.Close(StatusProtocolError, pe.Error())
		c.lingerAfter(-1)
		return fmt.Errorf("transport: %w", err)
	}
	return fmt.Errorf("transport: read: %w", err)
}

// lingerAfter skips the refused frame's payload and reads until the
// peer's close, so our close frame is read before the connection goes
// (dropping it with bytes unread would reset it first). Bounded by
// closeTimeout.
func (c *Conn) lingerAfter(skip int64) {
	if skip < 0 {
		return
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(closeTimeout))
	if _, err := io.CopyN(io.Discard, c.rd.Source, skip); err != nil {
		return
	}
	for {
		hdr, err := ws.ReadHeader(c.rd.Source)
		if err != nil {
			return
		}
		if hdr.OpCode == ws.OpClose {
			return
		}
		if _, err := io.CopyN(io.Discard, c.rd.Source, hdr.Length); err != nil {
			return
		}
	}
}

func (c *Conn) endRead(err error) {
	c.readOnce.Do(func() {
		c.readErr = err
		close(c.readDone)
	})
}

// Send queues a text frame and never blocks. It fails with ErrClosed once
// a close was asked for, and with ErrQueueFull when QueueLen frames are
// already waiting (the caller decides what a slow consumer costs).
func (c *Conn) Send(b []byte) error {
	select {
	case <-c.closing:
		return ErrClosed
	default:
	}
	select {
	case c.out <- b:
		return nil
	default:
		return ErrQueueFull
	}
}

// Queued reports how many frames wait in the send queue.
func (c *Conn) Queued() int { return len(c.out) }

// QueueLen reports the send queue's capacity.
func (c *Conn) QueueLen() int { return cap(c.out) }

// Close asks the writer to send what is queued, then a close frame with
// code and reason, and to drop the connection once the peer answers (or
// after closeTimeout). Only the first Close or Kill counts.
func (c *Conn) Close(code int, reason string) {
	c.closeOnce.Do(func() {
		c.closeCode, c.closeReason = code, reason
		close(c.closing)
	})
}

// Kill drops the connection at once, without a close handshake.
func (c *Conn) Kill() {
	c.closeOnce.Do(func() {
		c.closeCode, c.closeReason = StatusPolicyViolation, "slow consumer"
		close(c.closing)
	})
	c.killed.Store(true)
	_ = c.nc.Close()
}

// Closing is closed once a close was asked for (by either side).
func (c *Conn) Closing() <-chan struct{} { return c.closing }

// Done is closed once the writer has ended and the connection is closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Ping sends a ping through the writer and waits up to timeout for its
// pong. It returns ErrPongTimeout if none came, ErrClosed if the socket
// ended first. One goroutine pings.
func (c *Conn) Ping(timeout time.Duration) error {
	seq := c.pingSeq.Add(1)
	c.pingWant.Store(seq)
	select {
	case <-c.pongs: // a late pong of an earlier ping
	default:
	}
	p := make([]byte, 8)
	binary.BigEndian.PutUint64(p, seq)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case c.ctrl <- ws.NewPingFrame(p):
	case <-c.done:
		return ErrClosed
	case <-t.C:
		return ErrPongTimeout
	}
	select {
	case <-c.pongs:
		return nil
	case <-c.done:
		return ErrClosed
	case <-t.C:
		return ErrPongTimeout
	}
}

// writeLoop owns the connection's writes: batches of queued frames and
// control frames, then the close frame once one was asked for.
func (c *Conn) writeLoop() {
	defer close(c.done)
	defer c.nc.Close()
	for {
		select {
		case b := <-c.out:
			if !c.writeBatch(ws.Frame{Header: textHeader(b), Payload: b}) {
				return
			}
		case f := <-c.ctrl:
			if !c.writeBatch(f) {
				return
			}
		case <-c.closing:
			c.finish()
			return
		}
	}
}

func textHeader(b []byte) ws.Header {
	return ws.Header{Fin: true, OpCode: ws.OpText, Length: int64(len(b))}
}

// writeBatch writes first and then whatever else is queued, up to
// maxBatch frames, under one deadline, and flushes once.
func (c *Conn) writeBatch(first ws.Frame) bool {
	bw := c.startBatch()
	err := c.writeFrame(bw, first)
batch:
	for n := 1; err == nil && n < maxBatch; n++ {
		select {
		case b := <-c.out:
			err = c.writeFrame(bw, ws.Frame{Header: textHeader(b), Payload: b})
		case f := <-c.ctrl:
			err = c.writeFrame(bw, f)
		default:
			break batch
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	c.endBatch(bw)
	if err != nil {
		c.Kill()
		return false
	}
	return true
}

func (c *Conn) startBatch() *bufio.Writer {
	bw := writeBufs.Get().(*bufio.Writer)
	bw.Reset(c.nc)
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	return bw
}

func (c *Conn) endBatch(bw *bufio.Writer) {
	bw.Reset(nil)
	writeBufs.Put(bw)
}

func (c *Conn) writeFrame(bw *bufio.Writer, f ws.Frame) error {
	if err := ws.WriteHeaderBuffer(bw, f.Header, c.hdrBuf[:]); err != nil {
		return err
	}
	_, err := bw.Write(f.Payload)
	return err
}

// finish writes what is queued (unless the close answers the peer's, who
// reads no more), then the close frame, and waits for the peer's close.
func (c *Conn) finish() {
	if c.killed.Load() {
		return
	}
	bw := c.startBatch()
	var err error
	if !c.peerClosed {
	drain:
		for err == nil {
			select {
			case b := <-c.out:
				err = c.writeFrame(bw, ws.Frame{Header: textHeader(b), Payload: b})
			default:
				break drain
			}
		}
	}
	if err == nil {
		var body []byte
		if c.closeCode != 0 { // a peer's close without a code is echoed without one
			body = ws.NewCloseFrameBody(ws.StatusCode(c.closeCode), c.closeReason)
		}
		err = c.writeFrame(bw, ws.NewCloseFrame(body))
	}
	if err == nil {
		err = bw.Flush()
	}
	c.endBatch(bw)
	if err != nil {
		return
	}
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-c.readDone:
	case <-t.C:
	}
}
