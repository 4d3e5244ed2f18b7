package transport

// What the hub reads of an HTTP request before it is a socket.

import (
	"net"
	"net/http"
	"strings"
)

// RemoteHost is the request's peer address without its port: the host
// that limits and pacing are charged to.
func RemoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func headerHasToken(values []string, token string) bool {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}

// IsUpgrade reports whether r asks for a WebSocket upgrade.
func IsUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header.Values("Connection"), "upgrade") && headerHasToken(r.Header.Values("Upgrade"), "websocket")
}
