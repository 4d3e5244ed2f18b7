package main

// The files a shell command names as write targets, for the guard of an
// agent's shell tool (Claude Code's Bash, Codex's shell, Gemini CLI's
// run_shell_command, Cursor's beforeShellExecution, OpenCode's bash). It
// reads the command as a POSIX shell would split it, without running
// anything, and says honestly what it cannot tell.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// maxShellDepth is how deep `sh -c '...'` inside `bash -lc '...'` is read;
// a deeper script is reported as one the guard cannot tell about.
const maxShellDepth = 4

// shellScan is what a command writes, as far as its words say.
type shellScan struct {
	targets []string // absolute paths the command names as write targets
	unsure  []string // why the guard cannot tell all it writes
}

func (s *shellScan) cannotTell(format string, a ...any) {
	s.unsure = append(s.unsure, fmt.Sprintf(format, a...))
}

// scanShell reads command as run in cwd.
func scanShell(command, cwd string) shellScan {
	var s shellScan
	scanShellInto(&s, command, cwd, 0)
	return s
}

func scanShellInto(s *shellScan, command, cwd string, depth int) {
	if depth > maxShellDepth {
		s.cannotTell("it nests shells more than %d deep", maxShellDepth)
		return
	}
	cmds, problems := splitShell(command)
	s.unsure = append(s.unsure, problems...)
	cwdKnown := true
	for _, c := range cmds {
		for _, r := range c.redirs {
			s.addTarget(r, cwd, cwdKnown, "a redirection")
		}
		words := stripPrefixes(c.words)
		if len(words) == 0 {
			continue
		}
		name := filepath.Base(words[0].s)
		args := words[1:]
		if words[0].dynamic {
			s.cannotTell("it runs a command whose name is computed (%s)", words[0].s)
			continue
		}
		switch name {
		case "cd", "pushd":
			switch {
			case len(args) == 0:
				cwdKnown = false // home: outside the repository
			case args[0].dynamic:
				cwdKnown = false
			default:
				cwd = absFrom(cwd, args[0].s)
			}
		case "tee", "rm", "touch", "truncate", "shred", "unlink":
			for _, a := range operands(args, argOptions[name]) {
				s.addTarget(a, cwd, cwdKnown, name)
			}
		case "sed", "perl":
			scanInPlace(s, name, args, cwd, cwdKnown)
		case "mv", "cp", "ln", "install":
			scanCopy(s, name, args, cwd, cwdKnown)
		case "dd":
			for _, a := range args {
				if rest, ok := strings.CutPrefix(a.s, "of="); ok {
					s.addTarget(shWord{s: rest, dynamic: a.dynamic, glob: a.glob}, cwd, cwdKnown, "dd")
				}
			}
		case "git":
			scanGit(s, args, cwd, cwdKnown)
		case "apply_patch", "applypatch":
			text := ""
			if len(c.heredocs) > 0 {
				text = c.heredocs[0]
			} else if len(args) > 0 {
				text = args[0].s
			}
			files, err := patchFiles(text)
			if err != nil {
				s.cannotTell("%s: %v", name, err)
			}
			for _, f := range files {
				s.addTarget(shWord{s: f}, cwd, cwdKnown, name)
			}
		case "sh", "bash", "zsh", "dash", "ksh":
			if script, ok := shellScript(args); ok {
				if script.dynamic {
					s.cannotTell("it runs a computed script (%s -c %s)", name, script.s)
				} else {
					scanShellInto(s, script.s, cwd, depth+1)
				}
			} else if len(args) > 0 {
				s.cannotTell("it runs a script file (%s %s)", name, args[0].s)
			}
		case "eval", "xargs", "parallel", "exec", "source", ".":
			s.cannotTell("it runs commands it builds at run time (%s)", name)
		case "find":
			for _, a := range args {
				switch a.s {
				case "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprintf", "-fls":
					s.cannotTell("find %s acts on files it finds at run time", a.s)
				}
			}
		case "python", "python3", "node", "ruby", "deno", "bun":
			for _, a := range args {
				if a.s == "-c" || a.s == "-e" || a.s == "--eval" {
					s.cannotTell("it runs an inline %s script", name)
					break
				}
			}
		}
	}
}

