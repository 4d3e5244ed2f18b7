// Package mcpserver is Synapse's MCP server: the hub's claims, messages and
// task board as Model Context Protocol tools and resources, for agents such
// as Claude Code, Codex and Cursor (docs/mcp.md).
//
// One Server is one agent identity: it wraps a connected client.Client and
// every tool acts as that client's name. Serve it over stdio with Run (the
// `synapse mcp` command), or over Streamable HTTP with HTTPHandler, which
// keeps one Server per agent name (the hub's /mcp).
//
// Beyond the hub's verbs the server adds what a model cannot do for itself:
//
//   - a lease keeper renews every claim made through the server until it is
//     released, handed off or the server closes, so a claim does not lapse
//     during long work;
//   - it listens to the hub and sends notifications/resources/updated for
//     synapse://claims, synapse://board and synapse://inbox when a claim or
//     the board changes or mail arrives, so an idle agent learns of it
//     without polling;
//   - the inbox keeps the messages addressed to the agent, live ones and
//     those the hub's mailbox kept while it was offline, until acked.
package mcpserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/synapse-hub/synapse/client"
)

// Profile selects the tools a server exposes.
type Profile string

const (
	// ProfileFull exposes every tool (the default).
	ProfileFull Profile = "full"
	// ProfileMinimal exposes claim, release, wait, send, inbox and status:
	// enough to coordinate, for hosts that pay for every tool description.
	ProfileMinimal Profile = "minimal"
)

// ParseProfile reads a --tools value: "full", "minimal", or "" (full).
func ParseProfile(s string) (Profile, error) {
	switch Profile(s) {
	case "", ProfileFull:
		return ProfileFull, nil
	case ProfileMinimal:
		return ProfileMinimal, nil
	}
	return "", fmt.Errorf("unknown tool profile %q: say full or minimal", s)
}

// minimalTools are the tools of ProfileMinimal.
var minimalTools = map[string]bool{"claim": true, "release": true, "wait": true, "send": true, "inbox": true, "status": true}

// Resource URIs.
const (
	BoardURI  = "synapse://board"
	ClaimsURI = "synapse://claims"
	InboxURI  = "synapse://inbox"
)

// Options configures New.
type Options struct {
	// Client is the agent's connection; required. The caller closes it
	// after the Server.
	Client *client.Client
	// Profile is the tool set; "" = ProfileFull.
	Profile Profile
	// Version is reported as the server's version in the MCP handshake.
	Version string
	// Logger receives the SDK's and the server's diagnostics; default none.
	Logger *slog.Logger
	// InboxCap bounds the messages kept (default 1000); the oldest go first.
	InboxCap int
	// Ledger, when set, records every grant the server makes or adopts
	// (and each background renewal, a fresh epoch) and forgets released
	// and handed-off claims, so the write-path checks (synapse guard, the
	// git pre-commit check) fence on the current epoch. synapse mcp sets
	// it to the checkout's ledger; the hub's /mcp has none.
	Ledger *client.Ledger
	// Checkout is the root of the checkout the agent works in: a claim's
	// path that names an existing regular file there is claimed as a file,
	// covering itself alone (client.ClaimRequest.Checkout). synapse mcp
	// sets it; the hub's /mcp has none, and sends paths as they are.
	Checkout string
	// Channel configures the claude/channel events (channel.go).
	Channel ChannelOptions
	// WaitDefault is the wait tool's timeout when the call gives none;
	// default DefaultWait, under the 60 s request timeout of the MCP
	// TypeScript SDK's clients.
	WaitDefault time.Duration
	// SessionID, when set, names each new MCP session (Streamable HTTP:
	// the Mcp-Session-Id); HTTPHandler sets it to bind sessions to names.
	SessionID func() string
	// OutputSchemas lists each tool's output schema in tools/list (about
	// 13 KB more); by default the tools have none, and their results carry
	// structured content all the same.
	OutputSchemas bool
	// ProgressEvery is how often the wait tool sends
	// notifications/progress to a client that gave a progress token;
	// default DefaultProgressEvery.
	ProgressEvery time.Duration
}

