package transport

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/gobwas/ws"
)

// Keepalive pings every socket added to it each Interval from one
// goroutine, and kills a socket whose peer has not been heard within
// Timeout of its ping — neither its pong nor any message read since (a
// peer that vanished without closing: a killed process, a cable pulled).
// A message counts because a server that paces a socket's reads leaves the
// pong queued behind the frames it has not read yet. One goroutine and one ticker serve every socket, so an
// idle socket costs no goroutine of its own for this.
type Keepalive struct {
	interval, timeout time.Duration
	onDead            func(*Conn)

	mu    sync.Mutex
	conns map[*Conn]struct{}
	added uint64 // sockets added so far: spreads their first pings (Add)
	stop  chan struct{}
	done  chan struct{}
}

// NewKeepalive starts the keeper. onDead is called, on the keeper's
// goroutine, after a socket was killed for a missing pong.
func NewKeepalive(interval, timeout time.Duration, onDead func(*Conn)) *Keepalive {
	k := &Keepalive{interval: interval, timeout: timeout, onDead: onDead,
		conns: make(map[*Conn]struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go k.run()
	return k
}

// Add starts pinging c; its first ping goes out between Interval and 1.5
// Interval after Accept. The sockets of a connect storm, accepted within
// a second or two, would otherwise all be pinged in one of the keeper's
// ticks every Interval: thousands of pings, pongs and writer wake-ups at
// once, which an agent's claim waits behind. Each socket's delay is the
// next of a low-discrepancy sequence, so any run of added sockets is
// spread evenly over half an interval, and keeps its phase after.
func (k *Keepalive) Add(c *Conn) {
	k.mu.Lock()
	k.added++
	const golden = 0x9E3779B97F4A7C15 // 2^64 / φ: the Weyl sequence's step
	frac := float64(k.added*golden) / (1 << 64)
	c.pingAt += int64(frac * float64(k.interval/2)) // before the keeper can see c
	k.conns[c] = struct{}{}
	k.mu.Unlock()
}

// Remove stops pinging c.
func (k *Keepalive) Remove(c *Conn) {
	k.mu.Lock()
	delete(k.conns, c)
	k.mu.Unlock()
}

// Close stops the keeper and waits for it.
func (k *Keepalive) Close() {
	k.mu.Lock()
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	k.mu.Unlock()
	<-k.done
}

// step is the keeper's tick: a sixty-fourth of the shorter period, so a
// ping goes out and a dead peer is reaped at most that late, and the pings
// of sockets spread over an interval go out in 64 small groups, not one or
// four large ones. A tick looks at every socket (a few ns each: 10,000
// sockets cost ~1 ms of CPU a second at the default interval).
func (k *Keepalive) step() time.Duration {
	return max(min(k.interval, k.timeout)/64, time.Millisecond)
}

func (k *Keepalive) run() {
	defer close(k.done)
	t := time.NewTicker(k.step())
	defer t.Stop()
	var conns []*Conn
	for {
		select {
		case <-k.stop:
			return
		case now := <-t.C:
			k.mu.Lock()
			conns = conns[:0]
			for c := range k.conns {
				conns = append(conns, c)
			}
			k.mu.Unlock()
			for _, c := range conns {
				if c.keep(now.UnixNano(), k.interval, k.timeout) {
					c.Kill()
					k.Remove(c)
					k.onDead(c)
				}
			}
			clear(conns)
		}
	}
}

// keep is one keeper tick for c: it reports true when c's pong is overdue,
// and otherwise sends a ping when one is due. Keeper goroutine only.
func (c *Conn) keep(now int64, interval, timeout time.Duration) (dead bool) {
	select {
	case <-c.closing:
		return false // closing: the close handshake has its own bound
	default:
	}
	if c.pingOut {
		if c.pongSeen.Load() != c.pingSeq {
			return now-c.pingAt >= int64(timeout)
		}
		c.pingOut = false
	}
	if now-c.pingAt >= int64(interval) {
		c.pingSeq++
		c.pingAt, c.pingOut = now, true
		c.pingSent.Store(c.pingSeq)
		c.queueControl(ws.OpPing, binary.BigEndian.AppendUint64(nil, c.pingSeq))
	}
	return false
}