// addTarget records w, resolved against cwd, as a write target.
func (s *shellScan) addTarget(w shWord, cwd string, cwdKnown bool, by string) {
	p := w.s
	switch {
	case w.dynamic:
		s.cannotTell("the target of %s is computed at run time (%s)", by, p)
		return
	case p == "" || p == "-":
		return
	case strings.HasPrefix(p, "~"):
		home, _ := os.UserHomeDir()
		p = home + p[1:]
	case !filepath.IsAbs(p) && !cwdKnown:
		s.cannotTell("the target of %s, %s, is relative to a folder computed at run time", by, p)
		return
	}
	abs := absFrom(cwd, p)
	if w.glob {
		matches, _ := filepath.Glob(abs)
		if len(matches) == 0 {
			matches = []string{abs} // the shell passes an unmatched pattern as it is
		}
		s.targets = append(s.targets, matches...)
		return
	}
	s.targets = append(s.targets, abs)
}

func absFrom(cwd, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(cwd, p)
}

// argOptions are the options of a command that take a value, so that
// value is not read as a file.
var argOptions = map[string]string{
	"truncate": "sr", "touch": "dtr", "tee": "", "rm": "", "shred": "nsu", "unlink": "",
	"sed": "efl", "perl": "eIMmx", "mv": "tS", "cp": "tS", "ln": "tS", "install": "tSmgo",
}

// longWithValue are long options whose value is the next word (unless
// attached with "=").
var longWithValue = map[string]bool{"--source": true, "--target-directory": true, "--suffix": true, "--expression": true,
	"--file": true, "--reference": true, "--date": true, "--size": true, "--mode": true, "--owner": true, "--group": true}

// operands are the words of args that are not options (nor their values);
// everything after "--" is an operand.
func operands(args []shWord, withValue string) []shWord {
	var out []shWord
	for i := 0; i < len(args); i++ {
		a := args[i].s
		switch {
		case a == "--":
			return append(out, args[i+1:]...)
		case strings.HasPrefix(a, "--"):
			if longWithValue[a] {
				i++ // --source REV: the value is the next word
			}
		case len(a) > 1 && a[0] == '-':
			last := a[len(a)-1:]
			if strings.Contains(withValue, last) && len(a) == 2 {
				i++ // the value is the next word
			}
		default:
			out = append(out, args[i])
		}
	}
	return out
}

// scanInPlace reads `sed -i` and `perl -i`: the files after the script
// are rewritten; without -i nothing is written.
func scanInPlace(s *shellScan, name string, args []shWord, cwd string, cwdKnown bool) {
	inPlace, scriptGiven := false, false
	for _, a := range args {
		switch {
		case a.s == "--in-place" || strings.HasPrefix(a.s, "--in-place="):
			inPlace = true
		case a.s == "-e" || a.s == "-f" || strings.HasPrefix(a.s, "--expression") || strings.HasPrefix(a.s, "--file"):
			scriptGiven = true
		case len(a.s) > 1 && a.s[0] == '-' && a.s[1] != '-':
			flags := a.s[1:]
			if i := strings.IndexByte(flags, 'i'); i >= 0 && (name == "sed" || name == "perl") {
				inPlace = true
			}
			if strings.ContainsAny(flags, "ef") && name == "sed" || strings.Contains(flags, "e") && name == "perl" {
				scriptGiven = true
			}
		}
	}
	if !inPlace {
		return
	}
	files := operands(args, argOptions[name])
	if !scriptGiven && len(files) > 0 {
		files = files[1:] // the first operand is the script
	}
	for _, f := range files {
		s.addTarget(f, cwd, cwdKnown, name+" -i")
	}
}

