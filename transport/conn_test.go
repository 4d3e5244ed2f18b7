package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
)

const testDeadline = 10 * time.Second

// serve runs Accept behind httptest and hands each accepted socket to
// handle, on the handler's goroutine.
func serve(t *testing.T, opts Options, handle func(*Conn)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := Accept(w, r, opts)
		if err != nil {
			return
		}
		handle(c)
		<-c.Done()
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

// readToEnd reads until the socket ends, as a server's read loop does (it
// answers pings and completes close handshakes).
func readToEnd(c *Conn) {
	for {
		if _, err := c.Read(); err != nil {
			return
		}
	}
}

var testOpts = Options{MaxMessageBytes: 4096, QueueLen: 1024, WriteTimeout: testDeadline}

func TestConn_QueuedFramesArriveInOrderThenTheCloseCodeAndReason(t *testing.T) {
	const n = 1000 // more than one batch
	url := serve(t, testOpts, func(c *Conn) {
		for i := range n {
			if err := c.Send([]byte(fmt.Sprintf(`{"i":%d}`, i))); err != nil {
				t.Errorf("send %d: %v", i, err)
			}
		}
		c.Close(4009, "name conflict")
		readToEnd(c)
	})
	cl := dial(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	for i := range n {
		typ, b, err := cl.Read(ctx)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if want := fmt.Sprintf(`{"i":%d}`, i); typ != websocket.MessageText || string(b) != want {
			t.Fatalf("frame %d: %v %q, want text %q", i, typ, b, want)
		}
	}
	_, _, err := cl.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4009 || ce.Reason != "name conflict" {
		t.Fatalf("ended with %v, want close 4009 %q", err, "name conflict")
	}
}

func TestConn_ReadsTextBinaryAndFragmentedMessagesWhole(t *testing.T) {
	got := make(chan string, 3)
	url := serve(t, testOpts, func(c *Conn) {
		for {
			b, err := c.Read()
			if err != nil {
				close(got)
				return
			}
			got <- string(b)
		}
	})
	cl := dial(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	_ = cl.Write(ctx, websocket.MessageText, []byte("\xff not utf-8"))
	_ = cl.Write(ctx, websocket.MessageBinary, []byte{0, 1, 2})
	w, err := cl.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"frag", "mented"} {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	_ = w.Close()
	for _, want := range []string{"\xff not utf-8", "\x00\x01\x02", "fragmented"} {
		select {
		case b := <-got:
			if b != want {
				t.Fatalf("read %q, want %q", b, want)
			}
		case <-time.After(testDeadline):
			t.Fatalf("no message %q", want)
		}
	}
}

func TestConn_OversizedMessageCloses1009(t *testing.T) {
	readErr := make(chan error, 1)
	url := serve(t, testOpts, func(c *Conn) {
		for {
			if _, err := c.Read(); err != nil {
				readErr <- err
				return
			}
		}
	})
	cl := dial(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	if err := cl.Write(ctx, websocket.MessageText, []byte(strings.Repeat("x", 4096))); err != nil {
		t.Fatal(err)
	}
	_ = cl.Write(ctx, websocket.MessageText, []byte(strings.Repeat("x", 4097)))
	_, _, err := cl.Read(ctx)
	if code := websocket.CloseStatus(err); code != websocket.StatusMessageTooBig {
		t.Fatalf("ended with %v, want close 1009", err)
	}
	if err := <-readErr; err == nil {
		t.Fatal("Read did not fail")
	}
}

func TestConn_AFullQueueIsReported(t *testing.T) {
	full := make(chan error, 1)
	url := serve(t, Options{MaxMessageBytes: 4096, QueueLen: 1, WriteTimeout: testDeadline}, func(c *Conn) {
		go func() {
			readToEnd(c)
		}()
		var err error
		for err == nil { // the client does not read frames
			err = c.Send(make([]byte, 1024))
		}
		full <- err
		c.Kill()
	})
	dial(t, url)
	if err := <-full; !errors.Is(err, ErrQueueFull) {
		t.Fatalf("send: %v, want ErrQueueFull", err)
	}
}

// A peer that reads nothing while large frames pile up is reported by the
// byte bound long before QueueLen frames wait: the queue never holds more
// than QueueBytes (issue 12: a slow reader must not grow the hub's memory).
// A frame alone in the queue is taken whatever its size.
func TestConn_QueueBytesBoundsASlowReadersQueue(t *testing.T) {
	const bound = 64 << 10
	type result struct {
		err        error
		sent, max  int
		aloneTaken error
	}
	done := make(chan result, 1)
	url := serve(t, Options{MaxMessageBytes: 4096, QueueLen: 1 << 20, QueueBytes: bound, WriteTimeout: testDeadline}, func(c *Conn) {
		go readToEnd(c)
		var r result
		for r.err == nil { // the client does not read frames
			r.err = c.Send(make([]byte, 8<<10))
			r.sent++
			r.max = max(r.max, c.QueuedBytes())
		}
		done <- r
		c.Kill()
	})
	dial(t, url)
	r := <-done
	if !errors.Is(r.err, ErrQueueFull) || r.max > bound {
		t.Fatalf("send %d: %v with %d bytes queued at most; want ErrQueueFull and at most %d", r.sent, r.err, r.max, bound)
	}

	alone := make(chan error, 1)
	url = serve(t, Options{MaxMessageBytes: 4096, QueueLen: 8, QueueBytes: 1, WriteTimeout: testDeadline}, func(c *Conn) {
		go readToEnd(c)
		c.Hold() // nothing is written meanwhile: the frame waits in the queue
		alone <- c.Send(make([]byte, 1024))
		c.Release()
		c.Kill()
	})
	dial(t, url)
	if err := <-alone; err != nil {
		t.Fatalf("a frame alone in the queue: %v, want it taken", err)
	}
}

// The keeper pings every socket: one whose peer answers stays up across
// many intervals, one whose peer has stopped reading (no pong) is killed
// and reported (PROTOCOL.md §1.1: a dead socket is reaped).
func TestKeepalive_AnsweringPeerStaysSilentPeerIsReaped(t *testing.T) {
	const interval = 20 * time.Millisecond
	dead := make(chan *Conn, 2)
	k := NewKeepalive(interval, interval, func(c *Conn) { dead <- c })
	t.Cleanup(k.Close)
	conns := make(chan *Conn, 2)
	url := serve(t, testOpts, func(c *Conn) {
		k.Add(c)
		conns <- c
		readToEnd(c)
	})
	live := dial(t, url)
	liveConn := <-conns
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _, _ = live.Read(ctx) }() // reading answers pings
	silent := dial(t, url)                   // never reads: no pong
	_ = silent
	silentConn := <-conns

	select {
	case c := <-dead:
		if c != silentConn {
			t.Fatal("the keeper reaped the peer that answers its pings")
		}
	case <-time.After(testDeadline):
		t.Fatal("the silent peer was not reaped")
	}
	<-silentConn.Done()
	// The answering peer outlives many more rounds.
	for range 10 {
		before := liveConn.pongSeen.Load()
		deadline := time.Now().Add(testDeadline)
		for liveConn.pongSeen.Load() == before {
			if time.Now().After(deadline) {
				t.Fatal("no new pong from the answering peer")
			}
			time.Sleep(interval / 4)
		}
	}
	select {
	case <-liveConn.Closing():
		t.Fatal("the answering peer's socket was closed")
	case c := <-dead:
		t.Fatalf("a second socket was reaped: %v", c == liveConn)
	default:
	}
}

func TestConn_PeerCloseIsEchoed(t *testing.T) {
	readErr := make(chan error, 1)
	url := serve(t, testOpts, func(c *Conn) {
		_, err := c.Read()
		readErr <- err
	})
	cl := dial(t, url)
	if err := cl.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatalf("close handshake: %v", err)
	}
	if err := <-readErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("Read: %v, want ErrClosed", err)
	}
}

// Host and Origin are the hub's decision, taken once for every route
// (gate.RequestPolicy, TestPolicy_* in gate); Accept checks only the handshake.
func TestAccept_LeavesOriginToTheCaller(t *testing.T) {
	url := serve(t, testOpts, func(c *Conn) { c.Kill() })
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	cl, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://evil.example"}}})
	if err != nil {
		t.Fatalf("dial with a foreign Origin: %v, want the upgrade", err)
	}
	cl.CloseNow()
}

// Frames queued while the reader holds the socket wait for Release, which
// writes them in order with whatever other goroutines queued; a request
// that produces many frames (past heldMax) is drained without waiting for
// Release. Writes interrupted by a full socket buffer resume where they
// stopped (the unwritten tail goes first): the client, which reads only
// after every frame was queued, gets them all, whole and in order.
func TestConn_HeldFramesWaitForReleaseAndPartialWritesResume(t *testing.T) {
	const rounds = 150
	big := strings.Repeat("x", 60<<10) // 150 × 60 KiB: far more than the socket buffers hold
	ready := make(chan *Conn, 1)
	url := serve(t, Options{MaxMessageBytes: 4096, QueueLen: 1024, WriteTimeout: testDeadline}, func(c *Conn) {
		ready <- c
		readToEnd(c)
	})
	cl := dial(t, url)
	cl.SetReadLimit(1 << 20)
	c := <-ready

	c.Hold()
	if err := c.Send([]byte(`{"i":"held"}`)); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	writing := c.writing
	c.mu.Unlock()
	if writing {
		t.Fatal("a frame sent while held started a writer: Release should write it")
	}
	c.Release()
	for i := range rounds {
		c.Hold()
		if err := c.Send([]byte(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, big))); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		c.Release()
	}
	c.Hold()
	for i := range heldMax + 1 {
		if err := c.Send([]byte(fmt.Sprintf(`{"j":%d}`, i))); err != nil {
			t.Fatalf("send j%d: %v", i, err)
		}
	}
	// No Release: the writer started at heldMax must deliver them.

	ctx, cancel := context.WithTimeout(context.Background(), 3*testDeadline)
	defer cancel()
	read := func() string {
		_, b, err := cl.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return string(b)
	}
	if got := read(); got != `{"i":"held"}` {
		t.Fatalf("first frame %.40q", got)
	}
	for i := range rounds {
		if want := fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, big); read() != want {
			t.Fatalf("frame %d is not whole or not in order", i)
		}
	}
	for i := range heldMax + 1 {
		if got, want := read(), fmt.Sprintf(`{"j":%d}`, i); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	c.Release()
}

