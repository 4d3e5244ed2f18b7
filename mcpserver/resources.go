package mcpserver

// The resources: the board, the live claims and the inbox, as JSON. The
// watcher (server.go) sends notifications/resources/updated for each when
// it changes, to the sessions that subscribed.

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func (s *Server) addResources() {
	s.srv.AddResource(&mcp.Resource{URI: BoardURI, Name: "board", MIMEType: "application/json",
		Description: "The shared task board: tasks, the ready list, recent progress notes."}, s.readBoard)
	s.srv.AddResource(&mcp.Resource{URI: ClaimsURI, Name: "claims", MIMEType: "application/json",
		Description: "The live claims: who holds which task and files, until when."}, s.readClaims)
	s.srv.AddResource(&mcp.Resource{URI: InboxURI, Name: "inbox", MIMEType: "application/json",
		Description: "Your unread messages (ack them with the inbox tool)."}, s.readInboxResource)
}

func jsonContents(uri string, v any) (*mcp.ReadResourceResult, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
}

func (s *Server) readBoard(ctx context.Context, _ *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	b, err := s.c.Board(ctx)
	if err != nil {
		return nil, &resourceError{s.explain(err)}
	}
	return jsonContents(BoardURI, boardResult(b))
}

// ClaimsResource is the content of synapse://claims.
type ClaimsResource struct {
	ActiveClaims []ClaimView `json:"active_claims"`
	GeneratedAt  string      `json:"generated_at"`
}

func (s *Server) readClaims(ctx context.Context, _ *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	st, err := s.c.State(ctx)
	if err != nil {
		return nil, &resourceError{s.explain(err)}
	}
	out := ClaimsResource{ActiveClaims: []ClaimView{}, GeneratedAt: rfc3339(st.GeneratedAt)}
	for i := range st.ActiveClaims {
		out.ActiveClaims = append(out.ActiveClaims, s.view(&st.ActiveClaims[i]))
	}
	return jsonContents(ClaimsURI, out)
}

func (s *Server) readInboxResource(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	s.mu.Lock()
	out := InboxResult{Messages: s.inbox.list(false, 0), Unread: s.inbox.unread()}
	s.mu.Unlock()
	return jsonContents(InboxURI, out)
}

// resourceError is a read that failed for want of the hub.
type resourceError struct{ msg string }

func (e *resourceError) Error() string { return e.msg }
