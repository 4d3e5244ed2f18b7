package wire

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// pyFnmatch is the reference's matcher transcribed: Python 3.12's
// fnmatch.translate (Lib/fnmatch.py, _translate) building a regular
// expression the same way — bracket bodies cut into chunks at '-', empty
// ranges merged away, '!' turned into '^' — then matched whole, with '.'
// crossing newlines. It shares no code with Fnmatch, so the two agreeing
// on arbitrary input is evidence, not tautology.
func pyFnmatch(name, pat string) bool {
	re := regexp.MustCompile(`(?s)\A(?:` + pyTranslate([]rune(pat)) + `)\z`)
	return re.MatchString(name)
}

func pyTranslate(pat []rune) string {
	var res strings.Builder
	lastStar := false
	add := func(s string, star bool) {
		res.WriteString(s)
		lastStar = star
	}
	i, n := 0, len(pat)
	for i < n {
		c := pat[i]
		i++
		switch c {
		case '*':
			if !lastStar {
				add(".*", true)
			}
		case '?':
			add(".", false)
		case '[':
			j := i
			if j < n && pat[j] == '!' {
				j++
			}
			if j < n && pat[j] == ']' {
				j++
			}
			for j < n && pat[j] != ']' {
				j++
			}
			if j >= n {
				add(`\[`, false)
				continue
			}
			stuff := pyClassBody(pat, i, j)
			i = j + 1
			switch {
			case stuff == "":
				add(`[^\x00-\x{10FFFF}]`, false) // Python's (?!): never matches
			case stuff == "!":
				add(".", false)
			default:
				add(pyClassToGo(stuff), false)
			}
		default:
			add(regexp.QuoteMeta(string(c)), false)
		}
	}
	return res.String()
}

// pyClassBody is _translate's bracket body as Python writes it: backslashes
// and in-chunk hyphens escaped, range hyphens bare, a leading '!' kept for
// the caller.
func pyClassBody(pat []rune, i, j int) string {
	body := string(pat[i:j])
	if !strings.ContainsRune(body, '-') {
		return strings.ReplaceAll(body, `\`, `\\`)
	}
	find := func(from, to int) int {
		for k := from; k < to; k++ {
			if pat[k] == '-' {
				return k
			}
		}
		return -1
	}
	var chunks []string
	k := i + 1
	if pat[i] == '!' {
		k = i + 2
	}
	for {
		k = find(k, j)
		if k < 0 {
			break
		}
		chunks = append(chunks, string(pat[i:k]))
		i = k + 1
		k += 3
	}
	if chunk := string(pat[i:j]); chunk != "" {
		chunks = append(chunks, chunk)
	} else {
		chunks[len(chunks)-1] += "-"
	}
	// Remove empty ranges (a > b), as Python does, from the end.
	for k := len(chunks) - 1; k > 0; k-- {
		prev, cur := []rune(chunks[k-1]), []rune(chunks[k])
		if prev[len(prev)-1] > cur[0] {
			chunks[k-1] = string(prev[:len(prev)-1]) + string(cur[1:])
			chunks = append(chunks[:k], chunks[k+1:]...)
		}
	}
	for k, s := range chunks {
		chunks[k] = strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "-", `\-`)
	}
	return strings.Join(chunks, "-")
}

// pyClassToGo reads a Python class body the way sre_parse does — an item,
// then '-' and an item make a range — and writes it as a Go class of
// \x{…} escapes, so no character is special to Go's parser.
func pyClassToGo(stuff string) string {
	s := []rune(stuff)
	var b strings.Builder
	b.WriteByte('[')
	if s[0] == '!' {
		b.WriteByte('^')
		s = s[1:]
	}
	item := func(k int) (rune, int) {
		if s[k] == '\\' {
			return s[k+1], k + 2
		}
		return s[k], k + 1
	}
	for k := 0; k < len(s); {
		lo, next := item(k)
		k = next
		if k+1 < len(s) && s[k] == '-' {
			hi, next := item(k + 1)
			if lo > hi {
				panic(fmt.Sprintf("Python would raise re.error: bad character range in %q", stuff))
			}
			fmt.Fprintf(&b, `\x{%x}-\x{%x}`, lo, hi)
			k = next
			continue
		}
		fmt.Fprintf(&b, `\x{%x}`, lo)
	}
	b.WriteByte(']')
	return b.String()
}

// FuzzFnmatch checks Fnmatch against pyFnmatch on arbitrary names and
// patterns, and Literal against its promise: a literal pattern matches
// exactly the name spelled like it.
func FuzzFnmatch(f *testing.F) {
	for _, s := range [][2]string{
		{"proj/a", "proj/*"}, {"proj/c", "proj/[!ab]"}, {"]", "[]]"}, {"!", "[!]"}, {"[a", "[a"},
		{`a\xb`, `a\*b`}, {"aXbXc", "a*b*c"}, {"z", "[z-a]"}, {"-", "[a-]"}, {"é", "?"},
		{"y", "[c-a!x]"}, {"b", "[a-c-e]"}, {"-", "[--0]"}, {"^", "[^a]"}, {"&", "[a&&b]"},
		{"a\nb", "a*b"}, {"x", "[!c-a]"}, {"\\", `[\]`}, {"b", "[a--]"}, {":", "[[:alpha:]]"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, pat string) {
		if !utf8.ValidString(name) || !utf8.ValidString(pat) {
			// Fnmatch compares runes, each invalid byte U+FFFD; Python
			// has only code points. Compare on the decoded text.
			name, pat = string([]rune(name)), string([]rune(pat))
		}
		if len(pat) > 64 || len(name) > 256 {
			return // the reference compiles a regexp per call
		}
		got, want := Fnmatch(name, pat), pyFnmatch(name, pat)
		if got != want {
			t.Fatalf("Fnmatch(%q, %q) = %v, Python's fnmatchcase says %v (regexp %s)", name, pat, got, want, pyTranslate([]rune(pat)))
		}
		if Literal(pat) && got != (name == pat) {
			t.Fatalf("literal %q matches %q: %v", pat, name, got)
		}
		if !Fnmatch(pat, pat) && Literal(pat) {
			t.Fatalf("literal %q does not match itself", pat)
		}
	})
}
