package main

import (
	"bytes"
	"flag"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/dashboard"
	"github.com/synapse-hub/synapse/hub"
	"strings"
	"testing"
	"time"
)

// An off-loopback hub without a token would let anyone act as any agent:
// it must refuse to start unless told.
func TestHub_RefusesOffLoopbackWithoutToken(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"hub", "--host", "0.0.0.0", "--no-db"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "--token") || !strings.Contains(errb.String(), "--insecure-off-loopback") {
		t.Fatalf("exit %d, stderr %q: want 2 and a message naming --token and --insecure-off-loopback", code, errb.String())
	}
}

func TestHub_ExposureRules(t *testing.T) {
	cases := []struct {
		f  hubFlags
		ok bool
	}{
		{hubFlags{host: "127.0.0.1"}, true},
		{hubFlags{host: "::1"}, true},
		{hubFlags{host: "localhost"}, true},
		{hubFlags{host: "0.0.0.0"}, false},
		{hubFlags{host: "0.0.0.0", token: "s3cret"}, true},
		{hubFlags{host: "0.0.0.0", insecure: true}, true},
	}
	for _, c := range cases {
		if err := checkExposure(c.f); (err == nil) != c.ok {
			t.Errorf("%+v: err %v, want ok=%v", c.f, err, c.ok)
		}
	}
}

func TestHub_HelpNamesTheDefaults(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"hub", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"127.0.0.1:8876", defaultJournalPath(), "--no-db", "--max-claims-per-agent", "SIGTERM"} {
		if !strings.Contains(errb.String(), strings.TrimPrefix(want, "--")) {
			t.Errorf("hub --help does not mention %q", want)
		}
	}
}

// The hard cap per socket (--frames-per-socket) is on by default where
// clients may be strangers — off loopback, or with a token — and off on a
// loopback hub without one; given, the flag wins either way, and --help
// says which default applies where.
func TestHub_HardCapPerSocketFollowsLoopbackAndToken(t *testing.T) {
	on := float64(hub.DefaultFramesPerSocket)
	cases := []struct {
		f    hubFlags
		set  map[string]bool
		want float64
	}{
		{hubFlags{host: "127.0.0.1"}, nil, 0},
		{hubFlags{host: "::1"}, nil, 0},
		{hubFlags{host: "localhost"}, nil, 0},
		{hubFlags{host: "127.0.0.1", token: "s3cret"}, nil, on},
		{hubFlags{host: "0.0.0.0", insecure: true}, nil, on},
		{hubFlags{host: "10.1.2.3", token: "s3cret"}, nil, on},
		{hubFlags{host: "127.0.0.1", framesRate: 40}, map[string]bool{"frames-per-socket": true}, 40},
		{hubFlags{host: "0.0.0.0", token: "s3cret"}, map[string]bool{"frames-per-socket": true}, 0},
	}
	for _, c := range cases {
		if got := framesPerSocket(c.f, c.set); got != c.want {
			t.Errorf("host %q token %t set %v: --frames-per-socket %v, want %v", c.f.host, c.f.token != "", c.set, got, c.want)
		}
	}
	var out, errb bytes.Buffer
	run([]string{"hub", "--help"}, &out, &errb)
	if !strings.Contains(errb.String(), "Default 100 when the hub listens off loopback or has a token, off on a loopback hub without one") {
		t.Error("hub --help does not say where --frames-per-socket is on by default")
	}
}

