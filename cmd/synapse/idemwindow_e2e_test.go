package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/internal/testbin"
)

// A real hub with --idempotency-window 1s: a retry of a keyed claim is
// answered with the first grant (its epoch) until the record expires —
// across a SIGKILL and restart too — and from then on with an error frame
// whose error_code is idempotency_expired, never by granting it again
// (INV-CR-1 within the window, a typed answer outside it).
func TestHubProcess_IdempotencyWindow_StoredThenExpired_INV_CR_1(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hub process past a window")
	}
	db := filepath.Join(t.TempDir(), "hub.db")
	port := testbin.FreePort(t)
	h := startFaultHub(t, nil, db, port, "--idempotency-window", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := client.ClaimRequest{TaskID: "T1", Paths: []string{"src/a.go"}, IdemKey: "k1"}
	first, err := h.dial(t, ctx, "proj/alice").Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	h.kill()
	h = h.restart(t, "--idempotency-window", "1s")
	c := h.dial(t, ctx, "proj/alice")
	retries := 0
	for {
		again, err := c.Claim(ctx, req)
		var ref *client.Refused
		switch {
		case err == nil:
			if again.Epoch != first.Epoch {
				t.Fatalf("retry %d got epoch %d; want the stored grant at %d (applied twice)", retries, again.Epoch, first.Epoch)
			}
		case errors.As(err, &ref) && ref.Code == "idempotency_expired":
			st, err := c.State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.ActiveClaims) != 1 || st.ActiveClaims[0].Epoch != first.Epoch {
				t.Fatalf("after the expired retry the claims are %+v; want the first grant alone", st.ActiveClaims)
			}
			t.Logf("%d retries answered with the stored grant, then: %s", retries, ref.Message)
			return
		default:
			t.Fatalf("retry %d: %v; want the stored grant or idempotency_expired", retries, err)
		}
		retries++
		select {
		case <-ctx.Done():
			t.Fatal("the record never expired")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
