package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/synapse-hub/synapse/federation"
	"github.com/synapse-hub/synapse/gate"
)

// registerFederation adds the multi-hub flags (docs/federation.md).
func (f *hubFlags) registerFederation(fs *flag.FlagSet) {
	fs.Var(&f.owners, "namespace-owner", "`NS=HUB_ID`: hub HUB_ID alone grants claims of agents named NS/… (repeatable; '*=HUB_ID' owns every unlisted namespace). With any, claims in an unlisted namespace are refused")
	fs.StringVar(&f.ownerFile, "namespace-owner-file", "", "read NS=HUB_ID lines from `PATH` (# comments), for long ownership maps")
	fs.Var(&f.claimPeers, "claim-peer", "`HUB_ID=URI`: where peer HUB_ID listens (ws://host:port); claim-family verbs of namespaces it owns are forwarded there (repeatable)")
	fs.StringVar(&f.claimPeerToken, "claim-peer-token", "", "token this hub presents to its peers when it forwards or pulls their log (shows in ps: prefer --claim-peer-token-file)")
	fs.StringVar(&f.claimPeerTokenFile, "claim-peer-token-file", "", "read --claim-peer-token from the first line of `PATH`")
	fs.Var(&f.peerTokens, "peer-token", "`HUB_ID=TOKEN`: the token peer HUB_ID must present to forward here or pull this hub's log (repeatable; no entry = refused)")
	fs.StringVar(&f.peerTokenFile, "peer-token-file", "", "read HUB_ID=TOKEN lines from `PATH` (not world-readable)")
	fs.Var(&f.watches, "multihub-watch", "`HUB_ID=URI`: pull peer HUB_ID's event log and show its claims as observed@HUB_ID (advisory: never grants or revokes; repeatable)")
	fs.DurationVar(&f.watchInterval, "multihub-watch-interval", federation.DefaultWatchInterval, "how often each watched peer's log is pulled")
	fs.DurationVar(&f.forwardTimeout, "forward-timeout", federation.DefaultForwardTimeout, "how long a forward to a namespace's owner may take (reconnection included) before it is refused")
}

// federationConfig turns the multi-hub flags into the hub's federation.
func (f *hubFlags) federationConfig() (federation.Config, error) {
	c := federation.Config{WatchInterval: f.watchInterval, ForwardTimeout: f.forwardTimeout}
	c.Owners = append(c.Owners, f.owners...)
	if f.ownerFile != "" {
		lines, err := federation.ReadOwnerFile(f.ownerFile)
		if err != nil {
			return c, fmt.Errorf("--namespace-owner-file: %w", err)
		}
		c.Owners = append(c.Owners, lines...)
	}
	var err error
	if c.ClaimPeers, err = pairs("claim-peer", "HUB_ID=URI", f.claimPeers); err != nil {
		return c, err
	}
	for id, uri := range c.ClaimPeers {
		if !strings.HasPrefix(uri, "ws://") && !strings.HasPrefix(uri, "wss://") {
			return c, fmt.Errorf("--claim-peer %s=%s: the URI must start with ws:// or wss://", id, uri)
		}
	}
	if c.Watch, err = pairs("multihub-watch", "HUB_ID=URI", f.watches); err != nil {
		return c, err
	}
	tokens := append([]string(nil), f.peerTokens...)
	if f.peerTokenFile != "" {
		if err := checkSecretFile(f.peerTokenFile); err != nil {
			return c, fmt.Errorf("--peer-token-file: %w", err)
		}
		lines, err := federation.ReadOwnerFile(f.peerTokenFile)
		if err != nil {
			return c, fmt.Errorf("--peer-token-file: %w", err)
		}
		tokens = append(tokens, lines...)
	}
	if c.PeerTokens, err = pairs("peer-token", "HUB_ID=TOKEN", tokens); err != nil {
		return c, err
	}
	c.ClaimPeerToken = f.claimPeerToken
	if f.claimPeerTokenFile != "" {
		if f.claimPeerToken != "" {
			return c, errors.New("give the peer token once: --claim-peer-token or --claim-peer-token-file, not both")
		}
		if c.ClaimPeerToken, err = gate.ReadTokenFile(f.claimPeerTokenFile); err != nil {
			return c, fmt.Errorf("--claim-peer-token-file: %w", err)
		}
	}
	configured := len(c.Owners) > 0 || len(c.ClaimPeers) > 0 || len(c.Watch) > 0 || len(c.PeerTokens) > 0
	if configured && f.hubID == "" {
		return c, errors.New("a federated hub needs a stable id its peers can name: add --hub-id ID (for example --hub-id syn-east)")
	}
	if (len(c.ClaimPeers) > 0 || len(c.Watch) > 0) && c.ClaimPeerToken == "" {
		return c, errors.New("--claim-peer and --multihub-watch need --claim-peer-token (or --claim-peer-token-file): peers serve no hub without a token")
	}
	if len(c.Owners) > 0 {
		if _, err := federation.NewOwnership(f.hubID, c.Owners); err != nil {
			return c, err
		}
	}
	return c, nil
}

// pairs reads repeated KEY=VALUE flags; a key given twice is an error.
func pairs(flagName, shape string, specs []string) (map[string]string, error) {
	m := make(map[string]string, len(specs))
	for _, spec := range specs {
		k, v, ok := strings.Cut(strings.TrimSpace(spec), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("--%s %q: want %s", flagName, spec, shape)
		}
		if prev, dup := m[k]; dup && prev != v {
			return nil, fmt.Errorf("--%s: %s is given twice", flagName, k)
		}
		m[k] = v
	}
	return m, nil
}

// checkSecretFile refuses a secrets file others can read.
func checkSecretFile(path string) error {
	_, err := gate.ReadTokenFile(path) // the same permission rule as the connect token's file
	return err
}
