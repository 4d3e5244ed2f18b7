package bench

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gobwas/ws"
)

// hostile.go is the load benchmark's flood (--hostile N): sockets that send
// malformed frames as fast as the hub takes them while the good agents
// work, so their claim latency can be read against the quiet baseline
// (issue 12: hostile clients must not hurt well-behaved agents).

// What a hostile socket sends, in turn: garbage and nesting deeper than
// the decoder's limit, and every 16th frame 64 KiB of garbage (under the
// hub's 1 MiB limit). None binds a name; each is "Malformed JSON.".
var (
	floodSmall = [][]byte{
		[]byte("this is not json {{{"),
		[]byte(strings.Repeat("[", 100) + strings.Repeat("]", 100)),
	}
	floodLarge = []byte("{" + strings.Repeat("x", 64<<10))
)

func floodFrame(k int) []byte {
	if k%16 == 15 {
		return floodLarge
	}
	return floodSmall[k%2]
}

// flood is a running flood: its sockets, and the frames they have sent.
type flood struct {
	sent   atomic.Int64
	cancel context.CancelFunc
	wg     sync.WaitGroup
	socks  []*wsConn
}

// startFlood opens n sockets to uri and has each send flood frames
// until stop. A socket the hub closes stops sending; its end is not an
// error (closing a flooder is a fair answer).
func startFlood(ctx context.Context, uri string, n int) (*flood, error) {
	f := &flood{}
	ctx, f.cancel = context.WithCancel(ctx)
	for range n {
		c, err := dialWS(ctx, ws.Dialer{}, uri)
		if err != nil {
			f.stop()
			return nil, err
		}
		f.socks = append(f.socks, c)
	}
	for _, c := range f.socks {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for k := 0; ctx.Err() == nil; k++ {
				if c.sendText(floodFrame(k)) != nil {
					return
				}
				f.sent.Add(1)
			}
		}()
	}
	return f, nil
}

// stop ends the flood and closes its sockets.
func (f *flood) stop() {
	f.cancel()
	for _, c := range f.socks {
		c.nc.Close() // unblocks a sender the hub no longer reads
	}
	f.wg.Wait()
}

// closed is how many of the flood's sockets the hub has closed.
func (f *flood) closed() int {
	n := 0
	for _, c := range f.socks {
		select {
		case <-c.done:
			n++
		default:
		}
	}
	return n
}