// An idle socket keeps no writer goroutine: the writer that drained the
// queue ends.
func TestConn_WriterEndsWhenTheQueueIsEmpty(t *testing.T) {
	ready := make(chan *Conn, 1)
	url := serve(t, testOpts, func(c *Conn) {
		ready <- c
		readToEnd(c)
	})
	cl := dial(t, url)
	c := <-ready
	for i := range 100 {
		if err := c.Send([]byte(fmt.Sprintf(`{"i":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	for range 100 {
		if _, _, err := cl.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(testDeadline)
	for {
		c.mu.Lock()
		writing, queued := c.writing, len(c.q)
		c.mu.Unlock()
		if !writing && queued == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer still running (writing=%v, %d queued) after the queue drained", writing, queued)
		}
		time.Sleep(time.Millisecond)
	}
}

// A message larger than the first allocation (readChunk) is read whole as
// its bytes arrive, and one announced larger than the limit is refused
// (1009) from its header: the buffer grows with what the peer sent, never
// to what it announced.
func TestConn_LargeMessageGrowsAsItArrives(t *testing.T) {
	got := make(chan []byte, 1)
	url := serve(t, Options{MaxMessageBytes: 1 << 20, QueueLen: 16, WriteTimeout: testDeadline}, func(c *Conn) {
		b, err := c.Read()
		if err != nil {
			close(got)
			return
		}
		got <- b
		readToEnd(c)
	})
	cl := dial(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	want := []byte(strings.Repeat("0123456789abcdef", 200<<10/16)) // 200 KiB
	if err := cl.Write(ctx, websocket.MessageText, want); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if string(b) != string(want) {
			t.Fatalf("read %d bytes, want the %d sent", len(b), len(want))
		}
	case <-time.After(testDeadline):
		t.Fatal("no message")
	}
}

// Pending tells a peer that sent ahead of its answers (its next frames
// came in with the last one) from one that waits for them: the hub's heavy
// lane is chosen by it (issue 12, hostile clients).
func TestConn_PendingSaysTheNextFramesAreAlreadyIn(t *testing.T) {
	start := make(chan struct{})
	pending := make(chan bool, 3)
	url := serve(t, testOpts, func(c *Conn) {
		<-start
		for range 3 {
			if _, err := c.Read(); err != nil {
				close(pending)
				return
			}
			pending <- c.Pending()
		}
	})
	cl := dial(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	for _, m := range []string{"one", "two", "three"} {
		if err := cl.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	close(start) // on loopback the three are in the server's socket buffer by now
	for i, want := range []bool{true, true, false} {
		select {
		case got := <-pending:
			if got != want {
				t.Fatalf("after message %d Pending() = %v, want %v", i+1, got, want)
			}
		case <-time.After(testDeadline):
			t.Fatalf("message %d not read", i+1)
		}
	}
}

// A connect storm's sockets, added to the keeper within a moment, get
// their first pings spread evenly over half an interval, so no keeper tick
// pings them all at once (a 10,000-agent storm's pings in one tick made
// every claim behind them wait).
func TestKeepalive_SpreadsTheFirstPingsOfAStorm(t *testing.T) {
	const interval, n, buckets = 16 * time.Second, 1000, 16
	k := &Keepalive{interval: interval, conns: map[*Conn]struct{}{}}
	count := make([]int, buckets)
	for range n {
		c := &Conn{}
		k.Add(c)
		off := time.Duration(c.pingAt)
		if off < 0 || off >= interval/2 {
			t.Fatalf("first ping %v after the interval, want within half an interval", off)
		}
		count[off*buckets/(interval/2)]++
	}
	for i, got := range count {
		if got < n/buckets*9/10 || got > n/buckets*11/10 {
			t.Fatalf("%d of %d first pings in slice %d of %d: not spread evenly %v", got, n, i, buckets, count)
		}
	}
}

// A peer whose messages the server is still reading is not reaped for a
// pong that waits behind them (a server pacing the socket's reads): a
// message read after a ping answers it as its pong would. Once nothing is
// read after the next ping, the missing pong reaps it. The keeper's step
// is driven by hand, with its clock given.
func TestKeepalive_AMessageReadAfterThePingAnswersIt(t *testing.T) {
	const interval, timeout = time.Second, time.Second
	conns := make(chan *Conn, 1)
	url := serve(t, testOpts, func(c *Conn) { conns <- c })
	cl := dial(t, url) // never reads: it never answers a ping
	c := <-conns
	t.Cleanup(c.Kill)
	now := c.pingAt + int64(interval)
	if c.keep(now, interval, timeout) || !c.pingOut {
		t.Fatal("the first ping was not sent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	if err := cl.Write(ctx, websocket.MessageText, []byte("work")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(); err != nil {
		t.Fatal(err)
	}
	now += int64(timeout) // the first ping's pong is due, and the next ping
	if c.keep(now, interval, timeout) {
		t.Fatal("reaped a peer whose message was read after the ping")
	}
	if c.pingSent.Load() != 2 || !c.pingOut {
		t.Fatal("the second ping was not sent")
	}
	if !c.keep(now+int64(timeout), interval, timeout) {
		t.Fatal("a peer heard from neither by pong nor by message after the ping was not reaped")
	}
}

// A frame sent to a socket its reader does not hold (a broadcast) is
// written by the flusher, with one non-blocking write per socket, not by a
// writer goroutine per socket: a broadcast to many sockets costs no
// goroutine each. Every peer gets its frame.
func TestFlusher_WritesBroadcastsWithoutAWriterPerSocket(t *testing.T) {
	const n = 50
	conns := make(chan *Conn, n)
	url := serve(t, testOpts, func(c *Conn) {
		conns <- c
		readToEnd(c)
	})
	peers := make([]*websocket.Conn, n)
	server := make([]*Conn, n)
	for i := range peers {
		peers[i] = dial(t, url)
		server[i] = <-conns
	}
	before := Stats()
	for _, c := range server {
		if err := c.Send([]byte(`{"type":"claim_granted"}`)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	for i, p := range peers {
		if _, b, err := p.Read(ctx); err != nil || string(b) != `{"type":"claim_granted"}` {
			t.Fatalf("peer %d read %q, %v", i, b, err)
		}
	}
	after := Stats()
	if w := after.Writes - before.Writes; w != 0 {
		t.Errorf("%d writes by writer goroutines for %d broadcast frames, want none", w, n)
	}
	// A frame sent while that socket's reader is between a read and its
	// release leaves with the release instead (inline): still one
	// non-blocking write, and no goroutine of its own.
	f, in := after.FlushWrites-before.FlushWrites, after.InlineWrites-before.InlineWrites
	if f+in != n || f == 0 {
		t.Errorf("%d writes by the flusher and %d inline, want one per socket (%d), most by the flusher", f, in, n)
	}
}

// A frame for a socket whose reader already has the peer's next message
// in hand (the peer sent ahead of its answers) waits for that message's
// Release and goes out with its answer in one write, rather than costing
// a write of its own: a broadcast to flooders costs them no system call
// each. A socket with nothing in hand gets it from the flusher at once.
func TestSend_WaitsForTheNextReleaseOfASocketThatSentAhead(t *testing.T) {
	conns := make(chan *Conn, 1)
	url := serve(t, testOpts, func(c *Conn) {
		conns <- c
		<-c.Closing()
	})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	nc, br, _, err := ws.Dial(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := <-conns
	// Two messages in one write: the first Read leaves the second in hand.
	bw := bufio.NewWriter(nc)
	for _, m := range []string{"one", "two"} {
		if err := wsutil.WriteClientText(bw, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if b, err := c.Read(); err != nil || string(b) != "one" {
		t.Fatalf("read %q, %v", b, err)
	}
	if !c.Pending() {
		t.Fatal("the second message is not in hand after the first Read")
	}
	before := Stats()
	if err := c.Send([]byte("broadcast")); err != nil { // as another goroutine would
		t.Fatal(err)
	}
	if s := Stats(); s.Writes != before.Writes || s.FlushWrites != before.FlushWrites || c.Queued() != 1 {
		t.Fatalf("the frame was written (writes %d, flushes %d, queued %d), want it to wait for the next Release",
			s.Writes-before.Writes, s.FlushWrites-before.FlushWrites, c.Queued())
	}
	if b, err := c.Read(); err != nil || string(b) != "two" {
		t.Fatalf("read %q, %v", b, err)
	}
	c.Hold()
	if err := c.Send([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	c.Release()
	if s := Stats(); s.InlineWrites != before.InlineWrites+1 {
		t.Fatalf("%d inline writes, want the broadcast and the answer in one", s.InlineWrites-before.InlineWrites)
	}
	var got []string
	peer := struct {
		io.Reader
		io.Writer
	}{nc, nc}
	if br != nil { // the handshake's reader holds what came with it
		peer.Reader = br
	}
	for len(got) < 2 {
		b, err := wsutil.ReadServerText(peer)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
	}
	if got[0] != "broadcast" || got[1] != "answer" {
		t.Fatalf("the peer read %v, want the broadcast, then the answer", got)
	}
	// Nothing in hand now: a frame goes out through the flusher.
	if c.Pending() {
		t.Fatal("bytes in hand after both messages")
	}
	if err := c.Send([]byte("later")); err != nil {
		t.Fatal(err)
	}
	if b, err := wsutil.ReadServerText(peer); err != nil || string(b) != "later" {
		t.Fatalf("read %q, %v", b, err)
	}
}