// scanCopy reads mv, cp, ln and install: the destination is written (and
// mv's sources removed); into a folder, the file of each source's name.
func scanCopy(s *shellScan, name string, args []shWord, cwd string, cwdKnown bool) {
	var dest *shWord
	for i := 0; i+1 < len(args); i++ {
		if args[i].s == "-t" {
			dest = &args[i+1]
		} else if v, ok := strings.CutPrefix(args[i].s, "--target-directory="); ok {
			dest = &shWord{s: v, dynamic: args[i].dynamic}
		}
	}
	ops := operands(args, argOptions[name])
	if dest == nil {
		if len(ops) < 2 {
			return
		}
		dest, ops = &ops[len(ops)-1], ops[:len(ops)-1]
	}
	if name == "mv" {
		for _, src := range ops {
			s.addTarget(src, cwd, cwdKnown, "mv")
		}
	}
	s.addTarget(*dest, cwd, cwdKnown, name)
	if dest.dynamic || dest.glob {
		return
	}
	if fi, err := os.Stat(absFrom(cwd, dest.s)); err == nil && fi.IsDir() {
		for _, src := range ops {
			if !src.dynamic {
				s.addTarget(shWord{s: filepath.Join(dest.s, filepath.Base(src.s))}, cwd, cwdKnown, name)
			}
		}
	}
}

// scanGit reads the git subcommands that write named files, and says
// which rewrite files they do not name.
func scanGit(s *shellScan, args []shWord, cwd string, cwdKnown bool) {
	for len(args) > 0 && strings.HasPrefix(args[0].s, "-") {
		if (args[0].s == "-C" || args[0].s == "-c") && len(args) > 1 {
			if args[0].s == "-C" {
				if args[1].dynamic {
					cwdKnown = false
				}
				cwd = absFrom(cwd, args[1].s)
			}
			args = args[1:]
		}
		args = args[1:]
	}
	if len(args) == 0 {
		return
	}
	sub, rest := args[0].s, args[1:]
	afterDashes := func() ([]shWord, bool) {
		for i, a := range rest {
			if a.s == "--" {
				return rest[i+1:], true
			}
		}
		return nil, false
	}
	switch sub {
	case "checkout":
		if files, ok := afterDashes(); ok {
			for _, f := range files {
				s.addTarget(f, cwd, cwdKnown, "git checkout --")
			}
		} else if len(operands(rest, "bB")) > 0 {
			s.cannotTell("git checkout without -- may switch branches, rewriting files it does not name")
		}
	case "restore":
		files, ok := afterDashes()
		if !ok {
			files = operands(rest, "s")
		}
		for _, f := range files {
			s.addTarget(f, cwd, cwdKnown, "git restore")
		}
	case "rm", "mv":
		files, ok := afterDashes()
		if !ok {
			files = operands(rest, "")
		}
		for _, f := range files {
			s.addTarget(f, cwd, cwdKnown, "git "+sub)
		}
	case "reset":
		for _, a := range rest {
			if a.s == "--hard" || a.s == "--merge" || a.s == "--keep" {
				s.cannotTell("git reset %s rewrites files it does not name", a.s)
			}
		}
	case "stash", "merge", "rebase", "pull", "cherry-pick", "revert", "am", "apply", "switch", "clean":
		if sub == "stash" && len(rest) > 0 && (rest[0].s == "list" || rest[0].s == "show") {
			return
		}
		s.cannotTell("git %s rewrites files it does not name", sub)
	}
}

// shellScript is the script of `sh -c SCRIPT` (also -lc, -ec, ...).
func shellScript(args []shWord) (shWord, bool) {
	for i, a := range args {
		if len(a.s) > 1 && a.s[0] == '-' && a.s[1] != '-' && strings.Contains(a.s, "c") && i+1 < len(args) {
			return args[i+1], true
		}
		if !strings.HasPrefix(a.s, "-") {
			return shWord{}, false
		}
	}
	return shWord{}, false
}

