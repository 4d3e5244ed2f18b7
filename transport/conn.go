// Package transport is the hub's server side of a WebSocket: the upgrade,
// a bounded frame reader, and a writer that sends everything queued for a
// socket with one system call. It moves bytes; the protocol is package hub.
//
// Who owns what:
//
//   - One goroutine reads (the caller of Read, in the hub the HTTP
//     handler's). It answers pings and close frames by queueing frames; it
//     writes only while it holds the socket (below).
//   - Every write is made by the one writer of the moment, marked by
//     Conn.writing: a writer goroutine started on demand when frames are
//     queued and nobody writes (it ends when the queue is empty, so an
//     idle socket has none), or the reader itself in Release. A writer
//     takes what is queued, up to maxBatch frames, encodes them into one
//     buffer and writes it at once, so a burst of broadcasts costs one
//     system call, not one per frame.
//   - Between Hold and Release the reader holds the socket: Send only
//     queues, and Release writes what its request produced with one write
//     that never blocks (what the kernel does not take goes to a writer
//     goroutine). A request and its reply thus cost no hand-off to another
//     goroutine.
//   - Send, Close and Kill are safe from any goroutine. One Keepalive
//     goroutine pings every socket of a server (keepalive.go).
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
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	// StatusAbnormalClosure is never sent: CloseStatus reports it for a
	// connection dropped because a write failed.
	StatusAbnormalClosure = 1006
)

var (
	// ErrClosed is returned once the socket is closing or closed.
	ErrClosed = errors.New("transport: socket closed")
	// ErrQueueFull is returned by Send when the peer has not taken the
	// frames already queued for it.
	ErrQueueFull = errors.New("transport: send queue full")
	// errPeerClose ends a read at the peer's close frame.
	errPeerClose = errors.New("transport: peer sent close")
)

// maxBatch caps the frames one write takes, so one busy socket still
// writes (and frees its buffer) regularly.
const maxBatch = 256

// closeTimeout is how long the writer waits, after its close frame, for
// the peer's close before dropping the connection (as coder/websocket did).
var closeTimeout = 5 * time.Second

// Write buffers: a batch is encoded into one pooled buffer and written at
// once. A payload above bigPayload is written from its own slice (writev)
// rather than copied; a Release writes inline only up to inlineMax bytes.
const (
	writeBufSize = 32 << 10
	readBufSize  = 1 << 10  // per socket, held while it is idle
	readChunk    = 16 << 10 // a message's first allocation; it grows as its bytes arrive
	bigPayload   = 16 << 10
	inlineMax    = 64 << 10
	// keptQueue is the largest queue an idle socket keeps; a bigger one
	// (after a burst) is dropped once it empties.
	keptQueue = 64
	// heldMax is how many frames wait for a holding reader's Release
	// before a writer goroutine starts draining them anyway.
	heldMax = 64
	// maxControl bounds queued control frames: pongs beyond it are dropped
	// (RFC 6455 §5.5.3 lets a peer answer only the latest ping).
	maxControl = 4
)

// stats counts what every socket of the process wrote (Stats).
var stats struct {
	frames, writes, inlineWrites, flushWrites atomic.Int64
}

// WriteStats is what the sockets of this process have written.
type WriteStats struct {
	Frames       int64 // frames written (control frames included)
	Writes       int64 // write system calls by writer goroutines
	InlineWrites int64 // non-blocking writes by a reader at Release
	FlushWrites  int64 // non-blocking writes by the flusher (flusher.go): frames no reader held
}

// Stats returns the write counters: Frames / (Writes + InlineWrites +
// FlushWrites) is how many frames one system call carried on average.
func Stats() WriteStats {
	return WriteStats{Frames: stats.frames.Load(), Writes: stats.writes.Load(), InlineWrites: stats.inlineWrites.Load(),
		FlushWrites: stats.flushWrites.Load()}
}

