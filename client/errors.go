package client

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Compare with errors.Is.
var (
	// ErrUnreachable means no hub answered at the URI: the dial failed or
	// the hub did not finish the handshake in time.
	ErrUnreachable = errors.New("client: cannot reach the hub")
	// ErrDisconnected means the socket dropped while a call was in flight,
	// or a call was made while the client was reconnecting. The call may or
	// may not have reached the hub; retry it (with an IdemKey where the
	// verb takes one) once the client is back.
	ErrDisconnected = errors.New("client: disconnected from the hub")
	// ErrClosed means the client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrUnsupported means the hub is too old for the call: its welcome
	// does not announce the feature the call needs. An *UnsupportedError
	// says which.
	ErrUnsupported = errors.New("client: the hub does not support this call")
)

// UnsupportedError is a call the hub cannot serve because it does not
// announce Feature in its welcome; nothing was sent. It matches
// ErrUnsupported.
type UnsupportedError struct {
	Call    string // e.g. "Namespaces"
	Feature string // the welcome feature it needs, e.g. "namespaces"
	HubID   string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("client: hub %s is too old for %s: its welcome does not announce the %q feature (upgrade the hub)", e.HubID, e.Call, e.Feature)
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Refused is the hub saying no to a call: a claim_denied, release_denied,
// handoff_denied, checkpoint_denied, wait_denied or a plain error frame.
// Get it with errors.As.
type Refused struct {
	// Frame is the refusal's frame type (claim_denied, error, ...).
	Frame string
	// Code is the machine reason: the claim's reason_code (LEASE_LIVE,
	// SCOPE_CONFLICT, ...) or the additive error_code of other verbs; ""
	// from a hub that sends neither.
	Code string
	// Message is the hub's sentence, e.g. "Task 'T1' is already claimed by
	// proj/alpha."
	Message string
	// TaskID is the task the call was about.
	TaskID string
	// Holder is who holds the task or the conflicting scope, when the hub
	// says (wait_denied carries it; for claims it is read from the
	// message, whose wording PROTOCOL.md §2.4 fixes).
	Holder string
	// ConflictTask is the other task a SCOPE_CONFLICT collides with.
	ConflictTask string
	// ConflictPattern and ConflictMode are the holder's path, glob or file
	// and its mode ("shared" or "exclusive"), when a glob, a file or a
	// shared claim is involved (features glob_scopes, shared_claims,
	// file_scopes); "" otherwise.
	ConflictPattern string
	ConflictMode    string
	// Pending are the board task's undone dependencies
	// (BOARD_TASK_NOT_READY of a task-bound claim).
	Pending []string

	// The fields below come with a refusal by a federated hub's ownership
	// gate (codes NAMESPACE_UNGOVERNED, NAMESPACE_PARTITIONED,
	// OWNER_UNREACHABLE, NAMESPACE_NOT_OWNED): which namespace, how this hub
	// resolves it, and which hub owns it, so a caller can connect to the
	// owner or have the map fixed.

	// Namespace is the agent's namespace, the part of its name before the
	// first '/' ("" for a bare name).
	Namespace string
	// Ownership is how the refusing hub resolves Namespace: local,
	// remote, ungoverned or partitioned.
	Ownership string
	// OwnerHubID is the hub that owns Namespace ("" when ungoverned).
	OwnerHubID string
	// ForwardError says why forwarding to the owner failed: no_route,
	// unreachable, timeout, connection_lost, unsupported, peer_refused or
	// forward_failed.
	ForwardError string
	// Contesting are the hubs asserting a partitioned namespace besides
	// its owner, sorted.
	Contesting []string
}

// Error is the hub's sentence with the code and, when the refusal names
// one, the namespace's owner: "... (OWNER_UNREACHABLE, owner syn-a)".
func (r *Refused) Error() string {
	var tags []string
	if r.Code != "" {
		tags = append(tags, r.Code)
	}
	if r.OwnerHubID != "" {
		tags = append(tags, "owner "+r.OwnerHubID)
	}
	if len(tags) == 0 {
		return r.Message
	}
	return r.Message + " (" + strings.Join(tags, ", ") + ")"
}

// refusedFrom builds a Refused from a denial or error frame.
func refusedFrom(f Frame, task string) *Refused {
	r := &Refused{Frame: f.Type, Code: f.String("reason_code"), Message: f.Payload, TaskID: task, Holder: f.String("holder")}
	if r.Code == "" {
		r.Code = f.String("error_code")
	}
	if t := f.String("task_id"); t != "" {
		r.TaskID = t
	}
	r.ConflictTask = f.String("conflict_task")
	r.ConflictPattern, r.ConflictMode = f.String("conflict_pattern"), f.String("conflict_mode")
	if r.Holder == "" { // a reference hub names them only in the sentence
		r.Holder, r.ConflictTask = holderFromMessage(r.Message)
	}
	r.Namespace, r.Ownership, r.OwnerHubID = f.String("namespace"), f.String("ownership"), f.String("owner_hub_id")
	r.ForwardError = f.String("forward_error")
	_ = f.DecodeField("contesting", &r.Contesting)
	_ = f.DecodeField("pending", &r.Pending)
	return r
}

// holderFromMessage reads the holder out of the reference's claim refusal
// sentences: "Task 'T' is already claimed by O." and "Task 'T' file scope
// conflicts with 'U' held by O."
func holderFromMessage(msg string) (holder, conflict string) {
	msg = strings.TrimSuffix(msg, ".")
	if _, after, ok := strings.Cut(msg, " is already claimed by "); ok {
		return after, ""
	}
	if _, after, ok := strings.Cut(msg, " file scope conflicts with '"); ok {
		if u, o, ok := strings.Cut(after, "' held by "); ok {
			return o, u
		}
	}
	return "", ""
}

// RejectedError is the hub refusing the connection itself: a name already
// online, a reserved name, a wrong token, a full hub. Code and Reason are
// the WebSocket close (PROTOCOL.md §1.8); Message is the hub's sentence
// when it sent one (name_conflict, auth_denied).
type RejectedError struct {
	Code    int
	Reason  string
	Message string
}

func (e *RejectedError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Reason
	}
	return fmt.Sprintf("client: the hub refused the connection: %s (close %d %s)", msg, e.Code, e.Reason)
}

// IdentityRefused reports whether the hub refused the registration's
// identity (close 4013): the name is pinned to another key, or the hub
// requires a signed registration. Message says how to recover.
func (e *RejectedError) IdentityRefused() bool {
	return e.Code == 4013 && (e.Reason == "identity pin mismatch" || e.Reason == "identity binding failed")
}

// AuthFailed reports whether the hub refused the token.
func (e *RejectedError) AuthFailed() bool {
	return e.Code == 4010 && (e.Reason == "auth denied" || e.Reason == "auth required")
}
