package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/journal"
)

const demoUsage = `Usage: synapse demo [--keep] [--json]

Starts an ephemeral hub with a throw-away journal and plays a scene with three
agents, narrating each step:

  two agents claim disjoint files; a third is refused an overlapping claim and
  waits; the holder releases with evidence and the waiter is woken by the hub
  (no polling); a task is handed off atomically and the old epoch is fenced
  out; a directed message to an offline agent waits in the journal, is read
  when the agent connects, and its ack settles the sender's receipt.

It prints "success" and exits 0 when every step went as the rules say, or
names the step that did not and exits 1.

Flags:
`

// demoStep is one line of the scene.
type demoStep struct {
	N      int    `json:"step"`
	Actor  string `json:"actor"`
	Action string `json:"action"`
	Result string `json:"result"`
}

type demoScene struct {
	out   io.Writer
	json  bool
	steps []demoStep
}

func (d *demoScene) say(actor, action, result string) {
	st := demoStep{N: len(d.steps) + 1, Actor: actor, Action: action, Result: result}
	d.steps = append(d.steps, st)
	if !d.json {
		fmt.Fprintf(d.out, "%2d. %-8s %-52s → %s\n", st.N, st.Actor, st.Action, st.Result)
	}
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, demoUsage); fs.PrintDefaults() }
	keep := fs.Bool("keep", false, "keep the throw-away journal and print where it is")
	asJSON := fs.Bool("json", false, "print the steps as one JSON object for scripts")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	dir, err := os.MkdirTemp("", "synapse-demo-")
	if err != nil {
		fmt.Fprintln(stderr, "synapse demo: cannot make a temporary folder:", err)
		return 1
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	d := &demoScene{out: stdout, json: *asJSON}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = d.play(ctx, filepath.Join(dir, "demo.db"))
	if *asJSON {
		res := map[string]any{"steps": d.steps, "success": err == nil}
		if err != nil {
			res["error"] = err.Error()
		}
		json.NewEncoder(stdout).Encode(res)
	}
	if err != nil {
		fmt.Fprintf(stderr, "synapse demo: FAILED at step %d: %v\n", len(d.steps)+1, err)
		return 1
	}
	if *keep {
		fmt.Fprintf(stderr, "journal kept in %s (inspect it with 'synapse journal stats %s')\n", dir, filepath.Join(dir, "demo.db"))
	}
	if !*asJSON {
		fmt.Fprintln(stdout, "success")
	}
	return 0
}

