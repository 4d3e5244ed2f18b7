package federation

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/synapse-hub/synapse/wire"
)

// Frame types hubs exchange. The claim request/result and log
// request/snapshot pairs are the reference's (PROTOCOL.md §6.2–6.3); the
// rest is ours, spoken only with a peer whose multihub_welcome announces
// FeatureForward.
const (
	TypeHello         = "multihub_hello"          // forwarder → owner: first frame of a long-lived link
	TypeWelcome       = "multihub_welcome"        // owner → forwarder: the link is up
	TypeForward       = "multihub_forward"        // one claim-family frame of an agent, by fwd_id
	TypeForwardResult = "multihub_forward_result" // the private replies of one forward
	TypeDeliver       = "multihub_deliver"        // a frame the owner addresses to an agent of the forwarder
	TypeAgentLeft     = "multihub_agent_left"     // the forwarder's agent disconnected: end its waits
	TypeClaimRequest  = "multihub_claim_request"  // the reference's one-claim forward
	TypeClaimResult   = "multihub_claim_result"
	TypeLogRequest    = "multihub_log_request" // pull a hub's event log from a cursor
	TypeLogSnapshot   = "multihub_log_snapshot"
)

// FeatureForward is announced in welcome.features and multihub_welcome by
// a hub that serves TypeForward: every claim-family verb, multiplexed over
// one link, with deliveries. A peer without it gets the reference's
// one-socket-per-claim multihub_claim_request, and only claims.
const FeatureForward = "multihub_forward"

// IsPeerType reports whether typ is a frame of the hub-to-hub protocol.
func IsPeerType(typ string) bool { return strings.HasPrefix(typ, "multihub_") }

// ClaimFamily are the verbs routed to a namespace's owner: every verb that
// reads or changes a lease (the reference routes only claim).
var ClaimFamily = map[string]bool{
	"claim": true, "release": true, "task_update": true, "handoff": true,
	"checkpoint": true, "wait_request": true,
}

// BoardFamily are the board writes, routed to the namespace of their
// author's owner on a fleet (where the board lives in etcd with the
// claims); hubs with a static map keep their boards local.
var BoardFamily = map[string]bool{
	"ledger_task": true, "ledger_task_update": true, "ledger_progress": true,
}

// Limits of the hub-to-hub protocol.
const (
	// MaxLogPage is the most events one multihub_log_snapshot carries (the
	// reference's limit:null ships the whole log in one frame).
	MaxLogPage = 1000
	// MaxOwnersDeclared bounds the ownership map a peer may declare.
	MaxOwnersDeclared = 10000
	// MaxResultFrames bounds the frames of one forward's result.
	MaxResultFrames = 64
)

// ErrBadFrame is a peer frame that is not what its type says.
var ErrBadFrame = errors.New("federation: malformed peer frame")

type helloFrame struct {
	Sender   string            `json:"sender"`
	Token    string            `json:"token"`
	Features []string          `json:"features"`
	Owners   map[string]string `json:"owners"`
}

type welcomeFrame struct {
	HubID    string            `json:"hub_id"`
	Features []string          `json:"features"`
	Owners   map[string]string `json:"owners"`
}

type forwardFrame struct {
	FwdID         int64           `json:"fwd_id"`
	Agent         string          `json:"agent"`
	Frame         json.RawMessage `json:"frame"`
	RecipientHere bool            `json:"recipient_here"`
	// The forwarding socket's credential and bound name (Principal);
	// absent from a socket without a credential and from older hubs.
	CredentialID   string `json:"credential_id,omitempty"`
	CredentialName string `json:"credential_name,omitempty"`
}

type forwardResultFrame struct {
	FwdID  int64             `json:"fwd_id"`
	Frames []json.RawMessage `json:"frames"`
}

type deliverFrame struct {
	Agent string          `json:"agent"`
	Frame json.RawMessage `json:"frame"`
}

type agentLeftFrame struct {
	Agent string `json:"agent"`
}

// claimRequestFrame is PROTOCOL.md §6.2's forward, as a reference hub sends it.
type claimRequestFrame struct {
	Sender    string          `json:"sender"`
	Token     string          `json:"token"`
	Namespace string          `json:"namespace"`
	Claimant  string          `json:"claimant"`
	TaskID    string          `json:"task_id"`
	Claim     json.RawMessage `json:"claim"`
}

// claimResultFrame is its answer; decoding is strict (§6.2).
type claimResultFrame struct {
	Granted    any             `json:"granted"`
	TaskID     any             `json:"task_id"`
	Namespace  any             `json:"namespace"`
	OwnerHubID any             `json:"owner_hub_id"`
	Detail     string          `json:"detail"`
	Grant      json.RawMessage `json:"grant"`
}

type logRequestFrame struct {
	Sender   string      `json:"sender"`
	Token    string      `json:"token"`
	AfterSeq json.Number `json:"after_seq"`
	Limit    json.Number `json:"limit"`
	ReqID    int64       `json:"req_id"`
}

// logEvent is one event of a multihub_log_snapshot.
type logEvent struct {
	Seq     int64           `json:"seq"`
	TS      float64         `json:"ts"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload"`
}

type logSnapshotFrame struct {
	Events      []logEvent `json:"events"`
	NextCursor  int64      `json:"next_cursor"`
	LogEndSeq   int64      `json:"log_end_seq"`
	LogStartSeq int64      `json:"log_start_seq"`
	ReqID       int64      `json:"req_id"`
}

// decodeFrame reads a peer frame strictly enough: a JSON object whose
// numbers keep their lexemes.
func decodeFrame(data []byte, v any) error {
	d := json.NewDecoder(strings.NewReader(string(data)))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadFrame, err)
	}
	return nil
}

// frameType reads the type of a frame.
func frameType(data []byte) string {
	var t struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &t) != nil {
		return ""
	}
	return t.Type
}

// peerEnvelope starts a frame this hub sends as a peer (forwarder side):
// the sender is its hub id, as the reference's forwarder writes it.
func peerEnvelope(typ, self, target string, now float64) *wire.Frame {
	return wire.Object().Str("sender", self).Str("target", target).Str("type", typ).
		Str("payload", "").Float("timestamp", now)
}

// hubFrame starts a frame this hub sends as the serving side.
func hubFrame(typ, target, payload string, now float64, self string) *wire.Frame {
	return wire.NewFrame(typ, target, payload, now, self)
}

func appendOwners(b []byte, owners map[string]string) []byte {
	b = append(b, '{')
	first := true
	for _, ns := range sortedKeys(owners) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, mustJSON(ns)...)
		b = append(b, ':')
		b = append(b, mustJSON(owners[ns])...)
	}
	return append(b, '}')
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only strings reach here
	}
	return b
}
