package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/hub"
)

// startHub serves an in-process, memory-only hub and returns its URI.
func startHub() (uri string, stop func()) {
	h, err := hub.New(hub.Config{HubID: "syn-example", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h.Handler())
	return "ws" + strings.TrimPrefix(srv.URL, "http"), func() {
		h.Close(context.Background())
		srv.Close()
	}
}

func Example() {
	uri, stop := startHub()
	defer stop()
	ctx := context.Background()

	alpha, err := client.Dial(ctx, client.Options{URI: uri, Name: "proj/alpha"})
	if err != nil {
		panic(err)
	}
	defer alpha.Close()
	fmt.Println("hub", alpha.Welcome().HubID, "protocol", alpha.Welcome().ProtocolVersion)

	claim, err := alpha.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src/parser"}})
	if err != nil {
		panic(err)
	}
	fmt.Println("claimed", claim.TaskID, "by", claim.Owner, "for", claim.TTL())

	receipt, err := alpha.Release(ctx, "T1", client.ReleaseOptions{Epoch: claim.Epoch, Evidence: []string{"go test ./... ok"}})
	if err != nil {
		panic(err)
	}
	fmt.Println("released:", receipt.Released, receipt.EpistemicStatus)
	// Output:
	// hub syn-example protocol 2
	// claimed T1 by proj/alpha for 1h0m0s
	// released: true needs_freshness
}

// A refused claim says who holds what.
func ExampleClient_Claim_refused() {
	uri, stop := startHub()
	defer stop()
	ctx := context.Background()
	alpha, _ := client.Dial(ctx, client.Options{URI: uri, Name: "proj/alpha"})
	defer alpha.Close()
	bravo, _ := client.Dial(ctx, client.Options{URI: uri, Name: "proj/bravo"})
	defer bravo.Close()

	alpha.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src/"}})
	_, err := bravo.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"src/main.go"}})
	var ref *client.Refused
	if errors.As(err, &ref) {
		fmt.Println(ref.Code, "held by", ref.Holder, "under", ref.ConflictTask)
		fmt.Println(ref.Message)
	}
	// Output:
	// SCOPE_CONFLICT held by proj/alpha under T1
	// Task 'T2' file scope conflicts with 'T1' held by proj/alpha.
}

// Wait blocks until the hub says the task is free.
func ExampleClient_Wait() {
	uri, stop := startHub()
	defer stop()
	ctx := context.Background()
	alpha, _ := client.Dial(ctx, client.Options{URI: uri, Name: "proj/alpha"})
	defer alpha.Close()
	bravo, _ := client.Dial(ctx, client.Options{URI: uri, Name: "proj/bravo"})
	defer bravo.Close()

	alpha.Claim(ctx, client.ClaimRequest{TaskID: "T1"})
	waiting := make(chan string)
	done := make(chan *client.Wakeup)
	go func() {
		w, _ := bravo.WaitWithNotice(ctx, "T1", func(holder string) { waiting <- holder })
		done <- w
	}()
	fmt.Println("waiting for", <-waiting)
	alpha.Release(ctx, "T1", client.ReleaseOptions{})
	w := <-done
	fmt.Println("T1 is free:", w.Reason)
	// Output:
	// waiting for proj/alpha
	// T1 is free: release
}

// KeepLease renews a claim while long work runs, then releases it.
func ExampleClient_KeepLease() {
	uri, stop := startHub()
	defer stop()
	ctx := context.Background()
	alpha, _ := client.Dial(ctx, client.Options{URI: uri, Name: "proj/alpha"})
	defer alpha.Close()

	claim, _ := alpha.Claim(ctx, client.ClaimRequest{TaskID: "T1", TTL: 5 * time.Minute})
	k := alpha.KeepLease(ctx, claim)
	go func() {
		if err, ok := <-k.Lost(); ok {
			fmt.Println("lost the lease:", err) // stop the work: someone else holds it now
		}
	}()
	// ... the long work ...
	r, err := k.Release(ctx, client.ReleaseOptions{Evidence: []string{"done"}})
	fmt.Println(r.Released, err)
	// Output: true <nil>
}

// Subscribe streams what the hub broadcasts and what is sent to this agent.
func ExampleClient_Subscribe() {
	uri, stop := startHub()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	alpha, _ := client.Dial(ctx, client.Options{URI: uri, Name: "proj/alpha"})
	defer alpha.Close()
	bravo, _ := client.Dial(ctx, client.Options{URI: uri, Name: "proj/bravo"})
	defer bravo.Close()

	chats := bravo.Subscribe(ctx, func(f client.Frame) bool { return f.Type == "chat" })
	alpha.Send(ctx, "proj/bravo", "review T1 please", client.SendOptions{})
	f := <-chats
	fmt.Printf("%s -> %s: %s\n", f.Sender, f.Target, f.Payload)
	// Output: proj/alpha -> proj/bravo: review T1 please
}
