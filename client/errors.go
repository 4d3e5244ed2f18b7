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
)

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
}

func (r *Refused) Error() string {
	if r.Code != "" {
		return r.Message + " (" + r.Code + ")"
	}
	return r.Message
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
	if r.Holder == "" { // a reference hub names them only in the sentence
		r.Holder, r.ConflictTask = holderFromMessage(r.Message)
	}
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

// AuthFailed reports whether the hub refused the token.
func (e *RejectedError) AuthFailed() bool {
	return e.Code == 4010 && (e.Reason == "auth denied" || e.Reason == "auth required")
}
