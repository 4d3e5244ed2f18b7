package main

// synapse hub's flags for credentials, granted roles and access rules
// (issue 23 items 1, 3, 4; docs/security.md).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/synapse-hub/synapse/access"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/journal"
)

// accessFlags are synapse hub's --credentials, --acl and --acl-shadow.
type accessFlags struct {
	credentials bool
	acl         string
	shadow      bool
	aclPoll     time.Duration
}

func (f *accessFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.credentials, "credentials", false, "secure the hub with per-agent credentials alone (synapse token issue): every socket must present one; with --token the shared token works beside them. A journal that holds live credentials turns this on by itself")
	fs.StringVar(&f.acl, "acl", "", "enforce the access rules in `FILE` (JSON; deny by default; see 'synapse acl --help'), reloaded on SIGHUP and when the file changes; a file that does not parse keeps the old rules")
	fs.BoolVar(&f.shadow, "acl-shadow", false, "with --acl: log and count what the rules would refuse (synapse_acl_denied_total{mode=\"shadow\"}) and refuse nothing")
	fs.DurationVar(&f.aclPoll, "acl-poll", 2*time.Second, "with --acl: how often the file is checked for a change (0 = only on SIGHUP)")
}

// apply puts the flags in cfg: the credentials and grants from the
// journal (or an empty registry in memory without one), the ACL, and
// whether credentials alone secure the hub. It prints what is in force.
func (f *accessFlags) apply(cfg *hub.Config, store *journal.Store, fleet *fleetMember, stdout io.Writer) error {
	if f.shadow && f.acl == "" {
		return errors.New("--acl-shadow needs --acl FILE")
	}
	var back access.Backing
	var creds []access.Credential
	var grants []access.Grant
	where := "in memory only (no journal): a restart forgets them"
	switch {
	case fleet != nil: // a fleet: the records (and identity pins) are the fleet's, in etcd
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		creds, grants, err = fleet.access.Load(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("%w. Is etcd running? Check --etcd", err)
		}
		back, where = fleet.access, "in etcd, shared by the fleet"
		cfg.IdentityPins = fleet.access
	case store != nil:
		var err error
		if creds, grants, err = store.LoadAccess(); err != nil {
			return err
		}
		back, where = store, "in the journal"
	}
	cfg.Access = access.NewRegistry(back, creds, grants)
	live := cfg.Access.Live()
	cfg.RequireCredentials = f.credentials || (live > 0 && cfg.Token == "")
	if f.acl != "" {
		p, err := hub.LoadACL(f.acl)
		if err != nil {
			return fmt.Errorf("%w. Fix the file and start again ('synapse acl check --acl %s ...' tries it)", err, f.acl)
		}
		cfg.ACL, cfg.ACLFile, cfg.ACLShadow = p, f.acl, f.shadow
		mode := "enforced"
		if f.shadow {
			mode = "shadow mode: logged, not refused"
		}
		fmt.Fprintf(stdout, "acl: %s, %d rules, %s (reloaded on SIGHUP or a change)\n", f.acl, p.Len(), mode)
	}
	if cfg.Token != "" || cfg.RequireCredentials {
		fmt.Fprintf(stdout, "credentials: %d live, %d role grants, kept %s", live, len(grants), where)
		if cfg.RequireCredentials && cfg.Token == "" {
			fmt.Fprint(stdout, "; no shared token, so the dashboard is off")
		}
		fmt.Fprintln(stdout)
	} else if live > 0 {
		fmt.Fprintln(stdout, "credentials: ignored, the hub is open")
	}
	return nil
}

// watch reloads the ACL on SIGHUP and, every --acl-poll, when the file's
// size or modification time changed. It returns the function that stops it.
func (f *accessFlags) watch(h *hub.Hub, log *slog.Logger) func() {
	if f.acl == "" {
		return func() {}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	stamp := func() (int64, time.Time) {
		fi, err := os.Stat(f.acl)
		if err != nil {
			return -1, time.Time{}
		}
		return fi.Size(), fi.ModTime()
	}
	size, mod := stamp()
	var tick <-chan time.Time
	if f.aclPoll > 0 {
		t := time.NewTicker(f.aclPoll)
		tick = t.C
		go func() { <-done; t.Stop() }()
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-hup:
				log.Info("SIGHUP: reloading the ACL", "file", f.acl)
				_ = h.ReloadACL()
				size, mod = stamp()
			case <-tick:
				if s, m := stamp(); s != size || !m.Equal(mod) {
					size, mod = s, m
					_ = h.ReloadACL()
				}
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(stop)
		<-done
	}
}