var writeBufs = sync.Pool{New: func() any { b := make([]byte, 0, writeBufSize); return &b }}

// Options configure a socket. Every field must be set.
type Options struct {
	// MaxMessageBytes bounds a message (all its fragments); a larger one
	// closes the socket with 1009, refused from its frame header.
	MaxMessageBytes int
	// QueueLen is how many frames Send may queue before ErrQueueFull.
	QueueLen int
	// QueueBytes bounds the bytes of the text frames waiting in the send
	// queue: a Send that would pass it fails with ErrQueueFull, so a peer
	// that reads slowly while large frames pile up is reported before its
	// queue holds QueueLen of them. A frame alone in the queue is always
	// taken, whatever its size. 0 = no bound.
	QueueBytes int
	// WriteTimeout bounds one batch's write: a peer that accepts nothing
	// for this long is dropped even if its queue never fills.
	WriteTimeout time.Duration
}

// Conn is one upgraded server-side WebSocket.
type Conn struct {
	nc   net.Conn
	raw  syscall.RawConn // for writes that never block (Release); nil if the connection has none
	rd   wsutil.Reader
	buf  *bufio.Reader // rd's source
	opts Options

	mu          sync.Mutex
	q           []outFrame // queued frames, oldest first
	texts, ctls int        // text and control frames in q
	qBytes      int        // bytes of the text frames in q
	spare       []outFrame // a taken batch's slice, reused
	rest        []byte     // the unwritten tail of a partial inline write: written first
	writing     bool       // a writer owns the socket's writes
	held        bool       // the reader holds the socket (Hold … Release)
	// ahead: the last Read left bytes of the peer's next frames in hand,
	// so the reader is about to handle another message (Hold … Release)
	// and frames queued meanwhile wait for that Release (Send).
	ahead      atomic.Bool
	closeAsked bool // Close, Kill or the peer's close: nothing more is queued
	killed     bool

	closeOnce   sync.Once
	closing     chan struct{} // closed when a close was asked for
	closeCode   int
	closeReason string
	peerClosed  bool // the close answers the peer's: skip the queue (set before closing)

	readOnce sync.Once
	readDone chan struct{} // closed when Read has returned its final error
	readErr  error         // set before readDone is closed
	ctlBuf   [ws.MaxControlFramePayloadSize]byte

	// Keepalive (keepalive.go): the keeper's fields, the last ping's
	// payload for the reader, and the newest ping the reader has heard the
	// peer since: its pong, or any message read after it was sent (heard).
	pingSeq  uint64 // the last ping's payload (keeper)
	pingAt   int64  // when it was sent, unix ns; at Accept before any (keeper)
	pingOut  bool   // its pong has not come yet (keeper)
	pingSent atomic.Uint64
	pongSeen atomic.Uint64

	endOnce sync.Once
	done    chan struct{} // closed when the connection is closed and no writer runs
}

// outFrame is one queued frame: a text message or a control frame.
type outFrame struct {
	op ws.OpCode
	p  []byte
}

// Accept checks a WebSocket handshake, upgrades the connection and starts
// its writer. On a refused handshake it has written the HTTP error.
// Compression is never negotiated. Host and Origin are the caller's to
// check before Accept: the hub decides them for every route at once
// (gate.RequestPolicy), so Accept looks only at the WebSocket handshake.
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
		closing:  make(chan struct{}),
		readDone: make(chan struct{}),
		done:     make(chan struct{}),
		pingAt:   time.Now().UnixNano(),
	}
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	// The buffered reader may already hold the client's first frames; if
	// not, a smaller one replaces net/http's: most frames are a few
	// hundred bytes, and larger payloads are read past the buffer.
	c.buf = rw.Reader
	if rw.Reader.Buffered() == 0 {
		c.buf = bufio.NewReaderSize(nc, readBufSize)
	}
	c.rd = wsutil.Reader{
		Source:         c.buf,
		State:          ws.StateServerSide,
		MaxFrameSize:   int64(opts.MaxMessageBytes),
		MaxMessageSize: int64(opts.MaxMessageBytes),
		// Text is not checked for UTF-8: bad bytes reach the protocol's
		// decoder, which answers "Malformed JSON." and keeps the socket.
		CheckUTF8:      false,
		OnIntermediate: c.intermediate,
	}
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
	c.ahead.Store(c.buf.Buffered() > 0)
	return b, nil
}

