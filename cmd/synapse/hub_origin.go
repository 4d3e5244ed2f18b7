package main

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// listFlag collects a repeatable flag whose values may also be comma lists.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// registerOrigin adds the Host and Origin policy's flags (docs/security.md,
// "Host and Origin").
func (f *hubFlags) registerOrigin(fs *flag.FlagSet) {
	registerAllowLists(fs, &f.allowHosts, &f.allowOrigins)
}

// registerAllowLists adds --allow-host and --allow-origin to a command
// serving HTTP.
func registerAllowLists(fs *flag.FlagSet, hosts, origins *listFlag) {
	fs.Var(hosts, "allow-host", "also answer requests whose Host is `NAME[:PORT]` (no port: any), beside loopback names, the listen address and --advertise; \"*\" answers any Host (repeatable or a comma list)")
	fs.Var(origins, "allow-origin", "also accept browser requests from `SCHEME://HOST[:PORT]`, beside same-origin ones and those sending no Origin; \"*\" accepts any (repeatable or a comma list)")
}

// allowedHosts is the hub's Host allow list (see allowedHostsFor).
func (f *hubFlags) allowedHosts() ([]string, error) {
	return allowedHostsFor(f.host, f.advertise, f.allowHosts)
}

// allowedHostsFor is a server's Host allow list: the --allow-host values,
// plus the names it is reached by when it listens off loopback — the host
// it binds (or, bound to every interface, each interface's address) and
// the host of the advertised URI ("" if none), which fleet peers dial.
// Names a client might use that the server cannot know (a DNS name for a
// wildcard bind, a name federation peers give in --claim-peer) must be
// listed.
func allowedHostsFor(bind, advertise string, allow []string) ([]string, error) {
	hosts := append([]string(nil), allow...)
	switch ip := net.ParseIP(bind); {
	case bind == "" || (ip != nil && ip.IsUnspecified()):
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return nil, fmt.Errorf("list this machine's addresses for the Host check: %w (name the allowed hosts with --allow-host)", err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
				hosts = append(hosts, n.IP.String())
			}
		}
	case bind != "localhost" && (ip == nil || !ip.IsLoopback()):
		hosts = append(hosts, bind)
	}
	if advertise != "" {
		u, err := url.Parse(advertise)
		if err != nil || u.Hostname() == "" {
			return nil, fmt.Errorf("--advertise %s: want ws://HOST:PORT", advertise)
		}
		hosts = append(hosts, u.Hostname())
	}
	return hosts, nil
}

// describeRequestPolicy is the start-up line saying which Host and Origin
// headers the hub answers.
func describeRequestPolicy(hosts, origins []string) string {
	h := "loopback"
	if len(hosts) > 0 {
		h += ", " + strings.Join(hosts, ", ")
	}
	o := "none or same-origin"
	if len(origins) > 0 {
		o += ", " + strings.Join(origins, ", ")
	}
	return fmt.Sprintf("http: answers Host %s; Origin %s (--allow-host, --allow-origin)", h, o)
}
