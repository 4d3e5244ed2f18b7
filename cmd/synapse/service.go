package main

// service: the hub as a user service, always there (issue 21 item 5): a
// systemd user unit, or a launchd agent on macOS.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const serviceUsage = `Usage: synapse service install|uninstall|status [--dry-run] [--launchd] [--json] [-- HUB FLAGS...]

Runs the hub as a user service, started at login and restarted if it fails,
so no terminal has to stay open for it.

  install    writes the unit and starts it: a systemd user unit
             (~/.config/systemd/user/synapse-hub.service, Restart=on-failure)
             or, on macOS (--launchd), a launchd agent
             (~/Library/LaunchAgents/dev.synapse.hub.plist, kept alive).
             The hub keeps its journal where 'synapse hub' does by default,
             in the state dir ($XDG_STATE_HOME/synapse/hub.db, else
             ~/.local/state/synapse/hub.db). HUB FLAGS after -- go to
             'synapse hub' (e.g. -- --token-file ~/.config/synapse/token).
             Where 'systemctl --user' cannot run (no user bus: a container,
             CI, an ssh session without lingering) the unit is written and
             install says what to run to start it. --dry-run prints what
             it would write and run, and changes nothing.
  uninstall  stops the service and removes the unit.
  status     says whether the unit is installed, whether it runs, and
             where its journal and its log are.
`

// serviceName is the systemd unit; serviceLabel the launchd label.
const (
	serviceName  = "synapse-hub.service"
	serviceLabel = "dev.synapse.hub"
)

// serviceFiles is where the service of this user lives.
type serviceFiles struct {
	unit, journal, log string
	launchd            bool
}

func serviceFilesFor(launchd bool) serviceFiles {
	s := serviceFiles{journal: defaultJournalPath(), launchd: launchd}
	if launchd {
		home, _ := os.UserHomeDir()
		s.unit = filepath.Join(home, "Library", "LaunchAgents", serviceLabel+".plist")
		s.log = filepath.Join(filepath.Dir(s.journal), "hub.log")
	} else {
		s.unit = filepath.Join(userConfigDir(), "systemd", "user", serviceName)
		s.log = "journalctl --user -u " + serviceName
	}
	return s
}

// serviceMarker identifies a unit Synapse wrote.
const serviceMarker = "synapse service install"

func hubUnit(bin string, sf serviceFiles, hubArgs []string) string {
	words := []string{systemdQuote(bin), "hub", "--db", systemdQuote(sf.journal)}
	for _, a := range hubArgs {
		words = append(words, systemdQuote(a))
	}
	return `# Written by '` + serviceMarker + `'; remove with 'synapse service uninstall'.
[Unit]
Description=Synapse coordination hub (synapse hub)
Documentation=https://github.com/synapse-hub/synapse/blob/main/docs/waking.md
After=network.target
StartLimitIntervalSec=0

[Service]
Type=simple
ExecStartPre=/bin/mkdir -p ` + systemdQuote(filepath.Dir(sf.journal)) + `
ExecStart=` + strings.Join(words, " ") + `
Restart=on-failure
RestartSec=2
# 2: bad flags; restarting will not mend them.
RestartPreventExitStatus=2

[Install]
WantedBy=default.target
`
}

func hubPlist(bin string, sf serviceFiles, hubArgs []string) string {
	args := ""
	for _, a := range append([]string{bin, "hub", "--db", sf.journal}, hubArgs...) {
		args += "\t\t<string>" + xmlEscape(a) + "</string>\n"
	}
	return `<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by '` + serviceMarker + `'; remove with 'synapse service uninstall'. -->
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key><string>` + serviceLabel + `</string>
	<key>ProgramArguments</key>
	<array>
` + args + `	</array>
	<key>RunAtLoad</key><true/>
	<key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>
	<key>ThrottleInterval</key><integer>2</integer>
	<key>StandardOutPath</key><string>` + xmlEscape(sf.log) + `</string>
	<key>StandardErrorPath</key><string>` + xmlEscape(sf.log) + `</string>