// play runs the scene against a real hub on a loopback port.
func (d *demoScene) play(ctx context.Context, dbPath string) error {
	store, err := journal.Open(dbPath, journal.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	h, err := hub.New(hub.Config{Journal: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer func() {
		h.Close(context.Background())
		srv.Close()
	}()
	uri := "ws://" + ln.Addr().String()
	d.say("hub", "starts with a throw-away journal", uri)

	dial := func(name string) (*client.Client, error) {
		return client.Dial(ctx, client.Options{URI: uri, Name: name})
	}
	alpha, err := dial("demo/alpha")
	if err != nil {
		return err
	}
	defer alpha.Close()
	bravo, err := dial("demo/bravo")
	if err != nil {
		return err
	}
	defer bravo.Close()
	charlie, err := dial("demo/charlie")
	if err != nil {
		return err
	}
	defer charlie.Close()

	api, err := alpha.Claim(ctx, client.ClaimRequest{TaskID: "api", Paths: []string{"src/api"}, Note: "new endpoint"})
	if err != nil {
		return fmt.Errorf("alpha's claim on src/api: %w", err)
	}
	d.say("alpha", `claims "api" on src/api`, fmt.Sprintf("granted, epoch %d", api.Epoch))
	ui, err := bravo.Claim(ctx, client.ClaimRequest{TaskID: "ui", Paths: []string{"src/ui"}})
	if err != nil {
		return fmt.Errorf("bravo's claim on src/ui: %w", err)
	}
	d.say("bravo", `claims "ui" on src/ui`, fmt.Sprintf("granted, epoch %d: disjoint files never contend", ui.Epoch))

	_, err = charlie.Claim(ctx, client.ClaimRequest{TaskID: "api-tests", Paths: []string{"src/api/handlers_test.go"}})
	var refused *client.Refused
	if !errors.As(err, &refused) || refused.Code != "SCOPE_CONFLICT" {
		return fmt.Errorf("charlie's overlapping claim should be refused with SCOPE_CONFLICT, got %v", err)
	}
	d.say("charlie", `claims "api-tests" on src/api/handlers_test.go`, "refused: "+refused.Message)

	woken := make(chan *client.Wakeup, 1)
	waitErr := make(chan error, 1)
	waiting := make(chan string, 1)
	go func() {
		w, err := charlie.WaitWithNotice(ctx, "api", func(holder string) { waiting <- holder })
		if err != nil {
			waitErr <- err
			return
		}
		woken <- w
	}()
	select {
	case holder := <-waiting:
		d.say("charlie", `waits for "api"`, "waiting on "+holder+"; the hub will wake it")
	case err := <-waitErr:
		return fmt.Errorf("charlie's wait: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}

	version, err := alpha.Checkpoint(ctx, "api", "handler written, tests next", api.Epoch)
	if err != nil {
		return fmt.Errorf("alpha's checkpoint: %w", err)
	}
	d.say("alpha", `saves a checkpoint on "api" (fenced by epoch)`, fmt.Sprintf("version %d", version))
	fresh := 30.0
	receipt, err := alpha.Release(ctx, "api", client.ReleaseOptions{Epoch: api.Epoch, Evidence: []string{"go test ./api: ok"},
		ChangedFiles: []string{"src/api/handlers.go"}, FreshnessSeconds: &fresh})
	if err != nil {
		return fmt.Errorf("alpha's release: %w", err)
	}
	d.say("alpha", `releases "api" with test evidence`, "released; receipt "+receipt.EpistemicStatus)
	select {
	case w := <-woken:
		d.say("charlie", "is woken by the hub", fmt.Sprintf(`"%s" is free (%s)`, w.TaskID, w.Reason))
	case err := <-waitErr:
		return fmt.Errorf("charlie's wait: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("charlie was not woken: %w", ctx.Err())
	}
	tests, err := charlie.Claim(ctx, client.ClaimRequest{TaskID: "api-tests", Paths: []string{"src/api/handlers_test.go"}})
	if err != nil {
		return fmt.Errorf("charlie's claim after the release: %w", err)
	}
	d.say("charlie", `claims "api-tests" again`, fmt.Sprintf("granted, epoch %d", tests.Epoch))

	moved, err := bravo.Handoff(ctx, client.HandoffRequest{TaskID: "ui", To: "demo/alpha", Note: "please finish the styles", Epoch: ui.Epoch})
	if err != nil {
		return fmt.Errorf("bravo's handoff: %w", err)
	}
	d.say("bravo", `hands "ui" to alpha, atomically`, fmt.Sprintf("alpha holds it at epoch %d; bravo's epoch %d is fenced out", moved.Epoch, ui.Epoch))
	_, err = bravo.Release(ctx, "ui", client.ReleaseOptions{Epoch: ui.Epoch})
	if !errors.As(err, &refused) {
		return fmt.Errorf("bravo's release with its old epoch should be refused, got %v", err)
	}
	d.say("bravo", "tries to release it with its old epoch", "refused: "+refused.Message)
	return d.mailbox(ctx, uri, bravo)
}

// mailbox sends a directed message to an agent that is not online: the hub
// keeps it as a dead letter in its journal and delivers it when the agent
// connects; the agent's ack settles the sender's receipt.
func (d *demoScene) mailbox(ctx context.Context, uri string, bravo *client.Client) error {
	deferred := bravo.Subscribe(ctx, func(f client.Frame) bool {
		var r client.DeliveryReceipt
		return f.Type == "delivery_receipt" && f.Decode(&r) == nil && r.Deferred
	})
	sent, err := bravo.Send(ctx, "demo/delta", "the ui styles are yours after alpha", client.SendOptions{ReceiptRequested: true})
	if err != nil {
		return fmt.Errorf("bravo's message to delta: %w", err)
	}
	if sent.Receipt == nil || sent.Receipt.Delivered {
		return fmt.Errorf("a message to an offline agent must not be reported delivered: %+v", sent.Receipt)
	}
	d.say("bravo", "writes to delta, who is offline, asking for a receipt", "not delivered: kept in the journal as a dead letter")

	delta, err := client.Dial(ctx, client.Options{URI: uri, Name: "demo/delta"})
	if err != nil {
		return err
	}
	defer delta.Close()
	inbox, err := delta.Inbox(ctx)
	if err != nil {
		return fmt.Errorf("delta's inbox: %w", err)
	}
	if len(inbox) != 1 || inbox[0].Payload != "the ui styles are yours after alpha" {
		return fmt.Errorf("delta's inbox holds %d messages, want bravo's one: %+v", len(inbox), inbox)
	}
	d.say("delta", "connects and reads its mailbox", fmt.Sprintf("%q from %s (seq %d)", inbox[0].Payload, inbox[0].Sender, inbox[0].Seq()))
	if err := delta.Ack(ctx, inbox[0].Seq()); err != nil {
		return fmt.Errorf("delta's ack: %w", err)
	}
	select {
	case f := <-deferred:
		var r client.DeliveryReceipt
		if err := f.Decode(&r); err != nil || !r.Delivered {
			return fmt.Errorf("the deferred receipt does not say delivered: %+v", f)
		}
		d.say("bravo", "gets the deferred receipt", "delivered to demo/delta")
	case <-ctx.Done():
		return fmt.Errorf("bravo never got the deferred receipt: %w", ctx.Err())
	}
	return nil
}