// Every limit has a flag: each one sets its field, and without flags the
// hub runs with exactly the core's and the hub's defaults.
func TestHub_EveryLimitHasAFlag(t *testing.T) {
	var f hubFlags
	fs := flag.NewFlagSet("hub", flag.ContinueOnError)
	f.registerLimits(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if f.limits != coord.DefaultLimits() || f.sendQueue != hub.DefaultSendQueue || f.sendQueueKB<<10 != hub.DefaultSendQueueBytes ||
		f.pendingReceipts != hub.DefaultPendingReceiptWindow || f.pingInterval != hub.DefaultPingInterval ||
		f.pongTimeout != hub.DefaultPongTimeout || f.authTimeout != hub.DefaultAuthTimeout || f.presenceWindow != hub.DefaultPresenceWindow ||
		f.malformedRate != hub.DefaultMalformedPerSecond || f.malformedBurst != hub.DefaultMalformedBurst ||
		f.closesRate != hub.DefaultClosesPerHostPerSecond || f.closesBurst != hub.DefaultClosesPerHostBurst ||
		f.framesRate != 0 || f.framesBurst != hub.DefaultFramesPerSocketBurst || // 0: decided by framesPerSocket
		f.heavyRate != hub.DefaultHeavyLanePerSecond || f.heavyBurst != hub.DefaultHeavyLaneBurst ||
		f.eventBuffer != dashboard.DefaultEventBuffer || f.eventStreams != dashboard.DefaultEventStreams || f.recentRefusals != dashboard.DefaultRecentRefusals {
		t.Fatalf("defaults %+v differ from the hub's", f)
	}
	cases := []struct {
		flag, value string
		got         func() any
		want        any
	}{
		{"max-claims-per-agent", "7", func() any { return f.limits.MaxClaimsPerPrincipal }, 7},
		{"default-ttl", "600", func() any { return f.limits.DefaultTTL }, 600.0},
		{"min-ttl", "5", func() any { return f.limits.MinTTL }, 5.0},
		{"max-ttl", "86400", func() any { return f.limits.MaxTTL }, 86400.0},
		{"max-paths-per-claim", "16", func() any { return f.limits.MaxPathsPerClaim }, 16},
		{"max-path-length", "256", func() any { return f.limits.MaxPathLength }, 256},
		{"max-retained-checkpoints", "9", func() any { return f.limits.MaxRetainedCheckpoints }, 9},
		{"resource-ttl", "60", func() any { return f.limits.ResourceTTL }, 60.0},
		{"max-offers-per-agent", "3", func() any { return f.limits.MaxOffersPerAgent }, 3},
		{"max-waits-per-agent", "4", func() any { return f.limits.MaxWaitsPerAgent }, 4},
		{"max-board-tasks", "11", func() any { return f.limits.MaxBoardTasks }, 11},
		{"max-notes", "12", func() any { return f.limits.MaxNotesTotal }, 12},
		{"max-notes-per-author", "13", func() any { return f.limits.MaxNotesPerAuthor }, 13},
		{"max-notes-per-task", "14", func() any { return f.limits.MaxNotesPerTask }, 14},
		{"send-queue", "99", func() any { return f.sendQueue }, 99},
		{"send-queue-kb", "512", func() any { return f.sendQueueKB }, 512},
		{"pending-receipt-window", "17", func() any { return f.pendingReceipts }, 17},
		{"ping-interval", "3s", func() any { return f.pingInterval }, 3 * time.Second},
		{"pong-timeout", "4s", func() any { return f.pongTimeout }, 4 * time.Second},
		{"auth-timeout", "5s", func() any { return f.authTimeout }, 5 * time.Second},
		{"malformed-per-socket", "2.5", func() any { return f.malformedRate }, 2.5},
		{"malformed-burst", "7", func() any { return f.malformedBurst }, 7},
		{"frames-per-socket", "50", func() any { return f.framesRate }, 50.0},
		{"frames-burst", "60", func() any { return f.framesBurst }, 60},
		{"heavy-lane-rate", "700", func() any { return f.heavyRate }, 700.0},
		{"heavy-lane-burst", "70", func() any { return f.heavyBurst }, 70},
		{"closes-per-host", "3.5", func() any { return f.closesRate }, 3.5},
		{"closes-burst", "8", func() any { return f.closesBurst }, 8},
		{"journal-max-kb", "64", func() any { return f.journalMaxKB }, int64(64)},
		{"idempotency-window", "90s", func() any { return f.idemWindow }, 90 * time.Second},
		{"presence-window", "250ms", func() any { return f.presenceWindow }, 250 * time.Millisecond},
		{"dashboard-event-buffer", "16", func() any { return f.eventBuffer }, 16},
		{"dashboard-streams", "3", func() any { return f.eventStreams }, 3},
		{"dashboard-refusals", "5", func() any { return f.recentRefusals }, 5},
	}
	for _, c := range cases {
		if err := fs.Parse([]string{"--" + c.flag, c.value}); err != nil {
			t.Fatalf("--%s: %v", c.flag, err)
		}
		if got := c.got(); got != c.want {
			t.Errorf("--%s %s set %v, want %v", c.flag, c.value, got, c.want)
		}
	}
}