</dict>
</plist>
`
}

// serviceManager runs systemctl --user or launchctl and returns its
// output; a variable so nothing else is ever run.
var serviceManager = func(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// serviceCommands are the commands that start (or stop) the service.
func serviceCommands(sf serviceFiles, start bool) [][]string {
	if sf.launchd {
		domain := fmt.Sprintf("gui/%d", os.Getuid())
		if start {
			return [][]string{{"launchctl", "bootstrap", domain, sf.unit}}
		}
		return [][]string{{"launchctl", "bootout", domain + "/" + serviceLabel}}
	}
	if start {
		return [][]string{{"systemctl", "--user", "daemon-reload"}, {"systemctl", "--user", "enable", "--now", serviceName}}
	}
	return [][]string{{"systemctl", "--user", "disable", "--now", serviceName}, {"systemctl", "--user", "daemon-reload"}}
}

func showCommands(cmds [][]string) string {
	var s []string
	for _, c := range cmds {
		s = append(s, shellJoin(c))
	}
	return strings.Join(s, " && ")
}

func runService(args []string, stdout, stderr io.Writer) int {
	var hubArgs []string
	for i, a := range args {
		if a == "--" {
			args, hubArgs = args[:i], args[i+1:]
			break
		}
	}
	var f clientFlags
	fs := newFlagSet("service", serviceUsage, "", stderr)
	fs.BoolVar(&f.asJSON, "json", false, "print JSON for scripts")
	dry := fs.Bool("dry-run", false, "install: print what would be written and run; change nothing")
	launchd := fs.Bool("launchd", isDarwin(), "a launchd agent (macOS), not a systemd user unit")
	command := fs.String("command", "", "the synapse binary the service runs (default: this one)")
	pos, code, ok := parseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, "service", "say install, uninstall or status")
	}
	if pos[0] != "install" && len(hubArgs) > 0 {
		return usageError(stderr, "service", "hub flags after -- go with install")
	}
	sf := serviceFilesFor(*launchd)
	switch pos[0] {
	case "install":
		bin := *command
		if bin == "" {
			bin = thisBinary()
		}
		return serviceInstall(&f, sf, bin, hubArgs, *dry, stdout, stderr)
	case "uninstall":
		return serviceUninstall(&f, sf, stdout, stderr)
	case "status":
		return serviceStatus(&f, sf, stdout)
	}
	return usageError(stderr, "service", "unknown verb %q: say install, uninstall or status", pos[0])
}

func serviceInstall(f *clientFlags, sf serviceFiles, bin string, hubArgs []string, dry bool, stdout, stderr io.Writer) int {
	body := hubUnit(bin, sf, hubArgs)
	if sf.launchd {
		body = hubPlist(bin, sf, hubArgs)
	}
	start := serviceCommands(sf, true)
	if old, err := os.ReadFile(sf.unit); err == nil && !strings.Contains(string(old), serviceMarker) {
		fmt.Fprintf(stderr, "synapse service: %s exists and is not Synapse's; left alone. Remove it, or run the hub from it.\n", sf.unit)
		return exitRefused
	}
	if dry {
		if f.asJSON {
			printJSON(stdout, map[string]any{"unit": sf.unit, "content": body, "would_run": showCommands(start), "journal": sf.journal, "log": sf.log})
			return exitOK
		}
		fmt.Fprintf(stdout, "would write %s:\n%s\nwould run: %s\n", sf.unit, body, showCommands(start))
		return exitOK
	}
	if err := os.MkdirAll(filepath.Dir(sf.unit), 0o755); err != nil {
		fmt.Fprintf(stderr, "synapse service: %v\n", err)
		return exitRefused
	}
	if err := os.MkdirAll(filepath.Dir(sf.journal), 0o700); err != nil {
		fmt.Fprintf(stderr, "synapse service: %v\n", err)
		return exitRefused
	}
	if err := os.WriteFile(sf.unit, []byte(body), 0o644); err != nil {
		fmt.Fprintf(stderr, "synapse service: cannot write %s: %v\n", sf.unit, err)
		return exitRefused
	}
	var failed error
	for _, c := range start {
		if out, err := serviceManager(c[0], c[1:]...); err != nil {
			failed = fmt.Errorf("%s: %v %s", shellJoin(c), err, out)
			break
		}
	}
	if f.asJSON {
		m := map[string]any{"unit": sf.unit, "written": true, "started": failed == nil, "journal": sf.journal, "log": sf.log}
		if failed != nil {
			m["reason"], m["run"] = failed.Error(), showCommands(start)
		}
		printJSON(stdout, m)
		return exitOK
	}
	fmt.Fprintf(stdout, "wrote %s\n  journal: %s\n  log:     %s\n", sf.unit, sf.journal, sf.log)
	if failed != nil {
		fmt.Fprintf(stdout, "Not started: %v\n(no user service manager here: a container, CI, or a session without one).\nStart it where one runs with:\n  %s\n", failed, showCommands(start))
		return exitOK
	}
	fmt.Fprintf(stdout, "Started; it starts again at login and after a failure. See it with 'synapse service status'.\n")
	return exitOK
}

func serviceUninstall(f *clientFlags, sf serviceFiles, stdout, stderr io.Writer) int {
	old, err := os.ReadFile(sf.unit)
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(stdout, "no service installed (%s).\n", sf.unit)
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "synapse service: %v\n", err)
		return exitRefused
	case !strings.Contains(string(old), serviceMarker):
		fmt.Fprintf(stderr, "synapse service: %s is not Synapse's; left alone.\n", sf.unit)
		return exitRefused
	}
	stop := serviceCommands(sf, false)
	var note string
	if out, err := serviceManager(stop[0][0], stop[0][1:]...); err != nil {
		note = fmt.Sprintf("could not stop it (%v %s): if it runs, stop it with %s", err, out, shellJoin(stop[0]))
	}
	if err := os.Remove(sf.unit); err != nil {
		fmt.Fprintf(stderr, "synapse service: %v\n", err)
		return exitRefused
	}
	if len(stop) > 1 {
		_, _ = serviceManager(stop[1][0], stop[1][1:]...)
	}
	fmt.Fprintf(stdout, "removed %s; the journal %s is kept.\n", sf.unit, sf.journal)
	if note != "" {
		fmt.Fprintln(stdout, note)
	}
	return exitOK
}

func serviceStatus(f *clientFlags, sf serviceFiles, stdout io.Writer) int {
	b, err := os.ReadFile(sf.unit)
	installed := err == nil && strings.Contains(string(b), serviceMarker)
	running := "no"
	why := ""
	if installed {
		var out string
		var err error
		if sf.launchd {
			out, err = serviceManager("launchctl", "print", fmt.Sprintf("gui/%d/%s", os.Getuid(), serviceLabel))
			if err == nil && strings.Contains(out, "state = running") {
				running = "yes"
			}
		} else {
			out, err = serviceManager("systemctl", "--user", "is-active", serviceName)
			if out == "active" {
				running = "yes"
			} else if err != nil && out != "inactive" && out != "failed" && out != "activating" {
				running, why = "unknown", out
			}
		}
	}
	if f.asJSON {
		printJSON(stdout, map[string]any{"installed": installed, "unit": sf.unit, "running": running, "reason": why, "journal": sf.journal, "log": sf.log})
		return exitOK
	}
	if !installed {
		fmt.Fprintf(stdout, "installed: no (%s); install it with 'synapse service install'\n", sf.unit)
	} else {
		fmt.Fprintf(stdout, "installed: yes (%s)\n", sf.unit)
	}
	fmt.Fprintf(stdout, "running:   %s", running)
	if why != "" {
		fmt.Fprintf(stdout, " (cannot ask the service manager: %s)", why)
	}
	fmt.Fprintf(stdout, "\njournal:   %s\nlog:       %s\n", sf.journal, sf.log)
	return exitOK
}
