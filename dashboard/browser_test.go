package dashboard_test

// The dashboard in a real browser: Debian's chromium, headless, driven by
// chromedp against a real hub with a scripted fleet (the Go SDK). CI
// installs chromium (.ci/run); without it this test fails and says how to
// install it, rather than skipping.

import (
	"context"
	"flag"
	"fmt"

	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/synapse-hub/synapse/client"
	"github.com/synapse-hub/synapse/coord"
	"github.com/synapse-hub/synapse/hub"
	"github.com/synapse-hub/synapse/hub/hubtest"
	"github.com/synapse-hub/synapse/journal"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the browser test's screenshot to docs/dashboard.png")

// liveWithin is how soon the page must show a grant or a release.
const liveWithin = time.Second

// chromium finds the browser: $SYNAPSE_CHROMIUM, else chromium on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SYNAPSE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium for the dashboard's browser test: install it with `apt-get install -y chromium` (Debian; ./deps.sh does), or set SYNAPSE_CHROMIUM to a Chrome or Chromium binary")
	return ""
}

func TestDashboard_BrowserShowsTheFleetAndFollowsGrantsAndReleases(t *testing.T) {
	exe := chromium(t)
	const token = "dashboard-test-token"
	store, err := journal.Open(filepath.Join(t.TempDir(), "hub.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	uri := hubtest.Start(t, hub.Config{Token: token, Journal: store, HubID: "syn-dashboard"})
	base := "http://" + strings.TrimPrefix(uri, "ws://")

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dial := func(name string) *client.Client {
		c, err := client.Dial(ctx, client.Options{URI: uri, Name: name, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	alpha, bravo, charlie := dial("proj/alpha"), dial("proj/bravo"), dial("proj/charlie")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = alpha.Claim(ctx, client.ClaimRequest{TaskID: "T1", Worktree: "/repo", Paths: []string{"src/core/a.go", "src/core/b.go"}})
	must(err)
	_, err = bravo.Claim(ctx, client.ClaimRequest{TaskID: "T2", Worktree: "/repo", Paths: []string{"docs"}})
	must(err)
	_, err = bravo.Claim(ctx, client.ClaimRequest{TaskID: "T5", Worktree: "/repo", Files: []string{"src/core/README.md"}})
	must(err)
	_, err = charlie.Claim(ctx, client.ClaimRequest{TaskID: "T3", Worktree: "/other", Paths: nil})
	must(err)
	if _, err := bravo.Claim(ctx, client.ClaimRequest{TaskID: "T4", Worktree: "/repo", Paths: []string{"src/core"}}); err == nil {
		t.Fatal("bravo's overlapping claim was granted")
	}
	_, err = alpha.TaskDeclare(ctx, client.TaskDeclaration{TaskID: "A", Title: "Design the schema"})
	must(err)
	_, err = alpha.TaskDeclare(ctx, client.TaskDeclaration{TaskID: "B", Title: "Write the migration", DependsOn: []string{"A"}})
	must(err)
	_, err = alpha.TaskDeclare(ctx, client.TaskDeclaration{TaskID: "C", Title: "Update the docs"})
	must(err)
	_, err = alpha.Send(ctx, "proj/offline", "are you there?", client.SendOptions{})
	must(err)
	_, err = alpha.Send(ctx, "proj/bravo", "please review T1", client.SendOptions{})
	must(err)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), // containers give /dev/shm 64 MB
		chromedp.WindowSize(1280, 900),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	// The one-time ?token= sets the session cookie and sends us to /.
	must(chromedp.Do(bctx,
		chromedp.Navigate(base+"/?token="+token),
		chromedp.WaitVisible(chromedp.CSS(`[data-claim="T1"]`)),
	))
	loc, err := chromedp.Run(bctx, chromedp.Location())
	must(err)
	if strings.Contains(loc, token) {
		t.Fatalf("the token stayed in the address bar: %s", loc)
	}

	// What the fleet did is on the page.
	for sel, want := range map[string]string{
		`[data-agent="proj/alpha"]`:                      "live",
		`[data-agent="proj/charlie"]`:                    "proj/charlie",
		`[data-worktree="/repo"] [data-claim="T1"]`:      "proj/alpha",
		`[data-worktree="/repo"] [data-claim="T2"]`:      "proj/bravo",
		`[data-worktree="/other"] [data-claim="T3"]`:     "proj/charlie",
		`[data-column="ready"] [data-task="A"]`:          "Design the schema",
		`[data-column="ready"] [data-task="C"]`:          "Update the docs",
		`[data-column="open"] [data-task="B"]`:           "after A",
		`#refusals-body [data-refusal="SCOPE_CONFLICT"]`: "proj/bravo → proj/alpha",
		`[data-dead="proj/offline"]`:                     "proj/alpha",
		`#health-body`:                                   "sqlite",
	} {
		if got := text(t, bctx, sel); !strings.Contains(got, want) {
			t.Errorf("%s shows %q, want it to contain %q", sel, got, want)
		}
	}
	if got := text(t, bctx, `[data-worktree="/repo"]`); !strings.Contains(got, "core/") || !strings.Contains(got, "a.go") || !strings.Contains(got, "README.md (file)") {
		t.Errorf("the /repo tree shows %q, want the folder core/, the path a.go and the file README.md", got)
	}

	// Live: a grant and a release reach the page within a second.
	_, err = charlie.Claim(ctx, client.ClaimRequest{TaskID: "T9", Worktree: "/repo", Paths: []string{"src/ui/page.go"}})
	must(err)
	waitFor(t, bctx, `document.querySelector('[data-claim="T9"]') !== null`, "the grant of T9")
	_, err = alpha.Release(ctx, "T1", client.ReleaseOptions{})
	must(err)
	waitFor(t, bctx, `document.querySelector('[data-claim="T1"]') === null`, "the release of T1")
	if got := text(t, bctx, `[data-claim="T9"]`); !strings.Contains(got, "proj/charlie") || !strings.Contains(got, "left") {
		t.Errorf("T9 shows %q, want its owner and its time left", got)
	}

	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	must(err)
	dir := os.Getenv("SYNAPSE_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	must(os.MkdirAll(dir, 0o755))
	shot := filepath.Join(dir, "dashboard.png")
	must(os.WriteFile(shot, png, 0o644))
	t.Logf("screenshot: %s", shot)
	if *updateScreenshot {
		must(os.WriteFile(filepath.Join("..", "docs", "dashboard.png"), png, 0o644))
	}

	// Keyboard: "/" focuses the filter, typing filters, Escape clears it.
	must(chromedp.Do(bctx, chromedp.KeyEvent("/")))
	waitForWithin(t, bctx, `document.activeElement && document.activeElement.id === "filter"`, "the filter focused by /", 2*time.Second)
	must(chromedp.Do(bctx, chromedp.KeyEvent("bravo")))
	waitForWithin(t, bctx, `document.querySelectorAll("[data-agent]").length === 1 && document.querySelector('[data-agent="proj/bravo"]') !== null`,
		"only proj/bravo under the filter", 2*time.Second)
	must(chromedp.Do(bctx, chromedp.KeyEvent("\x1b"))) // Escape
	waitForWithin(t, bctx, `document.querySelectorAll("[data-agent]").length === 3`, "every agent once the filter is cleared", 2*time.Second)

	// Dark theme when the system asks for it.
	light, err := chromedp.Run(bctx, chromedp.Evaluate[string](`getComputedStyle(document.documentElement).backgroundColor`))
	must(err)
	must(chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		return err
	})))
	dark, err := chromedp.Run(bctx, chromedp.Evaluate[string](`getComputedStyle(document.documentElement).backgroundColor`))
	must(err)
	if dark == light {
		t.Errorf("the background is %s in both themes", dark)
	}
	png, err = chromedp.Run(bctx, chromedp.FullScreenshot(100))
	must(err)
	must(os.WriteFile(filepath.Join(dir, "dashboard-dark.png"), png, 0o644))

	// A phone: one column, nothing wider than the screen.
	must(chromedp.Do(bctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulatePortrait)))
	waitForWithin(t, bctx, `document.documentElement.scrollWidth <= window.innerWidth`, "a page no wider than a phone", 2*time.Second)
	png, err = chromedp.Run(bctx, chromedp.FullScreenshot(100))
	must(err)
	must(os.WriteFile(filepath.Join(dir, "dashboard-phone.png"), png, 0o644))
}

// text returns the text of the first element matching sel, failing the
// test if there is none within a few seconds.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("%s: %v", sel, err)
	}
	return s
}