// stripPrefixes drops variable assignments, shell keywords and commands
// that run another (sudo, env, nice, time, command, nohup).
func stripPrefixes(words []shWord) []shWord {
	for len(words) > 0 {
		w := words[0].s
		switch {
		case isAssignment(w):
		case shellKeywords[w]:
		case w == "sudo" || w == "env" || w == "nice" || w == "nohup" || w == "command" || w == "builtin" || w == "time" || w == "timeout" || w == "stdbuf":
			words = words[1:]
			for len(words) > 0 && (strings.HasPrefix(words[0].s, "-") || isAssignment(words[0].s) || w == "timeout" && isDuration(words[0].s)) {
				words = words[1:]
			}
			continue
		default:
			return words
		}
		words = words[1:]
	}
	return nil
}

var shellKeywords = map[string]bool{"!": true, "{": true, "}": true, "if": true, "then": true, "else": true, "elif": true,
	"fi": true, "do": true, "done": true, "while": true, "until": true, "esac": true}

func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func isDuration(w string) bool {
	return w != "" && strings.Trim(w, "0123456789.smhd") == ""
}

// shWord is one word of a command: its text with quotes removed, whether
// part of it is computed at run time ($VAR, $(...), `...`), and whether an
// unquoted pattern character (* ? [) makes the shell expand it.
type shWord struct {
	s       string
	dynamic bool
	glob    bool
}

// shCmd is one simple command: its words, the files it redirects output
// to, and the bodies of its here-documents.
type shCmd struct {
	words    []shWord
	redirs   []shWord
	heredocs []string
}