// Server is one agent's MCP server.
//
// Who owns what: the watch goroutine reads the hub's frames and feeds the
// inbox and the notifications; one goroutine per keeper reports a lost
// lease. mu guards keepers and the inbox, which tool handlers (any
// goroutine) read and change.
type Server struct {
	c        *client.Client
	srv      *mcp.Server
	profile  Profile
	log      *slog.Logger
	ledger   *client.Ledger
	checkout string

	ctx    context.Context // ends at Close: the keepers and the watcher
	cancel context.CancelFunc
	wg     sync.WaitGroup

	ch            *channel
	waitDefault   time.Duration
	progressEvery time.Duration
	outputSchemas bool

	mu      sync.Mutex
	keepers map[string]*client.Keeper // task id → the keeper renewing it
	inbox   inbox
}

// Fanout is the broadcasts the client of a Server should ask for
// (client.Options.Fanout): the claims of its project, as the server tells
// its MCP client when they change (the claims resource), not only when its
// own do.
const Fanout = client.FanoutNamespace

// New builds the server for opts.Client and starts listening to the hub:
// messages received from now on go to the inbox. It panics on an unknown
// Profile (use ParseProfile).
func New(opts Options) *Server {
	if opts.Client == nil {
		panic("mcpserver: Options.Client is required")
	}
	profile, err := ParseProfile(string(opts.Profile))
	if err != nil {
		panic("mcpserver: " + err.Error())
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		c: opts.Client, profile: profile, log: log, ctx: ctx, cancel: cancel, ledger: opts.Ledger, checkout: opts.Checkout,
		keepers:     map[string]*client.Keeper{},
		inbox:       newInbox(opts.InboxCap),
		waitDefault: opts.WaitDefault, progressEvery: opts.ProgressEvery, outputSchemas: opts.OutputSchemas,
	}
	if s.waitDefault <= 0 {
		s.waitDefault = DefaultWait
	}
	if s.progressEvery <= 0 {
		s.progressEvery = DefaultProgressEvery
	}
	s.ch = newChannel(s, opts.Channel)
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "synapse", Title: "Synapse coordination hub", Version: version}, &mcp.ServerOptions{
		Instructions:       instructions(s.c.Name(), !opts.Channel.Off),
		Logger:             log,
		Capabilities:       s.ch.capabilities(),
		GetSessionID:       opts.SessionID,
		SubscribeHandler:   s.subscribe,
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
		// Events that came before the handshake wait for it.
		InitializedHandler: func(context.Context, *mcp.InitializedRequest) { go s.ch.flush() },
	})
	s.addTools()
	s.addResources()
	frames := s.c.Subscribe(ctx, watched)
	s.wg.Add(3)
	go s.watch(frames)
	go func() {
		defer s.wg.Done()
		if err := s.c.WaitUp(ctx); err != nil { // a client dialled in the background (synapse mcp) may not be up yet
			return
		}
		fctx, cancel := context.WithTimeout(ctx, mailboxTimeout)
		defer cancel()
		s.ch.start(fctx)
		s.fetchMailbox(fctx)
	}()
	go s.ch.leaseLoop()
	if s.ledger != nil {
		s.wg.Add(1)
		go s.releaseDueLoop()
	}
	return s
}

// mailboxTimeout bounds a mailbox fetch.
const mailboxTimeout = 10 * time.Second

// fetchMailbox files the hub's mailbox replay: directed chats sent while
// this agent was offline (after its acked cursor). Mail already in the
// inbox is recognised by its seq.
func (s *Server) fetchMailbox(ctx context.Context) {
	frames, err := s.c.Inbox(ctx)
	if err != nil {
		s.log.Debug("mailbox fetch", "err", err)
		return
	}
	fresh := false
	for _, f := range frames {
		fresh = s.receive(f) || fresh
	}
	if fresh {
		s.notify(InboxURI)
	}
}

