package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/internal/testbin"
)

// The real binary, end to end: `synapse hub` grants a claim over the wire,
// is SIGKILLed, restarts on its journal and still refuses a competing claim
// with the same epoch and hub id (nothing acknowledged is lost, INV-RR-1).
func TestHubBinary_GrantSurvivesSIGKILL_INV_RR_1(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "synapse")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	db := filepath.Join(t.TempDir(), "hub.db")
	port := freePort(t)
	uri := "ws://127.0.0.1:" + strconv.Itoa(port)

	hub1, banner1 := startHubProcess(t, bin, db, port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alpha, err := client.Dial(ctx, client.Options{URI: uri, Name: "proj/alpha"})
	if err != nil {
		t.Fatal(err)
	}
	granted, err := alpha.Claim(ctx, client.ClaimRequest{TaskID: "T1", Paths: []string{"src/core"}})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	alpha.Close()
	if err := hub1.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	hub1.Wait()

	hub2, banner2 := startHubProcess(t, bin, db, port)
	defer func() { hub2.Process.Signal(syscall.SIGTERM); hub2.Wait() }()
	if hubID(banner1) == "" || hubID(banner1) != hubID(banner2) {
		t.Fatalf("hub id changed across the restart: %q then %q", banner1, banner2)
	}
	bravo, err := client.Dial(ctx, client.Options{URI: uri, Name: "proj/bravo"})
	if err != nil {
		t.Fatal(err)
	}
	defer bravo.Close()
	_, err = bravo.Claim(ctx, client.ClaimRequest{TaskID: "T2", Paths: []string{"src/core/x.go"}})
	var refused *client.Refused
	if !errors.As(err, &refused) || refused.Code != "SCOPE_CONFLICT" {
		t.Fatalf("after SIGKILL and restart a claim overlapping the acknowledged grant got %v; want SCOPE_CONFLICT", err)
	}
	st, err := bravo.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.ActiveClaims) != 1 || st.ActiveClaims[0].Epoch != granted.Epoch || st.ActiveClaims[0].Owner != "proj/alpha" {
		t.Fatalf("restored claims %+v; want T1 of proj/alpha at epoch %d", st.ActiveClaims, granted.Epoch)
	}
}

func freePort(t *testing.T) int { return testbin.FreePort(t) }

// startHubProcess runs `synapse hub` and returns once it printed its
// listening banner.
func startHubProcess(t *testing.T, bin, db string, port int) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, "hub", "--db", db, "--port", strconv.Itoa(port))
	cmd.Env = append(os.Environ(), "SYNAPSE_TOKEN=")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on") {
				lines <- sc.Text()
			}
		}
	}()
	select {
	case l := <-lines:
		return cmd, l
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the hub did not start within 30 s")
	}
	return nil, ""
}

func hubID(banner string) string {
	_, after, _ := strings.Cut(banner, "hub_id ")
	id, _, _ := strings.Cut(after, ",")
	return id
}

// The CLI against the real hub binary: the human and --json outputs of the
// commands a newcomer runs first.
func TestCLI_AgainstTheHubBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "synapse")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	isolate(t) // no user config file leaks in
	port := freePort(t)
	hubProc, _ := startHubProcess(t, bin, filepath.Join(t.TempDir(), "hub.db"), port)
	defer func() { hubProc.Process.Signal(syscall.SIGTERM); hubProc.Wait() }()
	uri := "ws://127.0.0.1:" + strconv.Itoa(port)
	cli := func(args ...string) (int, string, string) {
		cmd := exec.Command(bin, append(args, "--uri", uri)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	if code, out, e := cli("claim", "T1", "--paths", "src/core", "--name", "proj/alpha"); code != 0 || !strings.HasPrefix(out, "Claimed 'T1' as proj/alpha (epoch 1).") {
		t.Fatalf("claim: exit %d\n%s%s", code, out, e)
	}
	code, out, e := cli("claim", "T2", "--paths", "src/core/x.go", "--name", "proj/bravo", "--json")
	var refused struct {
		Granted      bool   `json:"granted"`
		Code         string `json:"code"`
		Holder       string `json:"holder"`
		ConflictTask string `json:"conflict_task"`
	}
	if err := json.Unmarshal([]byte(out), &refused); err != nil || code != exitRefused || refused.Granted ||
		refused.Code != "SCOPE_CONFLICT" || refused.Holder != "proj/alpha" || refused.ConflictTask != "T1" {
		t.Fatalf("overlapping claim --json: exit %d %v\n%s%s", code, err, out, e)
	}
	code, out, e = cli("state", "--json")
	var st struct {
		ActiveClaims []struct {
			TaskID string   `json:"task_id"`
			Owner  string   `json:"owner"`
			Epoch  int64    `json:"epoch"`
			Paths  []string `json:"paths"`
		} `json:"active_claims"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || len(st.ActiveClaims) != 1 ||
		st.ActiveClaims[0].Owner != "proj/alpha" || st.ActiveClaims[0].Paths[0] != "src/core" {
		t.Fatalf("state --json: exit %d %v\n%s%s", code, err, out, e)
	}
	if code, out, e := cli("release", "T1", "--name", "proj/alpha"); code != 0 || !strings.HasPrefix(out, "Released 'T1' (proj/alpha).") {
		t.Fatalf("release: exit %d\n%s%s", code, out, e)
	}
	if code, out, _ := cli("state"); code != 0 || !strings.Contains(out, "No live claims.") {
		t.Fatalf("state after the release: exit %d %s", code, out)
	}
}
