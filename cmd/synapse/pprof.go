package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/synapse-hub/synapse/gate"
)

// servePprof serves Go's profiler on a listener of its own, so profiling a
// hub under load (go tool pprof http://ADDR/debug/pprof/profile) never
// exposes it on the hub's port. Only a loopback address is accepted: a
// profile shows memory contents and costs CPU while it runs. It answers
// the hub's Host and Origin policy, so a DNS-rebinding page cannot read
// /debug/pprof/cmdline (which shows --token) either.
func servePprof(addr string, policy *gate.RequestPolicy) (stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof %q: want HOST:PORT, e.g. 127.0.0.1:6060", addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof %q: the profiler listens on loopback only (127.0.0.1:PORT)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: cannot listen on %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: policy.Guard(nil, mux), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}
