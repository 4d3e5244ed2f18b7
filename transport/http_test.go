package transport

import (
	"net/http"
	"testing"
)

// An upgrade is read from the Connection and Upgrade tokens whatever their
// case and company (RFC 6455 §4.2.1), and a request's host from its peer
// address without the port.
func TestHTTP_UpgradeAndRemoteHost(t *testing.T) {
	r, _ := http.NewRequest("GET", "http://h/", nil)
	r.Header.Set("Connection", "keep-alive, Upgrade")
	r.Header.Set("Upgrade", "WebSocket")
	if !IsUpgrade(r) {
		t.Error("keep-alive, Upgrade + WebSocket is an upgrade")
	}
	r.Header.Set("Upgrade", "h2c")
	if IsUpgrade(r) {
		t.Error("an h2c upgrade is not a WebSocket one")
	}
	r.RemoteAddr = "[::1]:4242"
	if h := RemoteHost(r); h != "::1" {
		t.Errorf("RemoteHost = %q", h)
	}
	r.RemoteAddr = "pipe"
	if h := RemoteHost(r); h != "pipe" {
		t.Errorf("RemoteHost of an address without a port = %q", h)
	}
}
