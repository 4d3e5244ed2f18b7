package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/certs"
	"github.com/synapse-hub/synapse/cluster/clustertest"
)

// A member joins an etcd that serves https:// and requires client
// certificates, with Config.TLS (synapse hub --etcd-ca, --etcd-cert,
// --etcd-key); without the CA it cannot (issue 23 item 6).
func TestJoin_EtcdOverTLS_Issue23_TLS(t *testing.T) {
	w, err := certs.SelfSigned(t.TempDir(), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := clustertest.StartTLS(t, w.Cert, w.Key, w.CA)
	if !strings.HasPrefix(x.Endpoint, "https://") {
		t.Fatalf("endpoint %s", x.Endpoint)
	}
	pair, err := certs.NewReloader(w.ClientCert, w.ClientKey, quiet())
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := certs.ClientConfig(w.CA, pair)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := Join(ctx, Config{Endpoints: []string{x.Endpoint}, HubID: "syn-a", Advertise: "wss://127.0.0.1:1", LeaseTTL: 2 * time.Second, Logger: quiet(), TLS: tlsCfg})
	if err != nil {
		t.Fatalf("join over TLS: %v", err)
	}
	defer m.Leave()
	if r, err := m.Client().Get(ctx, m.key("hubs", "syn-a")); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("registration over TLS: %v %v", r, err)
	}

	other, err := certs.SelfSigned(t.TempDir(), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wrong, _ := certs.ClientConfig(other.CA, pair)
	sctx, scancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer scancel()
	if m2, err := Join(sctx, Config{Endpoints: []string{x.Endpoint}, HubID: "syn-b", Advertise: "wss://127.0.0.1:2", Logger: quiet(), TLS: wrong}); err == nil {
		m2.Leave()
		t.Fatal("joined an etcd whose certificate another CA signed")
	}
}
