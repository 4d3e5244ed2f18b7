package main

import (
	"flag"

	"github.com/synapse-hub/synapse/hub"
)

// identityFlags are `synapse hub`'s flags for identity pins (issue 23
// item 2; docs/security.md, "Identity pins").
type identityFlags struct {
	require bool
	noPins  bool
}

// registerIdentityFlags adds --require-identity and --no-identity-pins.
func registerIdentityFlags(fs *flag.FlagSet) *identityFlags {
	f := &identityFlags{}
	fs.BoolVar(&f.require, "require-identity", false, "refuse (close 4013) a registration that does not carry a valid signed proof of a key (identity_public_key and signature, as synapse and the reference's clients send by default); without it, unsigned names bind first-come as before")
	fs.BoolVar(&f.noPins, "no-identity-pins", false, "do not pin names to the key of their first signed registration (pins are kept in the journal; 'synapse identity list|reclaim' manages them)")
	return f
}

// apply sets the hub's identity configuration.
func (f *identityFlags) apply(cfg *hub.Config) {
	cfg.RequireIdentity, cfg.NoIdentityPins = f.require, f.noPins
}