func instructions(name string, channel bool) string {
	s := "You act as agent " + name + " on a Synapse hub that stops agents from editing the same files. " +
		"Claim a task and the files you will edit (claim) before editing; the server renews the lease while you work. " +
		"When refused, the text says who holds what: wait for the task, or send the holder a message. " +
		"Release with evidence when done. Read inbox for messages; subscribe to " + InboxURI + " to be told of new mail and to " + ClaimsURI +
		" to be told when your claims change; wait for a task to be told when it is freed."
	if !channel {
		return s
	}
	return s + " Events from this server arrive as <channel source=\"synapse\" kind=... urgency=...>. " +
		"urgency=\"urgent\": act on it before you continue; urgency=\"normal\": finish your current step first. " +
		"kind=\"message\": a message to you (from, msg_id, priority); answer with send, then call inbox with ack_through set to its inbox_id. " +
		"kind=\"task_free\": a task you waited for is free; claim it. " +
		"kind=\"conflict_resolved\": the claim that refused yours is gone; claim again. " +
		"kind=\"handoff\": a claim was handed to you; call status to see it, work, then release. " +
		"kind=\"lease_expiring\": your lease ends soon; renew it, or release it. " +
		"kind=\"task_ready\": a board task suggested to you has its dependencies done; claim it with board_task."
}

// MCP returns the SDK server, to serve on any transport.
func (s *Server) MCP() *mcp.Server { return s.srv }

// Name is the agent the server acts as.
func (s *Server) Name() string { return s.c.Name() }

// Run serves one session on t (e.g. &mcp.StdioTransport{}) until the peer
// hangs up or ctx ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	return s.srv.Run(ctx, t)
}

// Close ends the server's MCP sessions and stops the lease keepers and the
// watcher. The claims stay on the hub until their leases run out, so an
// agent that restarts can resume them; release what you are done with. It
// does not close the client.
func (s *Server) Close() error {
	s.cancel()
	for ss := range s.srv.Sessions() {
		ss.Close()
	}
	s.mu.Lock()
	keepers := s.keepers
	s.keepers = map[string]*client.Keeper{}
	s.mu.Unlock()
	for _, k := range keepers {
		k.Stop()
	}
	s.wg.Wait()
	return nil
}

// subscribe accepts subscriptions to the server's resources.
func (s *Server) subscribe(_ context.Context, req *mcp.SubscribeRequest) error {
	switch req.Params.URI {
	case BoardURI, ClaimsURI, InboxURI:
		return nil
	}
	return mcp.ResourceNotFoundError(req.Params.URI)
}

// notify tells subscribed sessions that uri changed.
func (s *Server) notify(uri string) {
	if err := s.srv.ResourceUpdated(s.ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
		s.log.Debug("resource updated notification", "uri", uri, "err", err)
	}
}

// watched selects the frames the watcher needs.
func watched(f client.Frame) bool {
	switch f.Type {
	case "chat", "claim_granted", "release_granted", "handoff_granted", "claim_expired", "task_updated",
		"ledger_task_posted", "ledger_task_updated", "ledger_progress_posted":
		return true
	}
	return false
}

// watch turns the hub's frames into inbox entries and notifications.
func (s *Server) watch(frames <-chan client.Frame) {
	defer s.wg.Done()
	for f := range frames {
		s.ch.observe(f)
		switch f.Type {
		case "chat":
			if s.receive(f) {
				s.notify(InboxURI)
			}
		case "handoff_granted":
			if f.String("owner") == s.c.Name() {
				s.adoptHandoff(f)
			}
			s.notify(ClaimsURI)
		case "claim_granted", "release_granted", "claim_expired", "task_updated":
			s.notify(ClaimsURI)
		default: // ledger_*
			s.notify(BoardURI)
		}
	}
}

