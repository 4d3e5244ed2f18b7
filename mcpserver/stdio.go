package mcpserver

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DrainTimeout bounds how long a draining transport waits, once its input
// has ended, for the replies still owed (a tool such as wait may block far
// longer; a host that hung up must not keep the process forever).
var DrainTimeout = 30 * time.Second

// DrainingTransport wraps t so that the end of its input does not end the
// session at once: Read holds the end back until every request read so far
// has had its reply written, or DrainTimeout passes. Without it, `printf
// REQUESTS | synapse mcp` exits on EOF before answering anything.
func DrainingTransport(t mcp.Transport) mcp.Transport { return drainTransport{t} }

type drainTransport struct{ t mcp.Transport }

func (d drainTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := d.t.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &drainConn{Connection: c}, nil
}

// drainConn counts the requests read (calls, not notifications) against
// the responses written; one reader goroutine calls Read, any may Write.
type drainConn struct {
	mcp.Connection
	mu      sync.Mutex
	owed    int
	settled chan struct{} // closed when owed reaches 0, while Read waits
}

func (c *drainConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err == nil {
		if r, ok := msg.(*jsonrpc.Request); ok && r.ID.IsValid() {
			c.mu.Lock()
			c.owed++
			c.mu.Unlock()
		}
		return msg, nil
	}
	if !errors.Is(err, io.EOF) {
		return nil, err
	}
	c.mu.Lock()
	if c.owed == 0 {
		c.mu.Unlock()
		return nil, err
	}
	settled := make(chan struct{})
	c.settled = settled
	c.mu.Unlock()
	timer := time.NewTimer(DrainTimeout)
	defer timer.Stop()
	select {
	case <-settled:
	case <-timer.C:
	case <-ctx.Done():
	}
	return nil, err
}

func (c *drainConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if _, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		if c.owed > 0 {
			c.owed--
		}
		if c.owed == 0 && c.settled != nil {
			close(c.settled)
			c.settled = nil
		}
		c.mu.Unlock()
	}
	return err
}
