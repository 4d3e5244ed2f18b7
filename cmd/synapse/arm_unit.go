package main

// The service units that keep 'synapse arm' running: a systemd user
// template unit (synapse-arm@.service, one instance per agent) and a
// launchd agent on macOS.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

func isDarwin() bool { return runtime.GOOS == "darwin" }

// systemdEscape is `systemd-escape NAME`: "/" becomes "-", and anything
// but ASCII letters, digits, ":", "_" and "." (and a leading ".") \xNN.
func systemdEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '/':
			b.WriteByte('-')
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == ':', c == '_', c == '.' && i > 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	return b.String()
}

// systemdQuote is v as one double-quoted word of an Exec line (C-style
// escapes; "$" and "%" doubled, or systemd would expand them).
func systemdQuote(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "$", "$$", "%", "%%")
	return `"` + r.Replace(v) + `"`
}

// envQuote is v as a double-quoted EnvironmentFile value (backslash
// escapes; no expansion there).
func envQuote(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v) + `"`
}

// armTemplateUnit is synapse-arm@.service: %I is the agent's name; the
// instance's command, hub and token are in its environment file.
func armTemplateUnit(bin string) string {
	return `[Unit]
Description=Synapse waiter for %I: runs a command for every message (synapse arm)
Documentation=https://github.com/synapse-hub/synapse/blob/main/docs/waking.md
After=network.target
StartLimitIntervalSec=0

[Service]
Type=simple
EnvironmentFile=%E/synapse/arm/%i.env
ExecStart=` + systemdQuote(bin) + ` arm %I
Restart=on-failure
RestartSec=2
# 1: a wrong token, or a cursor it cannot write; 2: bad flags or another
# agent's cursor. Restarting mends none of them.
RestartPreventExitStatus=1 2

[Install]
WantedBy=default.target
`
}

// armEnvFile is an instance's environment file.
func armEnvFile(f *clientFlags, cfg armConfig) string {
	var b strings.Builder
	b.WriteString("# synapse arm " + cfg.name + ": read by synapse-arm@.service\n")
	kv := func(k, v string) { fmt.Fprintf(&b, "%s=%s\n", k, envQuote(v)) }
	kv("SYNAPSE_ARM_EXEC", cfg.exec)
	kv("SYNAPSE_URI", f.uri)
	if f.token != "" {
		kv("SYNAPSE_TOKEN", f.token)
	}
	if f.ca != "" {
		kv("SYNAPSE_CA", absPath(f.ca))
	}
	return b.String()
}

// xmlEscape escapes text for a plist string.
func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// launchdLabel is the launchd label of name's waiter.
func launchdLabel(prefix, name string) string {
	return prefix + "." + strings.NewReplacer("/", ".", " ", "_").Replace(name)
}

// armPlist is the launchd agent for name's waiter.
func armPlist(f *clientFlags, cfg armConfig, bin, logPath string) string {
	env := "\t\t<key>SYNAPSE_ARM_EXEC</key><string>" + xmlEscape(cfg.exec) + "</string>\n" +
		"\t\t<key>SYNAPSE_URI</key><string>" + xmlEscape(f.uri) + "</string>\n"
	if f.token != "" {
		env += "\t\t<key>SYNAPSE_TOKEN</key><string>" + xmlEscape(f.token) + "</string>\n"
	}
	if f.ca != "" {
		env += "\t\t<key>SYNAPSE_CA</key><string>" + xmlEscape(absPath(f.ca)) + "</string>\n"
	}
	return `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key><string>` + launchdLabel("dev.synapse.arm", cfg.name) + `</string>
	<key>ProgramArguments</key>
	<array>
		<string>` + xmlEscape(bin) + `</string>
		<string>arm</string>
		<string>` + xmlEscape(cfg.name) + `</string>
	</array>
	<key>EnvironmentVariables</key>
	<dict>
` + env + `	</dict>
	<key>RunAtLoad</key><true/>
	<key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>
	<key>ThrottleInterval</key><integer>2</integer>
	<key>StandardOutPath</key><string>` + xmlEscape(logPath) + `</string>
	<key>StandardErrorPath</key><string>` + xmlEscape(logPath) + `</string>
</dict>
</plist>
`
}

// userConfigDir is $XDG_CONFIG_HOME, else ~/.config (systemd's %E).
func userConfigDir() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".config")
}

// armUnit prints or writes the unit of cfg's waiter.
func armUnit(f *clientFlags, cfg armConfig, bin string, launchd, install bool, stdout, stderr io.Writer) int {
	type file struct {
		path, body string
		mode       os.FileMode
	}
	var files []file
	var next string
	if launchd {
		home, _ := os.UserHomeDir()
		label := launchdLabel("dev.synapse.arm", cfg.name)
		p := filepath.Join(home, "Library", "LaunchAgents", label+".plist")
		logPath := filepath.Join(home, "Library", "Logs", "synapse", label+".log")
		files = []file{{p, armPlist(f, cfg, bin, logPath), 0o600}}
		next = fmt.Sprintf("launchctl bootstrap gui/$(id -u) %s\n  log:  %s", shellJoin([]string{p}), logPath)
	} else {
		inst := systemdEscape(cfg.name)
		files = []file{
			{filepath.Join(userConfigDir(), "systemd", "user", "synapse-arm@.service"), armTemplateUnit(bin), 0o644},
			{filepath.Join(userConfigDir(), "synapse", "arm", inst+".env"), armEnvFile(f, cfg), 0o600},
		}
		unit := "synapse-arm@" + inst + ".service"
		next = fmt.Sprintf("systemctl --user daemon-reload && systemctl --user enable --now %s\n  log:  journalctl --user -u %s", shellJoin([]string{unit}), shellJoin([]string{unit}))
	}
	if !install {
		for _, fl := range files {
			fmt.Fprintf(stdout, "# %s\n%s\n", fl.path, fl.body)
		}
		fmt.Fprintf(stdout, "# start it with: %s\n", next)
		return exitOK
	}
	for _, fl := range files {
		if err := os.MkdirAll(filepath.Dir(fl.path), 0o755); err != nil {
			fmt.Fprintf(stderr, "synapse arm: %v\n", err)
			return exitRefused
		}
		if err := os.WriteFile(fl.path, []byte(fl.body), fl.mode); err != nil {
			fmt.Fprintf(stderr, "synapse arm: cannot write %s: %v\n", fl.path, err)
			return exitRefused
		}
		fmt.Fprintf(stdout, "wrote %s\n", fl.path)
	}
	fmt.Fprintf(stdout, "Start it with:\n  %s\n", next)
	return exitOK
}
