package bench

// handshake.go is how the load client meets a hub: what it learns from the
// hub's welcome, and how an agent registers and knows that the hub has read
// its registration. It speaks protocol v2 as every v2 hub does, the
// reference included (PROTOCOL.md §1.4–1.6; hub/testdata/traces/handshake):
//
//   - An open hub sends welcome as soon as the socket is up; a hub with a
//     token sends it once the first frame has authenticated.
//   - The registration is a heartbeat (payload "online", the token if any).
//     A heartbeat gets no reply, but a newly bound name is broadcast as a
//     presence_update with event "joined" and agent set to that name, to
//     every socket the joiner's included: that frame is the acknowledgement.
//   - A takeover binds a name that stays online, so no presence_update
//     follows it; a who_request sent after it is answered in order, after
//     the heartbeat has been handled.
//
// Our features are asked for only when the welcome announces them
// (welcome.features, which the reference does not send): scoped fan-out
// ("scoped_fanout", the registration's fanout field), the Go SDK's own
// fan-out without presence ("own_fanout", "presence_delta": the Synapse-
// Presence header and the presence field; then no presence_update comes,
// and the registration is acked by a ping, feature "ping", answered in
// order) and the leave verb ("leave", said before closing).

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/gobwas/ws"

	"github.com/synapse-hub/synapse/pyjson"
)

// HubInfo is what a hub's welcome says about it.
type HubInfo struct {
	HubID           string   `json:"hub_id"`
	ProtocolVersion int      `json:"protocol_version"`
	Features        []string `json:"features,omitempty"` // additive features (ours); none from the reference
}

// Has reports whether the hub announced feature.
func (h HubInfo) Has(feature string) bool { return slices.Contains(h.Features, feature) }

// parseWelcome reads a welcome frame (once per run: decoded, not matched).
func parseWelcome(b []byte) (HubInfo, error) {
	var w struct {
		Type string `json:"type"`
		HubInfo
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return HubInfo{}, fmt.Errorf("bench: welcome: %w", err)
	}
	if w.Type != "welcome" {
		return HubInfo{}, fmt.Errorf("bench: the hub's first frame is %q, not a welcome", w.Type)
	}
	return w.HubInfo, nil
}

// probeName is the name the probe registers under on a hub with a token.
const probeName = "load/probe"

// ProbeHub connects one socket to the hub at uri and reads its welcome: on
// an open hub the frame sent on connect, on a hub with a token (token not
// "") the one sent after the registration authenticates, which is then
// acknowledged like any agent's before the socket closes.
// A wss:// hub is dialled with tlsCfg (nil: the system's roots).
func ProbeHub(ctx context.Context, uri, token string, tlsCfg *tls.Config) (HubInfo, error) {
	var welcome []byte
	w := newWaiter(func(b []byte) bool {
		if !fields("type", "welcome").in(b) {
			return false
		}
		welcome = append([]byte(nil), b...)
		return true
	})
	c, err := dialWSAwaiting(ctx, ws.Dialer{TLSConfig: tlsCfg}, uri, w)
	if err != nil {
		return HubInfo{}, fmt.Errorf("bench: probe %s: %w", uri, err)
	}
	a := &loadAgent{name: probeName, c: c}
	defer a.close() // with leave only once registered and announced
	if token != "" {
		// The registration's ack is awaited after the welcome, which
		// comes first: the waiter holds one frame at a time.
		if err := a.send(registrationFrame(a, registration{token: token}, false)); err != nil {
			return HubInfo{}, fmt.Errorf("bench: probe: %w", err)
		}
	}
	if err := c.wait(ctx, w); err != nil {
		return HubInfo{}, fmt.Errorf("bench: no welcome from %s: %w", uri, err)
	}
	info, err := parseWelcome(welcome)
	if err != nil {
		return info, err
	}
	if token != "" {
		a.leave = info.Has("leave")
	}
	return info, nil
}

// registration is how the agents of a run register: what every v2 hub
// takes, and our features where the hub announced them.
type registration struct {
	token    string // the hub's connect token ("" = open hub)
	fanout   string // the fan-out asked for: "" (the reference's), "scoped" or "own"
	presence string // the presence form asked for: "" (the fan-out's) or "none"
	ping     bool   // ack the registration with a ping (feature ping)
	leave    bool   // say leave before closing (feature leave)
	// tls is what a wss:// hub is dialled with (LoadConfig.TLS).
	tls *tls.Config
}

// registrationFor is the registration a run asks for on the hub info
// describes: the fan-out wanted ("full", "scoped", "own") where announced.
func registrationFor(info HubInfo, token, want string) registration {
	r := registration{token: token, leave: info.Has("leave")}
	switch {
	case want == "own" && info.Has("own_fanout") && info.Has("ping"):
		r.fanout, r.presence, r.ping = "own", "none", true
	case want != "full" && info.Has("scoped_fanout"):
		r.fanout = "scoped"
	}
	return r
}

// fanoutRun is the fan-out the registration gets: "full" where it asks for
// none.
func (r registration) fanoutRun() string {
	if r.fanout == "" {
		return "full"
	}
	return r.fanout
}

// registrationFrame is the registration heartbeat of a (with takeover,
// evicting a live socket of the same name).
func registrationFrame(a *loadAgent, r registration, takeover bool) []byte {
	b := appendField(a.request("heartbeat", "System"), "payload", "online")
	if r.token != "" {
		b = appendField(b, "token", r.token)
	}
	if r.fanout != "" {
		b = appendField(b, "fanout", r.fanout)
	}
	if r.presence != "" {
		b = appendField(b, "presence", r.presence)
	}
	if takeover {
		b = append(pyjson.AppendKey(b, "takeover"), "true"...)
	}
	return b
}

// register sends the agent's first frame and waits until the hub has read
// it: its own presence_update joined, or after a takeover (no presence:
// the name stays online) the answer to a who_request sent behind it.
func (a *loadAgent) register(ctx context.Context, r registration, takeover bool) error {
	a.leave = r.leave
	b := registrationFrame(a, r, takeover)
	if r.ping { // no presence comes: a ping behind it is answered in order
		if err := a.send(b); err != nil {
			return fmt.Errorf("register %s: %w", a.name, err)
		}
		if err := a.call(ctx, a.request("ping", "System"), fields("type", "pong", "target", a.name).in); err != nil {
			return fmt.Errorf("register (awaiting the pong behind it): %w", err)
		}
		return nil
	}
	if !takeover {
		if err := a.call(ctx, b, fields("type", "presence_update", "event", "joined", "agent", a.name).in); err != nil {
			return fmt.Errorf("register (awaiting its presence_update joined): %w", err)
		}
		return nil
	}
	if err := a.send(b); err != nil {
		return fmt.Errorf("register %s: %w", a.name, err)
	}
	if err := a.call(ctx, a.request("who_request", "System"), fields("type", "who_snapshot", "target", a.name).in); err != nil {
		return fmt.Errorf("register (takeover, awaiting who_snapshot): %w", err)
	}
	return nil
}