// Pending reports whether bytes of the peer's next frames were already
// read in with the last message: the peer sent more before it saw any
// answer, as a flooder does and a request-response client does not. Only
// the reading goroutine may call it.
func (c *Conn) Pending() bool { return c.buf.Buffered() > 0 }

// LimitReceiveBuffer caps the kernel's receive buffer for the socket at
// about n bytes (SO_RCVBUF; Linux doubles it and stops growing it): a peer
// that sends far ahead of what is read then blocks on its writes instead
// of queueing megabytes in this host's kernel.
func (c *Conn) LimitReceiveBuffer(n int) {
	nc := c.nc
	if tc, ok := nc.(interface{ NetConn() net.Conn }); ok { // a TLS socket: its TCP connection
		nc = tc.NetConn()
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(n)
	}
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
		// It grows as bytes arrive, not to the length the header announces:
		// a peer that announces 1 MiB and trickles holds what it sent.
		buf := make([]byte, 0, min(hdr.Length, readChunk))
		for {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			n, err := c.rd.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if err == io.EOF {
				c.heard()
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

// heard notes a whole message read from the peer: the peer is there, as
// surely as a pong would say, so it answers every ping sent so far (keep).
// A reader that a server paces (its frames wait in the kernel's buffers,
// the pong behind them) then does not get its peer reaped while it is
// still reading what the peer sent. Reader only; one atomic load per
// message, a store once per ping.
func (c *Conn) heard() {
	if p := c.pingSent.Load(); c.pongSeen.Load() != p {
		c.pongSeen.Store(p)
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
		c.queueControl(ws.OpPong, append([]byte(nil), p...))
	case ws.OpPong:
		if len(p) == 8 {
			c.pongSeen.Store(binary.BigEndian.Uint64(p))
		}
	case ws.OpClose:
		code, reason := ws.ParseCloseFrameData(p)
		c.closeOnce.Do(func() {
			c.closeCode, c.closeReason, c.peerClosed = int(code), reason, true
			close(c.closing)
		})
		c.finishLater()
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
// a close was asked for, and with ErrQueueFull when QueueLen frames, or
// QueueBytes bytes, are already waiting (the caller decides what a slow
// consumer costs).
func (c *Conn) Send(b []byte) error {
	c.mu.Lock()
	switch {
	case c.closeAsked:
		c.mu.Unlock()
		return ErrClosed
	case c.texts >= c.opts.QueueLen,
		c.opts.QueueBytes > 0 && c.texts > 0 && c.qBytes+len(b) > c.opts.QueueBytes:
		c.mu.Unlock()
		return ErrQueueFull
	}
	c.q = append(c.q, outFrame{ws.OpText, b})
	c.texts++
	c.qBytes += len(b)
	// A held socket's frames wait for Release, unless its request turns
	// out to produce many (a mailbox replay): a writer starts draining
	// them at once, so the queue's bound applies to the peer, not to us.
	// So do the frames of a socket whose next message the reader already
	// has in hand (one that sends ahead of its answers: a flood, a
	// pipelining script): they go out with its next answers, in one
	// write, instead of costing a write each (a broadcast to 200
	// flooders was 64,000 writes a second).
	wait := (c.held || c.ahead.Load()) && c.texts < heldMax
	start := !wait && c.claimWriterLocked()
	c.mu.Unlock()
	if start {
		flushLater(c)
	}
	return nil
}

// queueControl queues a ping or pong; beyond maxControl it is dropped.
func (c *Conn) queueControl(op ws.OpCode, p []byte) {
	c.mu.Lock()
	if c.closeAsked || c.ctls >= maxControl {
		c.mu.Unlock()
		return
	}
	c.q = append(c.q, outFrame{op, p})
	c.ctls++
	start := !c.held && c.claimWriterLocked()
	c.mu.Unlock()
	if start {
		go c.writeLoop()
	}
}

// claimWriterLocked makes the caller the writer if nobody writes.
func (c *Conn) claimWriterLocked() bool {
	if c.writing {
		return false
	}
	c.writing = true
	return true
}

// Queued reports how many text frames wait in the send queue.
func (c *Conn) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.texts
}

// QueuedBytes reports the bytes of the text frames in the send queue.
func (c *Conn) QueuedBytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.qBytes
}

// QueueLen reports the send queue's capacity.
func (c *Conn) QueueLen() int { return c.opts.QueueLen }

// Hold marks the reader as handling a message: frames queued until Release
// wait for it instead of starting a writer goroutine. The reader must not
// wait on anything slow (another hub, the network) while it holds the
// socket: it calls Release first. Only the reading goroutine calls Hold.
func (c *Conn) Hold() {
	c.mu.Lock()
	c.held = true
	c.mu.Unlock()
}

// Release ends a hold and writes what was queued meanwhile, on the calling
// goroutine, with one write that never blocks; what the kernel does not
// take (or a batch above inlineMax) goes to a writer goroutine. Releasing
// a socket not held does nothing.
func (c *Conn) Release() {
	c.mu.Lock()
	if !c.held {
		c.mu.Unlock()
		return
	}
	c.held = false
	if len(c.q) == 0 || !c.claimWriterLocked() {
		c.mu.Unlock()
		return
	}
	c.writeInlineLocked(&stats.inlineWrites)
}

// writeInlineLocked writes what is queued with one write that never
// blocks, on the calling goroutine, which holds c.mu (let go here) and is
// the writer; what the kernel does not take, or a batch above inlineMax,
// goes to a writer goroutine, as does a socket being closed. written counts
// the write.
func (c *Conn) writeInlineLocked(written *atomic.Int64) {
	if c.closeAsked || c.raw == nil {
		c.mu.Unlock()
		go c.writeLoop()
		return
	}
	batch := c.takeLocked()
	c.mu.Unlock()

	bp := writeBufs.Get().(*[]byte)
	buf, whole := encodeBatch((*bp)[:0], batch, inlineMax)
	n, err := 0, error(nil)
	if whole {
		// Counted before the call: a peer may read the bytes (and a test
		// read Stats) before tryWrite returns.
		written.Add(1)
		stats.frames.Add(int64(len(batch)))
		n, err = tryWrite(c.raw, buf)
	}
	c.mu.Lock()
	switch {
	case err != nil:
		c.mu.Unlock()
		c.giveBack(bp, buf, batch)
		c.lost()
		c.end() // the writer ends the socket it killed
		return
	case !whole: // too big to write inline: requeue it for the writer goroutine
		c.q = append(batch, c.q...)
		c.countLocked(batch, +1)
		batch = nil
	case n < len(buf): // the kernel took part: the writer goroutine writes the rest first
		c.rest = append([]byte(nil), buf[n:]...)
	case len(c.q) == 0 && !c.closeAsked:
		c.writing = false
		c.mu.Unlock()
		c.giveBack(bp, buf, batch)
		return
	}
	c.mu.Unlock()
	c.giveBack(bp, buf, batch)
	go c.writeLoop()
}

// takeLocked takes up to maxBatch frames off the queue.
func (c *Conn) takeLocked() []outFrame {
	n := min(len(c.q), maxBatch)
	var batch []outFrame
	if n == len(c.q) {
		batch, c.q = c.q, c.spare[:0]
		c.spare = nil
	} else {
		batch = append(c.spare[:0], c.q[:n]...)
		c.spare = nil
		rest := copy(c.q, c.q[n:])
		clear(c.q[rest:])
		c.q = c.q[:rest]
	}
	c.countLocked(batch, -1)
	return batch
}

func (c *Conn) countLocked(batch []outFrame, sign int) {
	for _, f := range batch {
		if f.op == ws.OpText {
			c.texts += sign
			c.qBytes += sign * len(f.p)
		} else {
			c.ctls += sign
		}
	}
}

// giveBack returns a written batch's buffers: the encode buffer to the
// pool, the batch's slice for reuse unless it grew large.
func (c *Conn) giveBack(bp *[]byte, buf []byte, batch []outFrame) {
	if cap(buf) <= 4*writeBufSize {
		*bp = buf[:0]
		writeBufs.Put(bp)
	}
	if batch == nil || cap(batch) > keptQueue {
		return
	}
	clear(batch)
	c.mu.Lock()
	if c.spare == nil {
		c.spare = batch[:0]
	}
	c.mu.Unlock()
}

// encodeBatch appends the frames of batch to buf. It reports false, having
// encoded nothing useful, when they would take more than max bytes (max < 0:
// no bound).
func encodeBatch(buf []byte, batch []outFrame, max int) ([]byte, bool) {
	if max >= 0 {
		total := 0
		for _, f := range batch {
			total += ws.MaxHeaderSize + len(f.p)
		}
		if total > max {
			return buf, false
		}
	}
	for _, f := range batch {
		buf = appendFrame(buf, f)
	}
	return buf, true
}

// appendFrame appends one unmasked server frame: header, then payload.
func appendFrame(buf []byte, f outFrame) []byte {
	buf = appendHeader(buf, f.op, len(f.p))
	return append(buf, f.p...)
}

// appendHeader appends a final, unmasked frame header (RFC 6455 §5.2).
func appendHeader(buf []byte, op ws.OpCode, n int) []byte {
	b0 := byte(0x80) | byte(op)
	switch {
	case n < 126:
		return append(buf, b0, byte(n))
	case n <= 0xffff:
		return append(buf, b0, 126, byte(n>>8), byte(n))
	default:
		return binary.BigEndian.AppendUint64(append(buf, b0, 127), uint64(n))
	}
}

// writeLoop is a writer goroutine: it writes batches until the queue is
// empty, then ends (an idle socket keeps no goroutine); once a close was
// asked for it finishes the socket. The caller made it the writer.
func (c *Conn) writeLoop() {
	runtime.Gosched() // let whoever is queueing frames queue more first: fewer, larger writes
	for {
		c.mu.Lock()
		if c.closeAsked {
			c.mu.Unlock()
			c.finish()
			return
		}
		rest := c.rest
		c.rest = nil
		if len(c.q) == 0 && rest == nil {
			c.writing = false
			if cap(c.q) > keptQueue {
				c.q = nil // a burst's queue is not kept by an idle socket
			}
			c.mu.Unlock()
			return
		}
		batch := c.takeLocked()
		c.mu.Unlock()
		if err := c.writeBlocking(rest, batch); err != nil {
			c.lost()
			c.end() // the writer ends the socket it killed
			return
		}
	}
}

// writeBlocking writes rest and then batch under one write deadline: one
// write system call per writeBufSize bytes, big payloads from their own
// slices (writev), so a peer that reads slowly blocks this goroutine only.
func (c *Conn) writeBlocking(rest []byte, batch []outFrame) error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	bp := writeBufs.Get().(*[]byte)
	buf := append((*bp)[:0], rest...)
	var err error
	stats.frames.Add(int64(len(batch)))
	for _, f := range batch {
		if len(f.p) > bigPayload {
			bufs := net.Buffers{appendHeader(buf, f.op, len(f.p)), f.p}
			stats.writes.Add(1)
			_, err = bufs.WriteTo(c.nc)
			buf = buf[:0]
		} else {
			buf = appendFrame(buf, f)
			if len(buf) >= writeBufSize {
				stats.writes.Add(1)
				_, err = c.nc.Write(buf)
				buf = buf[:0]
			}
		}
		if err != nil {
			break
		}
	}
	if err == nil && len(buf) > 0 {
		stats.writes.Add(1) // before the call, as in writeInlineLocked
		_, err = c.nc.Write(buf)
	}
	c.giveBack(bp, buf, batch)
	return err
}

// Close asks a writer to send what is queued, then a close frame with code
// and reason, and to drop the connection once the peer answers (or after
// closeTimeout). Only the first Close or Kill counts.
func (c *Conn) Close(code int, reason string) {
	c.closeOnce.Do(func() {
		c.closeCode, c.closeReason = code, reason
		close(c.closing)
	})
	c.finishLater()
}

// finishLater marks the socket closing and, if nobody writes, starts the
// writer goroutine that finishes it.
func (c *Conn) finishLater() {
	c.mu.Lock()
	c.closeAsked = true
	start := c.claimWriterLocked()
	c.mu.Unlock()
	if start {
		go c.writeLoop()
	}
}

// Kill drops the connection at once, without a close handshake.
func (c *Conn) Kill() {
	c.closeOnce.Do(func() {
		c.closeCode, c.closeReason = StatusPolicyViolation, "slow consumer"
		close(c.closing)
	})
	c.mu.Lock()
	c.closeAsked, c.killed = true, true
	c.mu.Unlock()
	_ = c.nc.Close()
	c.endIfIdle()
}

// lost drops a connection whose write failed (the peer is gone or took
// nothing for WriteTimeout): as Kill, with 1006, which is never sent.
func (c *Conn) lost() {
	c.closeOnce.Do(func() {
		c.closeCode, c.closeReason = StatusAbnormalClosure, "connection lost"
		close(c.closing)
	})
	c.Kill()
}

// endIfIdle ends a killed socket when no writer runs; a running writer
// ends it when its write fails.
func (c *Conn) endIfIdle() {
	c.mu.Lock()
	idle := !c.writing
	c.writing = true // nobody writes again
	c.mu.Unlock()
	if idle {
		c.end()
	}
}

// end closes the connection and Done.
func (c *Conn) end() {
	c.endOnce.Do(func() {
		_ = c.nc.Close()
		close(c.done)
	})
}

// CloseStatus is the code and reason the socket was closed with (by Close
// or Kill, or echoing the peer's close), and 0 and "" while no close was
// asked for.
func (c *Conn) CloseStatus() (int, string) {
	select {
	case <-c.closing:
		return c.closeCode, c.closeReason
	default:
		return 0, ""
	}
}

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Closing is closed once a close was asked for (by either side).
func (c *Conn) Closing() <-chan struct{} { return c.closing }

// Done is closed once the connection is closed and no writer runs.
func (c *Conn) Done() <-chan struct{} { return c.done }

// finish, on the writer that saw the close asked for, writes what is
// queued (unless the close answers the peer's, who reads no more), then
// the close frame, waits for the peer's close and ends the socket.
func (c *Conn) finish() {
	defer c.end()
	c.mu.Lock()
	killed, rest := c.killed, c.rest
	var batch []outFrame
	if !c.peerClosed {
		batch = c.q
	}
	c.q, c.rest = nil, nil
	c.mu.Unlock()
	if killed {
		return
	}
	var body []byte
	if c.closeCode != 0 { // a peer's close without a code is echoed without one
		body = ws.NewCloseFrameBody(ws.StatusCode(c.closeCode), c.closeReason)
	}
	for len(batch) > maxBatch {
		if c.writeBlocking(rest, batch[:maxBatch]) != nil {
			return
		}
		rest, batch = nil, batch[maxBatch:]
	}
	if c.writeBlocking(rest, append(batch, outFrame{ws.OpClose, body})) != nil {
		return
	}
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-c.readDone:
	case <-t.C:
	}
}