// waitFor polls the page until expr is true, failing after liveWithin.
func waitFor(t *testing.T, ctx context.Context, expr, what string) {
	t.Helper()
	waitForWithin(t, ctx, expr, what, liveWithin)
}

func waitForWithin(t *testing.T, ctx context.Context, expr, what string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page did not show %s within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// At 500 agents and 10,000 claims the page stays responsive: it renders
// pages of each list, not every row, and still shows a grant and a release
// within a second.
func TestDashboard_BrowserStaysResponsiveAt500AgentsAnd10000Claims(t *testing.T) {
	exe := chromium(t)
	const agents, claims = 500, 10000
	now := float64(time.Now().UnixNano()) / 1e9
	img := coord.Image{Epoch: claims}
	for i := range claims {
		img.Claims = append(img.Claims, coord.Claim{
			TaskID: fmt.Sprintf("T%05d", i), Owner: fmt.Sprintf("proj/agent-%03d", i%agents),
			Worktree: fmt.Sprintf("/wt-%02d", i%20), Paths: []string{fmt.Sprintf("src/pkg%03d/file%05d.go", i%300, i)},
			QuotaPrincipal: "open-host:127.0.0.1", ClaimedAt: now, ExpiresAt: now + 3600, Epoch: int64(i + 1),
		})
	}
	lim := coord.DefaultLimits()
	lim.MaxClaimsPerPrincipal = claims + 10
	uri := hubtest.Start(t, hub.Config{State: coord.FromImage(lim, img), Limits: lim, MaxClients: agents + 10, MaxConnectionsPerHost: -1})
	base := "http://" + strings.TrimPrefix(uri, "ws://")

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	fleet := make([]*client.Client, agents)
	var wg sync.WaitGroup
	errs := make(chan error, agents)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < agents; i += 8 {
				c, err := client.Dial(ctx, client.Options{URI: uri, Name: fmt.Sprintf("proj/agent-%03d", i)})
				if err != nil {
					errs <- err
					return
				}
				fleet[i] = c
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range fleet {
			c.Close()
		}
	})

	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	start := time.Now()
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-claim]`))); err != nil {
		t.Fatal(err)
	}
	t.Logf("first render of %d agents and %d claims: %v", agents, claims, time.Since(start).Round(time.Millisecond))
	if got := text(t, bctx, "#claims-count"); got != fmt.Sprint(claims) {
		t.Errorf("claims count shows %q, want %d", got, claims)
	}
	waitForWithin(t, bctx, `document.getElementById("agents-count").textContent.startsWith("500 online")`, "500 agents online", 10*time.Second)
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("[data-claim], [data-agent]").length`))
	if err != nil {
		t.Fatal(err)
	}
	if rows > 1000 {
		t.Errorf("the page holds %d claim and agent rows at once, want pages of them (at most 1000)", rows)
	}

	full, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.dataset.renderMs`))
	t.Logf("a render of every panel, unfiltered: %s ms", full)

	// With every claim loaded, a grant and a release still show within a
	// second (filtered, so they are on the page whatever their order).
	if err := chromedp.Do(bctx, chromedp.SendKeys(chromedp.CSS("#filter"), "zz-live")); err != nil {
		t.Fatal(err)
	}
	c := fleet[7]
	if _, err := c.Claim(ctx, client.ClaimRequest{TaskID: "zz-live-1", Worktree: "/wt-07", Paths: []string{"web/zz.go"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, bctx, `document.querySelector('[data-claim="zz-live-1"]') !== null`, "the grant among 10,000 claims")
	if _, err := c.Release(ctx, "zz-live-1", client.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, bctx, `document.querySelector('[data-claim="zz-live-1"]') === null`, "the release among 10,000 claims")
	ms, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.dataset.renderMs`))
	t.Logf("a render, filtered: %s ms", ms)
}

// With several hubs the page lists each namespace with its owner hub.
func TestDashboard_BrowserShowsNamespaceOwners(t *testing.T) {
	exe := chromium(t)
	uris := hubtest.StartFederation(t, []string{"hub-a", "hub-b"}, hubtest.Mesh("proj=hub-a", "web=hub-b"))
	hubtest.Agent(t, uris["hub-a"], "proj/alpha")
	base := "http://" + strings.TrimPrefix(uris["hub-a"], "ws://")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-namespace="web"]`))); err != nil {
		t.Fatal(err)
	}
	for ns, owner := range map[string]string{"proj": "hub-a", "web": "hub-b"} {
		if got := text(t, bctx, `[data-namespace="`+ns+`"]`); !strings.Contains(got, owner) {
			t.Errorf("namespace %s shows %q, want its owner %s", ns, got, owner)
		}
	}
	panel, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("namespaces").innerText`))
	if !strings.Contains(panel, "local") || !strings.Contains(panel, "remote") || !strings.Contains(panel, "Peers: hub-b") {
		t.Errorf("the namespaces panel shows:\n%s\nwant proj local, web remote, and the peer hub-b", panel)
	}
}