// receive files a chat addressed to this agent; false if it is not for it.
func (s *Server) receive(f client.Frame) bool {
	name := s.c.Name()
	if f.Sender == name {
		return false
	}
	directed, mine := addressedTo(f.Target, name)
	if !mine {
		return false
	}
	m := Message{
		Seq: f.Int("seq"), MsgID: f.Int("msg_id"), From: f.Sender, To: f.Target, Text: f.Payload,
		At: rfc3339(f.Timestamp), Directed: directed, Priority: f.Has("priority") && string(f.Field("priority")) == "true",
		Channel: f.String("channel"), clientMsgID: f.String("client_msg_id"),
	}
	s.mu.Lock()
	m, fresh := s.inbox.add(m)
	s.mu.Unlock()
	if fresh {
		s.ch.message(m)
	}
	return fresh
}

// adoptHandoff keeps alive a claim another agent handed to this one.
func (s *Server) adoptHandoff(f client.Frame) {
	var cl client.Claim
	if err := f.Decode(&cl); err != nil || cl.TaskID == "" {
		return
	}
	cl.GrantedAt = f.Timestamp
	s.keep(&cl)
}

// keep starts renewing cl in the background, replacing any keeper of the
// same task (whose grant is older).
func (s *Server) keep(cl *client.Claim) {
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	old := s.keepers[cl.TaskID]
	s.record(cl)
	// With a ledger, renewals are fenced: a keeper paused past its lease
	// must not renew (and record) a lease that moved on.
	k := s.c.KeepLeaseWith(s.ctx, cl, client.KeepOptions{OnRenew: s.record, Fence: s.ledger != nil})
	s.keepers[cl.TaskID] = k
	s.wg.Add(1) // under mu: Close cannot be waiting yet (it cancels ctx first)
	s.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	go s.watchKeeper(cl.TaskID, k)
}

// watchKeeper reports a lease the hub would not renew.
func (s *Server) watchKeeper(task string, k *client.Keeper) {
	defer s.wg.Done()
	err, lost := <-k.Lost()
	if !lost {
		return
	}
	s.mu.Lock()
	if s.keepers[task] == k {
		delete(s.keepers, task)
	}
	m, _ := s.inbox.add(Message{From: "synapse", To: s.c.Name(), Directed: true, Priority: true,
		Text: fmt.Sprintf("Your lease on '%s' was lost (%v). Stop editing its files; claim it again if you still need it.", task, err)})
	s.mu.Unlock()
	s.ch.message(m)
	s.notify(InboxURI)
	s.notify(ClaimsURI)
}

// record notes a grant (a fresh epoch) in the ledger, if there is one.
func (s *Server) record(cl *client.Claim) {
	if s.ledger == nil {
		return
	}
	if err := s.ledger.Record(s.c.URI(), cl); err != nil {
		s.log.Warn("synapse mcp: grant not recorded; guard and git-hook will not fence on it", "task", cl.TaskID, "epoch", cl.Epoch, "err", err)
	}
}

// forget drops this agent's record of task from the ledger, if there is one.
func (s *Server) forget(task string) {
	if s.ledger == nil {
		return
	}
	if err := s.ledger.Forget(s.c.Name(), task); err != nil {
		s.log.Warn("synapse mcp: cannot update the lease ledger", "task", task, "err", err)
	}
}

// unkeep stops renewing task and returns its keeper (nil if none).
func (s *Server) unkeep(task string) *client.Keeper {
	s.mu.Lock()
	k := s.keepers[task]
	delete(s.keepers, task)
	s.mu.Unlock()
	return k
}

// Kept lists the tasks whose leases the server renews.
func (s *Server) Kept() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.keepers))
	for t := range s.keepers {
		out = append(out, t)
	}
	sortStrings(out)
	return out
}