// splitShell splits a command line into simple commands as a POSIX shell
// would (quotes, escapes, ; & | && || newlines, redirections,
// here-documents), and reports what it cannot follow.
func splitShell(src string) (cmds []shCmd, problems []string) {
	var (
		cur      shCmd
		word     strings.Builder
		inWord   bool
		w        shWord
		redirect bool // the next word is a redirection target
		skipNext bool // the next word is an input file or a here-string
		pending  []struct {
			delim string
			strip bool
			cmd   int
		}
	)
	flushWord := func() {
		if !inWord {
			return
		}
		w.s = word.String()
		switch {
		case redirect:
			cur.redirs = append(cur.redirs, w)
		case skipNext:
		default:
			cur.words = append(cur.words, w)
		}
		redirect, skipNext, inWord = false, false, false
		word.Reset()
		w = shWord{}
	}
	flushCmd := func() {
		flushWord()
		if len(cur.words) > 0 || len(cur.redirs) > 0 {
			cmds = append(cmds, cur)
		}
		cur = shCmd{}
	}
	problem := func(p string) {
		for _, q := range problems {
			if q == p {
				return
			}
		}
		problems = append(problems, p)
	}
	rs := []rune(src)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\\':
			if i+1 < len(rs) {
				i++
				if rs[i] != '\n' {
					word.WriteRune(rs[i])
					inWord = true
				}
			}
		case r == '\'':
			end := indexRune(rs, i+1, '\'')
			if end < 0 {
				problem("its quotes are unbalanced")
				end = len(rs)
			}
			word.WriteString(string(rs[i+1 : end]))
			inWord, i = true, end
		case r == '"':
			i++
			for ; i < len(rs) && rs[i] != '"'; i++ {
				switch {
				case rs[i] == '\\' && i+1 < len(rs) && strings.ContainsRune("\"\\$`\n", rs[i+1]):
					i++
					word.WriteRune(rs[i])
				case rs[i] == '$' || rs[i] == '`':
					w.dynamic = true
					if i+1 < len(rs) && rs[i] == '$' && rs[i+1] == '(' || rs[i] == '`' {
						problem("it substitutes the output of a command")
					}
					word.WriteRune(rs[i])
				default:
					word.WriteRune(rs[i])
				}
			}
			if i >= len(rs) {
				problem("its quotes are unbalanced")
			}
			inWord = true
		case r == '$' || r == '`':
			w.dynamic, inWord = true, true
			if r == '`' || i+1 < len(rs) && rs[i+1] == '(' {
				problem("it substitutes the output of a command")
				end := matchingClose(rs, i)
				word.WriteString(string(rs[i:end]))
				i = end - 1
				continue
			}
			word.WriteRune(r)
		case r == '*' || r == '?' || r == '[':
			w.glob, inWord = true, true
			word.WriteRune(r)
		case r == '#' && !inWord:
			for i+1 < len(rs) && rs[i+1] != '\n' {
				i++
			}
		case r == ' ' || r == '\t':
			flushWord()
		case r == '\n':
			flushCmd()
			// here-document bodies follow the line that declared them
			for _, h := range pending {
				var body strings.Builder
				for i+1 < len(rs) {
					end := indexRune(rs, i+1, '\n')
					if end < 0 {
						end = len(rs)
					}
					line := string(rs[i+1 : end])
					i = end
					if h.strip {
						line = strings.TrimLeft(line, "\t")
					}
					if line == h.delim {
						break
					}
					body.WriteString(line + "\n")
				}
				if h.cmd < len(cmds) {
					cmds[h.cmd].heredocs = append(cmds[h.cmd].heredocs, body.String())
				}
			}
			pending = nil
		case r == ';' || r == '|' || r == '(' || r == ')':
			flushCmd()
		case r == '&':
			if i+1 < len(rs) && rs[i+1] == '>' { // &> and &>> send both outputs to a file
				flushWord()
				i++
				if i+1 < len(rs) && rs[i+1] == '>' {
					i++
				}
				redirect = true
				continue
			}
			flushCmd()
		case r == '>' || r == '<':
			if i+1 < len(rs) && rs[i+1] == '(' {
				problem("it uses process substitution")
				end := matchingClose(rs, i+1)
				i = end - 1
				continue
			}
			if inWord && !w.dynamic && isDigits(word.String()) {
				word.Reset() // "2>": the digits name a descriptor
				inWord = false
			}
			flushWord()
			if r == '<' {
				switch {
				case strings.HasPrefix(string(rs[i:min(i+3, len(rs))]), "<<<"):
					i += 2
					skipNext = true
				case i+1 < len(rs) && rs[i+1] == '<':
					i++
					strip := i+1 < len(rs) && rs[i+1] == '-'
					if strip {
						i++
					}
					for i+1 < len(rs) && (rs[i+1] == ' ' || rs[i+1] == '\t') {
						i++
					}
					j := i + 1
					for j < len(rs) && !strings.ContainsRune(" \t\n;&|<>()", rs[j]) {
						j++
					}
					delim := strings.NewReplacer("'", "", `"`, "", `\`, "").Replace(string(rs[i+1 : j]))
					i = j - 1
					pending = append(pending, struct {
						delim string
						strip bool
						cmd   int
					}{delim, strip, len(cmds)})
				case i+1 < len(rs) && rs[i+1] == '>':
					i++
					redirect = true // <> opens for writing too
				default:
					skipNext = true
				}
				continue
			}
			if i+1 < len(rs) && (rs[i+1] == '>' || rs[i+1] == '|') {
				i++
			}
			if i+1 < len(rs) && rs[i+1] == '&' { // >&2, >&-: a descriptor, not a file
				i++
				j := i + 1
				for j < len(rs) && (rs[j] >= '0' && rs[j] <= '9' || rs[j] == '-') {
					j++
				}
				if j > i+1 {
					i = j - 1
					continue
				}
			}
			redirect = true
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	flushCmd()
	return cmds, problems
}

func indexRune(rs []rune, from int, r rune) int {
	for i := from; i < len(rs); i++ {
		if rs[i] == r {
			return i
		}
	}
	return -1
}

// matchingClose is the index after the construct opening at rs[i]: a
// backquoted command, or $( ... ) / <( ... ) with nesting.
func matchingClose(rs []rune, i int) int {
	if rs[i] == '`' {
		if end := indexRune(rs, i+1, '`'); end >= 0 {
			return end + 1
		}
		return len(rs)
	}
	depth := 0
	for j := i; j < len(rs); j++ {
		switch rs[j] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return j + 1
			}
		}
	}
	return len(rs)
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}
